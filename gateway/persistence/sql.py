"""`SqlPersistence`: the reference persistence backend on SQLAlchemy 2 (async, Core).

SQLite (aiosqlite) is the embedded default; PostgreSQL (asyncpg) the server
option. Besides the core's `list()` and `load()`, it offers every fast path the
core uses when present (`load_header`, `load_window`, `load_fold_log`) and the
write side: `create`, `append`, `import_log`, `delete`.

Writes:

- `create(header, events=())` stores a new session, optionally with its log,
  in one transaction. The log is validated as a whole with the core's
  `fold_surface` (a gap in the seqs is fold rule 1).
- `append(id, events)` adds a batch atomically. The batch must start at the
  stored log's length and be contiguous (else `NonContiguousAppendError`, a
  ValueError) and must keep the log valid under the fold (else the core's
  `SessionQueryError(SESSION_QUERY_INVALID_SURFACE)`). The fold state is
  rebuilt from the stored *fold columns* of surface events only; payloads are
  read only for the stored `tool/result` events that a replacement in the
  batch rewrites (rule 7). The stored log itself is trusted to be valid: every
  writer here validated it.
- `import_log(header, events, replace=False)` writes a whole log: stored as
  new, recognised as identical (a no-op), refused when a different log is
  stored under the id (`SessionConflictError`), or replaced (delete and insert
  in one transaction) with `replace=True`.

Each write is one transaction that first locks the session: `BEGIN IMMEDIATE`
on SQLite, `SELECT ... FOR UPDATE` on the session row on PostgreSQL. Two
concurrent appends at the same seq therefore serialise, and the second gets a
`NonContiguousAppendError`; the `(session_id, seq)` primary key backs this up.

Other errors: `UnknownSessionError` (a KeyError) for a missing id on append,
count and load; `SessionExistsError` (a ValueError) for a duplicate create;
`InvalidEventError` (a ValueError) for a field the schema cannot hold (a
`time` that is not an integer, data that is not JSON, ...); `SchemaVersionError`
when the database's schema is missing or unknown (see `migrations`). Driver
errors (connection refused, timeouts) propagate unchanged; the query core
reports them as `SESSION_QUERY_PERSISTENCE_FAILED`.

Reads: every read is SQLAlchemy Core (no ORM objects) over the primary key
`(session_id, seq)`: `load_window` is a key range, `load_fold_log` reads the
fold columns only, plus the few payloads rule 7 compares (tool/result
replacements and the results they rewrite). Batch variants (`load_headers`,
`load_logs`, `load_fold_logs`, `load_windows`) answer many keys per query, so
the core's per-request coalescing keeps the number of statements flat. Reads
of several statements run in one transaction (REPEATABLE READ on PostgreSQL,
SQLite's snapshot), so a header and its events always match. JSON columns are
read as text and decoded here (the same on both engines), and the cyclic GC
is paused while a long log is fetched and decoded (see `gateway.core.gcpause`).

Inserts use the Core insert of `events`, compiled once per dialect and run
with positional rows in chunks of 5,000.

One `SqlPersistence` belongs to one event loop; `close()` it before the loop ends.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any, Literal, TypeVar

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Dialect,
    Select,
    Text,
    and_,
    bindparam,
    cast,
    delete,
    literal,
    null,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.types import NullType, TypeDecorator, TypeEngine

from gateway.core.errors import ErrorCode, SessionQueryError
from gateway.core.fold import FoldableEvent, SurfaceFold, fold_surface
from gateway.core.gcpause import gc_paused
from gateway.core.model import SessionEvent, SessionHeader

from .engine import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_STATEMENT_TIMEOUT,
    create_engine,
    default_database_url,
    display_url,
    dumps_json,
    is_sqlite,
    normalize_url,
    write_options,
)
from .errors import (
    InvalidEventError,
    NonContiguousAppendError,
    SessionConflictError,
    SessionExistsError,
    UnknownSessionError,
)
from .migrations import SchemaState, ensure_schema
from .tables import HEADER_COLUMNS, PgJsonText, events, sessions

ImportOutcome = Literal["created", "unchanged", "replaced"]
T = TypeVar("T")

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_TOOL_RESULT = "tool/result"
_INSERT_CHUNK = 5000
_COMPARE_CHUNK = 10000
_APPEND_JSON = '"append"'
# Rule 7 (a tool/result rewrite changes only data.message.content[0].content) was
# checked when the stored log was written; replaying it compares this stub to itself.
_REWRITE_STUB: dict[str, Any] = {"message": {"content": [{}]}}


class _PreEncodedJson(TypeDecorator[Any]):
    """Binds JSON text made by `dumps_json` as it is (TEXT on SQLite, json on PostgreSQL).

    Only its compiled form matters: no `::VARCHAR` cast on PostgreSQL, where the
    column is `json`.
    """

    impl = NullType
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(PgJsonText())
        return dialect.type_descriptor(NullType())


_RAW = NullType()


def _raw(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """The column without SQLAlchemy result processing (decoded by hand on the hot path)."""
    return type_coerce(column, _RAW)


def _json_text(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """A JSON column read as its stored text on both engines (decoded by `_loads`)."""
    return _raw(cast(column, Text))


_HEADER_SELECT = [sessions.c[name] for name in HEADER_COLUMNS]
_SID: BindParameter[str] = bindparam("sid")
_EVENT_COLUMNS = (
    events.c.seq,
    events.c.type,
    events.c.time,
    _json_text(events.c.surface_op),
    _json_text(events.c.source_event_seqs),
    _raw(events.c.ignorable),
)
_INSERT_EVENTS = events.insert().values(
    session_id=bindparam("session_id"),
    seq=bindparam("seq"),
    type=bindparam("type"),
    time=bindparam("time"),
    surface_op=bindparam("surface_op", type_=_PreEncodedJson()),
    source_event_seqs=bindparam("source_event_seqs", type_=_PreEncodedJson()),
    ignorable=bindparam("ignorable"),
    data=bindparam("data", type_=_PreEncodedJson()),
)


def _events_select(data: Literal["all", "none"]) -> Select[Any]:
    payload: ColumnElement[Any] = _json_text(events.c.data) if data == "all" else null()
    return (
        select(*_EVENT_COLUMNS, _raw(payload).label("data"))
        .where(events.c.session_id == _SID)
        .order_by(events.c.seq)
    )


_SELECT_ALL = _events_select("all")
_SELECT_FOLD = _events_select("none")
_SELECT_PAYLOADS = select(events.c.seq, _json_text(events.c.data)).where(
    events.c.session_id == _SID, events.c.seq.in_(bindparam("seqs", expanding=True))
)
_PAYLOAD_CHUNK = 1000
_KEY_CHUNK = 500
_WINDOW_CHUNK = 100
_SELECT_HEADERS_IN = select(*_HEADER_SELECT).where(
    sessions.c.id.in_(bindparam("ids", expanding=True))
)
_SELECT_MANY_ALL = select(
    events.c.session_id, *_EVENT_COLUMNS, _json_text(events.c.data).label("data")
).order_by(events.c.session_id, events.c.seq)
_SELECT_MANY_FOLD = select(
    events.c.session_id, *_EVENT_COLUMNS, _raw(null()).label("data")
).order_by(events.c.session_id, events.c.seq)
_SELECT_WINDOW = _SELECT_ALL.where(events.c.seq >= bindparam("lo"), events.c.seq <= bindparam("hi"))
_SELECT_HEADER = select(*_HEADER_SELECT).where(sessions.c.id == _SID)
_SELECT_HEADER_FOR_UPDATE = (
    select(*_HEADER_SELECT, sessions.c.event_count).where(sessions.c.id == _SID).with_for_update()
)
_PING = select(literal(1))
_SELECT_HEADERS = select(*_HEADER_SELECT).order_by(sessions.c.created_at.desc(), sessions.c.id)
_SELECT_SURFACE_FOLD = (
    select(
        events.c.seq,
        events.c.type,
        _json_text(events.c.surface_op),
        _json_text(events.c.source_event_seqs),
    )
    .where(events.c.session_id == _SID, events.c.surface_op.is_not(None))
    .order_by(events.c.seq)
)


_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _loads(text: str) -> Any:
    """`json.loads` for text this module stored (compact, no surrounding space), faster."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)  # raises the proper JSONDecodeError
    return value if end == len(text) else json.loads(text)


def _load_op(text: str) -> Any:
    return "append" if text == _APPEND_JSON else _loads(text)


def _load_sources(text: str) -> Any:
    """A stored sourceEventSeqs list as a tuple (fast for the usual list of ints)."""
    if text == "[]":
        return ()
    try:
        return tuple(map(int, text[1:-1].split(",")))
    except ValueError:  # not a plain list of integers: kept as stored, judged by the fold
        value = _loads(text)
        return tuple(value) if isinstance(value, list) else value


_make_event = SessionEvent


_COMPILED: dict[tuple[int, str], tuple[str, tuple[str, ...]]] = {}


async def _driver_rows(
    conn: AsyncConnection, statement: Select[Any], params: dict[str, Any]
) -> Sequence[Sequence[Any]]:
    """Run a Core statement through the driver's own cursor and return plain rows.

    SQLAlchemy compiles the statement (once per dialect); skipping its per-row
    result processing halves the cost of reading a long log, whose rows need
    none of it (JSON columns are selected as text and decoded here).
    """
    dialect = conn.dialect
    key = (id(statement), dialect.name)
    compiled = _COMPILED.get(key)
    if compiled is None:
        c = statement.compile(dialect=dialect)
        compiled = _COMPILED[key] = (str(c), tuple(c.positiontup or ()))
    sql, names = compiled
    args = [params[name] for name in names]
    driver = (await conn.get_raw_connection()).driver_connection
    if dialect.name == "sqlite":
        rows: Sequence[Sequence[Any]] = await driver.execute_fetchall(sql, args)  # type: ignore[union-attr]
    else:
        rows = await driver.fetch(sql, *args)  # type: ignore[union-attr]
    return rows


def _header_from_row(row: Sequence[Any]) -> SessionHeader:
    return SessionHeader(**dict(zip(HEADER_COLUMNS, row, strict=False)))


def _header_row(header: SessionHeader, event_count: int) -> dict[str, Any]:
    row = {name: getattr(header, name) for name in HEADER_COLUMNS}
    for name in ("created_at", "version", "seed_length", "delegation_depth"):
        value = row[name]
        if value is not None and not _INT64_MIN <= value <= _INT64_MAX:
            raise InvalidEventError(
                f"session {header.id!r}: header field {name} = {value} does not fit in 64 bits"
            )
    row["event_count"] = event_count
    return row


_EventRow = tuple[str, int, str, int, "str | None", "str | None", bool, str]
"""An insert row, in `_INSERT_ORDER`."""
_INSERT_ORDER = (
    "session_id",
    "seq",
    "type",
    "time",
    "surface_op",
    "source_event_seqs",
    "ignorable",
    "data",
)


def _encode_events(session_id: str, batch: Sequence[SessionEvent]) -> list[_EventRow]:
    """The insert rows of a batch, JSON encoded; InvalidEventError for what no column holds."""
    rows: list[_EventRow] = []
    add = rows.append
    for position, event in enumerate(batch):
        if not isinstance(event, SessionEvent):
            raise InvalidEventError(
                f"session {session_id!r}: batch position {position} is a "
                f"{type(event).__name__}, not a SessionEvent"
            )
        # seqs are judged by the contiguity check (append) or fold rule 1 (whole logs)
        seq, etype, time = event.seq, event.type, event.time
        if not isinstance(etype, str) or not etype:
            raise InvalidEventError(
                f"session {session_id!r}: event seq {seq} has type {etype!r}, "
                "not a non-empty string"
            )
        if type(time) is not int or not _INT64_MIN <= time <= _INT64_MAX:
            raise InvalidEventError(
                f"session {session_id!r}: event seq {seq} has time {time!r}, "
                "not an integer (epoch ms) in 64 bits"
            )
        if type(event.ignorable) is not bool:
            raise InvalidEventError(
                f"session {session_id!r}: event seq {seq} has ignorable {event.ignorable!r}, "
                "not a boolean"
            )
        op, sources = event.surface_op, event.source_event_seqs
        try:
            data = dumps_json(event.data)
            op_text = None if op is None else _APPEND_JSON if op == "append" else dumps_json(op)
            src_text = None if sources is None else dumps_json(list(sources))
        except (TypeError, ValueError) as exc:
            raise InvalidEventError(
                f"session {session_id!r}: event seq {seq} holds a value that is not JSON: {exc}"
            ) from None
        add((session_id, seq, etype, time, op_text, src_text, event.ignorable, data))
    return rows


def _check_contiguous(session_id: str, batch: Sequence[SessionEvent], start: int) -> None:
    for position, event in enumerate(batch):
        if event.seq != start + position:
            raise NonContiguousAppendError(
                session_id, start + position, event.seq, position=position
            )


def _canonical(event: SessionEvent) -> str:
    """A comparison key: equal iff equal as JSON values (1, 1.0 and true all differ)."""
    return json.dumps(event.to_json(), sort_keys=True, separators=(",", ":"))


@dataclass(slots=True)
class _FoldEvent:
    """What the fold reads of a stored event (FoldableEvent)."""

    type: str
    seq: int
    data: Any
    surface_op: Any
    source_event_seqs: Any


class SqlPersistence:
    """The reference persistence backend (module docstring): SQLite or PostgreSQL.

    `url`: `sqlite+aiosqlite:///path.db`, `postgresql+asyncpg://...` (plain `sqlite:`
    and `postgresql:` are upgraded); default `$SESSION_GATEWAY_DATABASE_URL`, else the
    embedded SQLite file. `auto_migrate`: migrate a fresh or older schema on first use;
    default True for SQLite, False for PostgreSQL (see `gateway.persistence.migrations`).
    Timeouts are in seconds: `connect_timeout` and `statement_timeout` for PostgreSQL
    (`statement_timeout=None` disables it), `busy_timeout` for SQLite locks.
    """

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

    async def __aenter__(self) -> SqlPersistence:
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

    # -- reads --------------------------------------------------------------

    async def list(self) -> builtins.list[SessionHeader]:
        """Every stored header, newest first (ties by id)."""
        async with self._reading() as conn:
            rows = (await conn.execute(_SELECT_HEADERS)).all()
        return [_header_from_row(row) for row in rows]

    async def load_header(self, session_id: str) -> SessionHeader | None:
        """The stored header of one session, or None."""
        async with self._reading() as conn:
            row = (await conn.execute(_SELECT_HEADER, {"sid": session_id})).first()
        return None if row is None else _header_from_row(row)

    async def count(self, session_id: str) -> int:
        """The stored log's length (the next seq); UnknownSessionError if not stored."""
        async with self._reading() as conn:
            value = (
                await conn.execute(
                    select(sessions.c.event_count).where(sessions.c.id == session_id)
                )
            ).scalar()
        if value is None:
            raise UnknownSessionError(session_id)
        return int(value)

    async def load(self, session_id: str) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """The header and the whole log, payloads included."""
        return await self._load(session_id, _SELECT_ALL, {})

    async def load_fold_log(
        self, session_id: str
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """Every event, with `data` only where the fold reads it, None elsewhere.

        The fold reads payloads for one rule only (7: a tool/result replace rewrites
        just one tool/result's content), so only tool/result replacements and the
        events they name as `start` carry their data; a second, keyed query reads
        those few payloads. The fold's outcome is the same as over the whole log.
        """
        return await self._load(session_id, _SELECT_FOLD, {}, rewrite_payloads=True)

    async def load_window(
        self, session_id: str, start: int, end: int
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """The header and the events with start <= seq <= end, ascending (a key range scan)."""
        return await self._load(session_id, _SELECT_WINDOW, {"lo": start, "hi": end})

    async def _load(
        self,
        session_id: str,
        statement: Select[Any],
        params: dict[str, Any],
        *,
        rewrite_payloads: bool = False,
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        async with self._reading() as conn:
            row = (await conn.execute(_SELECT_HEADER, {"sid": session_id})).first()
            if row is None:
                raise UnknownSessionError(session_id)
            with gc_paused():
                rows = await _driver_rows(conn, statement, {"sid": session_id, **params})
                loaded = self._events_from_rows(rows)
                del rows  # freed now, not walked by the collection that follows the pause
                if rewrite_payloads:
                    await self._fill_rewrite_payloads(conn, session_id, loaded)
        return _header_from_row(row), loaded

    @staticmethod
    async def _fill_rewrite_payloads(
        conn: AsyncConnection, session_id: str, loaded: builtins.list[SessionEvent]
    ) -> None:
        """Put the payloads rule 7 compares into a fold-columns-only log (in place)."""
        needed: set[int] = set()
        for event in loaded:
            op = event.surface_op
            if event.type == _TOOL_RESULT and type(op) is dict and op.get("op") == "replace":
                needed.add(event.seq)
                start = op.get("start")
                if type(start) is int and 0 <= start < event.seq:
                    needed.add(start)
        wanted = sorted(needed)
        for i in range(0, len(wanted), _PAYLOAD_CHUNK):
            chunk = wanted[i : i + _PAYLOAD_CHUNK]
            result = await conn.execute(_SELECT_PAYLOADS, {"sid": session_id, "seqs": chunk})
            for seq, data in result:
                pos = (
                    seq if seq < len(loaded) and loaded[seq].seq == seq else _position(loaded, seq)
                )
                e = loaded[pos]
                loaded[pos] = _make_event(
                    e.type, e.seq, e.time, _loads(data), e.surface_op, e.source_event_seqs,
                    e.ignorable,
                )  # fmt: skip

    @staticmethod
    def _events_from_rows(rows: Iterable[Any]) -> builtins.list[SessionEvent]:
        """SessionEvents from (seq, type, time, surface_op, sources, ignorable, data) rows.

        The hot loop of every read: JSON columns arrive as text (both engines) and
        are decoded here; `ignorable` is 0/1 on SQLite and a bool on PostgreSQL.
        """
        make, loads, load_op, load_sources = _make_event, _loads, _load_op, _load_sources
        flag = (False, True)
        out: builtins.list[SessionEvent] = []
        add = out.append
        with gc_paused():
            for seq, etype, time, op, src, ignorable, data in rows:
                if op is not None:
                    op = load_op(op)
                if src is not None:
                    src = load_sources(src)
                if data is not None:
                    data = loads(data)
                add(make(etype, seq, time, data, op, src, flag[ignorable]))
        return out

    # -- batch reads (the core coalesces one observation's loads into these) -------

    async def load_headers(self, session_ids: Sequence[str]) -> dict[str, SessionHeader]:
        """The stored headers of these ids; ids that are not stored are left out."""
        async with self._reading() as conn:
            return await self._headers_of(conn, session_ids)

    async def load_logs(
        self, session_ids: Sequence[str]
    ) -> dict[str, tuple[SessionHeader, builtins.list[SessionEvent]]]:
        """`load` for many ids in one transaction; ids that are not stored are left out."""
        return await self._load_many(session_ids, with_data=True)

    async def load_fold_logs(
        self, session_ids: Sequence[str]
    ) -> dict[str, tuple[SessionHeader, builtins.list[SessionEvent]]]:
        """`load_fold_log` for many ids in one transaction; missing ids are left out."""
        return await self._load_many(session_ids, with_data=False)

    async def load_windows(
        self, requests: Sequence[tuple[str, int, int]]
    ) -> dict[tuple[str, int, int], tuple[SessionHeader, builtins.list[SessionEvent]]]:
        """`load_window` for many (id, start, end) at once: one key-range query per
        chunk of requests; requests for ids that are not stored are left out."""
        wanted = builtins.list(dict.fromkeys(requests))
        out: dict[tuple[str, int, int], tuple[SessionHeader, builtins.list[SessionEvent]]] = {}
        async with self._reading() as conn:
            headers = await self._headers_of(conn, [sid for sid, _, _ in wanted])
            present = [r for r in wanted if r[0] in headers]
            for chunk in _chunks(present, _WINDOW_CHUNK):
                condition = or_(
                    *(
                        and_(events.c.session_id == sid, events.c.seq >= lo, events.c.seq <= hi)
                        for sid, lo, hi in chunk
                    )
                )
                with gc_paused():
                    rows = (await conn.execute(_SELECT_MANY_ALL.where(condition))).all()
                    logs = self._grouped_events(rows)
                    del rows
                for sid, lo, hi in chunk:
                    log = logs.get(sid, [])
                    seqs = [e.seq for e in log]
                    picked = log[bisect_left(seqs, lo) : bisect_right(seqs, hi)]
                    out[(sid, lo, hi)] = (headers[sid], picked)
        return out

    @staticmethod
    async def _headers_of(
        conn: AsyncConnection, session_ids: Iterable[str]
    ) -> dict[str, SessionHeader]:
        ids = builtins.list(dict.fromkeys(session_ids))
        out: dict[str, SessionHeader] = {}
        for chunk in _chunks(ids, _KEY_CHUNK):
            result = await conn.execute(_SELECT_HEADERS_IN, {"ids": chunk})
            for row in result:
                out[row[0]] = _header_from_row(row)
        return out

    async def _load_many(
        self, session_ids: Sequence[str], *, with_data: bool
    ) -> dict[str, tuple[SessionHeader, builtins.list[SessionEvent]]]:
        statement = _SELECT_MANY_ALL if with_data else _SELECT_MANY_FOLD
        async with self._reading() as conn:
            headers = await self._headers_of(conn, session_ids)
            logs: dict[str, builtins.list[SessionEvent]] = {}
            ids = builtins.list(headers)
            if len(ids) == 1:  # the common case of a long log: the single-session fast read
                single = _SELECT_ALL if with_data else _SELECT_FOLD
                with gc_paused():
                    rows = await _driver_rows(conn, single, {"sid": ids[0]})
                    logs[ids[0]] = self._events_from_rows(rows)
                    del rows
            else:
                for chunk in _chunks(ids, _KEY_CHUNK):
                    with gc_paused():
                        rows = (
                            await conn.execute(statement.where(events.c.session_id.in_(chunk)))
                        ).all()
                        logs.update(self._grouped_events(rows))
                        del rows
            if not with_data:
                for sid, log in logs.items():
                    await self._fill_rewrite_payloads(conn, sid, log)
        return {sid: (header, logs.get(sid, [])) for sid, header in headers.items()}

    @classmethod
    def _grouped_events(cls, rows: Sequence[Any]) -> dict[str, builtins.list[SessionEvent]]:
        """Rows of (session_id, *event columns), ordered by session then seq, by session."""
        out: dict[str, builtins.list[SessionEvent]] = {}
        for sid, group in groupby(rows, key=itemgetter(0)):
            out[sid] = cls._events_from_rows(row[1:] for row in group)
        return out

    # -- writes -------------------------------------------------------------

    async def create(self, header: SessionHeader, events: Sequence[SessionEvent] = ()) -> None:
        """Store a new session, with its initial log (validated as a whole), atomically."""
        batch = builtins.list(events)
        header_row = _header_row(header, len(batch))
        rows = _encode_events(header.id, batch)
        if batch:
            fold_surface(batch)
        async with self._writing() as conn:
            await self._insert_session(conn, header, header_row, rows)

    async def _insert_session(
        self,
        conn: AsyncConnection,
        header: SessionHeader,
        header_row: dict[str, Any],
        rows: builtins.list[_EventRow],
    ) -> None:
        try:
            await conn.execute(sessions.insert(), header_row)
        except IntegrityError:
            raise SessionExistsError(header.id) from None
        await self._insert_events(conn, rows)

    async def _insert_events(self, conn: AsyncConnection, rows: builtins.list[_EventRow]) -> None:
        # The Core insert, compiled once for this dialect, run with positional rows:
        # per-row parameter processing would cost more than the encoding itself.
        sql = self._insert_sql
        for i in range(0, len(rows), _INSERT_CHUNK):
            await conn.exec_driver_sql(sql, rows[i : i + _INSERT_CHUNK])

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> int:
        """Append a batch atomically (module docstring); returns the log's new length."""
        batch = builtins.list(events)
        rows = _encode_events(session_id, batch)
        async with self._writing() as conn:
            locked = (await conn.execute(_SELECT_HEADER_FOR_UPDATE, {"sid": session_id})).first()
            if locked is None:
                raise UnknownSessionError(session_id)
            stored = int(locked.event_count)
            if not batch:
                return stored
            _check_contiguous(session_id, batch, stored)
            fold = await self._stored_fold(conn, session_id, stored, batch)
            for event in batch:
                fold.apply(event)
            try:
                await self._insert_events(conn, rows)
            except IntegrityError:
                raise NonContiguousAppendError(session_id, stored, batch[0].seq) from None
            new_count = stored + len(batch)
            await conn.execute(
                update(sessions).where(sessions.c.id == session_id).values(event_count=new_count)
            )
        return new_count

    async def _stored_fold(
        self,
        conn: AsyncConnection,
        session_id: str,
        stored: int,
        batch: Sequence[SessionEvent],
    ) -> SurfaceFold:
        """The fold state after the stored log, ready to validate `batch` (which follows it).

        Only surface events' fold columns are read; log-only events are placeholders.
        Payloads are read only for stored tool/results that the batch rewrites.
        """
        log: builtins.list[FoldableEvent] = []
        add = log.append
        with gc_paused():
            rows = (await conn.execute(_SELECT_SURFACE_FOLD, {"sid": session_id})).all()
            for seq, etype, op, src in rows:
                while len(log) < seq:
                    add(_FoldEvent("", len(log), None, None, None))
                stub = _REWRITE_STUB if etype == _TOOL_RESULT else None
                sources = None if src is None else _load_sources(src)
                add(_FoldEvent(etype, seq, stub, _load_op(op), sources))
            while len(log) < stored:
                add(_FoldEvent("", len(log), None, None, None))

        real: dict[int, FoldableEvent] = {}
        replaying = True

        def lookup(seq: int) -> FoldableEvent:
            if replaying:
                return log[seq]
            if seq >= stored:
                return batch[seq - stored]
            found = real.get(seq)
            if found is None:  # pragma: no cover - guarded by _rewrite_targets
                raise RuntimeError(f"append: the payload of stored seq {seq} was not loaded")
            return found

        fold = SurfaceFold(lookup)
        try:
            with gc_paused():
                for event in log:
                    fold.apply(event)
        except SessionQueryError as exc:
            raise SessionQueryError(
                ErrorCode.INVALID_SURFACE,
                f"the stored log of session {session_id!r} is itself invalid: {exc.message}",
            ) from exc
        if len(fold) != stored:
            raise SessionQueryError(
                ErrorCode.INVALID_SURFACE,
                f"the stored log of session {session_id!r} has {len(fold)} events, "
                f"but its header counts {stored}",
            )
        targets = _rewrite_targets(batch, stored)
        if targets:
            result = await conn.execute(
                select(events.c.seq, events.c.type, _json_text(events.c.data)).where(
                    and_(events.c.session_id == session_id, events.c.seq.in_(sorted(targets)))
                )
            )
            for seq, etype, data in result:
                real[seq] = _FoldEvent(etype, seq, _loads(data), None, None)
        replaying = False
        return fold

    async def import_log(
        self,
        header: SessionHeader,
        events: Sequence[SessionEvent],
        *,
        replace: bool = False,
    ) -> ImportOutcome:
        """Store a whole log under its header's id in one transaction.

        Returns "created", "unchanged" (the identical header and log are stored:
        nothing is written) or "replaced" (only with `replace=True`). A different
        log under the id raises SessionConflictError naming the difference. The
        log is validated with the fold before anything is written.
        """
        batch = builtins.list(events)
        header_row = _header_row(header, len(batch))
        rows = _encode_events(header.id, batch)
        fold_surface(batch)
        async with self._writing() as conn:
            locked = (await conn.execute(_SELECT_HEADER_FOR_UPDATE, {"sid": header.id})).first()
            if locked is None:
                await self._insert_session(conn, header, header_row, rows)
                return "created"
            difference = await self._difference(conn, header, batch, locked)
            if difference is None:
                return "unchanged"
            if not replace:
                raise SessionConflictError(
                    header.id,
                    f"a different log is already stored ({difference}); "
                    "refused (use --replace / replace=True to overwrite it)",
                )
            await self._delete(conn, header.id)
            await self._insert_session(conn, header, header_row, rows)
            return "replaced"

    async def _difference(
        self,
        conn: AsyncConnection,
        header: SessionHeader,
        batch: Sequence[SessionEvent],
        locked: Any,
    ) -> str | None:
        """How the stored session differs from `header` + `batch`, or None if identical."""
        stored_header = _header_from_row(locked[: len(HEADER_COLUMNS)])
        ours, theirs = header.to_json(), stored_header.to_json()
        if ours != theirs:
            fields = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            return f"the headers differ on {', '.join(fields)}"
        stored = int(locked.event_count)
        if stored != len(batch):
            return f"the stored log has {stored} events, the new one {len(batch)}"
        for lo in range(0, stored, _COMPARE_CHUNK):
            hi = min(stored, lo + _COMPARE_CHUNK) - 1
            rows = (
                await conn.execute(_SELECT_WINDOW, {"sid": header.id, "lo": lo, "hi": hi})
            ).all()
            for old in self._events_from_rows(rows):
                if _canonical(old) != _canonical(batch[old.seq]):
                    return f"event seq {old.seq} differs"
        return None

    async def delete(self, session_id: str) -> bool:
        """Delete a session and its log; returns whether it was stored."""
        async with self._writing() as conn:
            return await self._delete(conn, session_id)

    @staticmethod
    async def _delete(conn: AsyncConnection, session_id: str) -> bool:
        await conn.execute(delete(events).where(events.c.session_id == session_id))
        result = await conn.execute(delete(sessions).where(sessions.c.id == session_id))
        return bool(result.rowcount)


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _position(log: Sequence[SessionEvent], seq: int) -> int:
    """Where `seq` sits in a log whose seqs are not its positions (a stored log that
    breaks rule 1; the fold will reject it, but loading it must not fail first)."""
    return next(i for i, e in enumerate(log) if e.seq == seq)


def _rewrite_targets(batch: Sequence[SessionEvent], stored: int) -> set[int]:
    """Stored seqs whose payload a tool/result replace in the batch compares against."""
    targets = set()
    for event in batch:
        op = event.surface_op
        if event.type == _TOOL_RESULT and type(op) is dict:
            start = op.get("start")
            if type(start) is int and 0 <= start < stored:
                targets.add(start)
    return targets
