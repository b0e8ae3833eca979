"""Reads of the fold's stored derivations (`gateway.core.backend.DerivedReads`).

The writer stores, beside every event, its class as of the whole stored log
(`surface`: 0 LOG_ONLY, 1 CURRENT, 2 SHADOWED), its immediate replacer
(`replaced_by`) and its order label on the surface (`surface_label`), plus the
reverse of `source_event_seqs` in `citations` (see `tables.py`). These reads
answer from them by index, never loading a whole log.

"As of" a log length `n` (what a reader that saw `n` events asks): events with
`seq >= n` do not exist; an event is SHADOWED only when its replacer is `< n`
(a SHADOWED row whose `replaced_by >= n` was still CURRENT then); the surface
as of `n` is the events CURRENT then, in label order; a replacement chain
follows `replaced_by` while it is `< n`; only citers `< n` derive from an event.

Every method takes many keys and answers them with a bounded number of
statements: keys are chunked, and one chunk is one UNION ALL of per-key,
index-range subqueries (each with its own LIMIT where there is one), tagged
with the key's position `k`. Each call is one synchronous question run in one
hop (`SqlBase._read`), in one read transaction.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    CompoundSelect,
    Select,
    and_,
    bindparam,
    cast,
    func,
    literal_column,
    null,
    or_,
    select,
    union_all,
)

from gateway.core.backend import EventQuery, StoredEvent, StoredSession, StoredTrace
from gateway.core.fold import CURRENT_CODE, LOG_ONLY_CODE, SHADOWED_CODE
from gateway.core.model import SessionEvent, SessionHeader

from .base import SqlBase
from .codec import (
    _TOOL_RESULT,
    _chunks,
    _header_from_row,
    _json_text,
    _raw,
    _stored_events_from_rows,
)
from .errors import StoredDataError
from .integrity import StoredExtent, check_ascending, check_class_total, check_run
from .readers import ReadConn, fixed
from .tables import HEADER_COLUMNS, citations, events, sessions

_KEY_CHUNK = 100
"""Keys per statement (SQLite allows 500 terms in a compound SELECT; a key uses <= 3)."""
_ID_CHUNK = 500
_AT_CHUNK = 500
_ALL_CODES = frozenset({LOG_ONLY_CODE, CURRENT_CODE, SHADOWED_CODE})

_SELECT_SESSIONS = select(
    *(sessions.c[name] for name in HEADER_COLUMNS),
    sessions.c.event_count,
    sessions.c.current_count,
    sessions.c.shadowed_count,
    sessions.c.derived_count,
)
_SELECT_SESSIONS_IN = _SELECT_SESSIONS.where(sessions.c.id.in_(bindparam("ids", expanding=True)))
fixed(_SELECT_SESSIONS_IN)


@dataclass(frozen=True, slots=True)
class StoredDerivations:
    """One session's stored log and everything the writer derived from it, as one read
    saw them (what `session-gateway verify` compares with the fold).

    `log` has payloads only where the fold reads them (rule 7: tool/result rewrites);
    `derivations[i]` is the stored (surface, replaced_by, surface_label) of `log[i]`;
    `citations` the stored (seq, cited_by) rows, ascending.
    """

    header: SessionHeader
    event_count: int
    current_count: int
    shadowed_count: int
    derived_count: int
    log: builtins.list[SessionEvent]
    derivations: builtins.list[tuple[int | None, int | None, int | None]]
    citations: builtins.list[tuple[int, int]]


def _event_columns(with_data: bool) -> list[ColumnElement[Any]]:
    payload: ColumnElement[Any] = _json_text(events.c.data) if with_data else _raw(null())
    return [
        events.c.seq.label("seq"),
        events.c.type.label("type"),
        events.c.time.label("time"),
        _json_text(events.c.surface_op).label("surface_op"),
        _json_text(events.c.source_event_seqs).label("source_event_seqs"),
        _raw(events.c.ignorable).label("ignorable"),
        payload.label("data"),
        _raw(events.c.surface).label("surface"),
        _raw(events.c.replaced_by).label("replaced_by"),
    ]


_DATA_AT = 7
"""Where `data` is in a ranged read's row: (k, *the columns of `_event_columns`)."""
_INLINE_EVENTS = 200
"""A ranged read of at most this many events may be answered on the event loop
(`gateway.persistence.readers`: its SQLite steps and decoded bytes still bounded)."""


def _tag(k: int) -> ColumnElement[Any]:
    """The key's position as a constant column (an int we made: safe to inline)."""
    return literal_column(str(int(k))).label("k")


def _p(name: str, k: int) -> BindParameter[Any]:
    """The bound parameter `name` of the key at position `k`."""
    return bindparam(f"{name}{k}")


def _not_indexed(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """`column + 0`: the same value, but not a term an index on `column` can serve, so
    the planner scans the index the other terms name (see `_shadowed_later`)."""
    return column + 0


def _shadowed_later(k: int) -> ColumnElement[bool]:
    """Rows stored SHADOWED whose replacer came at or after as_of: CURRENT as of it.

    Served by `ix_events_replaced_by` (usually an empty range: replacers >= as_of
    are the appends made after the reader's snapshot).
    """
    return and_(events.c.session_id == _p("sid", k), events.c.replaced_by >= _p("n", k))


_Stmt = Select[Any] | CompoundSelect[Any]


def _compound(parts: builtins.list[Select[Any]], *order: str) -> _Stmt:
    if len(parts) == 1:
        return parts[0].order_by(*order)
    return union_all(*parts).order_by(*order)


def _wrapped(part: Select[Any], k: int | None, by: ColumnElement[Any] | None = None) -> Select[Any]:
    """A part with its own ORDER BY seq LIMIT :lim{k}, as a subquery a compound can hold
    (no limit when `k` is None). `by` orders by another expression of seq instead."""
    if k is None:
        return part
    inner = part.order_by(events.c.seq if by is None else by).limit(_p("lim", k)).subquery()
    return select(*inner.c)


_STATEMENTS: dict[tuple[Any, ...], _Stmt] = {}
_STATEMENTS_MAX = 1024


def _statement(key: tuple[Any, ...], build: Callable[[Any], _Stmt], arg: Any) -> _Stmt:
    """A statement built once per shape (building a compound of many parts costs more
    than running it); the parameters are bound per call."""
    found = _STATEMENTS.get(key)
    if found is None:
        if len(_STATEMENTS) >= _STATEMENTS_MAX:
            _STATEMENTS.clear()
        found = _STATEMENTS[key] = build(arg)
    return found


class SqlDerivedReads(SqlBase):
    """Pages of classified events, single events, surfaces and traces by index."""

    async def load_sessions(self, session_ids: Sequence[str]) -> dict[str, StoredSession]:
        """Header, log size and class counts of each stored id (one read of the row).

        `counts` is None unless the stored derivations cover the whole log.
        """
        ids = builtins.list(dict.fromkeys(session_ids))

        def read(conn: ReadConn) -> builtins.list[Any]:
            rows: builtins.list[Any] = []
            for chunk in _chunks(ids, _ID_CHUNK):
                rows.extend(conn.rows(_SELECT_SESSIONS_IN, {"ids": chunk}))
            _remember_extents(conn, ids, rows)
            return rows

        out: dict[str, StoredSession] = {}
        width = len(HEADER_COLUMNS)
        for row in await self._read(read, inline=True):
            count, current, shadowed, derived = (int(v) for v in row[width:])
            counts = (count - current - shadowed, current, shadowed) if derived == count else None
            header = _header_from_row(row[:width])
            out[header.id] = StoredSession(header, count, counts)
        return out

    async def read_derivations(self, session_ids: Sequence[str]) -> dict[str, StoredDerivations]:
        """The stored log and derivations of each stored id, in one read transaction
        (ids not stored are left out). Reads whole logs: for checking, not serving."""
        ids = builtins.list(dict.fromkeys(session_ids))
        return await self._read(lambda conn: _read_derivations(conn, ids))

    async def read_events(
        self, queries: Sequence[EventQuery]
    ) -> dict[EventQuery, builtins.list[StoredEvent]]:
        """Each ranged read (see `EventQuery`); queries of unknown sessions left out.

        Returned rows carry their stored derivations (as of the whole stored log);
        the `surfaces` filter is applied as of `query.as_of`. The rows are checked
        against the session's stored count (`gateway.persistence.integrity`):
        `StoredDataError` rather than a short answer.
        """
        wanted = builtins.list(dict.fromkeys(queries))

        def read(
            conn: ReadConn,
        ) -> tuple[
            dict[EventQuery, builtins.list[StoredEvent]],
            builtins.list[EventQuery],
            dict[str, StoredExtent],
        ]:
            out: dict[EventQuery, builtins.list[StoredEvent]] = {}
            known = _stored_extents(conn, (q.session_id for q in wanted))
            asked = []
            for query in wanted:
                if query.session_id not in known:
                    continue
                out[query] = []
                if _bounds(query) is not None:
                    asked.append(query)
            for chunk in _chunks(asked, _KEY_CHUNK):
                shapes = tuple(_shape(q) for q in chunk)
                statement = _statement(("events", shapes), _events_statement, shapes)
                params: dict[str, Any] = {}
                for k, q in enumerate(chunk):
                    params.update(_event_params(q, k))
                rows = conn.rows(statement, params)
                if any(q.with_data for q in chunk):  # else no row holds a payload
                    conn.spend(sum(len(r[_DATA_AT]) for r in rows if r[_DATA_AT] is not None))
                if len(chunk) == 1:  # every row is the one key's (tag 0): no regrouping
                    if rows:
                        query = chunk[0]
                        tagless = (row[1:] for row in rows)
                        stored = _stored_events_from_rows(tagless, pause_gc=False)
                        out[query] = stored if query.limit is None else stored[: query.limit]
                    continue
                for k, found in _by_key(rows):
                    query = chunk[k]
                    stored = _stored_events_from_rows(found, pause_gc=False)
                    out[query] = stored if query.limit is None else stored[: query.limit]
            _check_against_index(conn, asked, out, known)
            return out, asked, known

        small = sum(q.limit if q.limit is not None else _INLINE_EVENTS + 1 for q in wanted)
        out, asked, known = await self._read(read, inline=small <= _INLINE_EVENTS)
        for query in asked:
            _check_events(query, out[query], known[query.session_id])
        return out

    async def read_events_at(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], StoredEvent]:
        """Single events by (session id, seq), payloads included; missing ones left out."""
        by_session: dict[str, builtins.list[int]] = {}
        for sid, seq in dict.fromkeys(keys):
            by_session.setdefault(sid, []).append(seq)

        def read(conn: ReadConn) -> dict[tuple[str, int], StoredEvent]:
            found = _events_at(conn, _flatten(by_session))
            missing = [key for key in dict.fromkeys(keys) if key not in found]
            if missing:  # absent, or lost: the stored count says which
                extents = _stored_extents(conn, (sid for sid, _ in missing))
                for sid, seq in missing:
                    extent = extents.get(sid)
                    if extent is not None and 0 <= seq < extent.event_count:
                        check_run(sid, [], seq, seq, extent, what="a read of one event")
            return found

        return await self._read(read)

    async def read_surfaces(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], builtins.list[StoredEvent]]:
        """For each (session id, as_of): the surface as it stood when the log had
        `as_of` events, in model-visible order, payloads included."""
        wanted = builtins.list(dict.fromkeys(keys))

        def read(
            conn: ReadConn,
        ) -> tuple[
            dict[tuple[str, int], builtins.list[StoredEvent]],
            builtins.list[tuple[str, int]],
            dict[str, StoredExtent],
        ]:
            out: dict[tuple[str, int], builtins.list[StoredEvent]] = {}
            known = _stored_extents(conn, (sid for sid, _ in wanted))
            asked = []
            for key in wanted:
                if key[0] in known:
                    out[key] = []
                    if key[1] > 0:
                        asked.append(key)
            for chunk in _chunks(asked, _KEY_CHUNK):
                m = len(chunk)
                statement = _statement(("surfaces", m), _surfaces_statement, m)
                params: dict[str, Any] = {}
                for k, (sid, as_of) in enumerate(chunk):
                    params[f"sid{k}"], params[f"n{k}"] = sid, as_of
                rows = conn.rows(statement, params)
                for k, found in _by_key(rows):
                    out[chunk[k]] = _stored_events_from_rows(
                        (row[:-1] for row in found), pause_gc=False
                    )
            return out, asked, known

        out, asked, known = await self._read(read)
        for key in asked:
            _check_surface(key, out[key], known[key[0]])
        return out

    async def read_traces(
        self, keys: Sequence[tuple[str, int, int]]
    ) -> dict[tuple[str, int, int], StoredTrace]:
        """For each (session id, seq, as_of): the event's stored relations as of `as_of`
        (an event not in the log as of `as_of` has none)."""
        wanted = builtins.list(dict.fromkeys(keys))
        empty = StoredTrace((), (), ())

        def read(conn: ReadConn) -> dict[tuple[str, int, int], StoredTrace]:
            out: dict[tuple[str, int, int], StoredTrace] = {}
            known = _stored_ids(conn, (sid for sid, _, _ in wanted))
            asked = []
            for key in wanted:
                sid, seq, as_of = key
                if sid in known:
                    out[key] = empty
                    if 0 <= seq < as_of:
                        asked.append(key)
            for chunk in _chunks(asked, _KEY_CHUNK):
                chains = _chains(conn, chunk)
                relations = _relations(conn, chunk)
                for k, key in enumerate(chunk):
                    replaced, derived = relations.get(k, ((), ()))
                    out[key] = StoredTrace(chains.get(k, ()), replaced, derived)
            return out

        return await self._read(read)


def _read_derivations(conn: ReadConn, ids: Sequence[str]) -> dict[str, StoredDerivations]:
    out: dict[str, StoredDerivations] = {}
    width = len(HEADER_COLUMNS)
    columns = [events.c.session_id, *_event_columns(False), _raw(events.c.surface_label)]
    for chunk in _chunks(ids, _ID_CHUNK):
        rows = conn.rows(_SELECT_SESSIONS_IN, {"ids": chunk})
        heads = {row[0]: row for row in rows}
        logs: dict[str, tuple[builtins.list[StoredEvent], builtins.list[Any]]] = {}
        found = conn.rows(
            select(*columns)
            .where(events.c.session_id.in_(builtins.list(heads)))
            .order_by(events.c.session_id, events.c.seq)
        )
        for sid, group in groupby(found, key=itemgetter(0)):
            rows_of = builtins.list(group)
            logs[sid] = (
                _stored_events_from_rows((row[1:-1] for row in rows_of), pause_gc=False),
                [row[-1] for row in rows_of],
            )
        del found
        cited: dict[str, builtins.list[tuple[int, int]]] = {}
        result = conn.rows(
            select(citations.c.session_id, citations.c.seq, citations.c.cited_by)
            .where(citations.c.session_id.in_(builtins.list(heads)))
            .order_by(citations.c.session_id, citations.c.seq, citations.c.cited_by)
        )
        for sid, seq, cited_by in result:
            cited.setdefault(sid, []).append((int(seq), int(cited_by)))
        events_of = {sid: [r.event for r in stored] for sid, (stored, _) in logs.items()}
        _fill_rewrite_payloads(conn, events_of)
        for sid, row in heads.items():
            stored, labels = logs.get(sid, ([], []))
            log = events_of.get(sid, [])
            count, current, shadowed, derived = (int(v) for v in row[width:])
            out[sid] = StoredDerivations(
                _header_from_row(row[:width]),
                count,
                current,
                shadowed,
                derived,
                log,
                [
                    (r.surface, r.replaced_by, label)
                    for r, label in zip(stored, labels, strict=True)
                ],
                cited.get(sid, []),
            )
    return out


def _bounds(query: EventQuery) -> tuple[int, frozenset[int]] | None:
    """The highest seq and the class codes a ranged read can return; None when empty."""
    hi = min(query.hi, query.as_of - 1)
    codes = _ALL_CODES if query.surfaces is None else query.surfaces & _ALL_CODES
    if query.lo > hi or (query.limit is not None and query.limit <= 0) or not codes:
        return None
    if query.types is not None and not query.types:
        return None
    return hi, codes


_Narrowing = tuple[bool, bool, bool]
"""Which §12 clauses a ranged read adds: time from, time to, types."""
_Shape = tuple["frozenset[int] | None", bool, bool, _Narrowing]
"""A ranged read's statement shape: class codes (None: all), limited, with payloads,
and its §12 narrowing."""


def _narrowing(query: EventQuery) -> _Narrowing:
    time = query.time
    return (
        time is not None and time.from_ is not None,
        time is not None and time.to is not None,
        query.types is not None,
    )


def _shape(query: EventQuery) -> _Shape:
    bounds = _bounds(query)
    assert bounds is not None
    codes = bounds[1]
    return (
        None if codes == _ALL_CODES else codes,
        query.limit is not None,
        query.with_data,
        _narrowing(query),
    )


def _event_params(query: EventQuery, k: int) -> dict[str, Any]:
    bounds = _bounds(query)
    assert bounds is not None
    params = {f"sid{k}": query.session_id, f"lo{k}": query.lo, f"hi{k}": bounds[0]}
    params[f"n{k}"] = query.as_of
    if query.limit is not None:
        params[f"lim{k}"] = query.limit
    if query.time is not None:
        if query.time.from_ is not None:
            params[f"tf{k}"] = query.time.from_
        if query.time.to is not None:
            params[f"tt{k}"] = query.time.to
    if query.types is not None:
        params[f"ty{k}"] = builtins.list(query.types)
    return params


def _narrow_terms(narrowing: _Narrowing, k: int) -> builtins.list[ColumnElement[bool]]:
    """The time and type terms of key `k` (SPEC §12), bound as `:tf{k}`, `:tt{k}`, `:ty{k}`."""
    time_from, time_to, typed = narrowing
    terms: builtins.list[ColumnElement[bool]] = []
    if time_from:
        terms.append(events.c.time >= _p("tf", k))
    if time_to:
        terms.append(events.c.time <= _p("tt", k))
    if typed:
        terms.append(events.c.type.in_(bindparam(f"ty{k}", expanding=True)))
    return terms


def _events_statement(shapes: tuple[_Shape, ...]) -> _Stmt:
    """The ranged reads of one chunk: index-range parts per key, each with its limit."""
    parts: builtins.list[Select[Any]] = []
    for k, (codes, limited, with_data, narrowing) in enumerate(shapes):
        columns = [_tag(k), *_event_columns(with_data)]
        sid, lo, hi = _p("sid", k), _p("lo", k), _p("hi", k)
        narrow = _narrow_terms(narrowing, k)
        in_range = and_(events.c.session_id == sid, events.c.seq >= lo, events.c.seq <= hi, *narrow)
        limit = k if limited else None
        if codes is None and len(shapes) == 1:
            # One range of every class (a plain page): one index range read in order. The
            # compound's form (a subquery ordered again by k, seq) made SQLite sort the
            # page in a temporary B-tree, half again the cost of the read itself.
            flat = select(*columns).where(in_range).order_by(events.c.seq)
            return flat if limit is None else flat.limit(_p("lim", k))
        if codes is None:
            parts.append(_wrapped(select(*columns).where(in_range), limit))
            continue
        if LOG_ONLY_CODE in codes:
            part = select(*columns).where(in_range, events.c.surface == LOG_ONLY_CODE)
            parts.append(_wrapped(part, limit))
        if CURRENT_CODE in codes:
            part = select(*columns).where(in_range, events.c.surface == CURRENT_CODE)
            parts.append(_wrapped(part, limit))
            # ordered by an expression, so that no plan walks the primary key for the order
            seq = _not_indexed(events.c.seq)
            part = select(*columns).where(_shadowed_later(k), seq >= lo, seq <= hi, *narrow)
            parts.append(_wrapped(part, limit, by=seq))
        if SHADOWED_CODE in codes:
            part = select(*columns).where(
                in_range, events.c.surface == SHADOWED_CODE, events.c.replaced_by < _p("n", k)
            )
            parts.append(_wrapped(part, limit))
    return _compound(parts, "k", "seq")


def _events_at_statement(m: int) -> Select[Any]:
    """Single events of `m` sessions: `seq IN :seqs{j}` of session `:sid{j}` each."""
    condition = or_(
        *(
            and_(
                events.c.session_id == _p("sid", j),
                events.c.seq.in_(bindparam(f"seqs{j}", expanding=True)),
            )
            for j in range(m)
        )
    )
    return select(events.c.session_id.label("sid"), *_event_columns(True)).where(condition)


def _surfaces_statement(m: int) -> _Stmt:
    """The surfaces of `m` keys as of their lengths, each in label order."""
    columns = [*_event_columns(True), events.c.surface_label.label("surface_label")]
    parts: builtins.list[Select[Any]] = []
    for k in range(m):
        n = _p("n", k)
        parts.append(
            select(_tag(k), *columns).where(
                events.c.session_id == _p("sid", k),
                events.c.surface == CURRENT_CODE,
                events.c.seq < n,
            )
        )
        parts.append(
            select(_tag(k), *columns).where(_shadowed_later(k), _not_indexed(events.c.seq) < n)
        )
    return _compound(parts, "k", "surface_label")


def _chains(conn: ReadConn, chunk: Sequence[tuple[str, int, int]]) -> dict[int, tuple[int, ...]]:
    """Each key's replacement chain as of its length: one recursive query for the chunk."""
    m = len(chunk)
    statement = _statement(("chains", m), _chains_statement, m)
    rows: Sequence[Any] = conn.rows(statement, _trace_params(chunk))
    out: dict[int, builtins.list[int]] = {}
    for row in rows:
        out.setdefault(int(row[0]), []).append(int(row[1]))
    return {k: tuple(seqs) for k, seqs in out.items()}


def _trace_params(chunk: Sequence[tuple[str, int, int]]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for k, (sid, seq, as_of) in enumerate(chunk):
        params[f"sid{k}"], params[f"seq{k}"], params[f"n{k}"] = sid, seq, as_of
    return params


def _chains_statement(m: int) -> Select[Any]:
    """A recursive query following `replaced_by` from each key's event while < as_of."""
    anchors = [
        select(
            _tag(k),
            events.c.session_id.label("sid"),
            cast(bindparam(f"n{k}", type_=BigInteger), BigInteger).label("as_of"),
            events.c.replaced_by.label("seq"),
            literal_column("1").label("depth"),
        ).where(
            events.c.session_id == _p("sid", k),
            events.c.seq == _p("seq", k),
            events.c.replaced_by < _p("n", k),
        )
        for k in range(m)
    ]
    start = (anchors[0] if m == 1 else union_all(*anchors)).subquery("anchor")
    chain = select(*start.c).cte("chain", recursive=True)
    step = events.alias("step")
    # The next replacer as a correlated scalar lookup by primary key (NULL past the end,
    # which stops the recursion): a join here lets PostgreSQL hash the whole table.
    following = (
        select(step.c.replaced_by)
        .where(
            step.c.session_id == chain.c.sid,
            step.c.seq == chain.c.seq,
            step.c.replaced_by < chain.c.as_of,
        )
        .scalar_subquery()
    )
    chain = chain.union_all(
        select(chain.c.k, chain.c.sid, chain.c.as_of, following, chain.c.depth + 1).where(
            chain.c.seq.is_not(None)
        )
    )
    return select(chain.c.k, chain.c.seq).where(chain.c.seq.is_not(None)).order_by("k", "depth")


def _relations(
    conn: ReadConn, chunk: Sequence[tuple[str, int, int]]
) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each key's replaced seqs (surface order) and citers < as_of (ascending)."""
    m = len(chunk)
    statement = _statement(("relations", m), _relations_statement, m)
    rows: Sequence[Any] = conn.rows(statement, _trace_params(chunk))
    found: dict[int, tuple[builtins.list[int], builtins.list[int]]] = {}
    for row in rows:
        found.setdefault(int(row[0]), ([], []))[int(row[1])].append(int(row[2]))
    return {k: (tuple(replaced), tuple(derived)) for k, (replaced, derived) in found.items()}


def _relations_statement(m: int) -> _Stmt:
    parts: builtins.list[Select[Any]] = []
    for k in range(m):
        sid, seq = _p("sid", k), _p("seq", k)
        parts.append(
            select(
                _tag(k),
                literal_column("0").label("kind"),
                events.c.seq.label("value"),
                events.c.surface_label.label("position"),
            ).where(events.c.session_id == sid, events.c.replaced_by == seq)
        )
        parts.append(
            select(
                _tag(k),
                literal_column("1").label("kind"),
                citations.c.cited_by.label("value"),
                citations.c.cited_by.label("position"),
            ).where(
                citations.c.session_id == sid,
                citations.c.seq == seq,
                citations.c.cited_by < _p("n", k),
            )
        )
    return _compound(parts, "k", "kind", "position")


def _fill_rewrite_payloads(conn: ReadConn, logs: dict[str, builtins.list[SessionEvent]]) -> None:
    """Put the payloads fold rule 7 compares into fold-columns-only logs (in place): those
    of tool/result replacements and of the events they name as `start` (the fold reads
    no other payload), for many sessions in a few keyed queries."""
    needed: dict[tuple[str, int], int] = {}
    for sid, log in logs.items():
        for position, event in enumerate(log):
            op = event.surface_op
            if event.type == _TOOL_RESULT and type(op) is dict and op.get("op") == "replace":
                needed[(sid, event.seq)] = position
                start = op.get("start")
                if type(start) is int and 0 <= start < position and log[start].seq == start:
                    needed[(sid, start)] = start
    for (sid, seq), found in _events_at(conn, sorted(needed)).items():
        log = logs[sid]
        position = needed[(sid, seq)]
        log[position] = log[position]._replace(data=found.event.data)


def _events_at(
    conn: ReadConn, keys: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], StoredEvent]:
    """The stored events at these (session id, seq) keys (grouped by session), payloads
    included, in one statement per chunk of keys; missing keys are left out."""
    out: dict[tuple[str, int], StoredEvent] = {}
    for chunk in _chunks(keys, _AT_CHUNK):
        grouped: dict[str, builtins.list[int]] = {}
        for sid, seq in chunk:
            grouped.setdefault(sid, []).append(seq)
        m = len(grouped)
        statement = _statement(("at", m), _events_at_statement, m)
        params: dict[str, Any] = {}
        for j, (sid, seqs) in enumerate(grouped.items()):
            params[f"sid{j}"], params[f"seqs{j}"] = sid, seqs
        rows = conn.rows(statement, params)
        sids = [row[0] for row in rows]
        for sid, stored in zip(
            sids, _stored_events_from_rows((row[1:] for row in rows), pause_gc=False), strict=True
        ):
            out[(sid, stored.event.seq)] = stored
    return out


_SELECT_EXTENTS = select(
    sessions.c.id,
    sessions.c.event_count,
    sessions.c.current_count,
    sessions.c.shadowed_count,
    sessions.c.derived_count,
).where(sessions.c.id.in_(bindparam("ids", expanding=True)))
_SELECT_IDS = select(sessions.c.id).where(sessions.c.id.in_(bindparam("ids", expanding=True)))
fixed(_SELECT_EXTENTS, _SELECT_IDS)


_EXTENTS = "derived.extents"
"""`ReadConn.memo` key: {session id: its `sessions` row as read in this transaction
(its last four columns the extent's counts), or None when the id is not stored}."""


def _remember_extents(conn: ReadConn, ids: Sequence[str], rows: Sequence[Any]) -> None:
    """Keep what these rows (the last four columns: event, current, shadowed and
    derived counts) state of each id for the transaction's later questions: a page of
    events read in the snapshot that has just read its session (every events request
    does) checks against this instead of reading the row again (on PostgreSQL a round
    trip). The rows themselves, not extents: most are never asked for again."""
    seen: dict[str, Any] = conn.memo.setdefault(_EXTENTS, {})
    for sid in ids:
        seen[sid] = None
    for row in rows:
        seen[row[0]] = row


def _stored_extents(conn: ReadConn, session_ids: Iterable[str]) -> dict[str, StoredExtent]:
    """What the `sessions` rows of these ids state about their logs (stored ids only):
    the read that proves the ids are stored, so the checks cost no extra query. Ids this
    transaction has read already are not read again (`_remember_extents`)."""
    ids = builtins.list(dict.fromkeys(session_ids))
    seen: dict[str, Any] = conn.memo.setdefault(_EXTENTS, {})
    for chunk in _chunks([sid for sid in ids if sid not in seen], _ID_CHUNK):
        _remember_extents(conn, chunk, conn.rows(_SELECT_EXTENTS, {"ids": chunk}))
    return {
        sid: StoredExtent(*(int(v) for v in row[-4:]))
        for sid in ids
        if (row := seen[sid]) is not None
    }


def _by_class(query: EventQuery, extent: StoredExtent) -> frozenset[int] | None:
    """The class codes of a read that goes through the class index (some classes only, no
    §12 narrowing, as of the whole stored log, where stored classes are the as-of ones);
    None for any other read."""
    if query.surfaces is None or query.time is not None or query.types is not None:
        return None
    codes = query.surfaces & _ALL_CODES
    if codes == _ALL_CODES or not codes or query.as_of != extent.event_count:
        return None
    return codes


def _index_seqs_statement(shapes: tuple[tuple[frozenset[int], bool], ...]) -> _Stmt:
    """The seqs the class index `ix_events_surface_seq` alone names for each key (an
    index-only range per class code, each with the key's limit)."""
    parts: builtins.list[Select[Any]] = []
    for k, (codes, limited) in enumerate(shapes):
        for code in sorted(codes):
            part = select(_tag(k), events.c.seq.label("seq")).where(
                events.c.session_id == _p("sid", k),
                events.c.surface == code,
                events.c.seq >= _p("lo", k),
                events.c.seq <= _p("hi", k),
            )
            parts.append(_wrapped(part, k if limited else None))
    return _compound(parts, "k", "seq")


def _check_against_index(
    conn: ReadConn,
    asked: Sequence[EventQuery],
    out: dict[EventQuery, builtins.list[StoredEvent]],
    known: dict[str, StoredExtent],
) -> None:
    """A read of some classes finds its rows through the class index, and SQLite skips a
    row the index names but a damaged table no longer holds, silently: so such a read
    is compared with the seqs the index alone names (index-only, the same limit: a
    page's cost again, not the log's).

    And a read that reaches the end of the log (the last page of a filtered listing)
    must end on the stored class count: the entries of those classes before it are
    counted in the index (index-only; the one check that costs more than its page,
    made once per listing, on its last page), so rows lost from table and index alike
    (deleted behind the writer's back) are found too."""
    checked = [(q, c) for q in asked if (c := _by_class(q, known[q.session_id])) is not None]
    for chunk in _chunks(checked, _KEY_CHUNK):
        shapes = tuple((codes, q.limit is not None) for q, codes in chunk)
        statement = _statement(("index seqs", shapes), _index_seqs_statement, shapes)
        params: dict[str, Any] = {}
        for k, (q, _) in enumerate(chunk):
            params[f"sid{k}"], params[f"lo{k}"] = q.session_id, q.lo
            params[f"hi{k}"] = min(q.hi, q.as_of - 1)
            if q.limit is not None:
                params[f"lim{k}"] = q.limit
        named: dict[int, builtins.list[int]] = {}
        for k, found in _by_key(conn.rows(statement, params)):
            named[k] = [int(row[0]) for row in found]
        for k, (q, _) in enumerate(chunk):
            want = named.get(k, [])[: q.limit]
            got = [row.event.seq for row in out[q]]
            if got != want:
                pairs = enumerate(zip(got, want, strict=False))
                at = next((i for i, (a, b) in pairs if a != b), min(len(got), len(want)))
                shown = f"seq {got[at]}" if at < len(got) else "nothing"
                raise StoredDataError(
                    q.session_id,
                    f"a read of some classes over seqs {q.lo}..{min(q.hi, q.as_of - 1)} read "
                    f"{len(got)} row(s), the class index names {len(want)}: row {at} is {shown} "
                    f"where the index names seq {want[at] if at < len(want) else '(none)'}",
                )
    for q, codes in checked:
        extent = known[q.session_id]
        short = q.limit is None or len(out[q]) < q.limit
        if q.lo > 0 and short and q.hi >= extent.event_count - 1 and extent.derived:
            before = conn.scalar(
                _COUNT_BEFORE, {"sid": q.session_id, "codes": sorted(codes), "lo": q.lo}
            )
            read = int(before or 0) + len(out[q])
            check_class_total(q.session_id, read, codes, extent, what="the last page")


def _check_events(query: EventQuery, rows: Sequence[StoredEvent], extent: StoredExtent) -> None:
    """A ranged read's rows against the stored count (`gateway.persistence.integrity`):
    every class: exactly the seqs asked for; some classes: ascending in range, and
    as many as the class counts say when the read covered the whole log."""
    sid = query.session_id
    seqs = [row.event.seq for row in rows]
    hi = min(query.hi, query.as_of - 1)
    narrowed = query.time is not None or query.types is not None
    if (query.surfaces is None or query.surfaces >= _ALL_CODES) and not narrowed:
        check_run(sid, seqs, query.lo, hi, extent, query.limit, what="a ranged read")
        return
    check_ascending(sid, seqs, max(query.lo, 0), min(hi, extent.event_count - 1))
    n = extent.event_count
    whole = query.lo <= 0 and hi >= n - 1 and query.as_of == n
    if whole and not narrowed and (query.limit is None or len(rows) < query.limit):
        codes = _ALL_CODES if query.surfaces is None else query.surfaces & _ALL_CODES
        check_class_total(sid, len(rows), codes, extent, what="a read of the whole log")


def _check_surface(key: tuple[str, int], rows: Sequence[StoredEvent], extent: StoredExtent) -> None:
    """A surface's rows: distinct seqs below its length, and as of the whole stored log
    as many as the stored CURRENT count."""
    sid, as_of = key
    check_ascending(sid, sorted(row.event.seq for row in rows), 0, as_of - 1, what="a surface")
    if as_of == extent.event_count:
        check_class_total(sid, len(rows), frozenset({CURRENT_CODE}), extent, what="the surface")


def _stored_ids(conn: ReadConn, session_ids: Iterable[str]) -> set[str]:
    ids = builtins.list(dict.fromkeys(session_ids))
    out: set[str] = set()
    for chunk in _chunks(ids, _ID_CHUNK):
        out.update(row[0] for row in conn.rows(_SELECT_IDS, {"ids": chunk}))
    return out


_COUNT_BEFORE = select(func.count()).where(
    events.c.session_id == bindparam("sid"),
    events.c.surface.in_(bindparam("codes", expanding=True)),
    events.c.seq < bindparam("lo"),
)
fixed(_COUNT_BEFORE)


def _by_key(rows: Sequence[Any]) -> Iterable[tuple[int, builtins.list[Any]]]:
    """Rows tagged with their key's position first, ordered by it: (k, rows without k)."""
    current: int | None = None
    group: builtins.list[Any] = []
    for row in rows:
        k = int(row[0])
        if k != current:
            if current is not None:
                yield current, group
            current, group = k, []
        group.append(row[1:])
    if current is not None:
        yield current, group


def _flatten(by_session: dict[str, builtins.list[int]]) -> builtins.list[tuple[str, int]]:
    return [(sid, seq) for sid, seqs in by_session.items() for seq in seqs]
