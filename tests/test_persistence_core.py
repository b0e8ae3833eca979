"""The query core over SqlPersistence, on SQLite and PostgreSQL: the backend's fast paths
are used, and every operation answers exactly as it does for the same session held live."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gateway import SessionQuery, SessionQueryError, SessionStore
from gateway.core import ErrorCode
from gateway.persistence import SqlPersistence
from tests.backends import Counting
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    HEADER,
    canonical,
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
    sample_log,
)


def plain(value: Any) -> Any:
    """A result as comparable data (dataclasses to dicts, JSON payloads canonical)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return canonical(value)
    return value


def live_query() -> SessionQuery:
    store = SessionStore()
    store.add(HEADER, sample_log())
    return SessionQuery(live=[store])


def same_but_live_flags(live: Any, stored: Any) -> None:
    """Results equal except the `live`/`persisted` flags of session records."""
    a, b = plain(live), plain(stored)

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("live", "persisted")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    assert strip(a) == strip(b)


async def test_every_operation_answers_as_for_the_live_session(db: SqlPersistence) -> None:
    log = sample_log()
    await db.create(HEADER, log)
    stored, live = SessionQuery(persistence=db), live_query()
    same_but_live_flags(await live.list_sessions(), await stored.list_sessions())
    assert plain(await live.list_events("full")) == plain(await stored.list_events("full"))
    for seq in range(len(log)):
        for before, after in [(0, 0), (2, 3), (50, 50)]:
            a = await live.read_event("full", seq, before, after)
            b = await stored.read_event("full", seq, before, after)
            assert plain(a) == plain(b)
        assert plain(await live.trace_event("full", seq)) == plain(
            await stored.trace_event("full", seq)
        )
    same_but_live_flags(await live.trace_session("full"), await stored.trace_session("full"))


async def test_errors_are_the_same_as_for_a_live_session(db: SqlPersistence) -> None:
    await db.create(HEADER, sample_log())
    stored, live = SessionQuery(persistence=db), live_query()
    for call in (
        lambda q: q.read_event("full", 12),
        lambda q: q.read_event("full", -1),
        lambda q: q.trace_event("full", 99),
        lambda q: q.read_event("full", 0, 51, 0),
    ):
        with pytest.raises(SessionQueryError) as a:
            await call(live)
        with pytest.raises(SessionQueryError) as b:
            await call(stored)
        assert a.value.code == b.value.code
    with pytest.raises(SessionQueryError) as missing:
        await stored.list_events("nope")
    assert missing.value.code is ErrorCode.SESSION_NOT_FOUND


def calls(counting: Counting, *names: str) -> int:
    """Calls of a fast path, single or batched (the core batches when it can)."""
    return sum(counting.calls[name] + counting.calls[name + "s"] for name in names)


async def test_list_events_and_trace_use_the_stored_derivations_not_whole_logs(
    db: SqlPersistence,
) -> None:
    await db.create(HEADER, sample_log())
    counting = Counting(db)
    query = SessionQuery(persistence=counting)
    await query.list_events("full")
    await query.trace_event("full", 5)
    assert calls(counting, "load") == 0
    assert counting.calls["read_events"] == 1  # list_events: the classes, by index
    assert counting.calls["read_traces"] == counting.calls["read_events_at"] == 1


async def test_read_event_uses_the_ranged_read_not_the_whole_log(db: SqlPersistence) -> None:
    await db.create(HEADER, sample_log())
    counting = Counting(db)
    window = await SessionQuery(persistence=counting).read_event("full", 6, 2, 2)
    assert (window.start_seq, window.end_seq) == (4, 8)
    assert counting.calls["read_events"] == 1  # one ranged read of seqs 4..8
    assert calls(counting, "load") == counting.calls["list"] == 0


async def test_results_are_detached_from_the_backend(db: SqlPersistence) -> None:
    await db.create(HEADER, sample_log())
    query = SessionQuery(persistence=db)
    window = await query.read_event("full", 6)
    window.target.data["nested"]["a"].append("mutated")
    again = await query.read_event("full", 6)
    assert "mutated" not in again.target.data["nested"]["a"]


async def test_persisted_state_may_lag_live_state(db: SqlPersistence) -> None:
    log = sample_log()
    await db.create(HEADER, log[:5])  # a checkpoint taken earlier
    store = SessionStore()
    store.add(HEADER, log)
    query = SessionQuery(live=[store], persistence=db)
    (record,) = await query.list_sessions()
    assert record.live and record.persisted
    assert len(await query.list_events("full")) == len(log)  # the live log wins
    store.remove("full")
    assert len(await query.list_events("full")) == 5  # the persisted, lagging one
