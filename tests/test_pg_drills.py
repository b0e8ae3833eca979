"""Failure drills on the real PostgreSQL server: an outage mid-test, a blocked statement
and a server that never answers. Cross-corpus operations fail with
SESSION_QUERY_PERSISTENCE_FAILED within a bounded time, live reads keep answering, and the
same SqlPersistence object recovers once the server is back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from gateway import SessionQuery, SessionQueryError, SessionStore
from gateway.core import ErrorCode, SessionEvent, SessionHeader
from gateway.persistence import SqlPersistence, migrate
from tests.support.postgres import PostgresServer
from tests.test_persistence_fixtures import HEADER, sample_log

pytestmark = pytest.mark.postgres

BOUND = 10.0  # seconds a failing cross-corpus operation may take, at most
STORED = SessionHeader("stored", 5, cwd="/db")


async def fails_fast(call: Callable[[], Awaitable[Any]], bound: float = BOUND) -> str:
    started = time.monotonic()
    with pytest.raises(SessionQueryError) as info:
        await call()
    elapsed = time.monotonic() - started
    assert info.value.code is ErrorCode.PERSISTENCE_FAILED, info.value
    assert elapsed < bound, f"took {elapsed:.1f}s"
    return info.value.message


async def test_outage_fails_fast_live_reads_answer_and_the_same_backend_recovers(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    await migrate(postgres_url)
    db = SqlPersistence(postgres_url, connect_timeout=2, statement_timeout=5)
    await db.create(STORED, sample_log())
    store = SessionStore()
    store.add(HEADER, sample_log())
    query = SessionQuery(live=[store], persistence=db)
    assert [r.header.id for r in await query.list_sessions()] == ["full", "stored"]

    postgres_server.stop()
    try:
        message = await fails_fast(query.list_sessions)
        assert "ConnectionRefusedError" in message
        await fails_fast(lambda: query.list_events("stored"))
        await fails_fast(lambda: query.read_event("stored", 3, 1, 1))
        await fails_fast(lambda: query.trace_event("stored", 7))
        await fails_fast(lambda: query.trace_session("full"))  # lineage needs the corpus
        # an exact read of a live session never touches persistence
        window = await query.read_event("full", 6, 2, 2)
        assert (window.start_seq, window.end_seq) == (4, 8)
        assert len(await query.list_events("full")) == 12
        assert (await query.trace_event("full", 5)).replaced_by == 7
    finally:
        postgres_server.start()

    records = await query.list_sessions()  # the same objects, no re-creation
    assert [(r.header.id, r.persisted) for r in records] == [("full", False), ("stored", True)]
    assert (await query.read_event("stored", 3)).target.seq == 3
    await db.append("stored", [SessionEvent("turn/start", 12, 9, {"after": True})])
    assert await db.count("stored") == 13
    await db.close()


async def test_a_blocked_statement_fails_within_the_statement_timeout(postgres_url: str) -> None:
    await migrate(postgres_url)
    db = SqlPersistence(postgres_url, statement_timeout=1)
    await db.create(STORED)
    query = SessionQuery(persistence=db)
    blocker = await asyncpg.connect(postgres_url.replace("+asyncpg", ""), timeout=5)
    try:
        transaction = blocker.transaction()
        await transaction.start()
        await blocker.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
        message = await fails_fast(query.list_sessions, bound=5)
        assert "timeout" in message.lower() or "cancel" in message.lower(), message
        await transaction.rollback()
    finally:
        await blocker.close()
    assert [r.header.id for r in await query.list_sessions()] == ["stored"]
    await db.close()


async def test_a_server_that_never_answers_fails_within_the_connect_timeout() -> None:
    release = asyncio.Event()

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()  # accept the connection, never say a word
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    db = SqlPersistence(f"postgresql://postgres@127.0.0.1:{port}/db", connect_timeout=1)
    try:
        await fails_fast(SessionQuery(persistence=db).list_sessions, bound=5)
    finally:
        release.set()
        server.close()
        await server.wait_closed()
        await db.close()
