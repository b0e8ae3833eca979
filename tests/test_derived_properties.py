"""Stored derivations on SQLite and PostgreSQL equal the fold (hypothesis): for valid logs
written by `create`, by `import_log` and by `create` + appends in random chunks, the stored
class, replacer, label order, citations and counts are the fold's, and every
`DerivedReads` answer, as of any log length, is what the fold of that prefix answers."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from gateway.core import SessionEvent, SessionHeader, SessionQueryError, fold_surface
from gateway.core.backend import EventQuery, StoredEvent, StoredTrace
from gateway.core.fold import CODE_BY_SURFACE, FoldResult, iter_citations
from gateway.persistence import SqlPersistence, migrate
from tests.test_fold_properties import logs
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    canonical,
    db_url_fixture,
    engine_name_fixture,
)

_ids = itertools.count()


def valid(events: list[SessionEvent]) -> list[SessionEvent]:
    """The generator's log without its trailing event when that one breaks a rule."""
    try:
        fold_surface(events)
    except SessionQueryError:
        events = events[:-1]
        fold_surface(events)
    return events


@st.composite
def written_logs(draw: st.DrawFn) -> tuple[str, list[SessionEvent], list[int]]:
    """(how it is written, a valid log, the append chunk sizes)."""
    events = valid(draw(logs(max_size=40)))
    how = draw(st.sampled_from(["create", "import", "appends"]))
    chunks: list[int] = []
    left = len(events)
    while how == "appends" and left:
        size = draw(st.integers(1, max(1, min(left, 8))))
        chunks.append(size)
        left -= size
    return how, events, chunks


async def write(db: SqlPersistence, sid: str, how: str, events: list[SessionEvent],
                chunks: list[int]) -> None:  # fmt: skip
    header = SessionHeader(sid, 1)
    if how == "create":
        await db.create(header, events)
    elif how == "import":
        assert await db.import_log(header, events) == "created"
    else:
        await db.create(header)
        at = 0
        for size in chunks:
            await db.append(sid, events[at : at + size])
            at += size


async def stored_rows(db: SqlPersistence, sid: str) -> tuple[list[Any], set[Any], Any]:
    async with db.engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT seq, surface, replaced_by, surface_label FROM events "
                    "WHERE session_id = :sid ORDER BY seq"
                ),
                {"sid": sid},
            )
        ).all()
        cites = (
            await conn.execute(
                text("SELECT seq, cited_by FROM citations WHERE session_id = :sid"), {"sid": sid}
            )
        ).all()
        counts = (
            await conn.execute(
                text(
                    "SELECT event_count, current_count, shadowed_count, derived_count "
                    "FROM sessions WHERE id = :sid"
                ),
                {"sid": sid},
            )
        ).one()
    return [tuple(r) for r in rows], {tuple(c) for c in cites}, tuple(counts)


def assert_stored_equal_the_fold(
    events: list[SessionEvent], rows: list[Any], cites: set[Any], counts: Any
) -> None:
    fold = fold_surface(events)
    assert [r[0] for r in rows] == list(range(len(events)))
    assert [r[1] for r in rows] == [CODE_BY_SURFACE[c] for c in fold.classes()]
    assert [r[2] for r in rows] == [fold.replaced_by(s) for s in range(len(events))]
    label = {seq: lab for seq, _, _, lab in rows}
    assert all((label[e.seq] is None) == (rows[e.seq][1] == 0) for e in events)
    current = [s for s, _, _, _ in rows if rows[s][1] == 1]
    assert sorted(current, key=label.__getitem__) == list(fold.nodes)
    for made in fold.replacements:
        assert sorted(made.shadowed, key=label.__getitem__) == list(made.shadowed)
    expected_cites = {
        (src, e.seq) for e in events if e.source_event_seqs for src in e.source_event_seqs
    }
    assert cites == expected_cites
    classes = [CODE_BY_SURFACE[c] for c in fold.classes()]
    assert counts == (len(events), classes.count(1), classes.count(2), len(events))


def class_as_of(row: StoredEvent, as_of: int) -> int:
    """What a reader makes of a stored row as of a log length (gateway.core.backend)."""
    if row.surface == 2 and row.replaced_by is not None and row.replaced_by >= as_of:
        return 1
    return row.surface


def same_event(a: SessionEvent, b: SessionEvent, with_data: bool = True) -> bool:
    if not with_data:
        b = b._replace(data=None)
    return canonical(a.to_json()) == canonical(b.to_json())


async def assert_reads_equal_the_fold(
    db: SqlPersistence, sid: str, events: list[SessionEvent], draw: st.DrawFn
) -> None:
    n = len(events)
    whole = fold_surface(events)
    (stored,) = (await db.load_sessions([sid, "no-such-session"])).values()
    if n:
        assert stored.counts is not None
        assert stored.counts == tuple(whole.classes().count(c) for c in _CLASSES)
    assert stored.event_count == n
    for as_of in sorted({n, draw(st.integers(0, n)), draw(st.integers(0, n))}):
        prefix = events[:as_of]
        fold: FoldResult = fold_surface(prefix)
        codes = [CODE_BY_SURFACE[c] for c in fold.classes()]

        lo, hi = draw(st.integers(-1, n + 1)), draw(st.integers(-1, n + 1))
        surfaces = draw(st.none() | st.frozensets(st.integers(0, 2)))
        limit = draw(st.none() | st.integers(0, n + 1))
        with_data = draw(st.booleans())
        query = EventQuery(sid, lo, hi, as_of, surfaces, limit, with_data)
        everything = EventQuery(sid, 0, n, as_of)
        missing = EventQuery("no-such-session", 0, 5, 5)
        answers = await db.read_events([query, everything, missing])
        assert missing not in answers
        expected = [
            e for e in prefix[max(lo, 0) : hi + 1] if surfaces is None or codes[e.seq] in surfaces
        ][:limit]
        got = answers[query]
        assert [r.event.seq for r in got] == [e.seq for e in expected]
        assert all(same_event(r.event, e, with_data) for r, e in zip(got, expected, strict=True))
        for row in answers[everything]:
            assert class_as_of(row, as_of) == codes[row.event.seq]
            assert row.surface == CODE_BY_SURFACE[whole.surface_of(row.event.seq)]
            assert row.replaced_by == whole.replaced_by(row.event.seq)
        assert len(answers[everything]) == as_of

        surfaces_got = await db.read_surfaces([(sid, as_of), ("no-such-session", 1)])
        assert list(surfaces_got) == [(sid, as_of)]
        assert [r.event.seq for r in surfaces_got[(sid, as_of)]] == list(fold.nodes)
        assert all(same_event(r.event, events[r.event.seq]) for r in surfaces_got[(sid, as_of)])

        keys = [(sid, seq, as_of) for seq in range(as_of)] + [("no-such-session", 0, 1)]
        traces = await db.read_traces(keys)
        assert ("no-such-session", 0, 1) not in traces
        for seq in range(as_of):
            made = fold.replacement(seq)
            assert traces[(sid, seq, as_of)] == StoredTrace(
                tuple(fold.replacement_chain(seq)),
                made.shadowed if made is not None else (),
                tuple(iter_citations(prefix, seq)),
            ), (seq, as_of)

    picked = [(sid, draw(st.integers(0, n + 1))) for _ in range(3)] + [("no-such-session", 0)]
    at = await db.read_events_at(picked)
    for key in picked:
        seq = key[1]
        if key[0] == sid and seq < n:
            assert same_event(at[key].event, events[seq])
            assert at[key].surface == CODE_BY_SURFACE[whole.surface_of(seq)]
            assert at[key].replaced_by == whole.replaced_by(seq)
        else:
            assert key not in at


_CLASSES = tuple(CODE_BY_SURFACE)  # LOG_ONLY, CURRENT, SHADOWED in code order


def test_property_stored_derivations_and_derived_reads_equal_the_fold(db_url: str) -> None:
    with asyncio.Runner() as runner:
        runner.run(migrate(db_url))
        db = SqlPersistence(db_url)

        @settings(
            max_examples=35,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(written_logs(), st.data())
        def check(written: tuple[str, list[SessionEvent], list[int]], data: st.DataObject) -> None:
            how, events, chunks = written
            sid = f"p{next(_ids)}"

            async def scenario() -> None:
                await write(db, sid, how, events, chunks)
                assert_stored_equal_the_fold(events, *await stored_rows(db, sid))
                await assert_reads_equal_the_fold(db, sid, events, data.draw)

            runner.run(scenario())

        try:
            check()
        finally:
            runner.run(db.close())
