"""PostgreSQL's read path: the read questions on raw asyncpg, one round trip a statement.

Through SQLAlchemy a persisted point read cost ~1.7 ms of CPU on PostgreSQL (in
process; SQLite's inline read ~0.1 ms): the pool's checkout with its pre-ping
(a round trip of its own), `AsyncConnection.run_sync`, the asyncpg adapter's
cursor and transaction objects, BEGIN and ROLLBACK, each a round trip. Here a
point read is its statement's one round trip, and the connection's return one
more, after the answer. SQLAlchemy stays for the schema, migrations, writes and
the token list; only the read questions (`readers.ReadFn`, the same synchronous
functions SQLite runs) come here:

- `PgReaders` keeps up to `PG_READERS` asyncpg connections of its own, opened on
  demand in the loop that reads, with the engine's connection settings
  (`engine.pg_connect_args`: application name, statement timeout, the
  client-side command and connect timeouts), and without JIT compilation: the
  read questions are index lookups, some compound (a recursive one above all),
  which the planner may estimate expensive enough to JIT-compile, at ~100x what
  running them costs; off per connection, not per question (a `SET LOCAL` was a
  round trip of its own). Not asyncpg's `Pool`: its release
  resets the connection (`RESET ALL`, `UNLISTEN *`, ...: a round trip) and rolls
  back any open transaction, where an idle connection here waits *in* a fresh
  REPEATABLE READ READ ONLY transaction: its BEGIN sent with the previous
  ROLLBACK in one round trip (`RENEW`, the simple query protocol takes both).
  Such a transaction holds no snapshot and no lock until its first statement
  (PostgreSQL takes a repeatable-read snapshot at the first statement, not at
  BEGIN), so the request that takes the connection still observes the database
  as of its own first read, and an idle connection holds back no vacuum. What
  it trades: monitoring shows idle read connections as "idle in transaction",
  and a server with `idle_in_transaction_session_timeout` closes them, which
  the next read survives (below).
- A question runs inside a greenlet (SQLAlchemy's `greenlet_spawn`): each of its
  statements switches out to the event loop to await asyncpg's `fetch`, then back,
  so a question stays one synchronous function of a `ReadConn`.
- SQL text is SQLAlchemy's, compiled once per statement for the engine's asyncpg
  dialect (`readers.SqlTexts`: `$n` placeholders with their casts); asyncpg keeps
  the prepared statements per connection. Rows are asyncpg `Record`s: the read
  questions index and unpack rows, which Records do like tuples.
- What the SQLAlchemy pool's pre-ping gave: an idle connection found dead by the
  first statement of a question (the server restarted or closed it meanwhile) is
  dropped and the question run again once on a new connection (a read question
  changes nothing, and nothing of it was answered yet).

`PgSnapshot` holds one transaction across the reads of one observation (as
`readers.SqliteSnapshot` does for SQLite); its release runs in a task of its
own, after the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Hashable, Mapping
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
RENEW = f"ROLLBACK; {BEGIN}"
"""A connection given back: its transaction ended and the next one begun, in one round
trip (the simple query protocol takes both statements at once)."""
_GONE = (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, ConnectionError)
"""What an idle connection raises when the server closed it since its last use."""


class AsyncpgReadConn:
    """A `ReadConn` on one asyncpg connection, inside `greenlet_spawn`."""

    __slots__ = ("_conn", "_texts", "memo")
    dialect = "postgresql"

    def __init__(
        self, conn: asyncpg.Connection, texts: SqlTexts, memo: dict[Hashable, Any] | None = None
    ) -> None:
        self._conn = conn
        self._texts = texts
        self.memo = {} if memo is None else memo

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


class PgReaders:
    """The read connections of one `SqlPersistence` on PostgreSQL (module docstring).

    Each idle connection waits in a fresh read transaction (BEGIN sent, no statement
    yet: no snapshot taken, so none is held); the question that takes it starts the
    snapshot with its first statement. Giving it back is one round trip,
    `ROLLBACK; BEGIN ...`, in a task of its own after the answer."""

    def __init__(
        self,
        url: URL,
        dialect: Any,
        connect_args: Mapping[str, Any],
        *,
        acquire_timeout: float,
    ) -> None:
        self._dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        settings = {**connect_args.get("server_settings", {}), "jit": "off"}
        self._connect_args = {**connect_args, "server_settings": settings}
        self._acquire_timeout = acquire_timeout
        self._texts = pg_texts(dialect)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[asyncpg.Connection] = []
        self._open = 0
        """Connections open or opening on `_loop` (idle ones and those in use)."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.slots = Slots(PG_SNAPSHOTS)
        self._tasks: set[asyncio.Task[None]] = set()

    def _here(self) -> None:
        """Connections are bound to their loop: a backend read from a new loop (a CLI's
        second `asyncio.run`) drops those of the old one."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            idle, self._idle = self._idle, []
            for conn in idle:
                _terminate(conn)
            self._loop, self._open = loop, 0
            self._waiters.clear()

    async def take(self, *, fresh: bool = False) -> tuple[asyncpg.Connection, bool]:
        """A connection in a fresh read transaction, and whether it was idle (it may
        then have died since: the caller asks again, once, `fresh`: the idle ones are
        closed, as a restarted server has closed them all, and a new one opened)."""
        self._here()
        if fresh:
            idle, self._idle = self._idle, []
            for conn in idle:
                _terminate(conn)
                self._open -= 1
        deadline = time.monotonic() + self._acquire_timeout
        while True:
            while self._idle:
                conn = self._idle.pop()
                if not conn.is_closed():
                    return conn, True
                self._open -= 1
            if self._open < PG_READERS:
                self._open += 1
                try:
                    conn = await asyncpg.connect(self._dsn, **self._connect_args)
                    try:
                        await conn.execute(BEGIN)
                    except BaseException:
                        _terminate(conn)
                        raise
                except BaseException:
                    self._gone()
                    raise
                return conn, False
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0)):
                    await waiter
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, but leaving (cancelled): the next waiter's turn
                if isinstance(exc, TimeoutError):
                    raise TimeoutError(
                        f"no PostgreSQL read connection was free within {self._acquire_timeout:g} s"
                    ) from None
                raise
            finally:
                if not waiter.done():
                    waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _gone(self) -> None:
        """A connection of this loop closed (or never opened): its place is free."""
        self._open -= 1
        self._wake()

    async def run(
        self, fn: ReadFn[T], conn: asyncpg.Connection, memo: dict[Hashable, Any] | None = None
    ) -> T:
        """`fn` on `conn`, inside its transaction (`memo`: that transaction's)."""
        return await greenlet_spawn(fn, AsyncpgReadConn(conn, self._texts, memo))

    async def finish(self, conn: asyncpg.Connection) -> None:
        """End `conn`'s transaction and keep it idle in a new one (one round trip); a
        connection that cannot (its statement cancelled, its server gone) is closed.
        Never raises: the answer read in the transaction stands whatever happens here."""
        loop = self._loop
        try:
            if not conn.is_closed():
                await conn.execute(RENEW)
                if loop is self._loop:
                    self._idle.append(conn)
                    self._wake()
                    return
        except BaseException:
            pass
        _terminate(conn)
        if loop is self._loop:
            self._gone()

    async def read(self, fn: ReadFn[T]) -> T:
        """One question in a transaction of its own."""
        conn, was_idle = await self.take()
        try:
            result = await self.run(fn, conn)
        except _GONE:
            self.spawn(self.finish(conn))
            if not was_idle:
                raise
            conn, _ = await self.take(fresh=True)  # it died idle: the question again, once
            try:
                result = await self.run(fn, conn)
            except BaseException:
                self.spawn(self.finish(conn))
                raise
        except BaseException:
            self.spawn(self.finish(conn))  # in a task of its own: this one may be cancelled
            raise
        self.spawn(self.finish(conn))
        return result

    def spawn(self, coro: Any) -> None:
        """Run `coro` in a task of its own (kept until done)."""
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:  # pragma: no cover - no loop: its connections went with it
            coro.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Close the idle connections (a later read opens new ones)."""
        if self._tasks:  # the releases still running give their connections back first
            await asyncio.wait(set(self._tasks), timeout=self._acquire_timeout)
        idle, self._idle = self._idle, []
        here = self._loop is asyncio.get_running_loop()
        self._loop, self._open = None, 0
        self._waiters.clear()
        for conn in idle:
            if not here:
                _terminate(conn)
                continue
            try:
                await asyncio.wait_for(conn.close(), self._acquire_timeout)
            except (TimeoutError, Exception):
                _terminate(conn)


def _terminate(conn: asyncpg.Connection) -> None:
    with contextlib.suppress(Exception):
        conn.terminate()


class PgSnapshot:
    """One REPEATABLE READ READ ONLY transaction for the reads of one observation."""

    def __init__(self, readers: PgReaders) -> None:
        self._readers = readers
        self._slot = False
        self._conn: asyncpg.Connection | None = None
        self._memo: dict[Hashable, Any] = {}
        """`ReadConn.memo` of the transaction on `_conn` (a new one with each connection)."""
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
                if conn is not None:
                    return await readers.run(fn, conn, self._memo)
                conn, was_idle = await readers.take()
                self._conn, self._memo = conn, {}
                try:
                    return await readers.run(fn, conn, self._memo)
                except _GONE:
                    if not was_idle:
                        raise
                self._conn = None  # it died idle: the question again, once, on a new one
                readers.spawn(readers.finish(conn))
                self._conn, _ = await readers.take(fresh=True)
                self._memo = {}
                return await readers.run(fn, self._conn, self._memo)
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
