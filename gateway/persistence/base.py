"""`SqlBase`: one SQLAlchemy async engine, its schema policy and its transactions.

The reads (`reads.py` and the read modules) and writes (`writes.py`) of
`SqlPersistence` build on it: every read question is one synchronous function
run by `_read` in one hop (`gateway.persistence.readers`: stdlib `sqlite3` on a
SQLite file, raw asyncpg on PostgreSQL (`pg_readers`), SQLAlchemy's sync facade in
one `run_sync` for SQLite without a file), in one read
transaction (REPEATABLE READ READ ONLY on PostgreSQL, SQLite's snapshot), or in
the snapshot of the observation it serves (`read_snapshot`); every write is one
locking transaction through the async engine (SQLAlchemy stays for the schema,
migrations and writes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

from sqlalchemy import bindparam, literal, select, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.core.backend import BackendSnapshot

from .codec import _INSERT_EVENTS, _INSERT_ORDER
from .engine import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_STATEMENT_TIMEOUT,
    FTS_VOCAB_DDL,
    create_engine,
    default_database_url,
    display_url,
    is_sqlite,
    normalize_url,
    pg_connect_args,
    pool_timeout,
    sqlite_file,
    write_options,
)
from .errors import StoredDataError, describe_failure
from .integrity import StoredExtent, check_run, is_corruption
from .migrations import SchemaState, ensure_schema
from .pg_readers import PgReaders, PgSnapshot
from .readers import (
    ReadConn,
    ReadFn,
    ReadSnapshot,
    SqliteReaders,
    SqliteSnapshot,
    run_sa_read,
)
from .tables import events, sessions

_PING = select(literal(1))
PROBE_ROWS = 1_000
"""Rows (seqs only) the integrity probe reads per call, across as many sessions."""
PROBE_INTERVAL = 2.0
"""Seconds between two sweeps of the integrity probe while it passes (see `probe_integrity`)."""
PROBE_SESSIONS = 64
"""Most session headers the integrity probe steps through per call."""
_SESSIONS_AFTER = (
    select(sessions.c.id, sessions.c.event_count)
    .where(sessions.c.id > bindparam("after"))
    .order_by(sessions.c.id)
    .limit(PROBE_SESSIONS)
)
_SEQS_IN = (
    select(events.c.seq)
    .where(
        events.c.session_id == bindparam("sid"),
        events.c.seq >= bindparam("lo"),
        events.c.seq <= bindparam("hi"),
    )
    .order_by(events.c.seq)
)
_SQLITE_QUICK_CHECK = text("PRAGMA quick_check(sessions)")
T = TypeVar("T")


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
        probe_interval: float = PROBE_INTERVAL,
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
        path = sqlite_file(self.url) if self.is_sqlite else None
        self._readers: SqliteReaders | None = None
        if path is not None:
            self._readers = SqliteReaders(
                str(path),
                busy_timeout=busy_timeout,
                on_connect=(
                    "PRAGMA foreign_keys=ON",
                    f"PRAGMA busy_timeout={int(busy_timeout * 1000)}",
                    FTS_VOCAB_DDL,
                    "PRAGMA query_only=ON",
                ),
            )
        self._pg_readers: PgReaders | None = None
        if not self.is_sqlite:
            self._pg_readers = PgReaders(
                self.url,
                self._engine.dialect,
                pg_connect_args(connect_timeout, statement_timeout),
                acquire_timeout=pool_timeout(connect_timeout, statement_timeout),
            )
        self._snapshot: ReadSnapshot | None = None
        """The observation's snapshot the reads of this object go through (a view made
        by `read_snapshot`), or None: each read question in its own transaction."""
        self._origin: SqlBase = self
        compiled = _INSERT_EVENTS.compile(dialect=self._engine.dialect)
        if tuple(compiled.positiontup or ()) != _INSERT_ORDER:  # pragma: no cover
            raise RuntimeError(f"unexpected insert parameter order {compiled.positiontup}")
        self._insert_sql = str(compiled)
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self._probe_at: tuple[str, int] = ("", 0)
        self._probe_interval = probe_interval
        self._probe_passed = -float("inf")
        """When (monotonic) the probe last passed; -inf while it fails."""
        """Where the integrity probe's sweep goes on: (the id before the session, its seq)."""

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
        # a point read: answered on the loop, not queued behind busy reader threads
        await self._read(lambda conn: conn.scalar(_PING), inline=True)

    async def probe_integrity(self) -> str | None:
        """A readiness probe of the stored data, bounded in cost: None when it passes, else
        what failed (for the log: it names sessions and seqs).

        In one read transaction: on SQLite `PRAGMA quick_check(sessions)` (the b-tree
        structure of the headers table and its indexes, which is small); then the
        next `PROBE_ROWS` seqs of a sweep through every stored log (sessions in id
        order, each log from seq 0, at most `PROBE_SESSIONS` headers per call), each
        run read by primary key and checked against the session's stored count
        (`gateway.persistence.integrity.check_run`). A driver error that says the data
        is damaged (`is_corruption`) fails the probe too; any other failure (the
        database unreachable, its schema unusable) raises, as `ping()` does.

        So a call costs a few indexed reads whatever the database's size, and
        repeated calls cover every log: the sweep's position is the only state kept
        between calls (no answer is). It does not move past a failure, so the probe
        keeps failing until the damage is repaired instead of passing on the next
        call. It reads no payload: damage confined to payload (overflow) pages is
        left to the reads that meet it and to `session-gateway verify`.

        While it passes, the checks run at most once per `probe_interval` seconds
        (the constructor's; default `PROBE_INTERVAL`) and a call in between only
        pings: `/readyz` is unauthenticated and never rate limited, so a flood of
        probes must not become a flood of reads. A failing probe checks again on
        every call (its answer is recomputed, never remembered).
        """
        now = time.monotonic()
        if now - self._probe_passed < self._probe_interval:
            await self.ping()
            return None
        self._probe_passed = -float("inf")
        try:
            failed = await self._read(self._probe)
            if failed is not None:
                return failed
            self._probe_passed = now
        except StoredDataError as exc:
            return exc.message
        except Exception as exc:  # the driver's "file is damaged", or any other failure
            if is_corruption(exc):
                return describe_failure(exc)
            raise
        return None

    def _probe(self, conn: ReadConn) -> str | None:
        """The probe's reads, in one read question (one hop): what failed, or None."""
        if conn.dialect == "sqlite":
            found = [str(row[0]) for row in conn.rows(_SQLITE_QUICK_CHECK)]
            if found != ["ok"]:
                return "PRAGMA quick_check(sessions): " + "; ".join(found[:5])
        self._sweep(conn)
        return None

    def _sweep(self, conn: ReadConn) -> None:
        """Check the next `PROBE_ROWS` stored seqs from `_probe_at`, and advance it."""
        after, seq = self._probe_at
        budget = PROBE_ROWS
        # the first row is the session the sweep is inside (at `seq`), the rest from 0
        rows = conn.rows(_SESSIONS_AFTER, {"after": after})
        if not rows and after:
            after, seq = "", 0  # the sweep wrapped: start again
            rows = conn.rows(_SESSIONS_AFTER, {"after": after})
        for sid, count in rows:
            sid, count = str(sid), int(count)
            lo = seq if seq < count else count
            hi = min(lo + budget, count) - 1
            if lo <= hi:
                params = {"sid": sid, "lo": lo, "hi": hi}
                seqs = [int(r[0]) for r in conn.rows(_SEQS_IN, params)]
                check_run(sid, seqs, lo, hi, StoredExtent(count), what="the probe's read")
                budget -= hi - lo + 1
            if hi < count - 1:  # this log continues on the next call
                self._probe_at = (after, hi + 1)
                return
            after, seq = sid, 0
            if budget <= 0:
                break
        self._probe_at = (after, 0)

    async def close(self) -> None:
        """Close every pooled connection (the object can be used again afterwards)."""
        if self._readers is not None:
            self._readers.close()
        if self._pg_readers is not None:
            await self._pg_readers.close()
        await self._engine.dispose()

    async def __aenter__(self) -> SqlBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- reads --------------------------------------------------------------------

    async def _read(self, fn: ReadFn[T], *, inline: bool = False) -> T:
        """Run one read question (a sync function of a `ReadConn`) in one hop, in this
        view's snapshot when it has one, else in a transaction of its own. `inline`: a
        question of a few indexed rows, which SQLite may answer on the event loop
        (`gateway.persistence.readers`); `fn` must then be safe to run twice."""
        await self._origin._ensure_ready()
        if self._snapshot is not None:
            return await self._snapshot.read(fn, inline=inline)
        if self._readers is not None:
            return await self._readers.read(fn, inline=inline)
        if self._pg_readers is not None:
            return await self._pg_readers.read(fn)
        return await run_sa_read(self._read_engine, fn)

    @property
    def read_hops(self) -> int:
        """Jobs handed to the SQLite reader threads so far (tests count them)."""
        return 0 if self._readers is None else self._readers.hops

    def sql_view(self) -> SqlBase:
        """This object itself: what a proxy of it (metrics, tracing) answers too, since
        proxies pass synchronous methods through. How a reader that is handed a
        snapshot's backend finds the SQL view behind it (`TokenStore.authenticate`)."""
        return self

    def read_snapshot(self, *, retryable: bool = False) -> BackendSnapshot | None:
        """This backend with its reads in one snapshot, for one observation
        (`gateway.core.backend.ReadSnapshots`); None where the engine gives none
        (SQLite without a file). `retryable` matters on PostgreSQL only
        (`pg_readers.PgSnapshot`): SQLite's snapshot costs no round trip."""
        snapshot: ReadSnapshot
        moved = None
        if self._readers is not None:
            snapshot = SqliteSnapshot(self._readers)
        elif self._pg_readers is not None:
            pg = PgSnapshot(self._pg_readers, retryable=retryable)
            snapshot, moved = pg, (pg.moved if retryable else None)
        else:
            return None
        # copy.copy's shallow copy, without its reduce protocol (a few us per request)
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._snapshot = snapshot
        return BackendSnapshot(view, snapshot.close, moved)  # type: ignore[arg-type]

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        await self._origin._ensure_ready()
        async with self._read_engine.connect() as conn, conn.begin():
            yield conn

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[AsyncConnection]:
        await self._origin._ensure_ready()
        async with self._engine.connect() as conn:
            if self._write_options:
                await conn.execution_options(**self._write_options)
            async with conn.begin():
                yield conn
