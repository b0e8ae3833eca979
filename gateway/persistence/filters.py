"""The filters of the pages by index (`gateway.core.backend.FilterReads`, SPEC §12).

The clauses of a `SessionFilter` (`availability` is the core's) are added to the
keyset page of `gateway.persistence.corpus` (`ix_sessions_newest_first`):
`id IN` (primary key), `cwd IN` / `IS NULL` (`ix_sessions_cwd`), `parent_session
IN` / `IS NULL` (`ix_sessions_parent_session`), and a `created_at` range, which
bounds the newest-first index range itself. The planner picks the index; a page
stops after `limit` rows when it walks the newest-first index, and reads the
matching rows of a cwd or parent when it takes their index (few, for the narrow
values a filter names). On SQLite a page of cwd values chooses between the two by
their counts (`_page_cwd`). A count of cwd values alone sums `cwd_stats`.

Event clauses (`time`, `types`) are terms of the ranged reads of
`gateway.persistence.derived` (`EventQuery.time` / `.types`) over `pk_events`
and `ix_events_surface_seq`; `count_events` counts a ranged read's rows, one
statement per query, with the class of each row as of the query's `as_of`.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, false, func, or_, select, true

from gateway.core.backend import EventQuery, ScopeFilter
from gateway.core.filters import SessionFilter
from gateway.core.fold import CURRENT_CODE, LOG_ONLY_CODE, SHADOWED_CODE
from gateway.core.model import SessionHeader

from .base import SqlBase
from .codec import _header_from_row
from .corpus import _COUNT, _FIRST_PAGE, _PAGE_AFTER, _filter_clause, _tree_plan
from .errors import StoredDataError
from .readers import ReadConn
from .tables import cwd_stats, events
from .tables import sessions as _sessions


def _one_of(column: ColumnElement[Any], values: Sequence[str | None]) -> ColumnElement[bool]:
    """`column` is one of `values`, None meaning NULL (an empty list matches nothing)."""
    named = [v for v in values if v is not None]
    terms: builtins.list[ColumnElement[bool]] = []
    if named:
        terms.append(column.in_(named))
    if len(named) != len(values):
        terms.append(column.is_(None))
    return or_(*terms) if terms else false()


def session_clause(
    f: SessionFilter,
    cwd: ColumnElement[Any] = _sessions.c.cwd,
    ids: ColumnElement[Any] = _sessions.c.id,
) -> ColumnElement[bool]:
    """The SQL predicate of every clause of `f` but `availability` (`cwd`: the column
    expression the cwd clause tests, see `_page_cwd`; `ids`: the session-id column,
    another table's when only the id clause is given, so `sessions` need not be
    joined)."""
    terms: builtins.list[ColumnElement[bool]] = []
    if f.ids is not None:
        terms.append(_one_of(ids, f.ids))
    if f.cwd is not None:
        terms.append(_one_of(cwd, f.cwd))
    if f.parent is not None:
        terms.append(_one_of(_sessions.c.parent_session, f.parent))
    if f.created_at is not None:
        if f.created_at.from_ is not None:
            terms.append(_sessions.c.created_at >= f.created_at.from_)
        if f.created_at.to is not None:
            terms.append(_sessions.c.created_at <= f.created_at.to)
    return and_(true(), *terms)


def _class_terms(query: EventQuery) -> ColumnElement[bool] | None:
    """Rows whose class as of `query.as_of` is one of `query.surfaces` (None: any)."""
    if query.surfaces is None:
        return None
    n = query.as_of
    terms: builtins.list[ColumnElement[bool]] = []
    if LOG_ONLY_CODE in query.surfaces:
        terms.append(events.c.surface == LOG_ONLY_CODE)
    if CURRENT_CODE in query.surfaces:
        terms.append(events.c.surface == CURRENT_CODE)
        terms.append(and_(events.c.surface == SHADOWED_CODE, events.c.replaced_by >= n))
    if SHADOWED_CODE in query.surfaces:
        terms.append(and_(events.c.surface == SHADOWED_CODE, events.c.replaced_by < n))
    return or_(*terms) if terms else false()


def event_count_statement(query: EventQuery) -> Any:
    """`count(*)` of a ranged read's rows, its limit ignored."""
    hi = min(query.hi, query.as_of - 1)
    terms: builtins.list[ColumnElement[bool]] = [
        events.c.session_id == query.session_id,
        events.c.seq >= query.lo,
        events.c.seq <= hi,
    ]
    classes = _class_terms(query)
    if classes is not None:
        terms.append(classes)
    if query.time is not None:
        if query.time.from_ is not None:
            terms.append(events.c.time >= query.time.from_)
        if query.time.to is not None:
            terms.append(events.c.time <= query.time.to)
    if query.types is not None:
        terms.append(events.c.type.in_(builtins.list(query.types)))
    return select(func.count()).select_from(events).where(*terms)


def _page_cwd(conn: ReadConn, f: SessionFilter, limit: int) -> ColumnElement[Any]:
    """The cwd expression a SQLite page tests: the column, or `cwd || ''` to keep the
    planner off `ix_sessions_cwd` when walking the newest-first index is cheaper.

    Without an index on (cwd, created_at DESC, id), SQLite takes the cwd index for
    `cwd IN (...)` and sorts every matching row (S of them) before the LIMIT; the
    newest-first walk reads about `limit * N / S` rows (N sessions). `cwd_stats` and
    `corpus_stats` give S and N in two reads of a few rows, so the page takes the cwd
    index only when `S * S <= limit * N`. (PostgreSQL's planner has the statistics.)"""
    column: ColumnElement[Any] = _sessions.c.cwd
    if conn.dialect != "sqlite" or not f.cwd or None in f.cwd:
        return column
    named = builtins.list(dict.fromkeys(v for v in f.cwd if v is not None))
    matching = conn.scalar(
        select(func.coalesce(func.sum(cwd_stats.c.session_count), 0)).where(
            cwd_stats.c.cwd.in_(named)
        )
    )
    total = conn.scalar(_COUNT)
    s, n = int(matching or 0), int(total or 0)
    return column.concat("") if s * s > limit * n else column


_SELECT_EXTENTS_IN = select(_sessions.c.id, _sessions.c.event_count).where(
    _sessions.c.id.in_(bindparam("ids", expanding=True))
)


class SqlFilterReads(SqlBase):
    """Filtered keyset pages and counts of sessions, and counts of filtered events."""

    async def filtered_headers_page(
        self,
        after: tuple[int, str] | None,
        limit: int,
        sessions: SessionFilter,
        where: ScopeFilter | None = None,
    ) -> builtins.list[SessionHeader]:
        """`headers_page` with the clauses of `sessions` (module docstring)."""
        if limit <= 0:
            return []
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["created_at"], params["id"] = after

        def read(conn: ReadConn) -> builtins.list[Any]:
            cwd = _page_cwd(conn, sessions, limit)
            statement = (_FIRST_PAGE if after is None else _PAGE_AFTER).where(
                session_clause(sessions, cwd)
            )
            with _tree_plan(conn, where):
                if where is not None:
                    statement = statement.where(_filter_clause(where, conn.dialect, paging=True))
                return conn.rows(statement, params)

        return [_header_from_row(row) for row in await self._read(read)]

    async def count_filtered_sessions(
        self, sessions: SessionFilter, where: ScopeFilter | None = None
    ) -> int:
        """How many stored sessions match `sessions` (and `where`, when given)."""
        cwd_only = (
            where is None
            and sessions.cwd is not None
            and None not in sessions.cwd
            and sessions.ids is None
            and sessions.parent is None
            and sessions.created_at is None
        )

        def read(conn: ReadConn) -> Any:
            if cwd_only:
                assert sessions.cwd is not None
                statement = select(func.coalesce(func.sum(cwd_stats.c.session_count), 0)).where(
                    cwd_stats.c.cwd.in_(builtins.list(dict.fromkeys(sessions.cwd)))
                )
                return conn.scalar(statement)
            statement = select(func.count()).select_from(_sessions)
            statement = statement.where(session_clause(sessions))
            with _tree_plan(conn, where):
                if where is not None:
                    statement = statement.where(_filter_clause(where, conn.dialect))
                return conn.scalar(statement)

        return int(await self._read(read) or 0)

    async def count_events(self, queries: Sequence[EventQuery]) -> dict[EventQuery, int]:
        """How many events each ranged read matches (its limit ignored); queries of
        sessions that are not stored are left out."""
        wanted = builtins.list(dict.fromkeys(queries))

        def read(conn: ReadConn) -> dict[EventQuery, int]:
            out: dict[EventQuery, int] = {}
            ids = builtins.list(dict.fromkeys(q.session_id for q in wanted))
            known: dict[str, int] = {}
            if ids:
                found = conn.rows(_SELECT_EXTENTS_IN, {"ids": ids})
                known = {row[0]: int(row[1]) for row in found}
            for query in wanted:
                if query.session_id not in known:
                    continue
                empty = (
                    query.lo > min(query.hi, query.as_of - 1)
                    or (query.surfaces is not None and not query.surfaces)
                    or (query.types is not None and not query.types)
                )
                if empty:
                    out[query] = 0
                    continue
                value = conn.scalar(event_count_statement(query))
                out[query] = int(value or 0)
                if query.surfaces is None and query.time is None and query.types is None:
                    _check_range_count(query, out[query], known[query.session_id])
            return out

        return await self._read(read)


def _check_range_count(query: EventQuery, found: int, event_count: int) -> None:
    """A count of a seq range (no other clause) is the range clipped to the stored log:
    fewer rows counted means lost rows (`gateway.persistence.integrity`)."""
    lo, hi = max(query.lo, 0), min(query.hi, query.as_of - 1, event_count - 1)
    want = max(hi - lo + 1, 0)
    if found != want:
        raise StoredDataError(
            query.session_id,
            f"the session stores {event_count} events; a count of seqs {lo}..{hi} "
            f"expected {want} and counted {found}",
        )
