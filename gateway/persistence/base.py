"""`SqlBase`: one SQLAlchemy async engine, its schema policy and its transactions.

The reads (`reads.py`) and writes (`writes.py`) of `SqlPersistence` build on
it: every read runs in one read transaction (REPEATABLE READ on PostgreSQL,
SQLite's snapshot), every write in one locking transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import literal, select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .codec import _INSERT_EVENTS, _INSERT_ORDER
from .engine import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_STATEMENT_TIMEOUT,
    create_engine,
    default_database_url,
    display_url,
    is_sqlite,
    normalize_url,
    write_options,
)
from .migrations import SchemaState, ensure_schema

_PING = select(literal(1))


class SqlBase:
    """The engine, schema policy and transactions of `SqlPersistence` (whose
    docstring documents the constructor's arguments)."""

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        auto_migrate: bool | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        statement_timeout: float | None = DEFAULT_STATEMENT_TIMEOUT,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        echo: bool = False,
    ) -> None:
        self.url: URL = normalize_url(url if url is not None else default_database_url())
        self.is_sqlite = is_sqlite(self.url)
        self.auto_migrate = self.is_sqlite if auto_migrate is None else auto_migrate
        self._engine = create_engine(
            self.url,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            busy_timeout=busy_timeout,
            echo=echo,
        )
        self._read_engine: AsyncEngine = (
            self._engine
            if self.is_sqlite
            else self._engine.execution_options(
                isolation_level="REPEATABLE READ", postgresql_readonly=True
            )
        )
        self._write_options = write_options(self.url)
        compiled = _INSERT_EVENTS.compile(dialect=self._engine.dialect)
        if tuple(compiled.positiontup or ()) != _INSERT_ORDER:  # pragma: no cover
            raise RuntimeError(f"unexpected insert parameter order {compiled.positiontup}")
        self._insert_sql = str(compiled)
        self._ready = False
        self._ready_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SqlPersistence({display_url(self.url)!r})"

    @property
    def engine(self) -> AsyncEngine:
        """The underlying async engine (for tests and tools)."""
        return self._engine

    # -- lifecycle ----------------------------------------------------------

    async def ensure_schema(self) -> SchemaState:
        """Check (and, per policy, migrate) the schema now instead of on first use."""
        async with self._ready_lock:
            state = await ensure_schema(self._engine, self.url, auto_migrate=self.auto_migrate)
            self._ready = True
            return state

    async def _ensure_ready(self) -> None:
        if not self._ready:
            async with self._ready_lock:
                if not self._ready:
                    await ensure_schema(self._engine, self.url, auto_migrate=self.auto_migrate)
                    self._ready = True

    async def ping(self) -> None:
        """A cheap readiness probe: the database answers and its schema is usable.

        Raises what `list()` would (driver errors, SchemaVersionError) without
        reading any session.
        """
        async with self._reading() as conn:
            await conn.execute(_PING)

    async def close(self) -> None:
        """Close every pooled connection (the object can be used again afterwards)."""
        await self._engine.dispose()

    async def __aenter__(self) -> SqlBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_ready()
        async with self._read_engine.connect() as conn, conn.begin():
            yield conn

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[AsyncConnection]:
        await self._ensure_ready()
        async with self._engine.connect() as conn:
            if self._write_options:
                await conn.execution_options(**self._write_options)
            async with conn.begin():
                yield conn
