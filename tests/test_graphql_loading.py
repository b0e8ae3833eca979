"""Per-request loading: bounded backend calls (no N+1), nothing cached across requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.persistence import SqlPersistence
from gateway.server import yielding
from tests.backends import Counting
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import gql, header, simple_log

NESTED = """{ sessions(first: 100) { totalCount nodes {
  id persisted parent { id } children { id }
  lineage { complete ancestors { id } graph { edges { parentId childId } } }
  events(first: 5) { totalCount nodes { seq type surface data } } } } }"""

WHOLE_LOG_LOADS = ("load",)


@pytest.fixture
async def inner(tmp_path: Path) -> AsyncIterator[SqlPersistence]:
    """The real backend the counting wrapper forwards to."""
    async with sql_backend(tmp_path / "x.db") as db:
        yield db


async def _fill(backend: SqlPersistence, n: int) -> None:
    # a forest: every third session starts a tree, the others hang below the previous one
    for i in range(n):
        parent = None if i % 3 == 0 else f"s{i - 1:03d}"
        await backend.create(header(f"s{i:03d}", 1_000 + i, parent))
        await backend.append(f"s{i:03d}", simple_log(12, t0=10_000 * i))


async def _calls_for(n: int, tmp_path: Path) -> tuple[int, dict[str, int]]:
    async with sql_backend(tmp_path / f"{n}.db") as inner:
        await _fill(inner, n)
        backend = Counting(inner)
        store = SessionStore()
        store.create("live", created_at=99_999, parent_session="s000", seed=simple_log(7))
        app = create_app(SessionQuery(live=[store], persistence=backend))
        body = await gql(app, NESTED)
    assert "errors" not in body, body["errors"][:3]
    nodes = body["data"]["sessions"]["nodes"]
    assert len(nodes) == n + 1
    for node in nodes:
        assert len(node["events"]["nodes"]) == 5
        assert all(e["data"] is not None for e in node["events"]["nodes"])
    return backend.total, dict(backend.calls)


async def test_backend_calls_do_not_grow_with_the_number_of_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batching, not yielding, is under test: on a loaded machine the 50-session answer
    # can pass the yield grace period (CPU time), and a yield splits a turn's batch in
    # two (gateway.server.yielding; tests/test_hostile_documents.py checks the yields).
    monkeypatch.setattr(yielding, "GRACE", 60.0)
    small, small_calls = await _calls_for(10, tmp_path)
    large, large_calls = await _calls_for(50, tmp_path)
    print(f"\nbackend calls: 10 sessions {small_calls}, 50 sessions {large_calls}")
    assert large == small, (small_calls, large_calls)
    # one call per distinct question: count and page the corpus, look up stored sessions
    # (twice: the live session's persisted twin, then the pages' event counts), children,
    # the two lineage walks, the event pages. The corpus is never listed whole, no
    # whole log is loaded.
    assert large <= 9, large_calls
    assert all(large_calls.get(k, 0) == 0 for k in ("list", *WHOLE_LOG_LOADS)), large_calls


async def test_each_log_is_loaded_once_however_the_query_nests(inner: SqlPersistence) -> None:
    await _fill(inner, 3)
    backend = Counting(inner)
    app = create_app(SessionQuery(persistence=backend))
    q = """{ a: session(id: "s001") { events(first: 3) { nodes { surface session { id } } }
      surface { seq } event(seq: 2) { replacedBy { seq } derived { seq } surface } }
      b: events(sessionId: "s001", surface: [CURRENT]) { totalCount }
      c: traceEvent(sessionId: "s001", seq: 1) { derivedEventSeqs }
      d: session(id: "s001") { lineage { target { id } } parent { id } } }"""
    body = await gql(app, q)
    assert "errors" not in body, body
    # every whole-log read, single or batched, with or without payloads: none, since
    # SqlPersistence answers from its stored derivations by index (windows, pages,
    # traces and surfaces are ranged reads), and the corpus is never listed whole
    log_loads = sum(backend.calls[k] for k in WHOLE_LOG_LOADS)
    assert backend.calls["list"] == 0
    assert log_loads == 0, backend.calls
    # and no question is asked twice of one session: each per-session read once per turn
    assert backend.calls["read_surfaces"] == 1, backend.calls


async def test_nothing_is_cached_across_requests(inner: SqlPersistence) -> None:
    await _fill(inner, 2)
    backend = Counting(inner)
    store = SessionStore()
    live = store.create("live", created_at=5, seed=simple_log(3))
    app = create_app(SessionQuery(live=[store], persistence=backend))
    q = '{ sessions { totalCount } session(id: "live") { events { totalCount } } }'
    first = await gql(app, q)
    calls_after_first = backend.total
    live.append("turn/start", {"turn": 7})
    await inner.create(header("late", 9))
    second = await gql(app, q)
    assert backend.total == 2 * calls_after_first  # asked afresh
    assert first["data"]["sessions"]["totalCount"] + 1 == second["data"]["sessions"]["totalCount"]
    assert second["data"]["session"]["events"]["totalCount"] == 4
