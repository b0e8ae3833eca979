"""The JSON codec and row shapes shared by the SQL reads and writes.

JSON columns are read as their stored text and decoded here by hand (the
stored text is compact, so a faster path than `json.loads` applies), and
events are encoded to positional insert rows once per write. Kept apart from
the statements so that reads and writes share one definition of a row.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Dialect,
    Select,
    Text,
    bindparam,
    cast,
    type_coerce,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import NullType, TypeDecorator, TypeEngine

from gateway.core.backend import StoredEvent
from gateway.core.fold import FoldableEvent
from gateway.core.gcpause import gc_paused
from gateway.core.ids import id_problem, shown, text_problem
from gateway.core.model import SessionEvent, SessionHeader

from .engine import (
    dumps_json,
)
from .errors import (
    InvalidEventError,
    NonContiguousAppendError,
    UnknownSessionError,
)
from .tables import HEADER_COLUMNS, PgJsonText, citations, events

T = TypeVar("T")

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_TOOL_RESULT = "tool/result"
_APPEND_JSON = '"append"'


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


_new_tuple = tuple.__new__
"""Builds a named tuple (`SessionEvent`, `StoredEvent`) from all its fields as the tuple it
is: the generated `__new__` (keywords, defaults) costs as much again per decoded row."""


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
    if (problem := id_problem(header.id)) is not None:  # the text policy: gateway.core.ids
        raise InvalidEventError(f"session id {shown(header.id)} {problem}")
    for name in ("parent_session", "cwd", "origin", "agent_preset"):
        value = getattr(header, name)
        if isinstance(value, str) and (problem := text_problem(value)) is not None:
            raise InvalidEventError(f"session {shown(header.id)}: header field {name} {problem}")
    row = {name: getattr(header, name) for name in HEADER_COLUMNS}
    for name in ("created_at", "version", "seed_length", "delegation_depth"):
        value = row[name]
        if value is not None and not _INT64_MIN <= value <= _INT64_MAX:
            raise InvalidEventError(
                f"session {header.id!r}: header field {name} = {value} does not fit in 64 bits"
            )
    row["event_count"] = event_count
    return row


_Encoded = tuple[str, int, str, int, "str | None", "str | None", bool, str]
"""An encoded event before its derivations: `_INSERT_ORDER` without surface..surface_label."""
_EventRow = tuple[
    str, int, str, int, "str | None", "str | None", bool, int, "int | None", "int | None", str
]
"""An insert row, in `_INSERT_ORDER`."""
_INSERT_ORDER = (
    "session_id",
    "seq",
    "type",
    "time",
    "surface_op",
    "source_event_seqs",
    "ignorable",
    "surface",
    "replaced_by",
    "surface_label",
    "data",
)
Derivation = tuple[int, "int | None", "int | None"]
"""What the writer stores beside an event: (surface code, replaced_by, surface_label)."""


def _encode_events(session_id: str, batch: Sequence[SessionEvent]) -> list[_Encoded]:
    """The encoded events of a batch (JSON as text), before the fold derives them;
    InvalidEventError for what no column holds. `_derived_rows` makes insert rows."""
    rows: list[_Encoded] = []
    add = rows.append
    if id_problem(session_id) is not None:
        raise UnknownSessionError(session_id)
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
        if (problem := text_problem(etype)) is not None:
            raise InvalidEventError(
                f"session {session_id!r}: event seq {seq} has a type that {problem}"
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


def _derived_rows(
    encoded: Sequence[_Encoded], derivations: Sequence[Derivation]
) -> list[_EventRow]:
    """Insert rows: each encoded event with its derivation (`SurfaceFold.derivations`)."""
    if len(encoded) != len(derivations):  # pragma: no cover - a caller's bug
        raise RuntimeError(f"{len(encoded)} events but {len(derivations)} derivations")
    return [
        (sid, seq, etype, time, op, src, ignorable, code, replaced_by, label, data)
        for (sid, seq, etype, time, op, src, ignorable, data), (code, replaced_by, label) in zip(
            encoded, derivations, strict=True
        )
    ]


def _citation_rows(session_id: str, batch: Iterable[FoldableEvent]) -> list[tuple[str, int, int]]:
    """(session_id, seq, cited_by) for every source of every event of a validated batch
    (the fold checked that sources are lists of distinct earlier seqs)."""
    out: list[tuple[str, int, int]] = []
    for event in batch:
        sources = event.source_event_seqs
        if sources:
            seq = event.seq
            out.extend((session_id, source, seq) for source in sources)
    return out


def _check_contiguous(session_id: str, batch: Sequence[SessionEvent], start: int) -> None:
    for position, event in enumerate(batch):
        if event.seq != start + position:
            raise NonContiguousAppendError(
                session_id, start + position, event.seq, position=position
            )


def _canonical(event: SessionEvent) -> str:
    """A comparison key: equal iff equal as JSON values (1, 1.0 and true all differ)."""
    return json.dumps(event.to_json(), sort_keys=True, separators=(",", ":"))


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _events_from_rows(rows: Iterable[Any], *, pause_gc: bool = True) -> builtins.list[SessionEvent]:
    """SessionEvents from (seq, type, time, surface_op, sources, ignorable, data) rows.

    The hot loop of every read: JSON columns arrive as text (both engines) and
    are decoded here; `ignorable` is 0/1 on SQLite and a bool on PostgreSQL.
    Synchronous on purpose: a GC pause around it never spans an `await`
    (`pause_gc=False` in a worker thread, where the loop runs meanwhile).
    """
    loads, load_op, load_sources, append_json = _loads, _load_op, _load_sources, _APPEND_JSON
    new, event_type = _new_tuple, SessionEvent
    flag = (False, True)
    out: builtins.list[SessionEvent] = []
    add = out.append
    with gc_paused() if pause_gc else nullcontext():
        for seq, etype, time, op, src, ignorable, data in rows:
            if op is not None:  # `_load_op`, its usual case inline (no call per row)
                op = "append" if op == append_json else load_op(op)
            if src is not None:  # `_load_sources`, likewise
                src = () if src == "[]" else load_sources(src)
            if data is not None:
                data = loads(data)
            add(new(event_type, (etype, seq, time, data, op, src, flag[ignorable])))
    return out


def _stored_events_from_rows(
    rows: Iterable[Any], *, pause_gc: bool = True
) -> builtins.list[StoredEvent]:
    """StoredEvents from (seq, type, time, surface_op, sources, ignorable, data, surface,
    replaced_by) rows (`data` None when not selected). Synchronous, like
    `_events_from_rows`: a GC pause around it never spans an `await` (`pause_gc=False`
    in a reader thread, where the loop runs meanwhile)."""
    loads, load_op, load_sources, append_json = _loads, _load_op, _load_sources, _APPEND_JSON
    new, event_type, stored = _new_tuple, SessionEvent, StoredEvent
    flag = (False, True)
    out: builtins.list[StoredEvent] = []
    add = out.append
    with gc_paused() if pause_gc else nullcontext():
        for seq, etype, time, op, src, ignorable, data, surface, replaced_by in rows:
            if op is not None:  # `_load_op`, its usual case inline (no call per row)
                op = "append" if op == append_json else load_op(op)
            if src is not None:  # `_load_sources`, likewise
                src = () if src == "[]" else load_sources(src)
            if data is not None:
                data = loads(data)
            # both named tuples built as the tuples they are (see `_new_tuple`)
            event = new(event_type, (etype, seq, time, data, op, src, flag[ignorable]))
            add(new(stored, (event, surface, replaced_by)))
    return out


_INSERT_EVENTS = events.insert().values(
    session_id=bindparam("session_id"),
    seq=bindparam("seq"),
    type=bindparam("type"),
    time=bindparam("time"),
    surface_op=bindparam("surface_op", type_=_PreEncodedJson()),
    source_event_seqs=bindparam("source_event_seqs", type_=_PreEncodedJson()),
    ignorable=bindparam("ignorable"),
    surface=bindparam("surface"),
    replaced_by=bindparam("replaced_by"),
    surface_label=bindparam("surface_label"),
    data=bindparam("data", type_=_PreEncodedJson()),
)
_INSERT_CITATIONS = citations.insert().values(
    session_id=bindparam("session_id"), seq=bindparam("seq"), cited_by=bindparam("cited_by")
)
_CITATION_ORDER = ("session_id", "seq", "cited_by")
