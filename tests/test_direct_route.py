"""`/graphql` over HTTP and WebSocket reaches its endpoint without Starlette's exception
layer and router (`gateway.server.direct_route`): the endpoint must see the scope the
router would have given it, after every rule of the stack, and every other request must
go through the router as before."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.routing import Route, WebSocketRoute
from websockets.sync.client import connect

from gateway import SessionQuery, SessionStore, create_app
from gateway.server.direct_route import DirectRoute
from tests.support.server import running_server

KEYS = ("route", "endpoint", "path_params", "router", "app", "path", "root_path")


def _recording_app(
    direct: bool, kind: type[Route | WebSocketRoute] = Route
) -> tuple[Any, list[dict[str, Any]]]:
    app = create_app(SessionQuery(live=[SessionStore()]))
    if not direct:
        assert app.user_middleware[-1].cls is DirectRoute
        app.user_middleware.pop()
    seen: list[dict[str, Any]] = []
    route = next(r for r in app.routes if type(r) is kind and r.path == "/graphql")
    graphql = route.app

    async def recorder(scope: Any, receive: Any, send: Any) -> None:
        seen.append(
            {k: scope.get(k) for k in KEYS} | {"exc": "starlette.exception_handlers" in scope}
        )
        await graphql(scope, receive, send)

    route.app = recorder
    return app, seen


@pytest.mark.parametrize("root_path", ["", "/api"])
async def test_the_graphql_endpoint_sees_the_scope_the_router_gives_it(root_path: str) -> None:
    scopes = []
    for direct in (True, False):
        app, seen = _recording_app(direct)
        transport = httpx.ASGITransport(app=app, root_path=root_path)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
            r = await c.post(f"{root_path}/graphql", json={"query": "{ __typename }"})
            assert r.status_code == 200 and r.json() == {"data": {"__typename": "Query"}}
            assert r.headers["x-request-id"] and r.headers["x-content-type-options"] == "nosniff"
            r = await c.get(f"{root_path}/graphql", params={"query": "{ __typename }"})
            assert r.status_code == 200
        assert len(seen) == 2
        scopes.append(seen)
    direct_seen, routed_seen = scopes
    for ours, theirs in zip(direct_seen, routed_seen, strict=True):
        assert ours.pop("exc") is False and theirs.pop("exc") is True  # the one difference
        assert ours["route"] is not None and ours["route"].path == "/graphql"
        assert ours["router"] is not None
        assert ours["path_params"] == theirs["path_params"] == {}
        assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in theirs.items()}
        assert ours["path"] == theirs["path"] and ours["root_path"] == theirs["root_path"]


async def test_other_paths_still_go_through_the_router() -> None:
    app, seen = _recording_app(True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/nowhere")).status_code == 404  # the router's HTTPException
        r = await c.post("/graphql/", json={"query": "{ __typename }"})
        assert r.status_code == 307  # the router's trailing-slash redirect
    assert seen == []


def test_the_graphql_websocket_sees_the_scope_the_router_gives_it() -> None:
    scopes = []
    for direct in (True, False):
        app, seen = _recording_app(direct, WebSocketRoute)
        with running_server(app) as base:
            url = base.replace("http://", "ws://") + "/graphql"
            with connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
                ws.send(json.dumps({"type": "connection_init"}))
                assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
                ws.send(
                    json.dumps(
                        {"id": "1", "type": "subscribe", "payload": {"query": "{ __typename }"}}
                    )
                )
                assert json.loads(ws.recv(timeout=10)) == {
                    "id": "1",
                    "type": "next",
                    "payload": {"data": {"__typename": "Query"}},
                }
        assert len(seen) == 1
        scopes.append(seen[0])
    ours, theirs = scopes
    assert ours.pop("exc") is False and theirs.pop("exc") is True  # the one difference
    assert ours["route"] is not None and ours["route"].path == "/graphql"
    assert ours["router"] is not None and ours["path_params"] == theirs["path_params"] == {}
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in theirs.items()}
    assert ours["path"] == theirs["path"]
