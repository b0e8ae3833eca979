"""Phrase search of the stored event texts (`gateway.core.backend.SearchReads`).

The writer keeps one `event_texts` row per event with a text, and its index
(`gateway.persistence.texts`). A search is one statement in one read
transaction, on either engine:

- candidates and `matchCount`: on SQLite the FTS5 query is the normalized
  query quoted as one phrase, and `matchCount` is the number of open markers
  `highlight()` writes (U+FDD0, which no indexed text holds; FTS5 merges
  overlapping occurrences into one highlight). A one-token query (most are)
  counts the token's instances in the index instead (`fts5vocab`, see
  `gateway.persistence.engine.FTS_VOCAB_DDL`): the same number, since one-token
  occurrences never overlap, without `highlight()` re-tokenizing every match
  (1.6 s for 100k matches, against 0.08 s). On PostgreSQL the GIN index
  gives the rows whose tokens contain every phrase token (`terms @> phrase`)
  and `gateway_phrase_count` counts the merged occurrences the same way;
- the filters: scope (`gateway.persistence.corpus._filter_clause`) and the
  session filter on `sessions` joined by primary key (only when one of them
  needs a header column), seq/time/type on the text row itself, surface on
  `events` joined by primary key (only when asked: it is the one derivation
  that changes after a write), live sessions' ids excluded (`shadowed`);
- the ranking of SPEC §13: matchCount desc, length asc, time desc, session id
  asc in code-point order (SQLite's BINARY collation; `COLLATE "C"` on
  PostgreSQL, byte order of UTF-8), seq desc; keyset strictly after `after`,
  `LIMIT`. `search_sessions` keeps each session's best event with
  `row_number()` over the session, then ranks and pages those.

Each search is one synchronous question run in one hop (`SqlBase._read`).
The SQL answers the page of the ranking only; snippets are made by the core
(`gateway.core.matching.snippet`) from the returned text.
"""

from __future__ import annotations

import builtins
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Subquery,
    and_,
    bindparam,
    false,
    func,
    literal,
    literal_column,
    not_,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import Text

from gateway.core.backend import StoredHit, StoredSearch
from gateway.core.filters import EventFilter, SessionFilter, TimeRange
from gateway.core.fold import CODE_BY_SURFACE
from gateway.core.matching import RankKey

from .base import SqlBase
from .corpus import _filter_clause, _tree_plan
from .engine import FTS_VOCAB_TABLE
from .filters import session_clause
from .readers import ReadConn
from .tables import event_fts, event_texts, events, sessions
from .texts import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, stored_term

_t = event_texts


def fts_query(query: str) -> str:
    """The FTS5 query of a normalized query: one quoted phrase (operators are text)."""
    return '"' + query.replace('"', '""') + '"'


def _range(column: ColumnElement[Any], r: TimeRange | Any) -> builtins.list[ColumnElement[bool]]:
    out: builtins.list[ColumnElement[bool]] = []
    if r.from_ is not None:
        out.append(column >= r.from_)
    if r.to is not None:
        out.append(column <= r.to)
    return out


def _needs_header(f: SessionFilter | None) -> bool:
    return f is not None and (f.cwd is not None or f.created_at is not None or f.parent is not None)


def _event_terms(f: EventFilter) -> builtins.list[ColumnElement[bool]]:
    out: builtins.list[ColumnElement[bool]] = []
    if f.seq is not None:
        out.extend(_range(_t.c.seq, f.seq))
    if f.time is not None:
        out.extend(_range(_t.c.time, f.time))
    if f.types is not None:
        out.append(_t.c.type.in_(builtins.list(f.types)) if f.types else false())
    if f.surface is not None:
        codes = sorted({CODE_BY_SURFACE[s] for s in f.surface})
        out.append(events.c.surface.in_(codes) if codes else false())
    return out


def _hits(search: StoredSearch, dialect: str) -> tuple[Select[Any], dict[str, Any]]:
    """Every matching event row with its matchCount `mc`, filters applied (unranked)."""
    params: dict[str, Any] = {}
    conditions: builtins.list[ColumnElement[bool]]
    mc: ColumnElement[Any]
    source: Any
    if dialect == "sqlite" and len(search.phrase) == 1:
        # One token: occurrences never overlap, so matchCount is its instance count,
        # read from the index's positions (no re-tokenizing of each match).
        counts = (
            select(literal_column("doc").label("doc"), func.count().label("n"))
            .select_from(text(FTS_VOCAB_TABLE))
            .where(literal_column("term") == bindparam("term"))
            .group_by(literal_column("doc"))
            .subquery("counts")
        )
        mc = counts.c.n
        source = counts.join(_t, _t.c.id == counts.c.doc)
        conditions = []
        params["term"] = search.phrase[0]
    elif dialect == "sqlite":
        marked = func.highlight(
            literal_column("event_fts"), 0, literal(HIGHLIGHT_OPEN), literal(HIGHLIGHT_CLOSE)
        )
        mc = func.length(marked) - func.length(
            func.replace(marked, literal(HIGHLIGHT_OPEN), literal(""))
        )
        source = event_fts.join(_t, _t.c.id == event_fts.c.rowid)
        conditions = [literal_column("event_fts").op("MATCH")(bindparam("q"))]
        params["q"] = fts_query(search.query)
    else:
        phrase = bindparam("phrase", type_=ARRAY(Text))
        mc = func.gateway_phrase_count(_t.c.terms, phrase)
        source = _t
        conditions = [_t.c.terms.contains(phrase)]
        params["phrase"] = [stored_term(term) for term in search.phrase]
    if search.where is not None or _needs_header(search.sessions):
        source = source.join(sessions, sessions.c.id == _t.c.session_id)
    if search.where is not None:
        conditions.append(_filter_clause(search.where, dialect))
    if search.sessions is not None:
        conditions.append(session_clause(search.sessions, ids=_t.c.session_id))
    if search.events is not None:
        if search.events.surface is not None:
            source = source.join(
                events, and_(events.c.session_id == _t.c.session_id, events.c.seq == _t.c.seq)
            )
        conditions.extend(_event_terms(search.events))
    if search.session_id is not None:
        conditions.append(_t.c.session_id == search.session_id)
    if search.shadowed:
        conditions.append(not_(_t.c.session_id.in_(builtins.list(search.shadowed))))
    statement = select(
        _t.c.session_id,
        _t.c.seq,
        _t.c.type,
        _t.c.time,
        _t.c.length,
        (_t.c.id if dialect == "sqlite" else _t.c.seq).label("tid"),
        mc.label("mc"),
    ).select_from(source)
    return statement.where(*conditions), params


def _sid(hits: Subquery, dialect: str) -> ColumnElement[Any]:
    """The session id in code-point order (UTF-8 byte order) on either engine."""
    column = hits.c.session_id
    return column.collate("C") if dialect == "postgresql" else column


def _after(hits: Subquery, sid: ColumnElement[Any], a: RankKey) -> ColumnElement[bool]:
    """Rows strictly after `a` in the ranking."""
    c = hits.c
    return or_(
        c.mc < a.match_count,
        and_(
            c.mc == a.match_count,
            or_(
                c.length > a.length,
                and_(
                    c.length == a.length,
                    or_(
                        c.time < a.time,
                        and_(
                            c.time == a.time,
                            or_(sid > a.session_id, and_(sid == a.session_id, c.seq < a.seq)),
                        ),
                    ),
                ),
            ),
        ),
    )


def _text_row(text_of: Any, p: Any, dialect: str) -> ColumnElement[bool]:
    """The text row of a page row: by rowid on SQLite (the FTS5 content key), by
    primary key (session id, seq) on PostgreSQL (`tid` is the seq there)."""
    if dialect == "sqlite":
        same: ColumnElement[bool] = text_of.c.id == p.tid
        return same
    return and_(text_of.c.session_id == p.session_id, text_of.c.seq == p.tid)


def _ranked(
    hits: Subquery, search: StoredSearch, dialect: str, *also: ColumnElement[bool]
) -> Select[Any]:
    """The page of `hits` (those also matching `also`) in the ranking, with its texts."""
    c = hits.c
    sid = _sid(hits, dialect)
    statement = select(c.session_id, c.seq, c.type, c.time, c.length, c.tid, c.mc).where(
        c.mc > 0, *also
    )
    if search.after is not None:
        statement = statement.where(_after(hits, sid, search.after))
    page = (
        statement.order_by(c.mc.desc(), c.length, c.time.desc(), sid, c.seq.desc())
        .limit(max(0, search.limit))
        .subquery("page")
    )
    # The texts of the page only: the ranking sorts keys, not every match's text.
    p, text_of = page.c, _t.alias("page_text")
    return (
        select(p.session_id, p.seq, p.type, p.time, p.length, text_of.c.text, p.mc)
        .select_from(page.join(text_of, _text_row(text_of, p, dialect)))
        .order_by(p.mc.desc(), p.length, p.time.desc(), _sid(page, dialect), p.seq.desc())
    )


def _rows_to_hits(rows: Any) -> builtins.list[StoredHit]:
    return [
        StoredHit(RankKey(int(mc), int(length), int(time), sid, int(seq)), etype, text)
        for sid, seq, etype, time, length, text, mc in rows
    ]


class SqlSearchReads(SqlBase):
    """Ranked phrase search over the stored event texts (module docstring)."""

    async def search_events(self, search: StoredSearch) -> builtins.list[StoredHit]:
        """The matching events, ranked (see `gateway.core.backend.StoredSearch`)."""
        if not search.phrase or search.limit <= 0:
            return []

        def read(conn: ReadConn) -> builtins.list[Any]:
            hits, params = _hits(search, conn.dialect)
            statement = _ranked(hits.subquery("hits"), search, conn.dialect)
            with _tree_plan(conn, search.where):
                return conn.rows(statement, params)

        return _rows_to_hits(await self._read(read))

    async def search_sessions(self, search: StoredSearch) -> builtins.list[StoredHit]:
        """Each matching session's best event, sessions ranked by it."""
        if not search.phrase or search.limit <= 0:
            return []

        def read(conn: ReadConn) -> builtins.list[Any]:
            dialect = conn.dialect
            hits, params = _hits(search, dialect)
            inner = hits.subquery("hits")
            best = func.row_number().over(
                partition_by=inner.c.session_id,
                order_by=(
                    inner.c.mc.desc(),
                    inner.c.length,
                    inner.c.time.desc(),
                    inner.c.seq.desc(),
                ),
            )
            per_session = select(*inner.c, best.label("rank_in_session")).subquery("best")
            ranked = _ranked(per_session, search, dialect, per_session.c.rank_in_session == 1)
            with _tree_plan(conn, search.where):
                return conn.rows(ranked, params)

        return _rows_to_hits(await self._read(read))
