"""PostgreSQL's read path: the read questions on raw asyncpg, one round trip a statement.

Through SQLAlchemy a persisted point read cost ~1.7 ms of CPU on PostgreSQL (in
process; SQLite's inline read ~0.1 ms): the pool's checkout with its pre-ping
(a round trip of its own), `AsyncConnection.run_sync`, the asyncpg adapter's
cursor and transaction objects, and the connection's return. On asyncpg
directly the same question, in the same REPEATABLE READ READ ONLY transaction,
costs ~0.5 ms: BEGIN, the statement, ROLLBACK, nothing else. SQLAlchemy stays
for the schema, migrations, writes and the token list; only the read questions
(`readers.ReadFn`, the same synchronous functions SQLite runs) come here:

- `PgReaders` keeps an `asyncpg` pool of its own (`PG_READERS` connections),
  made on first read in the loop that reads, with the engine's connection
  settings (`engine.pg_connect_args`: application name, statement timeout and
  the client-side command and connect timeouts).
- A question runs inside a greenlet (SQLAlchemy's `greenlet_spawn`): each of its
  statements switches out to the event loop to await asyncpg's `fetch`, then back,
  so a question stays one synchronous function of a `ReadConn`.
- SQL text is SQLAlchemy's, compiled once per statement for the engine's asyncpg
  dialect (`readers.SqlTexts`: `$n` placeholders with their casts); asyncpg keeps
  the prepared statements per connection. Rows are asyncpg `Record`s: the read
  questions index and unpack rows, which Records do like tuples.
- What the SQLAlchemy pool gave that asyncpg's does not is written here: a pooled
  connection found dead at BEGIN (the server restarted since it was last used) is
  dropped and the BEGIN retried once on a new one, which is what pre-ping is for,
  without its round trip on every checkout. And the pool's reset on release (by
  default `RESET ALL`, `UNLISTEN *`, `CLOSE ALL`: a round trip per release) is
  asyncpg's own rollback check alone: the read path changes no session state
  (its `SET LOCAL`s end with their transaction).

`PgSnapshot` holds one transaction across the reads of one observation (as
`readers.SqliteSnapshot` does for SQLite); its release (ROLLBACK, then the
connection back to the pool) runs in a task of its own, after the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, TypeVar

import asyncpg
from sqlalchemy.engine import URL
from sqlalchemy.sql import ClauseElement
from sqlalchemy.util import await_, greenlet_spawn

from .readers import PG_SNAPSHOTS, SNAPSHOT_IDLE, ReadFn, Slots, SqlTexts, pg_texts

T = TypeVar("T")

PG_READERS = 10
"""Most connections of the read pool (the SQLAlchemy pool, 5 + 10 overflow, serves
writes and the tools; `PG_SNAPSHOTS` of these may be held by snapshots at once)."""
BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
_GONE = (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, ConnectionError)
"""What a pooled connection raises when the server closed it since its last use."""


class AsyncpgReadConn:
    """A `ReadConn` on one asyncpg connection, inside `greenlet_spawn`."""

    __slots__ = ("_conn", "_texts")
    dialect = "postgresql"

    def __init__(self, conn: asyncpg.Connection, texts: SqlTexts) -> None:
        self._conn = conn
        self._texts = texts

    def rows(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> list[Any]:
        sql, args = self._texts.sql(statement, params or {})
        return await_(self._conn.fetch(sql, *args))

    def scalar(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> Any:
        sql, args = self._texts.sql(statement, params or {})
        return await_(self._conn.fetchval(sql, *args))

    def run(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> None:
        sql, args = self._texts.sql(statement, params or {})
        await_(self._conn.execute(sql, *args))

    def spend(self, nbytes: int) -> None:
        return None


async def _keep_session_state(_conn: asyncpg.Connection) -> None:
    """The pool's reset: nothing beyond asyncpg's own rollback check (module docstring)."""
    return None


class PgReaders:
    """The read pool of one `SqlPersistence` on PostgreSQL (module docstring)."""

    def __init__(
        self,
        url: URL,
        dialect: Any,
        connect_args: Mapping[str, Any],
        *,
        acquire_timeout: float,
    ) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._connect_args = dict(connect_args)
        self._acquire_timeout = acquire_timeout
        self._texts = pg_texts(dialect)
        self._pool: asyncpg.Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Future[asyncpg.Pool] | None = None
        self.slots = Slots(PG_SNAPSHOTS)
        self._tasks: set[asyncio.Task[None]] = set()

    async def _pool_here(self) -> asyncpg.Pool:
        """The pool of the running loop, made on first use (a pool is bound to its loop:
        a backend used from a new loop, as a CLI's second `asyncio.run`, gets a new one)."""
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        if self._opening is not None and self._loop is loop:
            return await asyncio.shield(self._opening)
        old, self._pool = self._pool, None
        if old is not None:  # its connections belong to a loop that no longer runs here
            _abandon(old)
        self._loop = loop
        opening = self._opening = loop.create_future()
        try:
            pool = await asyncpg.create_pool(
                self._dsn,
                min_size=0,
                max_size=PG_READERS,
                reset=_keep_session_state,
                **self._connect_args,
            )
        except BaseException as exc:
            self._opening = None
            opening.set_exception(exc)
            opening.exception()  # retrieved: a waiter, if any, re-raises it
            raise
        self._pool, self._opening = pool, None
        opening.set_result(pool)
        return pool

    async def begin(self) -> asyncpg.Connection:
        """A pooled connection in a new read transaction (a dead one replaced once)."""
        pool = await self._pool_here()
        for attempt in (0, 1):
            conn = await pool.acquire(timeout=self._acquire_timeout)
            try:
                await conn.execute(BEGIN)
            except _GONE:  # (asyncpg has given a closed connection back already)
                await _discard(pool, conn)
                if attempt:
                    raise
                continue
            except BaseException:
                self.spawn(self.finish(conn))  # in a task of its own: this one may be cancelled
                raise
            return conn
        raise AssertionError("unreachable")  # pragma: no cover

    async def run(self, fn: ReadFn[T], conn: asyncpg.Connection) -> T:
        """`fn` on `conn`, inside its transaction."""
        return await greenlet_spawn(fn, AsyncpgReadConn(conn, self._texts))

    async def finish(self, conn: asyncpg.Connection) -> None:
        """End `conn`'s transaction and give it back; a connection that cannot roll back
        (its statement cancelled, its server gone) is closed instead. Never raises: the
        answer read in the transaction stands whatever happens to its ROLLBACK."""
        pool = self._pool
        try:
            if not conn.is_closed():
                await asyncio.wait_for(conn.execute("ROLLBACK"), self._acquire_timeout)
                if pool is not None:
                    await pool.release(conn)
                    return
        except BaseException:
            pass
        await _discard(pool, conn)

    async def read(self, fn: ReadFn[T]) -> T:
        """One question in a transaction of its own."""
        conn = await self.begin()
        try:
            result = await self.run(fn, conn)
        except BaseException:
            self.spawn(self.finish(conn))  # in a task of its own: this one may be cancelled
            raise
        await self.finish(conn)
        return result

    def spawn(self, coro: Any) -> None:
        """Run `coro` in a task of its own (kept until done)."""
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:  # pragma: no cover - no loop: the pool is closed with it
            coro.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Close the pool (a later read opens a new one)."""
        if self._tasks:  # the releases still running give their connections back first
            await asyncio.wait(set(self._tasks), timeout=self._acquire_timeout)
        pool, loop = self._pool, self._loop
        self._pool = self._loop = None
        if pool is None:
            return
        if loop is not asyncio.get_running_loop():
            _abandon(pool)
            return
        try:
            await asyncio.wait_for(pool.close(), self._acquire_timeout)
        except (TimeoutError, Exception):
            pool.terminate()


async def _discard(pool: asyncpg.Pool | None, conn: asyncpg.Connection) -> None:
    """Close `conn` and give its place in the pool back, whatever state it is in."""
    with contextlib.suppress(Exception):
        conn.terminate()
    if pool is not None:
        with contextlib.suppress(Exception):
            await pool.release(conn)


def _abandon(pool: asyncpg.Pool) -> None:
    """Drop a pool made in another event loop (its transports cannot be closed here)."""
    with contextlib.suppress(Exception):
        pool.terminate()


class PgSnapshot:
    """One REPEATABLE READ READ ONLY transaction for the reads of one observation."""

    def __init__(self, readers: PgReaders) -> None:
        self._readers = readers
        self._slot = False
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False

    async def read(self, fn: ReadFn[T], *, inline: bool = False) -> T:
        """`fn` in the snapshot (`inline` is SQLite's: every read here is a round trip)."""
        readers = self._readers
        if not self._slot and not self._closed:
            self._slot = readers.slots.take()
        if self._closed or not self._slot:
            return await readers.read(fn)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        async with self._lock:
            try:
                conn = self._conn
                if conn is None:
                    conn = self._conn = await readers.begin()
                return await readers.run(fn, conn)
            except BaseException:
                self._drop()  # a failed transaction (or a cancelled call) is done
                raise
            finally:
                if not self._closed and self._slot:
                    loop = asyncio.get_running_loop()
                    self._idle_timer = loop.call_later(SNAPSHOT_IDLE, self.release)

    def _drop(self) -> None:
        """Give the connection back (rolled back, in a task of its own) and the slot."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._readers.spawn(self._readers.finish(conn))
        if self._slot:
            self._slot = False
            self._readers.slots.give()

    def release(self) -> None:
        """Give the connection back (a later read opens a new snapshot)."""
        self._idle_timer = None
        if not self._lock.locked():
            self._drop()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if not self._lock.locked():
            self._drop()
        else:  # a read is running (a cancelled one finishes first): drop after it
            self._readers.spawn(self._drop_after_read())

    async def _drop_after_read(self) -> None:
        async with self._lock:
            self._drop()
