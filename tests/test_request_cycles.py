"""A served request leaves no reference cycles: when it ends, reference counting
frees everything it built (its observation and loaders, graphql-core's execution
context), so the cyclic collector has nothing of it to find (`gateway.core.batching.
weakly`, `gateway.server.execution.GatewayExecutionContext`).

Checked with the collector's own bookkeeping: with `gc.DEBUG_SAVEALL`, everything a
collection finds unreachable is kept in `gc.garbage`; after a batch of requests run
with the collector off, a collection must find nothing.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence
from gateway.server.config import GatewayConfig
from tests.core_helpers import ev

DOCUMENTS = [
    '{ session(id: "s1") { id header { cwd } } }',
    '{ events(sessionId: "s1", first: 20) { nodes { seq type surface } '
    "pageInfo { hasNextPage endCursor } } }",
    '{ session(id: "s1") { events(first: 5) { edges { cursor node { seq data } } } } }',
    "{ sessions(first: 5) { nodes { id header { createdAt cwd } } } }",
    '{ session(id: "live-1") { id events(first: 3) { nodes { seq } } } }',
]


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


async def _call(app: Any, body: bytes) -> bytes:
    sent = False
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            out.append(message.get("body", b""))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return b"".join(out)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_served_request_leaves_no_reference_cycles(
    tmp_path: Path, collector_off: None, document: str
) -> None:
    async def main() -> int:
        db = SqlPersistence(f"sqlite:///{tmp_path / 'cycles.db'}")
        await db.ensure_schema()
        for i in range(3):
            await db.create(SessionHeader(f"s{i}", 1_000 + i, cwd=f"/w/{i}"), [ev(0), ev(1)])
        store = SessionStore()
        live = store.create("live-1", created_at=5_000)
        for seq in range(4):
            live.append("turn/start", {"n": seq})
        app = create_app(SessionQuery(live=[store], persistence=db), GatewayConfig())
        body = json.dumps({"query": document}).encode()
        try:
            for _ in range(3):  # warm: statements compiled, documents remembered
                answer = json.loads(await _call(app, body))
                assert "errors" not in answer, answer
            await asyncio.sleep(0.05)
            gc.collect()
            gc.garbage.clear()
            gc.set_debug(gc.DEBUG_SAVEALL)
            for _ in range(10):
                await _call(app, body)
            gc.collect()
            left = [type(o).__qualname__ for o in gc.garbage]
            gc.set_debug(0)
            gc.garbage.clear()
            assert left == [], sorted(set(left))
            return len(left)
        finally:
            await db.close()

    assert asyncio.run(main()) == 0
