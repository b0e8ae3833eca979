"""/metrics on the real app: counters move with queries, errors and backend calls; a
masked error carries the same request id as the response header."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import SessionQuery, SessionStore, create_app
from gateway.core import SessionHeader
from gateway.observability.metrics import GatewayMetrics, instrument_backend
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import client, simple_log


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text, 0 when absent."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


async def test_metrics_counters_move_after_queries(tmp_path: Path) -> None:
    async with sql_backend(tmp_path / "m.db") as db:
        await db.create(SessionHeader("p", 1), simple_log(6))
        metrics = GatewayMetrics()
        query = SessionQuery(persistence=instrument_backend(db, metrics))
        app = create_app(query, metrics=metrics)
        async with client(app) as c:
            before = (await c.get("/metrics")).text
            for _ in range(3):
                ok = await c.post(
                    "/graphql",
                    json={"query": "query Listing { sessions { totalCount } }"},
                )
                assert ok.json() == {"data": {"sessions": {"totalCount": 1}}}
            missing = await c.post(
                "/graphql",
                json={"query": 'query Missing { events(sessionId: "nope") { totalCount } }'},
            )
            assert missing.json()["errors"][0]["extensions"]["code"] == (
                "SESSION_QUERY_SESSION_NOT_FOUND"
            )
            after = (await c.get("/metrics")).text

    ops = {"operation_name": "Listing", "operation_type": "query"}
    assert (
        sample(after, "graphql_operations_total", **ops)
        == sample(before, "graphql_operations_total", **ops) + 3
    )
    code = {"code": "SESSION_QUERY_SESSION_NOT_FOUND"}
    assert sample(after, "graphql_errors_total", **code) == 1
    # each listing asks the backend for a count (a page of sessions is pushed down)
    calls = {"method": "count_sessions", "outcome": "ok"}
    assert sample(after, "backend_calls_total", **calls) >= 3
    assert sample(after, "graphql_operation_duration_seconds_count", **ops) >= 3
    # the library's process and GC series ride along; `_created` series do not
    assert sample(after, "process_open_fds") > 0
    assert sample(after, "python_gc_collections_total", generation="0") > 0
    assert "_created" not in after


async def test_masked_error_carries_the_request_id_of_the_response(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.server.types import sessions

    def boom(*args: Any) -> Any:
        raise RuntimeError("internal detail")

    store = SessionStore()
    store.create("a", created_at=1)
    monkeypatch.setattr(sessions.SessionHeader, "of", classmethod(boom))
    async with client(create_app(SessionQuery(live=[store]))) as c:
        r = await c.post(
            "/graphql",
            json={"query": '{ session(id: "a") { header { id } } }'},
            headers={"X-Request-Id": "req-42.abc"},
        )
    assert r.headers["x-request-id"] == "req-42.abc"
    (error,) = r.json()["errors"]
    assert error["extensions"]["requestId"] == "req-42.abc"
    assert error["extensions"]["code"] == "INTERNAL_ERROR"


async def test_every_path_the_app_serves_is_a_route_label_of_its_own() -> None:
    """The viewer page too: no route the app serves is counted as `other`."""
    app = create_app(SessionQuery(live=[SessionStore()]))
    async with client(app) as c:
        for path in ("/ui", "/healthz", "/no-such-page"):
            await c.get(path, headers={"Accept": "text/html"})
        text = (await c.get("/metrics")).text
    assert sample(text, "http_requests_total", route="/ui", status="200") == 1
    assert sample(text, "http_requests_total", route="/healthz", status="200") == 1
    assert sample(text, "http_requests_total", route="other", status="404") == 1
