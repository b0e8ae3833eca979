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
from gateway.persistence.pg_readers import BEGIN, PG_READERS
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.postgres


def _dsn(url: str) -> str:
    return url.replace("+asyncpg", "")


async def _gateway_backends(url: str) -> list[Any]:
    """(pid, state, query) of the read pool's and engine's server processes."""
    admin = await asyncpg.connect(_dsn(url))
    try:
        return list(
            await admin.fetch(
                "SELECT pid, state, query FROM pg_stat_activity "
                "WHERE application_name = 'session-gateway' AND datname = current_database()"
            )
        )
    finally:
        await admin.close()


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
    connection close before the next read takes it (the BEGIN finds it dead)."""
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


async def test_read_transactions_end_when_their_snapshot_closes(postgres_url: str) -> None:
    """No read connection stays idle in transaction after its snapshot closes, and the
    pool never holds more than `PG_READERS` connections, however many snapshots ran."""
    db = await _stored(postgres_url)
    try:

        async def one() -> None:
            snapshot = db.read_snapshot()
            assert snapshot is not None
            assert set(await snapshot.backend.load_headers(["s1"])) == {"s1"}  # type: ignore[attr-defined]
            assert await snapshot.backend.count("s2") == 0  # type: ignore[attr-defined]
            snapshot.close()

        await asyncio.gather(*(one() for _ in range(40)))
        seen: list[Any] = []
        for _ in range(50):  # the releases run in tasks of their own
            await asyncio.sleep(0.05)
            seen = await _gateway_backends(postgres_url)
            if not any(row["state"] == "idle in transaction" for row in seen):
                break
        assert not any(row["state"] == "idle in transaction" for row in seen), seen
        reading = [row for row in seen if row["query"] in (BEGIN, "ROLLBACK")]
        assert 0 < len(reading) <= PG_READERS, seen
    finally:
        await db.close()
    assert not [
        row for row in await _gateway_backends(postgres_url) if row["query"] in (BEGIN, "ROLLBACK")
    ]


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
