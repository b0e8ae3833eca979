"""Corpus questions by index (`gateway.core.backend.CorpusReads`) for `SqlPersistence`.

Each method is one read transaction of a bounded number of SQLAlchemy Core
statements (id lists are chunked at `_KEY_CHUNK`), on SQLite and PostgreSQL alike:

- `headers_page` is a keyset page over `ix_sessions_newest_first`
  (`created_at DESC, id`): `created_at <= c AND (created_at < c OR id > i)`,
  whose first term bounds the index range so a deep page costs what it returns;
- `count_sessions` reads the one row of `corpus_stats` that triggers keep
  equal to the number of sessions (migration 0003): a read, not a scan;
- a scoped page or count (`ScopeFilter`, SPEC §10) adds its predicate to the
  same statements: cwd prefixes by `GLOB 'prefix/*'` on SQLite and `LIKE
  'prefix/%'` on PostgreSQL (prefix escaped; both read `ix_sessions_cwd`), id
  globs by `GLOB` on SQLite and `LIKE ... ESCAPE` on PostgreSQL (both
  case-sensitive, translated so only `*` and `?` are wildcards), tree seeds by
  a recursive CTE of their descendants. A count of `cwd:` grants alone sums
  the rows of `cwd_stats` (sessions per cwd, kept by triggers: migration
  0004) whose cwd matches; any other scoped count reads the matching rows;
- `load_children` is an IN over `ix_sessions_parent_session`;
- `load_ancestry` and `load_descendancy` are recursive CTEs (`WITH RECURSIVE`)
  whose recursive term is joined by primary key (ancestry) or by the parent
  index (descendancy). They combine with `UNION`, not `UNION ALL`, so an id
  reached again (a cycle) is dropped and the recursion ends; chains of any
  depth work, since the database iterates instead of recursing. Each answers
  with the union over its seeds, a seed below another seed included, which the
  core splits into each seed's own answer (`gateway.core.reach`).

  On PostgreSQL the planner fixes a recursive CTE's plan before it runs, from
  estimates that are poor for a walk (a freshly loaded, unanalysed table, or a
  parent with many children, leads it to a hash join that scans the whole
  table at every level: quadratic in the depth). A lineage read therefore
  turns hash and merge joins off for its own transaction (`SET LOCAL`), which
  leaves the index nested loop: each level costs what it reaches, and sets them
  back after (`RESET`): the observation's later questions may share the
  transaction (`gateway.persistence.readers`).

Each method is one synchronous question run in one hop (`SqlBase._read`).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    CTE,
    BindParameter,
    ColumnElement,
    Select,
    bindparam,
    case,
    false,
    func,
    or_,
    select,
    text,
)
from sqlalchemy.util import LRUCache

from gateway.core.backend import ScopeFilter
from gateway.core.model import SessionHeader

from .base import SqlBase
from .codec import _chunks, _header_from_row
from .readers import ReadConn, fixed
from .tables import HEADER_COLUMNS, corpus_stats, cwd_stats, sessions

_KEY_CHUNK = 500
_HEADER_SELECT = [sessions.c[name] for name in HEADER_COLUMNS]
_ID_INDEX = HEADER_COLUMNS.index("id")
_IDS: BindParameter[Any] = bindparam("ids", expanding=True)
_NEWEST_FIRST = (sessions.c.created_at.desc(), sessions.c.id)

_SELECT_HEADERS_IN = select(*_HEADER_SELECT).where(sessions.c.id.in_(_IDS))
_COUNT = select(corpus_stats.c.session_count).where(corpus_stats.c.id == 1)
_FIRST_PAGE = select(*_HEADER_SELECT).order_by(*_NEWEST_FIRST).limit(bindparam("limit"))
_PAGE_AFTER = (
    select(*_HEADER_SELECT)
    .where(
        sessions.c.created_at <= bindparam("created_at"),
        or_(
            sessions.c.created_at < bindparam("created_at"),
            sessions.c.id > bindparam("id"),
        ),
    )
    .order_by(*_NEWEST_FIRST)
    .limit(bindparam("limit"))
)
_SELECT_CHILDREN = (
    select(*_HEADER_SELECT)
    .where(sessions.c.parent_session.in_(_IDS))
    .order_by(sessions.c.parent_session, sessions.c.created_at, sessions.c.id)
)


def _ancestry_statement() -> Select[Any]:
    """Headers reached from `:ids` (themselves included) by parent links."""
    anchor = select(sessions.c.id, sessions.c.parent_session).where(sessions.c.id.in_(_IDS))
    walk: CTE = anchor.cte("ancestry", recursive=True)
    parent = sessions.alias("parent")
    walk = walk.union(
        select(parent.c.id, parent.c.parent_session).join(
            walk, parent.c.id == walk.c.parent_session
        )
    )
    return select(*_HEADER_SELECT).join(walk, sessions.c.id == walk.c.id)


def _descendancy_statement() -> Select[Any]:
    """Headers reached from `:ids` by child links (an id among them too when reached:
    below another id, or through a cycle)."""
    anchor = select(sessions.c.id).where(sessions.c.parent_session.in_(_IDS))
    walk: CTE = anchor.cte("descendancy", recursive=True)
    child = sessions.alias("child")
    walk = walk.union(select(child.c.id).join(walk, child.c.parent_session == walk.c.id))
    return select(*_HEADER_SELECT).join(walk, sessions.c.id == walk.c.id)


_SELECT_ANCESTRY = _ancestry_statement()
_SELECT_DESCENDANCY = _descendancy_statement()
_PG_WALK_PLAN = text(
    "SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)"
)
_PG_RESET_PLAN = (text("RESET enable_hashjoin"), text("RESET enable_mergejoin"))
fixed(_SELECT_HEADERS_IN, _COUNT, _FIRST_PAGE, _PAGE_AFTER, _SELECT_CHILDREN)
fixed(_SELECT_ANCESTRY, _SELECT_DESCENDANCY)


def _sqlite_literal(text: str) -> str:
    """`text` as a SQLite GLOB pattern that matches only itself."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def _like_literal(text: str) -> str:
    """`text` as a LIKE pattern (backslash escape) that matches only itself."""
    return "".join("\\" + c if c in "%_\\" else c for c in text)


def _sqlite_glob(pattern: str) -> str:
    """SPEC glob -> SQLite GLOB: `[` is GLOB's class opener, so it is written `[[]`."""
    return pattern.replace("[", "[[]")


def _like(pattern: str) -> str:
    """SPEC glob -> LIKE with backslash as escape: `%`, `_` and backslash literal;
    `*` and `?` wild."""
    out = []
    for c in pattern:
        if c in "%_\\":
            out.append("\\" + c)
        else:
            out.append("%" if c == "*" else "_" if c == "?" else c)
    return "".join(out)


def _cwd_terms(
    cwd: ColumnElement[str], prefixes: Sequence[str], dialect: str
) -> builtins.list[ColumnElement[bool]]:
    """`cwd` equals a prefix or lies below it; each form can read an index range."""
    terms: builtins.list[ColumnElement[bool]] = []
    for prefix in prefixes:
        terms.append(cwd == prefix)
        if dialect == "sqlite":
            terms.append(cwd.op("GLOB")(_sqlite_literal(prefix) + "/*"))
        else:
            terms.append(cwd.like(_like_literal(prefix) + "/%", escape="\\"))
    return terms


def _filter_clause(
    where: ScopeFilter, dialect: str, *, paging: bool = False, table: Any = sessions
) -> ColumnElement[bool]:
    """The SQL predicate of a `ScopeFilter` over `sessions` (see the module docstring).

    `paging`: on SQLite, keep the planner off `ix_sessions_cwd` (`cwd || ''`) so a page
    walks the newest-first index and stops after `limit` rows; the cwd index, taken
    for a wide prefix, would read and sort every matching row first (measured: 270 ms
    for a page when 100,000 sessions match, against a few ms).
    """
    cwd: ColumnElement[str] = table.c.cwd
    if paging and dialect == "sqlite":
        cwd = table.c.cwd.concat("")
    terms = _cwd_terms(cwd, where.cwd_prefixes, dialect)
    for glob in where.id_globs:
        if dialect == "sqlite":
            terms.append(table.c.id.op("GLOB")(_sqlite_glob(glob)))
        else:
            terms.append(table.c.id.like(_like(glob), escape="\\"))
    if where.ids:
        terms.append(table.c.id.in_(builtins.list(where.ids)))
    if where.tree_seeds:
        seeds = builtins.list(where.tree_seeds)
        anchor = select(sessions.c.id).where(
            or_(sessions.c.id.in_(seeds), sessions.c.parent_session.in_(seeds))
        )
        members: CTE = anchor.cte("tree_members", recursive=True)
        child = sessions.alias("member_child")
        members = members.union(
            select(child.c.id).join(members, child.c.parent_session == members.c.id)
        )
        terms.append(table.c.id.in_(select(members.c.id)))
    return or_(*terms) if terms else false()


def _scoped_descendancy(
    where: ScopeFilter, dialect: str, seeds: Sequence[str], inside: Sequence[str]
) -> Select[Any]:
    """Headers reached from `seeds` by child links through visible sessions only.

    The walk carries whether each row is inside a granted tree (`member`): a child
    is inside when its parent is or its id is a tree root (`where.ids`); it is walked
    when inside or when it matches the scope's cwd prefixes or id globs.
    """
    roots = builtins.list(where.ids)
    direct = ScopeFilter(where.cwd_prefixes, where.id_globs)
    first = sessions.alias("first_child")
    first_inside = or_(first.c.parent_session.in_(builtins.list(inside)), first.c.id.in_(roots))
    anchor = select(first.c.id, case((first_inside, 1), else_=0).label("member")).where(
        first.c.parent_session.in_(builtins.list(seeds)),
        or_(first_inside, _filter_clause(direct, dialect, table=first)),
    )
    walk: CTE = anchor.cte("scoped_descendancy", recursive=True)
    child = sessions.alias("child")
    child_inside = or_(walk.c.member == 1, child.c.id.in_(roots))
    walk = walk.union(
        select(child.c.id, case((child_inside, 1), else_=0))
        .join(walk, child.c.parent_session == walk.c.id)
        .where(or_(child_inside, _filter_clause(direct, dialect, table=child)))
    )
    return select(*_HEADER_SELECT).join(walk, sessions.c.id == walk.c.id)


def _unique(ids: Iterable[str]) -> builtins.list[str]:
    return builtins.list(dict.fromkeys(ids))


class SqlCorpusReads(SqlBase):
    """Keyset pages, counts, children and lineage of the stored corpus."""

    async def load_headers(self, session_ids: Sequence[str]) -> dict[str, SessionHeader]:
        """The stored headers of these ids; ids that are not stored are left out."""
        ids = _unique(session_ids)
        return await self._read(
            lambda conn: _headers_in(conn, _SELECT_HEADERS_IN, ids), inline=True
        )

    async def count_sessions(self, where: ScopeFilter | None = None) -> int:
        """How many sessions are stored (that match `where`, when given)."""

        cwd_only = where is not None and bool(
            where.cwd_prefixes and not where.id_globs and not where.tree_seeds
        )

        def read(conn: ReadConn) -> Any:
            if where is None:
                return conn.scalar(_COUNT)
            if cwd_only:
                terms = _cwd_terms(cwd_stats.c.cwd, where.cwd_prefixes, conn.dialect)
                statement = select(func.coalesce(func.sum(cwd_stats.c.session_count), 0))
                return conn.scalar(statement.where(or_(*terms)))
            with _tree_plan(conn, where):
                statement = select(func.count()).select_from(sessions)
                statement = statement.where(_filter_clause(where, conn.dialect))
                return conn.scalar(statement)

        # the corpus's count is one row, a cwd scope's a few: point reads (on the loop)
        return int(await self._read(read, inline=where is None or cwd_only) or 0)

    async def headers_page(
        self, after: tuple[int, str] | None, limit: int, where: ScopeFilter | None = None
    ) -> builtins.list[SessionHeader]:
        """Up to `limit` headers in corpus order (createdAt descending, id ascending),
        strictly after the key `(created_at, id)` when `after` is given, only those
        matching `where` when given."""
        if limit <= 0:
            return []
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["created_at"], params["id"] = after

        def read(conn: ReadConn) -> builtins.list[Any]:
            statement = _FIRST_PAGE if after is None else _PAGE_AFTER
            if where is None:
                return conn.rows(statement, params)
            with _tree_plan(conn, where):
                return conn.rows(_scoped_page(statement, where, conn.dialect), params)

        return [_header_from_row(row) for row in await self._read(read, inline=True)]

    async def load_children(
        self, parent_ids: Sequence[str], where: ScopeFilter | None = None
    ) -> dict[str, builtins.list[SessionHeader]]:
        """The stored sessions whose parentSession is each id (ids with none left out),
        only those matching `where` when given; each list ordered by createdAt, then id."""
        ids = _unique(parent_ids)

        def read(conn: ReadConn) -> dict[str, builtins.list[SessionHeader]]:
            out: dict[str, builtins.list[SessionHeader]] = {}
            statement = _SELECT_CHILDREN
            with _tree_plan(conn, where):
                if where is not None:
                    statement = statement.where(_filter_clause(where, conn.dialect))
                for chunk in _chunks(ids, _KEY_CHUNK):
                    for row in conn.rows(statement, {"ids": chunk}):
                        header = _header_from_row(row)
                        assert header.parent_session is not None
                        out.setdefault(header.parent_session, []).append(header)
            return out

        return await self._read(read)

    async def load_ancestry(self, session_ids: Sequence[str]) -> dict[str, SessionHeader]:
        """Every stored header on the chain of any of these ids (the id itself when
        stored, then its stored parents): the union the core splits per seed.
        Terminates on cycles."""
        ids = _unique(session_ids)
        return await self._read(lambda conn: _walk(conn, _SELECT_ANCESTRY, ids))

    async def load_descendancy(
        self,
        session_ids: Sequence[str],
        where: ScopeFilter | None = None,
        inside: Sequence[str] = (),
    ) -> dict[str, SessionHeader]:
        """Every stored header reached from any of these ids by one or more child links,
        an id included when it is so reached (below another id, or through a cycle): the
        union the core splits per seed. Terminates on cycles. With `where`, only through
        visible sessions (see `gateway.core.backend.CorpusReads.load_descendancy`)."""
        ids = _unique(session_ids)

        def read(conn: ReadConn) -> dict[str, SessionHeader]:
            if where is None:
                return _walk(conn, _SELECT_DESCENDANCY, ids)
            found = {}
            with _pg_walk_plan(conn):
                statement = _scoped_descendancy(where, conn.dialect, ids, inside)
                for row in conn.rows(statement):
                    found[row[_ID_INDEX]] = _header_from_row(row)
            return found

        return await self._read(read)


def _headers_in(
    conn: ReadConn, statement: Select[Any], ids: Sequence[str]
) -> dict[str, SessionHeader]:
    """Run `statement` (bound by `:ids`) per chunk of ids; its header rows by id."""
    out: dict[str, SessionHeader] = {}
    for chunk in _chunks(ids, _KEY_CHUNK):
        for row in conn.rows(statement, {"ids": chunk}):
            out[row[_ID_INDEX]] = _header_from_row(row)
    return out


@contextmanager
def _pg_walk_plan(conn: ReadConn, wanted: bool = True) -> Iterator[None]:
    """The index walk plan on PostgreSQL for the statements inside, set back after
    (module docstring); nothing elsewhere. Not set back on a failure: the failed
    transaction is not read again."""
    if not wanted or conn.dialect != "postgresql":
        yield
        return
    conn.run(_PG_WALK_PLAN)
    yield
    for reset in _PG_RESET_PLAN:
        conn.run(reset)


_SCOPED: LRUCache[tuple[Any, ...], Select[Any]] = LRUCache(256)
"""Scoped page statements by (first page or not, scope, dialect). A scope is a token's
grants, the same on every request of that token: building and cache-keying its
clause cost more than running the page (~150 us), and a statement met again is
compiled once (`gateway.persistence.readers`). Statements only, never rows."""


def _scoped_page(statement: Select[Any], where: ScopeFilter, dialect: str) -> Select[Any]:
    """`statement` (a corpus page) narrowed to `where`, built once per scope."""
    key = (statement is _FIRST_PAGE, where, dialect)
    found = _SCOPED.get(key)
    if found is None:
        found = _SCOPED[key] = statement.where(_filter_clause(where, dialect, paging=True))
    return found


def _tree_plan(conn: ReadConn, where: ScopeFilter | None) -> Any:
    """A tree filter walks like a lineage read: same plan on PostgreSQL."""
    return _pg_walk_plan(conn, where is not None and bool(where.tree_seeds))


def _walk(conn: ReadConn, statement: Select[Any], ids: Sequence[str]) -> dict[str, SessionHeader]:
    """A recursive lineage read, with the index walk plan on PostgreSQL (module docstring)."""
    if not ids:
        return {}
    with _pg_walk_plan(conn):
        return _headers_in(conn, statement, ids)
