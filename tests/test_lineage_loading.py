"""A lineage is its session's own, whatever else the observation asks (SPEC §4, §3a, §10).

Walks asked in one event-loop turn share one backend call, and the backend answers
with the union over their seeds; each seed's remembered answer must still be exactly
its own lineage. The bug this guards against: when one seed lay below another (a
request tracing `demo-root` beside `demo-fork-a`), the union left the lower seed out,
and the upper seed's lineage lost everything below it. Checked on SQLite files and on
PostgreSQL, unscoped and scoped, by tracing many sessions in one observation and
comparing each answer with the same trace made alone.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import SessionQuery, SessionStore
from gateway.core import SessionHeader, SessionQueryError
from gateway.core.lineage import flatten
from gateway.core.query import trace_session
from gateway.core.reach import WalkSeed, ancestry_per_seed, descendancy_per_seed
from gateway.persistence import SqlPersistence
from tests.backends import Counting
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)
from tests.test_pushdown import build, corpora

PROPERTY = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# root -> a -> a-sub -> a-sub-check; root -> b; root -> live (live only); c (a second tree)
STORED = [
    SessionHeader("root", 1, cwd="/w"),
    SessionHeader("a", 2, cwd="/w", parent_session="root"),
    SessionHeader("a-sub", 3, cwd="/w/sub", parent_session="a"),
    SessionHeader("a-sub-check", 4, cwd="/other", parent_session="a-sub"),
    SessionHeader("b", 5, cwd="/other", parent_session="root"),
    SessionHeader("c", 6, cwd="/w"),
    SessionHeader("c-kid", 7, cwd="/w", parent_session="c"),
]
LIVE = [SessionHeader("live", 8, cwd="/w", parent_session="root")]
IDS = [h.id for h in STORED + LIVE]
GRANTS: list[list[str] | None] = [None, ["cwd:/w"], ["tree:a"], ["cwd:/other", "tree:a-sub"]]


def outcome(result: Any) -> Any:
    """A trace, or the code of the error it raised (compared like an answer)."""
    return result.code if isinstance(result, SessionQueryError) else result


async def traced_together(query: Any, ids: list[str]) -> dict[str, Any]:
    """Every id traced in one observation, all asked in the same loop turn."""
    obs = query.observe()
    try:
        found = await asyncio.gather(
            *(trace_session(obs, sid) for sid in ids), return_exceptions=True
        )
    finally:
        obs.close()
    return {sid: outcome(r) for sid, r in zip(ids, found, strict=True)}


async def traced_alone(query: Any, ids: list[str]) -> dict[str, Any]:
    out = {}
    for sid in ids:
        try:
            out[sid] = await query.trace_session(sid)
        except SessionQueryError as exc:
            out[sid] = exc.code
    return out


def scoped(query: SessionQuery, grants: list[str] | None) -> Any:
    return query if grants is None else query.scoped(grants)


async def fill(db: SqlPersistence) -> SessionStore:
    return await build(db, STORED, LIVE)


async def test_a_lineage_is_the_same_whatever_else_the_request_traces(db: SqlPersistence) -> None:
    store = await fill(db)
    query = SessionQuery(live=[store], persistence=db)
    alone = await traced_alone(query, IDS)
    below_root = [n.session.id for n in flatten(alone["root"].descendants)]
    assert below_root == ["a", "a-sub", "a-sub-check", "b", "live"]
    for pair in itertools.permutations(IDS, 2):  # a seed below, above or beside the other
        assert await traced_together(query, list(pair)) == {sid: alone[sid] for sid in pair}
    assert await traced_together(query, IDS) == alone


@pytest.mark.parametrize("grants", GRANTS, ids=lambda g: "unscoped" if g is None else ",".join(g))
async def test_a_scoped_lineage_is_the_same_whatever_else_the_request_traces(
    db: SqlPersistence, grants: list[str] | None
) -> None:
    store = await fill(db)
    query = scoped(SessionQuery(live=[store], persistence=db), grants)
    alone = await traced_alone(query, IDS)
    for pair in itertools.combinations(IDS, 2):
        assert await traced_together(query, list(pair)) == {sid: alone[sid] for sid in pair}
    assert await traced_together(query, IDS) == alone


@pytest.mark.parametrize("grants", GRANTS, ids=lambda g: "unscoped" if g is None else ",".join(g))
async def test_a_page_of_lineages_holds_each_session_s_own_lineage(
    db: SqlPersistence, grants: list[str] | None
) -> None:
    """`sessions { nodes { lineage { ... } } }`: a page, then every node's lineage in
    one turn, as the GraphQL layer resolves it."""
    store = await fill(db)
    query = scoped(SessionQuery(live=[store], persistence=db), grants)
    obs = query.observe()
    try:
        page = await obs.sessions_page(None, 50)
        ids = [r.id for r in page.records]
        together = await asyncio.gather(*(obs.lineage_records(sid) for sid in ids))
    finally:
        obs.close()
    assert ids
    for sid, records in zip(ids, together, strict=True):
        alone = query.observe()
        try:
            assert records == await alone.lineage_records(sid), sid
        finally:
            alone.close()


async def test_walks_asked_together_still_share_one_backend_call(db: SqlPersistence) -> None:
    store = await fill(db)
    counting = Counting(db)
    query = SessionQuery(live=[store], persistence=counting)
    together = await traced_together(query, ["root", "a", "a-sub"])
    assert together == await traced_alone(
        SessionQuery(live=[store], persistence=db), list(together)
    )
    # one walk down from the three seeds, one more below the live session it reached;
    # one walk up from the parents of `a` and `a-sub`
    assert counting.calls["load_descendancy"] == 2, counting.calls
    assert counting.calls["load_ancestry"] == 1, counting.calls


@PROPERTY
@given(
    corpus=corpora(),
    grants=st.sampled_from([None, ["tree:s00"], ["tree:s01"], ["id:s0?"], ["id:s1*", "tree:s02"]]),
)
async def test_lineages_traced_together_equal_each_traced_alone(
    db: SqlPersistence, corpus: Any, grants: list[str] | None
) -> None:
    persisted, live = corpus
    store = await build(db, persisted, live)
    query = scoped(SessionQuery(live=[store], persistence=db), grants)
    ids = sorted({h.id for h in persisted + live})
    assert await traced_together(query, ids) == await traced_alone(query, ids)


# -- the split itself, without a backend -----------------------------------------------------


def chain_union(headers: list[SessionHeader]) -> dict[str, SessionHeader]:
    return {h.id: h for h in headers}


async def test_each_seed_gets_its_own_walk_from_a_shared_union() -> None:
    headers = chain_union(STORED)

    async def union(seeds: Any, *_: Any) -> dict[str, SessionHeader]:
        return headers  # everything any seed reaches, and more

    up = await ancestry_per_seed(union)(["a-sub", "a", "gone"])
    assert list(up["a-sub"].headers) == ["a-sub", "a", "root"]
    assert list(up["a"].headers) == ["a", "root"]
    assert up["gone"].headers == {}
    keys = [WalkSeed("root"), WalkSeed("a"), WalkSeed("c-kid")]
    down = await descendancy_per_seed(union, union)(keys)
    assert set(down[keys[0]].headers) == {"a", "a-sub", "a-sub-check", "b"}
    assert set(down[keys[1]].headers) == {"a-sub", "a-sub-check"}
    assert down[keys[2]].headers == {}
    assert all(down[k].seed == k.id for k in keys) and all(up[s].seed == s for s in up)
