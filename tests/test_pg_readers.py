"""PostgreSQL's read path on raw asyncpg (`gateway.persistence.pg_readers`): what the
SQLAlchemy pool gave (a dead connection replaced before use, nothing left open) still
holds, against the real server."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence, migrate
from gateway.persistence.pg_readers import PG_READERS
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.postgres


def _dsn(url: str) -> str:
    return url.replace("+asyncpg", "")


async def _gateway_backends(url: str) -> list[Any]:
    """(pid, state, query, holds a snapshot, holds an xid) of the gateway's server
    processes on this database."""
    admin = await asyncpg.connect(_dsn(url))
    try:
        return list(
            await admin.fetch(
                "SELECT pid, state, query, backend_xmin IS NOT NULL AS snapshot, "
                "backend_xid IS NOT NULL AS xid FROM pg_stat_activity "
                "WHERE application_name = 'session-gateway' AND datname = current_database()"
            )
        )
    finally:
        await admin.close()


async def ended_in_their_tasks(readers: Any) -> None:
    """Until the connections `PgReaders` ends in tasks of their own (ROLLBACKs, dead
    ones) are ended, for at most a second."""
    for _ in range(50):
        if not readers._tasks:
            return
        await asyncio.sleep(0.02)


async def _stored(url: str) -> SqlPersistence:
    await migrate(url)
    db = SqlPersistence(url, connect_timeout=2, statement_timeout=5)
    await db.create(SessionHeader("s1", 1, cwd="/a"))
    await db.create(SessionHeader("s2", 1, cwd="/b"))
    return db


async def test_a_pooled_read_connection_killed_by_the_server_is_replaced_before_use(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """The kill is sent with psql, which blocks the loop: the pool cannot have seen the
    connection close before the next read takes it (its first statement finds it dead)."""
    db = await _stored(postgres_url)
    try:
        for round_ in range(3):
            assert set(await db.load_headers(["s1", "s2"])) == {"s1", "s2"}
            name = postgres_url.rsplit("/", 1)[1]
            killed = postgres_server.psql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                f"WHERE application_name = 'session-gateway' AND datname = '{name}'"
            )
            assert int(killed.split()[0]) >= 1, killed
            if round_ % 2:  # a read on its own, or a snapshot's first read
                assert set(await db.load_headers(["s1"])) == {"s1"}
            else:
                snapshot = db.read_snapshot()
                assert snapshot is not None
                view: Any = snapshot.backend
                assert set(await view.load_headers(["s2"])) == {"s2"}
                snapshot.close()
    finally:
        await db.close()


async def test_a_read_connection_lost_in_an_outage_frees_its_one_place_in_the_pool(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """The server stops while a read connection is idle: the next read finds it dead and
    cannot open a new one. That connection's place is freed once, so the pool counts
    none open (freed twice, the pool would allow one connection past `PG_READERS`), and
    reads work again once the server is back."""
    db = await _stored(postgres_url)
    readers: Any = db._pg_readers
    try:
        assert set(await db.load_headers(["s1"])) == {"s1"}
        assert readers._open == 1  # one idle connection
        postgres_server.stop()  # blocks the loop: the idle connection looks alive
        try:
            with pytest.raises(Exception):  # noqa: B017 - whatever the outage raises
                await db.load_headers(["s1"])
            await ended_in_their_tasks(readers)  # the dead one is ended in a task
            assert readers._open == 0
        finally:
            postgres_server.start()
        assert set(await db.load_headers(["s1", "s2"])) == {"s1", "s2"}
        assert readers._open == 1
    finally:
        await db.close()


async def test_an_idle_read_connection_holds_no_snapshot_and_close_ends_them(
    postgres_url: str,
) -> None:
    """Given back, a read connection waits outside any transaction: it holds no snapshot
    (nor a transaction id), so it holds back no vacuum. The pool never holds more than
    `PG_READERS` of them, however many snapshots (strict and retryable) ran; `close()`
    ends them."""
    db = await _stored(postgres_url)
    try:

        async def one(retryable: bool) -> None:
            snapshot = db.read_snapshot(retryable=retryable)
            assert snapshot is not None
            view: Any = snapshot.backend
            assert set(await view.load_headers(["s1"])) == {"s1"}
            assert await view.count("s2") == 0
            snapshot.close()

        await asyncio.gather(*(one(n % 2 == 0) for n in range(40)))
        await db.engine.dispose()  # the writes' pool: only the read connections are left
        reading: list[Any] = []
        for _ in range(50):  # the strict ones are rolled back in tasks of their own
            await asyncio.sleep(0.05)
            reading = await _gateway_backends(postgres_url)
            reading = [r for r in reading if r["query"] not in ("", None)]
            if reading and all(r["state"] == "idle" for r in reading):
                break
        assert 0 < len(reading) <= PG_READERS, reading
        assert all(r["state"] == "idle" for r in reading), reading
        assert not any(r["snapshot"] or r["xid"] for r in reading), reading
    finally:
        await db.close()
    left = [r for r in await _gateway_backends(postgres_url) if r["query"] not in ("", None)]
    assert not left, left


async def test_a_read_sees_what_was_committed_while_its_connection_was_idle(
    postgres_url: str,
) -> None:
    """An idle connection holds no transaction: the read after a write sees it, on its
    own, in a strict snapshot and in a retryable one."""
    db = await _stored(postgres_url)
    try:
        for n in range(3, 8):
            assert f"s{n}" not in await db.load_headers([f"s{n}"])
            await asyncio.sleep(0.05)  # the connection is idle again
            await db.create(SessionHeader(f"s{n}", 1, cwd="/c"))
            assert f"s{n}" in await db.load_headers([f"s{n}"])
            for retryable in (False, True):
                snapshot = db.read_snapshot(retryable=retryable)
                assert snapshot is not None
                view: Any = snapshot.backend
                assert f"s{n}" in await view.load_headers([f"s{n}"])
                snapshot.close()
    finally:
        await db.close()


async def test_a_snapshot_reads_one_state_while_a_write_lands(postgres_url: str) -> None:
    db = await _stored(postgres_url)
    try:
        snapshot = db.read_snapshot()
        assert snapshot is not None
        view: Any = snapshot.backend
        assert set(await view.load_headers(["s1", "s2", "s3"])) == {"s1", "s2"}
        await db.create(SessionHeader("s3", 1, cwd="/c"))
        assert set(await view.load_headers(["s1", "s2", "s3"])) == {"s1", "s2"}
        snapshot.close()
        assert set(await db.load_headers(["s1", "s2", "s3"])) == {"s1", "s2", "s3"}
    finally:
        await db.close()


def test_one_backend_reads_from_two_event_loops_in_turn(postgres_url: str) -> None:
    """A CLI runs `asyncio.run` more than once with one backend: each loop gets a pool."""
    db = asyncio.run(_stored(postgres_url))
    assert set(asyncio.run(db.load_headers(["s1"]))) == {"s1"}
    assert set(asyncio.run(db.load_headers(["s2"]))) == {"s2"}
    asyncio.run(db.close())


async def test_read_connections_run_without_jit(postgres_url: str) -> None:
    """JIT compiling a compound index lookup costs ~100x running it: the read
    connections have it off (the engine's own connections keep the server's setting)."""
    from sqlalchemy import text

    db = await _stored(postgres_url)
    try:
        assert await db._read(lambda conn: conn.scalar(text("SHOW jit"))) == "off"
        snapshot = db.read_snapshot()
        assert snapshot is not None
        view: Any = snapshot.backend
        assert await view._read(lambda conn: conn.scalar(text("SHOW jit"))) == "off"
        snapshot.close()
    finally:
        await db.close()


async def test_a_read_waits_for_a_free_read_connection_then_gives_up_in_time(
    postgres_url: str,
) -> None:
    """With every read connection in use a read waits for one to come back (it then
    answers), and past the pool timeout it fails saying so, instead of queueing forever."""
    db = await _stored(postgres_url)
    await db.close()
    db = SqlPersistence(postgres_url, connect_timeout=0.5, statement_timeout=0.5)
    readers: Any = db._pg_readers
    try:
        held = [(await readers.take())[0] for _ in range(PG_READERS)]
        waiting = asyncio.create_task(db.load_headers(["s1"]))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await readers.finish(held.pop())
        assert set(await asyncio.wait_for(waiting, 5)) == {"s1"}
        held.append((await readers.take())[0])  # every one in use again
        started = asyncio.get_running_loop().time()
        with pytest.raises(TimeoutError, match="no PostgreSQL read connection was free"):
            await db.load_headers(["s1"])
        assert asyncio.get_running_loop().time() - started < 3
        for conn in held:
            await readers.finish(conn)
        assert set(await db.load_headers(["s2"])) == {"s2"}
    finally:
        await db.close()
