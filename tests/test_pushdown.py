"""SPEC §3a: answers at scale are the same answers. Corpus questions pushed down to the
backend's indexes and merged with the live overlay (a sessions page, its totalCount,
children, lineage) equal the full-list definition of SPEC §3, on SQLite and PostgreSQL.

The reference is computed by the same core from `list()` alone (the full listing and
`trace_lineage` over it), so a page, a count or a lineage that the pushdown gets wrong
differs from it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from gateway import SessionQuery, SessionQueryError, SessionStore
from gateway.core import ErrorCode, SessionHeader
from gateway.core.lineage import children_index, flatten, trace_lineage
from gateway.core.observation import Observation, corpus_key
from gateway.persistence import SqlPersistence, migrate
from gateway.persistence.engine import create_engine, normalize_url
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

SLOW = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class ListOnly:
    """The same backend seen through `list()`/`load()` only: the SPEC §3 reference."""

    def __init__(self, inner: SqlPersistence) -> None:
        self._inner = inner

    async def list(self) -> list[SessionHeader]:
        return await self._inner.list()

    async def load(self, session_id: str) -> Any:
        return await self._inner.load(session_id)


async def clear(db: SqlPersistence) -> None:
    async with db.engine.begin() as conn:
        for table in ("citations", "events", "sessions"):
            await conn.execute(text(f"DELETE FROM {table}"))


@st.composite
def corpora(draw: Any) -> tuple[list[SessionHeader], list[SessionHeader]]:
    """(persisted headers, live headers): a forest with shared ids, equal creation
    times (ties by id), parents outside the corpus, and live-only links in chains."""
    n = draw(st.integers(0, 14))
    ids = [f"s{i:02d}" for i in range(n)]
    headers = []
    for i, sid in enumerate(ids):
        created = draw(st.integers(1, 5))
        parent = draw(st.one_of(st.none(), st.sampled_from(ids[:i] or ["gone"]), st.just("gone")))
        headers.append(SessionHeader(sid, created, parent_session=parent))
    where = [draw(st.sampled_from(["db", "live", "both"])) for _ in headers]
    persisted = [h for h, w in zip(headers, where, strict=True) if w != "live"]
    live = [h for h, w in zip(headers, where, strict=True) if w != "db"]
    return persisted, live


async def build(db: SqlPersistence, persisted: list[SessionHeader], live: list[SessionHeader]):
    await clear(db)
    for header in persisted:
        await db.create(header)
    store = SessionStore()
    for header in live:
        store.add(header)
    return store


async def every_page(obs: Observation, page_size: int) -> tuple[list[Any], set[int]]:
    """Every record of the corpus walked page by page, and the totals the pages gave."""
    got: list[Any] = []
    totals: set[int] = set()
    after = None
    while True:
        page = await obs.sessions_page(after, page_size)
        totals.add(page.total)
        got.extend(page.records)
        if not page.has_next:
            return got, totals
        after = corpus_key(page.records[-1].header)


@pytest.mark.parametrize("page_size", [1, 3])
@SLOW
@given(corpus=corpora())
async def test_keyset_pages_merged_with_the_live_overlay_equal_the_full_list(
    db: SqlPersistence, page_size: int, corpus: Any
) -> None:
    persisted, live = corpus
    store = await build(db, persisted, live)
    expected = await SessionQuery(live=[store], persistence=ListOnly(db)).list_sessions()
    obs = Observation([store], db)
    assert obs.pushdown
    got, totals = await every_page(obs, page_size)
    assert got == expected and totals == {len(expected)}


@SLOW
@given(corpus=corpora())
async def test_children_and_lineage_by_index_equal_the_full_corpus_definition(
    db: SqlPersistence, corpus: Any
) -> None:
    persisted, live = corpus
    store = await build(db, persisted, live)
    reference = SessionQuery(live=[store], persistence=ListOnly(db))
    records = {r.id: r for r in await reference.list_sessions()}
    index = children_index(records)
    query = SessionQuery(live=[store], persistence=db)
    for sid in records:
        obs = query.observe()
        assert await obs.children(sid) == index.get(sid, [])
        assert await obs.record(sid) == records[sid]
        try:
            expected = trace_lineage(records, sid, index)
        except SessionQueryError as exc:
            with pytest.raises(SessionQueryError) as info:
                await query.trace_session(sid)
            assert info.value.code == exc.code
            continue
        assert await query.trace_session(sid) == expected


async def insert_chain(db: SqlPersistence, rows: list[tuple[str, int, str | None]]) -> None:
    """Write many headers at once (the writer's create() one by one is slow for 10,000)."""
    async with db.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO sessions (id, version, created_at, parent_session, event_count, "
                "current_count, shadowed_count, derived_count) "
                "VALUES (:id, 0, :created_at, :parent, 0, 0, 0, 0)"
            ),
            [{"id": i, "created_at": c, "parent": p} for i, c, p in rows],
        )


async def test_lineage_of_a_10000_deep_chain_by_index_from_both_ends(db: SqlPersistence) -> None:
    depth = 10_000
    rows = [(f"n{i:05d}", i + 1, None if i == 0 else f"n{i - 1:05d}") for i in range(depth)]
    await insert_chain(db, rows)
    query = SessionQuery(persistence=db)
    leaf = await query.trace_session(f"n{depth - 1:05d}")
    assert len(leaf.ancestors) == depth - 1 and leaf.complete and leaf.root.id == "n00000"
    root = await query.trace_session("n00000")
    assert len(flatten(root.descendants)) == depth - 1 and root.root.id == "n00000"


async def test_lineage_with_a_missing_parent_and_a_live_link_in_the_chain(
    db: SqlPersistence,
) -> None:
    # stored: a <- b ... c(parent: live-only L) <- d ; L's parent is b; e's parent is gone
    await insert_chain(
        db, [("a", 1, None), ("b", 2, "a"), ("c", 4, "L"), ("d", 5, "c"), ("e", 6, "gone")]
    )
    store = SessionStore()
    store.create("L", created_at=3, parent_session="b")
    query = SessionQuery(live=[store], persistence=db)
    trace = await query.trace_session("d")
    assert [r.id for r in trace.ancestors] == ["c", "L", "b", "a"]
    assert trace.complete and trace.root.id == "a"
    down = await query.trace_session("a")
    assert [n.session.id for n in flatten(down.descendants)] == ["b", "L", "c", "d"]
    gone = await query.trace_session("e")
    assert not gone.complete and gone.unresolved_parent_id == "gone"


async def test_a_stored_cycle_is_invalid_lineage_by_index(db: SqlPersistence) -> None:
    await insert_chain(db, [("x", 1, "y"), ("y", 2, "x"), ("z", 3, "y")])
    query = SessionQuery(persistence=db)
    for sid in ("x", "z"):
        with pytest.raises(SessionQueryError) as info:
            await query.trace_session(sid)
        assert info.value.code is ErrorCode.INVALID_LINEAGE


async def test_the_session_count_is_kept_by_the_database_whoever_writes(
    db: SqlPersistence, db_url: str
) -> None:
    """totalCount reads a counter (no scan); it must equal count(*) after every kind of
    write: create, import (created, replaced), import_many, delete, and raw SQL."""

    async def both() -> tuple[int, int]:
        async with db.engine.connect() as conn:
            scanned = (await conn.execute(text("SELECT count(*) FROM sessions"))).scalar()
        return await db.count_sessions(), int(scanned or 0)

    await db.create(SessionHeader("a", 1))
    await db.import_log(SessionHeader("b", 2), [])
    await db.import_log(SessionHeader("b", 2), [], replace=True)  # unchanged
    await db.import_many([(SessionHeader(f"m{i}", 3), []) for i in range(5)])
    assert await both() == (7, 7)
    await db.delete("a")
    await insert_chain(db, [("raw1", 4, None), ("raw2", 5, "raw1")])
    assert await both() == (8, 8)
    await clear(db)
    assert await both() == (0, 0)


async def test_migration_0003_counts_the_sessions_already_stored(db_url: str) -> None:
    await migrate(db_url, "0002")
    engine = create_engine(normalize_url(db_url))
    try:
        async with engine.begin() as conn:
            for sid in ("x", "y", "z"):
                await conn.execute(
                    text(
                        "INSERT INTO sessions (id, version, created_at, event_count) "
                        "VALUES (:id, 0, 1, 0)"
                    ),
                    {"id": sid},
                )
    finally:
        await engine.dispose()
    await migrate(db_url)
    db = SqlPersistence(db_url)
    try:
        assert await db.count_sessions() == 3
        await db.create(SessionHeader("w", 2))
        assert await db.count_sessions() == 4
    finally:
        await db.close()
