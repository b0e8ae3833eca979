"""The read path: each persisted question is one synchronous function, run in one hop.

SQLAlchemy's async facade costs a greenlet switch and, over aiosqlite, a thread
hop per call (about 22 hops for one page of events). So a read question
(`reads.py`, `corpus.py`, `derived.py`, `filters.py`, `search.py`, `titles.py`,
the token lookup) is written as one synchronous function of a `ReadConn`, and
runs whole in one go:

- SQLite (a database file): on a stdlib `sqlite3` connection from a small pool
  (`SqliteReaders`), in one hop to a reader thread. SQL text is compiled once:
  SQLAlchemy Core still builds the statements, which are compiled to SQL
  strings on first use (cached by statement object for the module's fixed
  statements, by SQLAlchemy's cache key for the ones built per call) and bound
  positionally (`?`); rows are the driver's tuples, no result processing.
- PostgreSQL: on raw asyncpg, each statement one round trip, in one greenlet per
  question (`gateway.persistence.pg_readers`, whose docstring says why).
- SQLite without a file (`:memory:`, `file:` URIs, whose connections the
  SQLAlchemy pool must share): the same function in one
  `AsyncConnection.run_sync` call, through the sync facade (`SaReadConn`).

A small question runs on the event loop instead (`inline=True`, SQLite only): a
point lookup (a header by id, a token by hash) takes ~15 us of SQLite, less than
the hop around it costs (~100 us of CPU for the handoff, the future and the GIL
changing hands twice, and more under load, when the reader thread waits for
the busy loop to give up the GIL). The caller asks for it only for questions
whose work is a few indexed rows, and the engine holds it to that: a progress
handler counts SQLite's virtual-machine steps, and past `INLINE_STEPS` the
statement is interrupted (its transaction stays open, a read changes nothing)
and the question is run again whole in a reader thread. So the loop never runs
more than a bounded slice of SQL for one question. What it trades: a page of
the database file not yet in the OS cache is read from disk on the loop (a
point lookup touches a handful of pages of an index that every request reads);
a connection that is not idle at that moment (none free, or the snapshot's busy
in a thread) sends the question to a thread as before.

One observation (one request) reads through one snapshot where the engine
allows it (`SqliteSnapshot`, `PgSnapshot`): the first read opens a transaction
on a connection the snapshot keeps (SQLite: `BEGIN`, a WAL snapshot from the
first SELECT; PostgreSQL: REPEATABLE READ READ ONLY, `pg_readers.PgSnapshot`) and
every later read of the observation runs in it, so nested fields see one state. The observation's
`close()` releases it; so does `SNAPSHOT_IDLE` seconds without a read (a
subscription's observation lives on while its subscriber waits: it must not
pin a connection; a read after that opens a new snapshot).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import Compiled
from sqlalchemy.util import LRUCache

T = TypeVar("T")

INLINE_STEPS = 20_000
"""SQLite virtual-machine steps an inline question may take on the event loop (a
point lookup takes a few hundred) before it is moved to a reader thread."""
INLINE_BYTES = 64 * 1024
"""Stored text an inline question may decode on the event loop (`ReadConn.spend`):
SQLite's steps do not count the bytes of the values it hands back."""
_PROGRESS_EVERY = 1_000
"""Steps between two calls of the inline budget's progress handler."""
READER_THREADS = 4
"""Threads that run SQLite reads (a read holds the GIL only between SQLite calls)."""
IDLE_READERS = 16
"""SQLite connections kept open for reuse; more are opened when more are busy."""
SNAPSHOT_IDLE = 0.5
"""Seconds without a read after which an observation's snapshot is released."""
SQLITE_SNAPSHOTS = 16
PG_SNAPSHOTS = 4
"""Most snapshots held at once (SQLite: of the reader connections; PostgreSQL: of the
read connections, `pg_readers.PG_READERS`, so other questions and /readyz keep some). An
observation that finds none free reads each question in a transaction of its own, as
every read did before snapshots: 200 subscriptions starting at once must not pin 200
connections."""


class Slots:
    """A count of snapshots that may be held at once (used on the event loop only)."""

    __slots__ = ("free",)

    def __init__(self, n: int) -> None:
        self.free = n

    def take(self) -> bool:
        if self.free <= 0:
            return False
        self.free -= 1
        return True

    def give(self) -> None:
        self.free += 1


class ReadConn(Protocol):
    """What a read question runs on: statements in, plain row tuples out."""

    @property
    def dialect(self) -> str: ...

    @property
    def memo(self) -> dict[Hashable, Any]:
        """Whole answers read in this transaction, for later questions of the same one
        (a snapshot's: one state, so an answer read once stands for all of them; a
        question's own transaction has its own, empty at first)."""
        ...

    def rows(
        self, statement: ClauseElement, params: Mapping[str, Any] | None = None
    ) -> list[Any]: ...

    def scalar(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> Any: ...

    def run(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> None:
        """A statement whose rows are not read (`SET LOCAL`, `set_config`)."""
        ...

    def spend(self, nbytes: int) -> None:
        """The bytes the question is about to decode: an inline question past
        `INLINE_BYTES` moves to a reader thread (elsewhere this does nothing)."""
        ...


ReadFn = Callable[[ReadConn], T]

# -- SQLite: SQL text compiled once, bound positionally ------------------------------

_DIALECT = SQLiteDialect_pysqlite(paramstyle="qmark")


class SqlTexts:
    """SQL text and positional arguments of statements, for one dialect.

    A statement met for the second time (a module's fixed one, a per-shape one of
    `derived.py`) is compiled once and found by identity from then on; one built per
    call goes through SQLAlchemy's cache key (its literal values extracted)."""

    def __init__(self, dialect: Any) -> None:
        self.dialect = dialect
        self.fixed: weakref.WeakKeyDictionary[ClauseElement, tuple[Compiled, str | None]] = (
            weakref.WeakKeyDictionary()
        )
        """Statements compiled by identity: the compiled form and, when it has no IN
        list to expand, its SQL text."""
        self.by_key: LRUCache[Any, Any] = LRUCache(1000)
        """SQLAlchemy's compiled cache for statements built per call (scopes, filters)."""
        self.seen: weakref.WeakSet[ClauseElement] = weakref.WeakSet()
        """Statements compiled once through the cache key (a second use fixes them)."""

    def fix(self, statement: ClauseElement) -> None:
        compiled = statement.compile(dialect=self.dialect)
        self.fixed[statement] = (compiled, _text_if_fixed(compiled))

    def sql(self, statement: ClauseElement, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
        found = self.fixed.get(statement)
        if found is None and statement in self.seen:
            self.fix(statement)
            found = self.fixed[statement]
        if found is not None:
            compiled, sql = found
            full = compiled.construct_params(params)
        else:
            self.seen.add(statement)
            compiled, extracted, _, _ = statement._compile_w_cache(
                self.dialect, compiled_cache=self.by_key, column_keys=[], for_executemany=False
            )
            if extracted is None:  # no cache key: compiled afresh
                full = compiled.construct_params(params)
            else:
                full = compiled.construct_params(params, extracted_parameters=extracted)
            sql = _text_if_fixed(compiled)
        if sql is not None:
            names = compiled.positiontup or ()  # type: ignore[attr-defined]
            return sql, [full[name] for name in names]  # type: ignore[index]
        return _expanded(compiled, full or {})


_SQLITE = SqlTexts(_DIALECT)
_PG_TEXTS: dict[int, SqlTexts] = {}
"""PostgreSQL's, per dialect object (an engine's: its bind casts are part of the text)."""


def sqlite_sql(statement: ClauseElement, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """The SQLite SQL text of `statement` and its positional arguments (`SqlTexts`)."""
    return _SQLITE.sql(statement, params)


def pg_texts(dialect: Any) -> SqlTexts:
    """The `SqlTexts` of a PostgreSQL dialect object (an engine's)."""
    texts = _PG_TEXTS.get(id(dialect))
    if texts is None or texts.dialect is not dialect:
        texts = _PG_TEXTS[id(dialect)] = SqlTexts(dialect)
    return texts


_EXPANDED: LRUCache[Any, Any] = LRUCache(1000)
"""IN-list statements expanded for one tuple of list lengths: (SQL text, where each
positional argument comes from). SQLAlchemy's own expansion
(`_process_parameters_for_postcompile`) re-renders the SQL text on every call, ~70 us
for a one-id `IN`; the text depends only on the lengths when no value is rendered
literally, so it is made once per lengths."""


def _expanded(compiled: Compiled, full: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """SQL text and positional arguments of a statement with expanding IN lists."""
    expanding = compiled.post_compile_params  # type: ignore[attr-defined]
    if compiled.literal_execute_params or any(  # type: ignore[attr-defined]
        not isinstance(full.get(p.key), list | tuple) for p in expanding
    ):
        state = compiled._process_parameters_for_postcompile(dict(full))  # type: ignore[attr-defined]
        values = state.parameters
        return state.statement, [values[name] for name in state.positiontup or ()]
    key = (compiled, tuple(len(full[p.key]) for p in expanding))
    found = _EXPANDED.get(key)
    if found is None:  # (SQLAlchemy's expansion rewrites the mapping it is given)
        state = compiled._process_parameters_for_postcompile(dict(full))  # type: ignore[attr-defined]
        lists = {p.key for p in expanding}
        parts: dict[str, tuple[str, int | None]] = {}
        for p in expanding:
            for i in range(len(full[p.key])):
                parts[f"{p.key}_{i + 1}"] = (p.key, i)
        recipe: list[tuple[str, int | None]] = []
        for name in state.positiontup or ():
            part = parts.get(name)
            if part is None:
                if name in lists or name not in full:  # a shape not foreseen: no cache
                    values = state.parameters
                    return state.statement, [values[n] for n in state.positiontup or ()]
                part = (name, None)
            recipe.append(part)
        found = _EXPANDED[key] = (state.statement, recipe)
    sql, recipe = found
    return sql, [full[name] if i is None else full[name][i] for name, i in recipe]


def _text_if_fixed(compiled: Compiled) -> str | None:
    """The SQL text when no IN list needs expanding per call."""
    if compiled.post_compile_params or compiled.literal_execute_params:  # type: ignore[attr-defined]
        return None
    return compiled.string


def fixed(*statements: ClauseElement) -> None:
    """Compile the modules' fixed statements by identity for SQLite (looked up without
    a cache key; PostgreSQL's are fixed on their second use)."""
    for statement in statements:
        _SQLITE.fix(statement)


class SqliteReadConn:
    """A `ReadConn` over one stdlib `sqlite3` connection (used by one thread at a time)."""

    __slots__ = ("left", "memo", "raw")
    dialect = "sqlite"

    def __init__(
        self,
        raw: sqlite3.Connection,
        left: int | None = None,
        memo: dict[Hashable, Any] | None = None,
    ) -> None:
        self.raw = raw
        self.left = left
        """Bytes an inline question may still decode (None: not inline)."""
        self.memo = {} if memo is None else memo

    def spend(self, nbytes: int) -> None:
        if self.left is not None:
            self.left -= nbytes
            if self.left < 0:
                raise _TooLong()

    def rows(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> list[Any]:
        sql, args = sqlite_sql(statement, params or {})
        return self.raw.execute(sql, args).fetchall()

    def scalar(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> Any:
        sql, args = sqlite_sql(statement, params or {})
        row = self.raw.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def run(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> None:
        sql, args = sqlite_sql(statement, params or {})
        self.raw.execute(sql, args).close()

    def sql(self, text: str, args: Sequence[Any] = ()) -> list[Any]:
        """Rows of SQL text written for SQLite (the hot questions skip compiling)."""
        return self.raw.execute(text, args).fetchall()


class _TooLong(Exception):
    """An inline question passed `INLINE_STEPS`: it is run again in a reader thread."""


def run_inline(
    conn: sqlite3.Connection, fn: ReadFn[T], memo: dict[Hashable, Any] | None = None
) -> T:
    """`fn` on `conn` here and now, interrupted past `INLINE_STEPS` (then `_TooLong`).

    The interrupt ends the statement, not the transaction: a read transaction stays
    open with its snapshot, so the question can run again whole on the same
    connection elsewhere."""
    ticks = 0
    limit = INLINE_STEPS // _PROGRESS_EVERY

    def tick() -> int:
        nonlocal ticks
        ticks += 1
        return 1 if ticks > limit else 0

    conn.set_progress_handler(tick, _PROGRESS_EVERY)
    try:
        return fn(SqliteReadConn(conn, INLINE_BYTES, memo))
    except sqlite3.OperationalError:
        if ticks > limit:
            raise _TooLong() from None
        raise
    finally:
        conn.set_progress_handler(None, 0)


class SaReadConn:
    """A `ReadConn` over SQLAlchemy's sync facade (inside `AsyncConnection.run_sync`):
    SQLite without a file. PostgreSQL's is `pg_readers.AsyncpgReadConn`."""

    __slots__ = ("_conn", "dialect", "memo")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.dialect = conn.dialect.name
        self.memo: dict[Hashable, Any] = {}

    def rows(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> list[Any]:
        return list(self._conn.execute(statement, dict(params or {})).all())  # type: ignore[call-overload]

    def scalar(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> Any:
        return self._conn.execute(statement, dict(params or {})).scalar()  # type: ignore[call-overload]

    def run(self, statement: ClauseElement, params: Mapping[str, Any] | None = None) -> None:
        self._conn.execute(statement, dict(params or {})).close()  # type: ignore[call-overload]

    def spend(self, nbytes: int) -> None:
        return None


def sa_read_conn(conn: Connection) -> ReadConn:
    """The `ReadConn` of a sync SQLAlchemy connection (SQLite without a file)."""
    return SaReadConn(conn)


# -- SQLite: the reader pool ---------------------------------------------------------


class SqliteReaders:
    """Stdlib `sqlite3` connections to one database file and the threads that use them.

    `hops` counts the jobs handed to the reader threads and `inline` the questions
    answered on the event loop (tests count a request's hops).
    """

    def __init__(self, path: str, *, busy_timeout: float, on_connect: Sequence[str]) -> None:
        self._path = path
        self._busy_timeout = busy_timeout
        self._on_connect = tuple(on_connect)
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.hops = 0
        self.inline = 0
        self.slots = Slots(SQLITE_SNAPSHOTS)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path,
            timeout=self._busy_timeout,
            isolation_level=None,  # BEGIN is ours: reads of one question share a snapshot
            check_same_thread=False,
        )
        try:
            for statement in self._on_connect:
                conn.execute(statement).close()
        except BaseException:
            conn.close()
            raise
        return conn

    def acquire(self) -> sqlite3.Connection:
        """An idle connection, or a new one (in a reader thread: opening does I/O)."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._open()

    def take_idle(self) -> sqlite3.Connection | None:
        """An idle connection without waiting (on the loop: opening one does I/O)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._idle.pop() if self._idle else None
        finally:
            self._lock.release()

    def release(self, conn: sqlite3.Connection, *, broken: bool = False) -> None:
        """End the connection's transaction and keep it for reuse (or close it)."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            broken = True
        with self._lock:
            if not broken and len(self._idle) < IDLE_READERS:
                self._idle.append(conn)
                return
        conn.close()

    def submit(self, fn: Callable[[], T], *, read: bool = True) -> asyncio.Future[T]:
        """Run `fn` in a reader thread: one hop (counted in `hops` when it reads)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(READER_THREADS, thread_name_prefix="gateway-read")
        if read:
            self.hops += 1
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def read(self, fn: ReadFn[T], *, inline: bool = False) -> T:
        """One question in its own transaction: in one hop, or on the loop when
        `inline` and an idle connection is at hand (module docstring)."""
        if inline:
            conn = self.take_idle()
            if conn is not None:
                broken = False
                try:
                    conn.execute("BEGIN")
                    result = run_inline(conn, fn)
                except _TooLong:
                    pass  # run again whole in a thread, below
                except sqlite3.Error:
                    broken = True
                    raise
                else:
                    self.inline += 1
                    return result
                finally:
                    self.release(conn, broken=broken)
        return await self.submit(lambda: self._read(fn))

    def _read(self, fn: ReadFn[T]) -> T:
        conn = self.acquire()
        broken = False
        try:
            conn.execute("BEGIN")
            return fn(SqliteReadConn(conn))
        except sqlite3.Error:
            broken = True
            raise
        finally:
            self.release(conn, broken=broken)

    def close(self) -> None:
        """Close the idle connections and stop the threads (reusable afterwards)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class ReadSnapshot(Protocol):
    """The reads of one observation, in one transaction where the engine allows it."""

    async def read(self, fn: ReadFn[T], *, inline: bool = False) -> T: ...

    def release(self) -> None:
        """End the transaction now (unless a read runs in it): the next read opens a
        new one. What `SNAPSHOT_IDLE` without a read does."""
        ...

    def close(self) -> None: ...


class SqliteSnapshot:
    """One WAL snapshot for the reads of one observation (module docstring)."""

    def __init__(self, readers: SqliteReaders) -> None:
        self._readers = readers
        self._conn: sqlite3.Connection | None = None
        self._memo: dict[Hashable, Any] = {}
        """`ReadConn.memo` of the transaction on `_conn` (a new one with each BEGIN)."""
        self._lock = threading.Lock()  # one read at a time on the connection
        self._busy = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._slot = False  # holds one of `readers.slots`

    async def read(self, fn: ReadFn[T], *, inline: bool = False) -> T:
        if not self._slot and not self._closed:
            self._slot = self._readers.slots.take()
        if self._closed or not self._slot:
            return await self._readers.read(fn, inline=inline)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if inline and not self._busy:
            done, result = self._inline(fn)
            if done:
                self._arm_idle_timer()
                return result  # type: ignore[return-value]
        self._busy += 1
        try:
            return await self._readers.submit(lambda: self._step(fn))
        finally:
            self._busy -= 1
            if not self._busy:
                self._arm_idle_timer()

    def _arm_idle_timer(self) -> None:
        if not self._closed and self._idle_timer is None:
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(SNAPSHOT_IDLE, self.release)

    def _inline(self, fn: ReadFn[T]) -> tuple[bool, T | None]:
        """(True, answer) of `fn` run here in the snapshot, or (False, None) when it
        must go to a thread: the connection is in use there, none is idle to start
        the snapshot with, or `fn` passed the inline budget."""
        if not self._lock.acquire(blocking=False):
            return False, None
        try:
            conn = self._conn
            if conn is None:
                idle = self._readers.take_idle()
                if idle is None:
                    return False, None
                conn = self._begin(idle)
            try:
                result = run_inline(conn, fn, self._memo)
            except _TooLong:
                return False, None
            except sqlite3.Error:
                self._drop_failed(conn)
                raise
            self._readers.inline += 1
            return True, result
        finally:
            self._lock.release()

    def _step(self, fn: ReadFn[T]) -> T:
        with self._lock:
            conn = self._conn
            if conn is None:
                conn = self._begin(self._readers.acquire())
            try:
                return fn(SqliteReadConn(conn, None, self._memo))
            except sqlite3.Error:
                self._drop_failed(conn)
                raise

    def _begin(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """Open the snapshot on `conn` (lock held): BEGIN, then keep it."""
        try:
            conn.execute("BEGIN")
        except BaseException:
            self._readers.release(conn, broken=True)
            raise
        self._conn = conn
        self._memo = {}
        return conn

    def _drop_failed(self, conn: sqlite3.Connection) -> None:
        """A failed connection is not read again (lock held)."""
        self._conn = None
        self._readers.release(conn, broken=True)

    def _release(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            self._readers.release(conn)

    def _hand_back(self) -> None:
        """Release the connection: here when no thread holds it (ROLLBACK of a read
        transaction only drops its snapshot), else in a reader thread after it."""
        if self._lock.acquire(blocking=False):
            try:
                conn, self._conn = self._conn, None
            finally:
                self._lock.release()
            if conn is not None:
                self._readers.release(conn)
            return
        try:
            self._readers.submit(self._release, read=False)
        except RuntimeError:  # no loop or executor any more
            self._release()

    def _give_slot(self) -> None:
        if self._slot:
            self._slot = False
            self._readers.slots.give()

    def release(self) -> None:
        """Give the connection back (idle: a later read opens a new snapshot)."""
        self._idle_timer = None
        if self._busy:
            return
        self._give_slot()
        if self._conn is not None:
            self._hand_back()

    def close(self) -> None:
        """Release the snapshot (here, or after the thread reading in it is done)."""
        if self._closed:
            return
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._give_slot()
        if self._conn is not None:
            self._hand_back()


async def run_sa_read(engine: AsyncEngine, fn: ReadFn[T]) -> T:
    """One question in its own transaction through SQLAlchemy (module docstring)."""
    async with engine.connect() as conn, conn.begin():
        return await conn.run_sync(lambda sync: fn(sa_read_conn(sync)))
