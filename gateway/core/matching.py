"""Phrase matches, their ranking, snippets and highlights (SPEC §13), on one text.

Written from the contract, in one place for every engine: the live search runs
it over a live log, and both SQL backends run it over the page they return
(the SQL answers `matchCount` for the ranking; the snippet is made here, for
the page only, so a page costs the page).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .event_text import WHITESPACE_RUN, collapse_whitespace
from .words import Word, terms, words

SNIPPET_LENGTH = 240
ELLIPSIS = "\u2026"


class Span(NamedTuple):
    """A match in code points of its text: `[start, end)`."""

    start: int
    end: int


class TextRange(NamedTuple):
    """A highlight in code points of its snippet."""

    start: int
    length: int


class RankKey(NamedTuple):
    """An event hit's place in the ranking (SPEC §13); `order()` sorts best first."""

    match_count: int
    length: int
    time: int
    session_id: str
    seq: int

    def order(self) -> tuple[int, int, int, str, int]:
        return (-self.match_count, self.length, -self.time, self.session_id, -self.seq)


def normalize_query(query: str) -> str:
    """Trimmed, whitespace runs collapsed to one space (emptiness is the caller's check)."""
    return collapse_whitespace(query)


def query_terms(normalized: str) -> tuple[str, ...]:
    """The phrase a normalized query searches for: its unicode61 tokens (maybe none)."""
    return tuple(terms(normalized))


def phrase_spans(found: Sequence[Word], phrase: Sequence[str]) -> list[Span]:
    """Where `phrase` occurs consecutively in `found`, overlapping occurrences merged
    into one span (as FTS5's `highlight()` merges them): an occurrence starting at
    or before the end of the current one extends it."""
    n = len(phrase)
    if n == 0 or len(found) < n:
        return []
    first = phrase[0]
    spans: list[Span] = []
    end_token = -1  # last token index of the current merged span
    start_token = -1
    for i in range(len(found) - n + 1):
        if found[i].term != first:
            continue
        if n > 1 and any(found[i + k].term != phrase[k] for k in range(1, n)):
            continue
        if start_token >= 0 and i <= end_token:
            end_token = i + n - 1
            continue
        if start_token >= 0:
            spans.append(Span(found[start_token].start, found[end_token].end))
        start_token, end_token = i, i + n - 1
    if start_token >= 0:
        spans.append(Span(found[start_token].start, found[end_token].end))
    return spans


def text_spans(text: str, phrase: Sequence[str]) -> list[Span]:
    """The merged phrase matches in `text`; `len()` of it is the event's `matchCount`."""
    return phrase_spans(words(text), phrase) if phrase else []


def _clean_positions(text: str) -> tuple[str, list[tuple[int, int]]]:
    """`clean` (see `collapse_whitespace`) and the shifts that map a position of a
    non-whitespace character of `text` into it: (raw start of a kept run, delta)."""
    runs: list[tuple[int, int]] = []
    out: list[str] = []
    raw = 0
    clean_len = 0
    for m in WHITESPACE_RUN.finditer(text):
        if m.start() > raw:
            if clean_len > 0:
                out.append(" ")
                clean_len += 1
            runs.append((raw, clean_len - raw))
            out.append(text[raw : m.start()])
            clean_len += m.start() - raw
        raw = m.end()
    if raw < len(text):
        if clean_len > 0:
            out.append(" ")
            clean_len += 1
        runs.append((raw, clean_len - raw))
        out.append(text[raw:])
    return "".join(out), runs


def _to_clean(runs: list[tuple[int, int]], position: int) -> int:
    lo, hi = 0, len(runs) - 1
    while lo < hi:  # the last run starting at or before `position`
        mid = (lo + hi + 1) // 2
        if runs[mid][0] <= position:
            lo = mid
        else:
            hi = mid - 1
    return position + runs[lo][1]


def snippet(text: str, spans: Sequence[Span]) -> tuple[str, list[TextRange]]:
    """The snippet of `text` around its first match and every match inside it (SPEC §13)."""
    clean, runs = _clean_positions(text)
    mapped = [
        (_to_clean(runs, s.start), _to_clean(runs, s.end - 1) + 1) for s in spans if s.end > s.start
    ]
    n = len(clean)
    if n <= SNIPPET_LENGTH:
        shown, lo, hi, prefix = clean, 0, n, ""
    else:
        m = mapped[0][0] if mapped else 0
        start = max(0, m - 80)
        prefix = ELLIPSIS if start > 0 else ""
        if start + 239 - len(prefix) >= n:
            lo, hi = n - (SNIPPET_LENGTH - len(prefix)), n
            shown = prefix + clean[lo:hi]
        else:
            lo, hi = start, start + 239 - len(prefix)
            shown = prefix + clean[lo:hi] + ELLIPSIS
    ranges = []
    for cs, ce in mapped:
        s, e = max(cs, lo), min(ce, hi)
        if s < e:
            ranges.append(TextRange(len(prefix) + s - lo, e - s))
    return shown, ranges
