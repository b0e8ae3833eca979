"""The viewer's arithmetic (its DOM-free modules, run in Node) against models here.

* highlights: the API gives `{start, length}` in code points of the snippet, and
  JavaScript strings index UTF-16 units; the pieces the page marks must be
  exactly Python's code-point slices `snippet[start:start + length]`, emoji and
  all (SPEC §13);
* filters: the created range from two date inputs is whole UTC days, both ends
  inclusive, and the two checkboxes are the `availability` list (SPEC §12);
* export: the links are SPEC §15's route, the id one path segment.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.node_tools import run_ui_modules

# Astral characters (two UTF-16 units each) among plain, accented and CJK ones.
ALPHABET = st.one_of(
    st.sampled_from(
        [*"ab z…é\u0301中文\u3000", "🙂", "👩", "\u200d", "💻", "\U0001d400", "\U00020000"]
    ),
    st.characters(exclude_categories=("Cs",)),
)


@st.composite
def snippet_cases(draw: st.DrawFn) -> tuple[str, list[dict[str, int]]]:
    text = draw(st.text(ALPHABET, max_size=40))
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=8)))
    pairs = [(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if b > a]
    return text, [{"start": a, "length": b - a} for a, b in pairs]


def _model(text: str, highlights: list[dict[str, int]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    at = 0
    for h in highlights:
        start, end = h["start"], h["start"] + h["length"]
        if start > at:
            out.append({"text": text[at:start], "mark": False})
        out.append({"text": text[start:end], "mark": True})
        at = end
    if at < len(text) or not out:
        out.append({"text": text[at:], "mark": False})
    return out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(snippet_cases(), min_size=1, max_size=60))
def test_highlights_mark_the_code_point_ranges_of_the_snippet(
    cases: list[tuple[str, list[dict[str, int]]]],
) -> None:
    got = run_ui_modules({"segments": cases})["segments"]
    for (text, highlights), pieces in zip(cases, got, strict=True):
        assert pieces == _model(text, highlights)
        assert "".join(p["text"] for p in pieces) == text
        marked = [p["text"] for p in pieces if p["mark"]]
        assert marked == [text[h["start"] : h["start"] + h["length"]] for h in highlights]


def test_highlights_out_of_order_overlapping_or_past_the_end_never_break_the_snippet() -> None:
    text = "🙂 naïve café 🙂"
    got = run_ui_modules(
        {
            "segments": [
                [text, [{"start": 8, "length": 4}, {"start": 2, "length": 5}]],  # unsorted
                [text, [{"start": 2, "length": 5}, {"start": 4, "length": 6}]],  # overlap
                [text, [{"start": 13, "length": 50}]],  # past the end: clipped
            ]
        }
    )["segments"]
    assert [p["text"] for p in got[0] if p["mark"]] == ["naïve", "café"]
    assert [p["text"] for p in got[1] if p["mark"]] == ["naïve"]
    assert [p["text"] for p in got[2] if p["mark"]] == ["🙂"]
    assert all("".join(p["text"] for p in pieces) == text for pieces in got)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


@settings(max_examples=5, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.just(""), st.text(max_size=12)),
            st.one_of(st.none(), st.dates(date(1970, 1, 1), date(9999, 12, 31))),
            st.one_of(st.none(), st.dates(date(1970, 1, 1), date(9999, 12, 31))),
            st.booleans(),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_filter_form_is_the_session_filter_of_spec_12_in_whole_utc_days(
    forms: list[tuple[str, date | None, date | None, bool, bool]],
) -> None:
    cases = [
        {
            "cwd": cwd,
            "from": start.isoformat() if start else "",
            "to": end.isoformat() if end else "",
            "live": live,
            "persisted": persisted,
        }
        for cwd, start, end, live, persisted in forms
    ]
    got = run_ui_modules({"filters": cases})["filters"]
    for (cwd, start, end, live, persisted), value in zip(forms, got, strict=True):
        want: dict[str, Any] = {}
        if cwd != "":
            want["cwd"] = [cwd]  # exact: not trimmed, not folded
        if start or end:
            want["createdAt"] = {}
            if start:
                want["createdAt"]["from"] = _ms(datetime(*start.timetuple()[:3], tzinfo=UTC))
            if end:
                last = datetime(end.year, end.month, end.day, 23, 59, 59, 999_000, tzinfo=UTC)
                want["createdAt"]["to"] = _ms(last)
        if not (live and persisted):
            want["availability"] = [n for n, on in (("LIVE", live), ("PERSISTED", persisted)) if on]
        assert value == (want or None)


def test_export_links_are_the_route_of_spec_15_with_the_id_as_one_segment() -> None:
    ids = ["demo-root", "a/b c?d#e", "naïve🙂", "x%2F", "._-~!*'()"]
    cases = [["/sessions", i, d] for i in ids for d in (False, True)]
    got = run_ui_modules({"exports": cases})["exports"]
    for (_, session_id, descendants), (url, name) in zip(cases, got, strict=True):
        path = f"/sessions/{quote(session_id, safe='!*()~' + chr(39))}/export"
        assert url == (f"{path}?descendants=true" if descendants else path)
        safe = re.sub(r"[^A-Za-z0-9_-]", "_", session_id)
        assert name == f"{safe}.zip" if descendants else name == f"{safe}.jsonl"
