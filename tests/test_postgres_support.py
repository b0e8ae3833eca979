"""The throwaway-PostgreSQL test infrastructure itself, against a real server."""

from __future__ import annotations

import time

import asyncpg
import pytest

from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.postgres


def _dsn(url: str) -> str:
    """asyncpg wants a plain libpq URL, without SQLAlchemy's `+asyncpg` driver suffix."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def test_select_one(postgres_url: str) -> None:
    conn = await asyncpg.connect(_dsn(postgres_url), timeout=5)
    try:
        assert await conn.fetchval("select 1") == 1
        assert await conn.fetchval("select current_database()") == postgres_url.rsplit("/", 1)[1]
    finally:
        await conn.close()


def test_url_format(postgres_server: PostgresServer) -> None:
    port = postgres_server.port
    assert postgres_server.url() == f"postgresql+asyncpg://postgres@127.0.0.1:{port}/postgres"
    assert postgres_server.url("x", driver=None) == f"postgresql://postgres@127.0.0.1:{port}/x"


def test_rejects_unsafe_database_names(postgres_server: PostgresServer) -> None:
    with pytest.raises(ValueError, match="unsafe database name"):
        postgres_server.create_database('x"; drop database postgres; --')


_seen_databases: set[str] = set()


@pytest.mark.parametrize("run", [1, 2])
async def test_each_test_gets_a_distinct_empty_database(postgres_url: str, run: int) -> None:
    conn = await asyncpg.connect(_dsn(postgres_url), timeout=5)
    try:
        name = await conn.fetchval("select current_database()")
        tables = await conn.fetchval("select count(*) from pg_tables where schemaname = 'public'")
        await conn.execute("create table leftover (id int)")  # Must not leak into the next run.
    finally:
        await conn.close()
    assert tables == 0
    assert name not in _seen_databases
    _seen_databases.add(name)


async def test_outage_and_recovery_on_same_port(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    dsn = _dsn(postgres_url)
    conn = await asyncpg.connect(dsn, timeout=5)
    await conn.execute("create table survivor (v text); insert into survivor values ('kept')")
    port = postgres_server.port

    postgres_server.stop()
    assert not postgres_server.is_running()
    with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
        await conn.fetchval("select 1")  # The open connection was terminated.
    started = time.monotonic()
    with pytest.raises((OSError, TimeoutError)):
        await asyncpg.connect(dsn, timeout=3)
    assert time.monotonic() - started < 3, "connecting to a stopped server should fail fast"

    postgres_server.start()
    assert postgres_server.is_running()
    assert postgres_server.port == port
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        assert await conn.fetchval("select v from survivor") == "kept"
    finally:
        await conn.close()


def test_cleanup_stops_server_and_removes_directory(postgres_server: PostgresServer) -> None:
    """Uses its own server; depending on `postgres_server` just applies the skip policy."""
    with PostgresServer() as server:
        root = server.root
        assert root is not None and server.is_running()
        server.create_database("scratch")
    assert not server.is_running()
    assert not root.exists()
