"""`SqlPersistence` as `CorpusReads` (SPEC §3a), on SQLite and PostgreSQL: keyset pages,
counts, children and lineage by recursive query, each equal to what `list()` gives."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, insert

from gateway.core import SessionHeader
from gateway.core.backend import CorpusReads, capabilities_of
from gateway.persistence import SqlPersistence
from gateway.persistence.tables import HEADER_COLUMNS, sessions
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

PROPERTY = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def row(header: SessionHeader) -> dict[str, Any]:
    out = {name: getattr(header, name) for name in HEADER_COLUMNS}
    out["event_count"] = 0
    return out


async def put(db: SqlPersistence, headers: Iterable[SessionHeader], *, clear: bool = False) -> None:
    """Raw rows in one executemany (no lineage checks: cycles and missing parents too)."""
    rows = [row(h) for h in headers]
    async with db.engine.begin() as conn:
        if clear:
            await conn.execute(delete(sessions))
        if rows:
            await conn.execute(insert(sessions), rows)


# -- definitions over list() ----------------------------------------------------------


def ancestry_of(stored: dict[str, SessionHeader], ids: Sequence[str]) -> dict[str, SessionHeader]:
    out: dict[str, SessionHeader] = {}
    for sid in ids:
        current: str | None = sid
        while current is not None and current in stored and current not in out:
            out[current] = stored[current]
            current = stored[current].parent_session
    return out


def descendancy_of(
    stored: dict[str, SessionHeader], ids: Sequence[str]
) -> dict[str, SessionHeader]:
    children: dict[str, list[str]] = {}
    for header in stored.values():
        if header.parent_session is not None:
            children.setdefault(header.parent_session, []).append(header.id)
    reached: set[str] = set()
    pending = list(ids)
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in reached:
                reached.add(child)
                pending.append(child)
    return {
        sid: stored[sid] for sid in reached
    }  # an id too, when another id (or a cycle) reaches it


def children_of(
    stored: dict[str, SessionHeader], ids: Sequence[str]
) -> dict[str, list[SessionHeader]]:
    out: dict[str, list[SessionHeader]] = {}
    for header in sorted(stored.values(), key=lambda h: (h.created_at, h.id)):
        parent = header.parent_session
        if parent is not None and parent in ids:
            out.setdefault(parent, []).append(header)
    return out


# -- strategies -------------------------------------------------------------------------

IDS = st.text(alphabet="abcAB_-.9é", min_size=1, max_size=4)


@st.composite
def corpora(draw: st.DrawFn) -> list[SessionHeader]:
    """Headers with tied createdAt values, and parents among the ids, missing or None
    (so chains, forests, missing parents and cycles all occur)."""
    ids = draw(st.lists(IDS, unique=True, max_size=40))
    parents = st.one_of(st.none(), st.sampled_from(ids) if ids else st.none(), IDS)
    return [
        SessionHeader(
            sid,
            draw(st.integers(-3, 3)),
            cwd=draw(st.one_of(st.none(), st.just("/w"))),
            parent_session=draw(parents),
            delegation_depth=draw(st.one_of(st.none(), st.integers(0, 2))),
        )
        for sid in ids
    ]


# -- the protocol ------------------------------------------------------------------------


async def test_sql_persistence_offers_corpus_reads(db: SqlPersistence) -> None:
    assert isinstance(db, CorpusReads)
    assert capabilities_of(db).corpus is db


async def test_an_empty_corpus(db: SqlPersistence) -> None:
    assert await db.count_sessions() == 0
    assert await db.headers_page(None, 10) == []
    assert await db.headers_page((5, "x"), 10) == []
    assert await db.load_children(["x"]) == {}
    assert await db.load_ancestry(["x"]) == {}
    assert await db.load_descendancy(["x"]) == {}
    assert await db.load_headers([]) == {}


# -- pages and counts ----------------------------------------------------------------------


@PROPERTY
@given(corpus=corpora(), sizes=st.lists(st.integers(1, 7), min_size=1, max_size=50))
async def test_walking_pages_gives_list_in_order(
    db: SqlPersistence, corpus: list[SessionHeader], sizes: list[int]
) -> None:
    await put(db, corpus, clear=True)
    expected = await db.list()
    assert await db.count_sessions() == len(corpus) == len(expected)
    walked: list[SessionHeader] = []
    after: tuple[int, str] | None = None
    for i in range(len(expected) + 1):
        limit = sizes[i % len(sizes)]
        page = await db.headers_page(after, limit)
        assert len(page) <= limit
        walked.extend(page)
        if len(page) < limit:
            break
        after = (page[-1].created_at, page[-1].id)
    assert walked == expected


async def test_a_page_starts_strictly_after_its_key(db: SqlPersistence) -> None:
    await put(db, [SessionHeader(sid, t) for sid, t in [("a", 2), ("b", 2), ("c", 2), ("d", 1)]])
    assert [h.id for h in await db.headers_page((2, "a"), 10)] == ["b", "c", "d"]
    assert [h.id for h in await db.headers_page((2, "bb"), 10)] == ["c", "d"]
    assert [h.id for h in await db.headers_page((3, "z"), 2)] == ["a", "b"]
    assert [h.id for h in await db.headers_page((1, "d"), 10)] == []
    assert await db.headers_page(None, 0) == []


async def test_full_headers_round_trip_through_pages(db: SqlPersistence) -> None:
    header = SessionHeader(
        "full", 2**53 + 1, cwd="", parent_session="p", seed_length=0, origin="subagent",
        delegation_depth=0, agent_preset="coder",
    )  # fmt: skip
    await db.create(header)
    assert (await db.headers_page(None, 1))[0].to_json() == header.to_json()
    assert (await db.load_headers(["full", "nope"])) == {"full": header}


# -- children and lineage ---------------------------------------------------------------------


async def test_children_are_ordered_by_created_at_then_id(db: SqlPersistence) -> None:
    await put(
        db,
        [
            SessionHeader("root", 0),
            SessionHeader("z", 5, parent_session="root"),
            SessionHeader("b", 3, parent_session="root"),
            SessionHeader("a", 3, parent_session="root"),
            SessionHeader("y", 1, parent_session="other"),
            SessionHeader("x", 9, parent_session="a"),
        ],
    )
    children = await db.load_children(["root", "other", "x", "root"])
    assert {k: [h.id for h in v] for k, v in children.items()} == {
        "root": ["a", "b", "z"],
        "other": ["y"],
    }


@PROPERTY
@given(corpus=corpora(), picks=st.lists(st.integers(0, 100), max_size=4), extra=IDS)
async def test_lineage_reads_equal_their_definitions(
    db: SqlPersistence, corpus: list[SessionHeader], picks: list[int], extra: str
) -> None:
    await put(db, corpus, clear=True)
    stored = {h.id: h for h in await db.list()}
    ids = [corpus[p % len(corpus)].id for p in picks] if corpus else []
    ids.append(extra)  # perhaps not stored
    assert await db.load_ancestry(ids) == ancestry_of(stored, ids)
    assert await db.load_descendancy(ids) == descendancy_of(stored, ids)
    assert await db.load_children(ids) == children_of(stored, ids)
    assert await db.load_headers(ids) == {i: stored[i] for i in ids if i in stored}


async def test_a_missing_parent_ends_the_ancestry(db: SqlPersistence) -> None:
    await put(
        db,
        [SessionHeader("c", 3, parent_session="b"), SessionHeader("b", 2, parent_session="gone")],
    )
    assert set(await db.load_ancestry(["c"])) == {"c", "b"}
    assert await db.load_ancestry(["gone"]) == {}
    assert set(await db.load_descendancy(["gone"])) == {"b", "c"}


async def test_a_cycle_terminates(db: SqlPersistence) -> None:
    await put(
        db,
        [
            SessionHeader("a", 1, parent_session="b"),
            SessionHeader("b", 2, parent_session="a"),
            SessionHeader("c", 3, parent_session="b"),
            SessionHeader("self", 4, parent_session="self"),
        ],
    )
    assert set(await db.load_ancestry(["c"])) == {"a", "b", "c"}
    assert set(await db.load_descendancy(["a"])) == {"a", "b", "c"}  # a comes back through b
    assert set(await db.load_ancestry(["self"])) == {"self"}
    assert set(await db.load_descendancy(["self"])) == {"self"}
    children = await db.load_children(["b", "self"])
    assert {k: [h.id for h in v] for k, v in children.items()} == {
        "b": ["a", "c"],
        "self": ["self"],
    }


DEPTH = 10_000


async def test_a_10000_deep_chain(db: SqlPersistence) -> None:
    chain = [
        SessionHeader(f"n{i:05d}", i, parent_session=f"n{i - 1:05d}" if i else None)
        for i in range(DEPTH)
    ]
    await put(db, chain)
    leaf, root = chain[-1].id, chain[0].id
    assert await db.count_sessions() == DEPTH
    ancestry = await db.load_ancestry([leaf])
    assert ancestry == {h.id: h for h in chain}
    descendancy = await db.load_descendancy([root])
    assert descendancy == {h.id: h for h in chain[1:]}
    middle = chain[DEPTH // 2].id
    assert len(await db.load_ancestry([middle])) == DEPTH // 2 + 1
    assert len(await db.load_descendancy([middle, leaf])) == DEPTH - DEPTH // 2 - 1  # leaf too
    page = await db.headers_page((chain[100].created_at, chain[100].id), 3)
    assert [h.id for h in page] == [chain[99].id, chain[98].id, chain[97].id]


async def test_more_ids_than_one_chunk(db: SqlPersistence) -> None:
    wide = [SessionHeader("root", 0)] + [
        SessionHeader(f"c{i:04d}", i % 7, parent_session="root") for i in range(1_200)
    ]
    await put(db, wide)
    ids = [h.id for h in wide]
    stored = {h.id: h for h in wide}
    assert await db.load_headers(ids) == stored
    assert await db.load_ancestry(ids) == stored
    assert await db.load_descendancy(["root"]) == {h.id: h for h in wide[1:]}
    children = await db.load_children(ids)
    assert children == children_of(stored, ids)
