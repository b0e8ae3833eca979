"""GraphiQL at /graphql in headless Chromium: served offline by the gateway, runs a query."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.demo import load_demo
from gateway.persistence import SqlPersistence
from gateway.server.config import GatewayConfig
from tests.support.node_tools import run_browser_check
from tests.support.server import running_server
from tests.support.sqlite_backend import sqlite_url

pytestmark = pytest.mark.browser


async def _load(backend: SqlPersistence, store: SessionStore) -> None:
    try:
        await load_demo(backend, store)
    finally:
        # the server runs on another event loop (its own thread): keep no pooled
        # connection from this one
        await backend.close()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    backend = SqlPersistence(sqlite_url(tmp_path_factory.mktemp("graphiql") / "x.db"))
    store = SessionStore()
    asyncio.run(_load(backend, store))
    # An anonymous default query: GraphiQL re-reads the operation name a moment after an
    # edit, and the harness clicks "run" at once; a named default could go out stale.
    app = create_app(
        SessionQuery(live=[store], persistence=backend),
        GatewayConfig(default_query="{ __typename }"),
    )
    try:
        with running_server(app) as url:
            yield url
    finally:
        asyncio.run(backend.close())


def test_graphiql_runs_a_lineage_query_offline(server_url: str, tmp_path: Path) -> None:
    query = (
        '{ traceSession(sessionId: "demo-orphan-child") { complete unresolvedParentId '
        "graph { edges { parentId childId } } } }"
    )
    shot = tmp_path / "graphiql.png"
    report = run_browser_check(f"{server_url}/graphql", query, '"demo-deleted-parent"', shot)
    assert report["failedRequests"] == [], "GraphiQL tried to load something from elsewhere"
    assert report["ok"], report
    assert '"unresolvedParentId": "demo-deleted-parent"' in report["resultText"]
    assert report["consoleErrors"] == [] and report["httpErrors"] == []
    assert shot.stat().st_size > 10_000


def test_graphiql_runs_a_subscription_over_graphql_transport_ws(server_url: str) -> None:
    """SPEC §11: GraphiQL's fetcher sends subscriptions over graphql-transport-ws (the
    vendored graphql-ws client), and shows the live session's streamed events."""
    query = 'subscription { sessionEvents(sessionId: "demo-resumed") { seq type surface } }'
    report = run_browser_check(f"{server_url}/graphql", query, '"sessionEvents"')
    assert report["failedRequests"] == [], "GraphiQL tried to load something from elsewhere"
    assert report["ok"], report
    assert '"seq"' in report["resultText"] and '"surface"' in report["resultText"]
    assert report["consoleErrors"] == [] and report["httpErrors"] == []
