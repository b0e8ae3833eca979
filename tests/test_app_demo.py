"""The demo corpus (gateway.demo) holds everything the issue promises, checked via the core."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import SessionQuery, SessionStore
from gateway.core import EventSurface, fold_surface
from gateway.demo import (
    AGENT,
    EXAMPLE_QUERIES,
    FORK_A_SUB_CHECK,
    MISSING_PARENT,
    ORPHAN_CHILD,
    PERSISTED,
    RESUMED,
    RESUMED_PERSISTED_PREFIX,
    ROOT,
    SimulatedAgent,
    load_demo,
)
from gateway.persistence import SqlPersistence
from tests.support.sqlite_backend import sql_backend


async def backend_log(query: SessionQuery, sid: str):
    return await query.persistence.load(sid)


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[SqlPersistence]:
    async with sql_backend(tmp_path / "demo.db") as db:
        yield db


async def _demo(backend: SqlPersistence) -> tuple[SessionQuery, SimulatedAgent, SqlPersistence]:
    store = SessionStore()
    demo = await load_demo(backend, store, agent_interval=0.01)
    return SessionQuery(live=[store], persistence=backend), demo.agent, backend


async def test_fork_tree_three_levels_deep_and_a_missing_parent(backend: SqlPersistence) -> None:
    query, _, _ = await _demo(backend)
    deep = await query.trace_session(FORK_A_SUB_CHECK)
    assert len(deep.ancestors) == 3 and deep.complete and deep.root.header.id == ROOT
    orphan = await query.trace_session(ORPHAN_CHILD)
    assert not orphan.complete and orphan.unresolved_parent_id == MISSING_PARENT
    ids = {r.header.id for r in await query.list_sessions()}
    assert MISSING_PARENT not in ids


async def test_nested_replacement_and_tool_result_rewrite(backend: SqlPersistence) -> None:
    query, _, _ = await _demo(backend)
    events = await query.list_events(ROOT)
    nested = [
        t
        for e in events
        if (t := await query.trace_event(ROOT, e.seq)).replacement_chain
        and len(t.replacement_chain) >= 2
    ]
    assert nested, "no event was replaced by a replacement that was itself replaced"
    chain = nested[0].replacement_chain
    first = await query.trace_event(ROOT, chain[0])
    assert first.replaced_by == chain[1] and first.target.surface is EventSurface.SHADOWED
    _, log = await backend_log(query, ROOT)
    rewrites = [e for e in log if e.type == "tool/result" and isinstance(e.surface_op, dict)]
    assert len(rewrites) == 1
    old = log[rewrites[0].surface_op["start"]]
    assert old.type == "tool/result"
    assert (
        old.data["message"]["content"][0]["content"]
        != (rewrites[0].data["message"]["content"][0]["content"])
    )


async def test_live_and_persisted_with_the_live_log_ahead(backend: SqlPersistence) -> None:
    query, _, _ = await _demo(backend)
    records = {r.header.id: r for r in await query.list_sessions()}
    assert records[RESUMED].live and records[RESUMED].persisted
    _, persisted = await backend.load(RESUMED)
    live = await query.list_events(RESUMED)
    assert len(persisted) == RESUMED_PERSISTED_PREFIX < len(live)
    assert records[AGENT].live and not records[AGENT].persisted


async def test_the_simulated_agent_keeps_appending_valid_events(backend: SqlPersistence) -> None:
    query, agent, _ = await _demo(backend)
    for _ in range(300):  # many cycles: rewrites and compactions included
        agent.step()
    events = (await query.read_event(AGENT, 0, after=50)).events
    assert len(await query.list_events(AGENT)) == 300
    snapshot = [e for e in agent.session.events()]
    result = fold_surface(snapshot)
    assert result.replacements, "the agent never replaced anything"
    assert any(r.seq for r in result.replacements if snapshot[r.seq].type == "tool/result")
    assert events[0].seq == 0
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(0.1)
    agent.stop()
    await asyncio.wait_for(task, 2)
    assert len(agent.session) > 300


async def test_demo_writes_every_persisted_session_through_the_backend(
    backend: SqlPersistence,
) -> None:
    query, _, _ = await _demo(backend)
    assert len(await query.list_sessions()) == 9
    assert {h.id for h in await backend.list()} == set(PERSISTED)
    assert (await query.trace_session(FORK_A_SUB_CHECK)).complete


@pytest.mark.parametrize("name", list(EXAMPLE_QUERIES))
async def test_example_queries_run_without_errors(name: str, backend: SqlPersistence) -> None:
    from gateway import create_app
    from tests.test_graphql_helpers import gql

    query, _, _ = await _demo(backend)
    body = await gql(create_app(query), EXAMPLE_QUERIES[name])
    assert "errors" not in body, body
    assert all(v is not None for v in body["data"].values())
