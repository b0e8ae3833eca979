"""PostgreSQL's read path: the read questions on raw asyncpg, one round trip a statement.

Through SQLAlchemy a persisted point read cost ~1.7 ms of CPU on PostgreSQL (in
process; SQLite's inline read ~0.1 ms): the pool's checkout with its pre-ping
(a round trip of its own), `AsyncConnection.run_sync`, the asyncpg adapter's
cursor and transaction objects, BEGIN and ROLLBACK, each a round trip. Here a
point read is its statement's one round trip (a strict snapshot's BEGIN and
ROLLBACK two more, the ROLLBACK after the answer). SQLAlchemy stays for the
schema, migrations, writes and the token list; only the read questions
(`readers.ReadFn`, the same synchronous functions SQLite runs) come here:

- `PgReaders` keeps up to `PG_READERS` asyncpg connections of its own, opened on
  demand in the loop that reads, with the engine's connection settings
  (`engine.pg_connect_args`: application name, statement timeout, the
  client-side command and connect timeouts), and without JIT compilation: the
  read questions are index lookups, some compound (a recursive one above all),
  which the planner may estimate expensive enough to JIT-compile, at ~100x what
  running them costs; off per connection, not per question (a `SET LOCAL` was a
  round trip of its own). Not asyncpg's `Pool`: its release
  resets the connection (`RESET ALL`, `UNLISTEN *`, ...: a round trip) and rolls
  back any open transaction. An idle connection here is outside any transaction
  (it holds no snapshot, no lock, and back no vacuum; monitoring shows it "idle").
- Reads without a transaction (`Watch`, `watched`): a query's reads run as single
  statements, each on the snapshot PostgreSQL takes for it, and each answers that
  snapshot's text beside its rows (`pg_current_snapshot()`, in the same round
  trip; an empty answer asks again in a form that answers the snapshot alone).
  Equal texts mean no transaction ended between two statements, so they
  saw one committed state; when a later statement's differs, the reads are not
  one observation and raise `SnapshotMoved`. A question on its own
  (`PgReaders.read`) then runs again in a REPEATABLE READ READ ONLY transaction;
  a query's observation (`PgSnapshot(retryable=True)`) says so, and the pipeline
  runs the query again, strict (`gateway.server.pipeline`). Why: a transaction
  costs two round trips of its own (BEGIN, ROLLBACK; sent together with the next
  BEGIN they were one, still ~110-120 us of CPU per request, about a tenth of a
  persisted `session(id)`), and most requests read once. What it trades: a
  multi-read query that a commit lands in runs twice (counted:
  `graphql_retried_observations_total`); every row carries one more column,
  and an empty answer is asked twice (the second time in the form that
  answers its snapshot without rows, `watched`).
- A question runs inside a greenlet (SQLAlchemy's `greenlet_spawn`): each of its
  statements switches out to the event loop to await asyncpg's `fetch`, then back,
  so a question stays one synchronous function of a `ReadConn`.
- SQL text is SQLAlchemy's, compiled once per statement for the engine's asyncpg
  dialect (`readers.SqlTexts`: `$n` placeholders with their casts); asyncpg keeps
  the prepared statements per connection. Rows are asyncpg `Record`s (or, read
  without a transaction, tuples sliced from them): the read questions index and
  unpack rows, which both do alike.
- What the SQLAlchemy pool's pre-ping gave: an idle connection found dead by the
  first statement of a question (the server restarted or closed it meanwhile) is
  dropped and the question run again once on a new connection (a read question
  changes nothing, and nothing of it was answered yet).

`PgSnapshot` holds one transaction across the reads of one observation (as
`readers.SqliteSnapshot` does for SQLite), begun by its first read; its ROLLBACK
runs in a task of its own, after the answer. The library's `observe()` and every
stream are strict; a query's execution through the pipeline is retryable.
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
from sqlalchemy.util import LRUCache, await_, greenlet_spawn

from .readers import PG_SNAPSHOTS, SNAPSHOT_IDLE, ReadFn, Slots, SqlTexts, pg_texts

T = TypeVar("T")

PG_READERS = 10
"""Most connections of the read pool (the SQLAlchemy pool, 5 + 10 overflow, serves
writes and the tools; `PG_SNAPSHOTS` of these may be held by snapshots at once)."""
BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
_GONE = (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, ConnectionError)
"""What an idle connection raises when the server closed it since its last use."""


class SnapshotMoved(Exception):
    """A statement of a retryable observation saw another state of the database than
    the observation's first statement did (`Watch`): the observation is not one, and
    its answer must be made again (`PgSnapshot(retryable=True)`)."""


class Watch:
    """The snapshot every statement of one retryable observation must have seen.

    Each statement read outside a transaction runs on the snapshot PostgreSQL takes
    for it, and returns that snapshot's text (`pg_current_snapshot()`, `watched`) with
    its rows. Two statements saw the same committed state when their snapshots are the
    same text: a snapshot's xmin, xmax and in-progress list change only when some
    transaction ends (a transaction begun since has an id past xmax, invisible to both),
    so equal texts mean none ended in between. Unequal texts do not prove the rows the
    statements read changed, only that they may have: the observation is made again."""

    __slots__ = ("moved", "seen")

    def __init__(self) -> None:
        self.seen: str | None = None
        self.moved = False

    def check(self, snapshot: str) -> None:
        if self.seen is None:
            self.seen = snapshot
        elif snapshot != self.seen:
            self.moved = True
            raise SnapshotMoved("the database changed between two reads of one observation")


_WATCHED: LRUCache[str, tuple[str, str] | None] = LRUCache(1000)
"""Statement texts with their snapshot column (`watched`), by the statement's text."""


def watched(sql: str) -> tuple[str, str] | None:
    """`sql` answering its rows behind the statement's snapshot, in two forms. The
    first puts the snapshot in the select list, before the row's own columns: beside
    the statement's own plan it costs its column (a page of 51 rows ~40 us more than
    the bare statement, sequentially; the second form ~80 us, a custom plan per
    execution and a nested loop), but an empty answer has no row to carry it. The
    second joins the rows, behind a mark, to the one row of the snapshot, so an empty
    answer is that one row, its mark NULL: asked only when the first answered
    nothing. In both the statement
    stays whole inside (its ORDER BY included): a subquery with an ORDER BY or LIMIT
    is not pulled up, a scan of it keeps its order, and a nested loop over the one
    snapshot row answers the inner rows in their order (tests/test_retryable_snapshots.py
    checks both). None for a statement that is no query (`SHOW`): it reads no table,
    so it has no state to check."""
    try:
        return _WATCHED[sql]
    except KeyError:
        pass
    found = None
    if sql.lstrip()[:6].upper().startswith(("SELECT", "WITH")):
        found = (
            f"SELECT pg_current_snapshot()::text AS snap, q0.* FROM ({sql}) AS q0",
            "SELECT s.snap, q.* FROM (SELECT pg_current_snapshot()::text AS snap) AS s "
            f"LEFT JOIN LATERAL (SELECT true AS hit, q0.* FROM ({sql}) AS q0) AS q ON true",
        )
    _WATCHED[sql] = found
    return found


class AsyncpgReadConn:
    """A `ReadConn` on one asyncpg connection, inside `greenlet_spawn`.

    With a `Watch`, a statement outside a transaction runs `watched` and its snapshot is
    checked; a statement whose rows are not read (`run`: `SET LOCAL`, `set_config`)
    needs a transaction and begins one (a read question that sets a plan for its
    statements: those statements are checked against the first, as the rest)."""

    __slots__ = ("_conn", "_texts", "_watch", "memo")
    dialect = "postgresql"

    def __init__(
        self,
        conn: asyncpg.Connection,
        texts: SqlTexts,
        memo: dict[Hashable, Any] | None = None,
        watch: Watch | None = None,
    ) -> None:
        self._conn = conn
        self._texts = texts
        self.memo = {} if memo is None else memo
        self._watch = watch

    def _watched(self, forms: tuple[str, str], args: list[Any], watch: Watch) -> list[Any]:
        """The rows of a statement (`watched`) with their snapshot checked."""
        if watch.moved:
            raise SnapshotMoved("the database changed between two reads of one observation")
        records = await_(self._conn.fetch(forms[0], *args))
        if records:
            watch.check(records[0][0])
            return [r[1:] for r in records]
        records = await_(self._conn.fetch(forms[1], *args))  # the form that tells it
        watch.check(records[0][0])
        return [] if records[0][1] is None else [r[2:] for r in records]

    def rows(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> list[Any]:
        sql, args = self._texts.sql(statement, params or {})
        watch = self._watch
        if watch is not None and (checked := watched(sql)) is not None:
            return self._watched(checked, args, watch)
        return await_(self._conn.fetch(sql, *args))

    def scalar(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> Any:
        sql, args = self._texts.sql(statement, params or {})
        watch = self._watch
        if watch is not None and (checked := watched(sql)) is not None:
            rows = self._watched(checked, args, watch)
            return rows[0][0] if rows else None
        return await_(self._conn.fetchval(sql, *args))

    def run(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> None:
        sql, args = self._texts.sql(statement, params or {})
        if self._watch is not None and not self._conn.is_in_transaction():
            if not args:  # one round trip: the simple query protocol takes both
                await_(self._conn.execute(f"{BEGIN}; {sql}"))
                return
            await_(self._conn.execute(BEGIN))
        await_(self._conn.execute(sql, *args))

    def spend(self, nbytes: int) -> None:
        return None


class PgReaders:
    """The read connections of one `SqlPersistence` on PostgreSQL (module docstring).

    An idle connection is outside any transaction: it holds no snapshot and no lock.
    A read that needs no transaction (`Watch`) takes one, runs, and gives it back at
    once, without a round trip; one that opened a transaction gives it back with a
    ROLLBACK, in a task of its own after the answer."""

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
        """A connection outside any transaction, and whether it was idle (it may then
        have died since: the caller asks again, once, `fresh`: the idle ones are closed,
        as a restarted server has closed them all, and a new one opened)."""
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
        self,
        fn: ReadFn[T],
        conn: asyncpg.Connection,
        memo: dict[Hashable, Any] | None = None,
        watch: Watch | None = None,
    ) -> T:
        """`fn` on `conn` (`memo`: its observation's; `watch`: see `AsyncpgReadConn`)."""
        return await greenlet_spawn(fn, AsyncpgReadConn(conn, self._texts, memo, watch))

    async def run_taken(
        self,
        fn: ReadFn[T],
        memo: dict[Hashable, Any] | None = None,
        watch: Watch | None = None,
        *,
        begin: bool = False,
    ) -> tuple[T, asyncpg.Connection]:
        """`fn` on a connection taken for it (`begin`: in a REPEATABLE READ READ ONLY
        transaction begun first), and that connection, still the caller's. One that
        died idle (the server restarted or closed it meanwhile) is dropped and `fn` run
        again once on a new one, `memo` emptied (a read question changes nothing, and
        nothing of it was answered yet). When `fn` fails, the connection is ended in a
        task of its own (this one may be cancelled); on `SnapshotMoved` it is given
        back (`give`), so the question asked again may take it. Each connection taken
        is ended or given back exactly once: its place in the pool is freed once."""
        fresh = False
        while True:
            conn, was_idle = await self.take(fresh=fresh)
            try:
                if begin:
                    await conn.execute(BEGIN)
                return await self.run(fn, conn, memo, watch), conn
            except _GONE:
                if fresh or not was_idle:
                    self.spawn(self.finish(conn, check=True))
                    raise
                self.spawn(self.finish(conn))  # it died idle: once more, on a new one
            except SnapshotMoved:  # raised between statements: the connection is sound
                self.give(conn)
                raise
            except BaseException:
                self.spawn(self.finish(conn, check=True))
                raise
            fresh = True
            if memo is not None:
                memo.clear()

    def give(self, conn: asyncpg.Connection) -> None:
        """Give back a connection that a read left outside any transaction, as it is (no
        round trip); one in a transaction is ended first (`finish`)."""
        if conn.is_in_transaction() or conn.is_closed():
            self.spawn(self.finish(conn))
            return
        self._idle.append(conn)
        self._wake()

    async def finish(self, conn: asyncpg.Connection, *, check: bool = False) -> None:
        """End `conn`'s transaction (one round trip) and keep it idle; `check`: after a
        failed or cancelled read, a round trip even outside a transaction, which waits
        out what the failure left running. A connection that cannot is closed. Never
        raises: the answer read stands whatever happens here."""
        loop = self._loop
        try:
            if not conn.is_closed():
                if conn.is_in_transaction():
                    await conn.execute("ROLLBACK")
                elif check:
                    await conn.execute("SELECT 1")
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
        """One question on its own: its statements outside a transaction, each checked
        against the first (`Watch`); when a commit came between two of them, the
        question again, in a transaction of its own (a read question changes nothing,
        and nothing of it was answered yet)."""
        try:
            result, conn = await self.run_taken(fn, watch=Watch())
        except SnapshotMoved:
            result, conn = await self.run_taken(fn, begin=True)
        self.give(conn)
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
    """The reads of one observation in one state of the database.

    Strict (the default): one REPEATABLE READ READ ONLY transaction, begun by the first
    read, held across the reads. `retryable`: for an observation its owner can make
    again from the start (a query's execution, `gateway.server.pipeline`): no
    transaction, each statement checked against the first (`Watch`), so a request of
    one read is one round trip, not three (BEGIN, the read, ROLLBACK), and each read
    takes a connection only while it runs. When a commit came between two of its
    statements, `moved()` says so and every later read raises `SnapshotMoved`: the owner
    makes the observation again, strict. What it trades: a request of several reads
    that a commit lands in the middle of runs twice."""

    def __init__(self, readers: PgReaders, *, retryable: bool = False) -> None:
        self._readers = readers
        self._watch = Watch() if retryable else None
        self._slot = False
        self._conn: asyncpg.Connection | None = None
        self._memo: dict[Hashable, Any] = {}
        """`ReadConn.memo` of the observation (strict: of the transaction on `_conn`, a
        new one with each connection; retryable: of the watched state)."""
        self._lock = asyncio.Lock()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False

    def moved(self) -> bool:
        """Whether a read found the database changed since the first (retryable only)."""
        return self._watch is not None and self._watch.moved

    async def read(self, fn: ReadFn[T], *, inline: bool = False) -> T:
        """`fn` in the snapshot (`inline` is SQLite's: every read here is a round trip)."""
        if self._watch is not None:
            return await self._watched(fn, self._watch)
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
                self._memo = {}
                result, self._conn = await readers.run_taken(fn, self._memo, begin=True)
                return result
            except BaseException:
                self._drop()  # a failed transaction (or a cancelled call) is done
                raise
            finally:
                if not self._closed and self._slot:
                    loop = asyncio.get_running_loop()
                    self._idle_timer = loop.call_later(SNAPSHOT_IDLE, self.release)

    async def _watched(self, fn: ReadFn[T], watch: Watch) -> T:
        """`fn` outside a transaction, checked by `watch`; on a connection of its own
        unless a question of the observation began a transaction (`AsyncpgReadConn.run`):
        that one is then kept for the rest, as a strict snapshot's."""
        if watch.moved:
            raise SnapshotMoved("the database changed between two reads of one observation")
        readers = self._readers
        async with self._lock:
            conn = self._conn
            if conn is not None:
                try:
                    return await readers.run(fn, conn, self._memo, watch)
                except BaseException:
                    self._drop()
                    raise
            result, conn = await readers.run_taken(fn, self._memo, watch)
            if conn.is_in_transaction() and not self._closed:
                self._conn = conn  # its plan settings and snapshot hold for what follows
            else:
                readers.give(conn)
            return result

    def _drop(self) -> None:
        """Give the connection back (rolled back, in a task of its own) and the slot."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._readers.spawn(self._readers.finish(conn, check=True))
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
