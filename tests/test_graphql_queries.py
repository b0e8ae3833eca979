"""Every Query field over HTTP, checked against the core's own answers, and its error codes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.demo import (
    AGENT,
    FORK_A,
    FORK_A_SUB_CHECK,
    MISSING_PARENT,
    ORPHAN_CHILD,
    RESUMED,
    ROOT,
    load_demo,
)
from gateway.persistence import SqlPersistence, tables
from tests.backends import Broken
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import codes, gql, header, msg, simple_log


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[SqlPersistence]:
    async with sql_backend(tmp_path / "x.db") as db:
        yield db


@pytest.fixture
async def demo_query(backend: SqlPersistence) -> SessionQuery:
    store = SessionStore()
    demo = await load_demo(backend, store)
    for _ in range(40):
        demo.agent.step()
    return SessionQuery(live=[store], persistence=backend)


@pytest.fixture
def app(demo_query: SessionQuery) -> Any:
    return create_app(demo_query)


async def test_sessions_lists_the_corpus_in_order(app, demo_query) -> None:
    body = await gql(
        app,
        "{ sessions(first: 100) { totalCount nodes { id live persisted "
        "header { createdAt parentSessionId } } } }",
    )
    expected = await demo_query.list_sessions()
    nodes = body["data"]["sessions"]["nodes"]
    assert [n["id"] for n in nodes] == [r.header.id for r in expected]
    assert [(n["live"], n["persisted"]) for n in nodes] == [(r.live, r.persisted) for r in expected]
    assert [n["header"]["createdAt"] for n in nodes] == [r.header.created_at for r in expected]
    assert body["data"]["sessions"]["totalCount"] == len(expected)


async def test_session_by_id_and_missing_session(app) -> None:
    body = await gql(
        app,
        '{ session(id: "demo-resumed") { id live persisted header { id cwd '
        "agentPreset origin seedLength delegationDepth version } } }",
    )
    s = body["data"]["session"]
    assert s["live"] and s["persisted"]
    assert s["header"] == {
        "id": RESUMED,
        "cwd": "/work/parser",
        "agentPreset": "writer",
        "origin": None,
        "seedLength": None,
        "delegationDepth": None,
        "version": 0,
    }
    body = await gql(app, '{ session(id: "nope") { id } }')
    assert body["data"] == {"session": None}
    assert codes(body) == ["SESSION_QUERY_SESSION_NOT_FOUND"]
    assert body["errors"][0]["path"] == ["session"]
    assert "nope" in body["errors"][0]["message"]


async def test_events_match_list_events(app, demo_query) -> None:
    body = await gql(
        app,
        "query($id: ID!) { events(sessionId: $id, first: 500) { totalCount "
        "nodes { sessionId seq type time surface } } }",
        {"id": ROOT},
    )
    expected = await demo_query.list_events(ROOT)
    got = body["data"]["events"]
    assert got["totalCount"] == len(expected)
    assert [(n["seq"], n["type"], n["time"], n["surface"]) for n in got["nodes"]] == [
        (e.seq, e.type, e.time, e.surface.value) for e in expected
    ]
    assert {n["sessionId"] for n in got["nodes"]} == {ROOT}


async def test_events_surface_filter_and_session_surface(app, demo_query) -> None:
    expected = await demo_query.list_events(ROOT)
    q = """query($id: ID!) {
      current: events(sessionId: $id, surface: [CURRENT], first: 500) { totalCount nodes { seq } }
      gone: events(sessionId: $id, surface: [SHADOWED, LOG_ONLY], first: 500) { nodes { seq } }
      session(id: $id) { surface { seq surface } } }"""
    data = (await gql(app, q, {"id": ROOT}))["data"]
    current = [e.seq for e in expected if e.surface.value == "CURRENT"]
    assert [n["seq"] for n in data["current"]["nodes"]] == current
    assert data["current"]["totalCount"] == len(current)
    assert [n["seq"] for n in data["gone"]["nodes"]] == [
        e.seq for e in expected if e.surface.value != "CURRENT"
    ]
    surface = data["session"]["surface"]
    assert sorted(n["seq"] for n in surface) == current
    assert {n["surface"] for n in surface} == {"CURRENT"}
    # model-visible order: the compaction summaries sit where what they replaced sat
    assert [n["seq"] for n in surface] != current


async def test_event_fields_and_not_found(app, demo_query) -> None:
    q = """query($id: ID!, $seq: Int!) { event(sessionId: $id, seq: $seq) {
      sessionId seq type time data surfaceOp { kind start end } sourceEventSeqs ignorable surface
      session { id } } }"""
    call = next(e.seq for e in await demo_query.list_events(ROOT) if e.type == "tool/call")
    window = await demo_query.read_event(ROOT, call)
    data = (await gql(app, q, {"id": ROOT, "seq": call}))["data"]["event"]
    assert data["data"] == window.target.data
    assert data["type"] == window.target.type == "tool/call" and data["seq"] == call
    assert data["surfaceOp"] is None and data["sourceEventSeqs"] is None
    assert data["surface"] == "LOG_ONLY" and data["session"] == {"id": ROOT}
    body = await gql(app, q, {"id": ROOT, "seq": 10_000})
    assert body["data"] == {"event": None}
    assert codes(body) == ["SESSION_QUERY_EVENT_NOT_FOUND"]
    body = await gql(app, q, {"id": "nope", "seq": 0})
    assert codes(body) == ["SESSION_QUERY_SESSION_NOT_FOUND"]
    body = await gql(app, '{ session(id: "demo-root") { event(seq: -1) { seq } } }')
    assert body["data"] == {"session": {"event": None}}
    assert codes(body) == ["SESSION_QUERY_EVENT_NOT_FOUND"]


async def test_read_event_and_window(app, demo_query) -> None:
    q = """query($id: ID!) { readEvent(sessionId: $id, seq: 1, before: 5, after: 2) {
      session { id } target { seq } events { seq data } startSeq endSeq }
      session(id: $id) { window(seq: 1, after: 1) { startSeq endSeq events { seq } } } }"""
    data = (await gql(app, q, {"id": ROOT}))["data"]
    core = await demo_query.read_event(ROOT, 1, before=5, after=2)
    assert data["readEvent"]["startSeq"] == core.start_seq == 0
    assert data["readEvent"]["endSeq"] == core.end_seq == 3
    assert [e["data"] for e in data["readEvent"]["events"]] == [e.data for e in core.events]
    assert data["readEvent"]["session"] == {"id": ROOT}
    assert data["session"]["window"] == {
        "startSeq": 1,
        "endSeq": 2,
        "events": [{"seq": 1}, {"seq": 2}],
    }
    body = await gql(app, '{ readEvent(sessionId: "demo-root", seq: 1, before: 51) { startSeq } }')
    assert body["data"] is None
    assert codes(body) == ["SESSION_QUERY_INVALID_WINDOW"]
    body = await gql(app, '{ readEvent(sessionId: "demo-root", seq: 1, after: -1) { startSeq } }')
    assert codes(body) == ["SESSION_QUERY_INVALID_WINDOW"]


async def test_trace_session_and_lineage_graph(app, demo_query) -> None:
    q = """query($id: ID!) { traceSession(sessionId: $id) {
      target { id } ancestors { id } complete root { id } unresolvedParentId
      descendants { session { id } descendants { session { id } descendants { session { id } } } }
      graph { nodes { id } edges { parentId childId } } } }"""
    data = (await gql(app, q, {"id": ROOT}))["data"]["traceSession"]
    core = await demo_query.trace_session(ROOT)
    assert data["complete"] and data["root"] == {"id": ROOT} and data["ancestors"] == []
    assert [d["session"]["id"] for d in data["descendants"]] == [
        n.session.header.id for n in core.descendants
    ]
    ids = [n["id"] for n in data["graph"]["nodes"]]
    assert ids[0] == ROOT and FORK_A_SUB_CHECK in ids and AGENT in ids
    assert len(ids) == len(set(ids))
    edges = {(e["parentId"], e["childId"]) for e in data["graph"]["edges"]}
    assert (ROOT, FORK_A) in edges and len(edges) == len(ids) - 1

    data = (await gql(app, q, {"id": FORK_A_SUB_CHECK}))["data"]["traceSession"]
    assert [a["id"] for a in data["ancestors"]] == ["demo-fork-a-sub", FORK_A, ROOT]
    assert data["root"] == {"id": ROOT}

    data = (await gql(app, q, {"id": ORPHAN_CHILD}))["data"]["traceSession"]
    assert data["complete"] is False and data["root"] is None
    assert data["unresolvedParentId"] == MISSING_PARENT
    assert {(e["parentId"], e["childId"]) for e in data["graph"]["edges"]} == {
        ("demo-orphan", ORPHAN_CHILD)
    }


async def test_session_parent_children_lineage(app) -> None:
    q = """{ session(id: "demo-fork-a") { parent { id } children { id } lineage { target { id }
      ancestors { id } } } orphan: session(id: "demo-orphan") { parent { id } } }"""
    data = (await gql(app, q))["data"]
    assert data["session"]["parent"] == {"id": ROOT}
    assert data["session"]["children"] == [{"id": "demo-fork-a-sub"}]
    assert data["session"]["lineage"]["ancestors"] == [{"id": ROOT}]
    assert data["orphan"] == {"parent": None}  # a missing parent is data, not an error


async def test_trace_event_and_event_relationships(app, demo_query) -> None:
    # seq 1 of demo-root is the first ask: compacted, and the summary compacted again.
    core = await demo_query.trace_event(ROOT, 1)
    assert len(core.replacement_chain) == 2
    q = """query($id: ID!, $seq: Int!) {
      traceEvent(sessionId: $id, seq: $seq) { target { seq type surface } replacedBy
        replacementChain replacedEventSeqs sourceEventSeqs derivedEventSeqs }
      event(sessionId: $id, seq: $seq) { replacedBy { seq } replacementChain { seq }
        derived { seq } sources { seq } trace { replacementChain } } }"""
    data = (await gql(app, q, {"id": ROOT, "seq": 1}))["data"]
    t = data["traceEvent"]
    assert t["target"] == {"seq": 1, "type": "user/message", "surface": "SHADOWED"}
    assert t["replacedBy"] == core.replaced_by
    assert t["replacementChain"] == core.replacement_chain
    assert t["derivedEventSeqs"] == core.derived_event_seqs
    e = data["event"]
    assert e["replacedBy"] == {"seq": core.replaced_by}
    assert [x["seq"] for x in e["replacementChain"]] == core.replacement_chain
    assert [x["seq"] for x in e["derived"]] == core.derived_event_seqs
    assert e["trace"]["replacementChain"] == core.replacement_chain
    # the nested replacement: the second summary removed the first one
    second = core.replacement_chain[1]
    data = (await gql(app, q, {"id": ROOT, "seq": second}))["data"]
    core2 = await demo_query.trace_event(ROOT, second)
    assert core.replacement_chain[0] in core2.replaced_event_seqs
    assert data["traceEvent"]["replacedEventSeqs"] == core2.replaced_event_seqs
    assert [x["seq"] for x in data["event"]["sources"]] == core2.source_event_seqs
    body = await gql(app, '{ traceEvent(sessionId: "demo-root", seq: 9999) { replacedBy } }')
    assert codes(body) == ["SESSION_QUERY_EVENT_NOT_FOUND"]


async def test_replaced_events_on_a_tool_result_rewrite(app, demo_query) -> None:
    events = await demo_query.list_events(ROOT)
    q = """query($id: ID!) { events(sessionId: $id, first: 500) { nodes { seq type
      surfaceOp { kind start end } replacedEvents { seq type surface } } } }"""
    nodes = (await gql(app, q, {"id": ROOT}))["data"]["events"]["nodes"]
    rewrites = [
        n for n in nodes if n["type"] == "tool/result" and n["surfaceOp"]["kind"] == "REPLACE"
    ]
    assert len(rewrites) == 1
    (rw,) = rewrites
    assert rw["surfaceOp"]["start"] == rw["surfaceOp"]["end"]
    assert rw["replacedEvents"] == [
        {"seq": rw["surfaceOp"]["start"], "type": "tool/result", "surface": "SHADOWED"}
    ]
    assert len(events) == len(nodes)


async def test_epoch_millis_is_a_53_bit_json_number() -> None:
    store = SessionStore()
    big = 2**53 - 1
    store.create("big", created_at=big)
    app = create_app(SessionQuery(live=[store]))
    body = await gql(app, '{ session(id: "big") { header { createdAt } } }')
    assert body["data"]["session"]["header"]["createdAt"] == big


async def test_invalid_surface_is_reported_with_its_code(backend: SqlPersistence) -> None:
    await backend.create(header("bad", 1))
    # bypass the backend's validation: write a stored log that breaks rule 3 (surface
    # type without surfaceOp) straight into the SQLite tables
    async with backend.engine.begin() as conn:
        await conn.execute(
            tables.events.insert().values(
                session_id="bad", seq=0, type="user/message", time=1, data=msg("user", "hi")
            )
        )
        await conn.execute(
            tables.sessions.update().where(tables.sessions.c.id == "bad").values(event_count=1)
        )
    app = create_app(SessionQuery(persistence=backend))
    body = await gql(app, '{ events(sessionId: "bad") { totalCount } }')
    assert body["data"] is None
    assert codes(body) == ["SESSION_QUERY_INVALID_SURFACE"]
    assert "rule 3" in body["errors"][0]["message"]


async def test_persistence_failure_keeps_live_sessions_readable() -> None:
    store = SessionStore()
    store.create("live", created_at=5, seed=simple_log(5))
    down = Broken(ConnectionError("database is down"))  # a failure double
    app = create_app(SessionQuery(live=[store], persistence=down))
    body = await gql(app, "{ sessions { totalCount } }")
    assert codes(body) == ["SESSION_QUERY_PERSISTENCE_FAILED"]
    error = body["errors"][0]
    assert "ConnectionError" in error["message"] and "database is down" not in error["message"]
    assert error["extensions"]["correlationId"] in error["message"]
    body = await gql(app, '{ session(id: "live") { id live events { totalCount } } }')
    assert body == {"data": {"session": {"id": "live", "live": True, "events": {"totalCount": 5}}}}


async def test_source_conflict_and_invalid_lineage() -> None:
    one, two = SessionStore(), SessionStore()
    one.create("dup", created_at=1)
    two.create("dup", created_at=1)
    app = create_app(SessionQuery(live=[one, two]))
    body = await gql(app, '{ session(id: "dup") { id } }')
    assert codes(body) == ["SESSION_QUERY_SOURCE_CONFLICT"]
    store = SessionStore()
    store.create("a", created_at=1, parent_session="b")
    store.create("b", created_at=2, parent_session="a")
    app = create_app(SessionQuery(live=[store]))
    body = await gql(app, '{ traceSession(sessionId: "a") { complete } }')
    assert codes(body) == ["SESSION_QUERY_INVALID_LINEAGE"]
