"""Checkpointing a live session into SqlPersistence (SQLite and PostgreSQL): only the
missing tail is written, and a stored session that disagrees is refused untouched."""

from __future__ import annotations

import pytest

from gateway import SessionQuery, SessionStore
from gateway.core import SessionHeader
from gateway.persistence import SessionConflictError, SqlPersistence, checkpoint
from tests.core_helpers import ev
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    HEADER,
    U,
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
    log_json,
    sample_log,
)


def live_session(events: int) -> tuple[SessionStore, object]:
    store = SessionStore()
    return store, store.add(HEADER, sample_log()[:events])


async def test_checkpoint_creates_a_missing_session_with_its_whole_log(
    db: SqlPersistence,
) -> None:
    _, session = live_session(12)
    assert await checkpoint(session, db) == 12
    header, events = await db.load("full")
    assert header == HEADER and log_json(events) == log_json(sample_log())


async def test_checkpoint_appends_only_the_missing_tail(db: SqlPersistence) -> None:
    store = SessionStore()
    session = store.add(HEADER, sample_log()[:4])
    assert await checkpoint(session, db) == 4
    session.append("turn/start", {"n": 1}, time=2_000)
    session.append(U, {"content": []}, surface_op="append", time=2_001)
    assert await checkpoint(session, db) == 2
    assert await checkpoint(session, db) == 0  # up to date: nothing written
    assert log_json((await db.load("full"))[1]) == log_json(session.events())


async def test_a_checkpointed_session_reads_the_same_after_the_live_one_is_gone(
    db: SqlPersistence,
) -> None:
    store, session = live_session(12)
    query = SessionQuery(live=[store], persistence=db)
    live_events = await query.list_events("full")
    await checkpoint(session, db)
    store.remove("full")
    assert await query.list_events("full") == live_events


async def test_checkpoint_refuses_a_stored_prefix_that_differs(db: SqlPersistence) -> None:
    log = sample_log()
    await db.create(HEADER, [*log[:2], ev(2, "other/type", {"x": 1})])
    _, session = live_session(12)
    with pytest.raises(SessionConflictError, match="stored event seq 2 differs"):
        await checkpoint(session, db)
    assert await db.count("full") == 3


async def test_checkpoint_refuses_a_conflicting_header(db: SqlPersistence) -> None:
    await db.create(SessionHeader("full", HEADER.created_at, cwd="/elsewhere"))
    _, session = live_session(3)
    with pytest.raises(SessionConflictError, match=r"differs from the live one on .*cwd"):
        await checkpoint(session, db)
    assert await db.count("full") == 0


async def test_checkpoint_refuses_a_stored_log_longer_than_the_live_one(
    db: SqlPersistence,
) -> None:
    await db.create(HEADER, sample_log())
    _, session = live_session(4)
    with pytest.raises(SessionConflictError, match="12 events, more than the live session's 4"):
        await checkpoint(session, db)


async def test_checkpoint_without_prefix_check_still_appends_validated(
    db: SqlPersistence,
) -> None:
    _, session = live_session(6)
    await db.create(HEADER, sample_log()[:3])
    assert await checkpoint(session, db, verify_prefix=False) == 3
    assert await db.count("full") == 6
