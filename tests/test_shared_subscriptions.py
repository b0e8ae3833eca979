"""Shared subscription executions (issue 21.5) against a real uvicorn server: subscribers
of one session with the same document, variables and caller share one execution per
event, and each still gets every event once, in order, from its own position.

The model is the session's own log (`LiveSession.events()`); executions are counted by
`graphql_subscription_executions_total` (one per executed result)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from gateway import SessionQuery, SessionStore, create_app
from gateway.core import LiveSession
from gateway.observability import GatewayMetrics
from gateway.server.config import GatewayConfig
from gateway.server.principal import Principal, Unauthenticated
from tests.support.server import running_server
from tests.test_live_tail_transports import RawWebSocket

TURN = "turn/start"
PROTOCOL = "graphql-transport-ws"
DOCUMENT = """
subscription Tail($id: ID!, $after: Int) {
  sessionEvents(sessionId: $id, afterSeq: $after) { seq type data }
}
"""
EXECUTIONS = "graphql_subscription_executions_total"


@contextmanager
def serving(
    store: SessionStore, config: GatewayConfig | None = None, **collaborators: Any
) -> Iterator[tuple[str, GatewayMetrics]]:
    metrics = GatewayMetrics()
    app = create_app(SessionQuery(live=[store]), config, metrics=metrics, **collaborators)
    with running_server(app) as base:
        yield base.replace("http://", "ws://") + "/graphql", metrics


def log_of(session: LiveSession) -> list[dict[str, Any]]:
    """The model: what `{ seq type data }` answers for each event of the log."""
    return [{"seq": e.seq, "type": e.type, "data": e.data} for e in session.events()]


async def until(predicate: Callable[[], bool], limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


async def subscribe(
    url: str, variables: dict[str, Any], authorization: str | None = None, op_id: str = "1"
) -> ClientConnection:
    ws = await connect(url, subprotocols=[PROTOCOL], max_size=None)  # type: ignore[list-item]
    init: dict[str, Any] = {"type": "connection_init"}
    if authorization is not None:
        init["payload"] = {"authorization": authorization}
    await ws.send(json.dumps(init))
    assert json.loads(await ws.recv())["type"] == "connection_ack"
    payload = {"query": DOCUMENT, "variables": variables}
    await ws.send(json.dumps({"type": "subscribe", "id": op_id, "payload": payload}))
    return ws


async def take(ws: ClientConnection, n: int) -> list[dict[str, Any]]:
    """The next `n` events of the subscription (fails on anything else)."""
    out = []
    while len(out) < n:
        message = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert message["type"] == "next" and "errors" not in message["payload"], message
        out.append(message["payload"]["data"]["sessionEvents"])
    return out


def active(metrics: GatewayMetrics) -> float:
    return metrics.value("graphql_subscriptions_active")


def test_subscribers_with_one_document_share_one_execution_per_event() -> None:
    store = SessionStore()
    session = store.create("s", created_at=1)
    subscribers = 6

    async def run(url: str, metrics: GatewayMetrics) -> list[list[dict[str, Any]]]:
        sockets = [await subscribe(url, {"id": "s"}) for _ in range(subscribers)]
        await until(lambda: active(metrics) == subscribers)
        for i in range(40):
            session.append(TURN, {"i": i})
            if i % 7 == 0:
                await asyncio.sleep(0.005)
        got = await asyncio.gather(*(take(ws, 40) for ws in sockets))
        for ws in sockets:
            await ws.close()
        return got

    with serving(store) as (url, metrics):
        got = asyncio.run(run(url, metrics))
        executions = metrics.value(EXECUTIONS)
        delivered = metrics.value("graphql_subscription_events_total")
    model = log_of(session)
    assert all(one == model for one in got)  # every event once, in order, to every one
    assert executions == 40  # one execution per event, not one per subscriber
    assert delivered == 40 * subscribers


def test_a_late_joiner_gets_a_gapless_replay_then_the_shared_live_events() -> None:
    store = SessionStore()
    session = store.create("s", created_at=1)
    total = 600

    async def run(url: str, metrics: GatewayMetrics) -> tuple[list[Any], list[Any]]:
        first = await subscribe(url, {"id": "s"})
        await until(lambda: active(metrics) == 1)

        async def agent() -> None:  # appends race the late joiner's replay and handover
            for i in range(total):
                session.append(TURN, {"i": i})
                if i % 3 == 0:
                    await asyncio.sleep(0.001)

        appending = asyncio.create_task(agent())
        early = await take(first, 150)  # the shared execution is well under way
        late = await subscribe(url, {"id": "s"})
        rest, joined = await asyncio.gather(take(first, total - 150), take(late, total))
        await appending
        await first.close()
        await late.close()
        return early + rest, joined

    with serving(store) as (url, metrics):
        first, late = asyncio.run(run(url, metrics))
        executions = metrics.value(EXECUTIONS)
    model = log_of(session)
    assert first == model
    assert late == model  # its own replay, then the shared frames: no gap, no duplicate
    # the late joiner's own replay ran up to the handover only; the rest was shared
    assert total < executions < 2 * total


def test_different_variables_or_scopes_do_not_share() -> None:
    store = SessionStore()
    session = store.create("s", created_at=1)
    tokens = {"Bearer a": Principal("a", ("all",)), "Bearer b": Principal("b", ("id:s",))}

    async def authenticate(value: str | None) -> Principal:
        if value not in tokens:
            raise Unauthenticated("unknown token")
        return tokens[value]

    async def run(url: str, metrics: GatewayMetrics) -> list[list[dict[str, Any]]]:
        sockets = [
            await subscribe(url, {"id": "s"}, "Bearer a"),
            await subscribe(url, {"id": "s", "after": 4}, "Bearer a"),  # other variables
            await subscribe(url, {"id": "s"}, "Bearer b"),  # another scope
            await subscribe(url, {"id": "s"}, "Bearer a"),  # shares with the first
        ]
        await until(lambda: active(metrics) == 4)
        for i in range(20):
            session.append(TURN, {"i": i})
        got = [await take(ws, n) for ws, n in zip(sockets, (20, 15, 20, 20), strict=True)]
        for ws in sockets:
            await ws.close()
        return got

    with serving(store, authenticate=authenticate) as (url, metrics):
        got = asyncio.run(run(url, metrics))
        executions = metrics.value(EXECUTIONS)
    model = log_of(session)
    assert got == [model, model[5:], model, model]
    assert executions == 20 + 15 + 20  # three executions: the fourth shared the first's


def test_a_slow_subscriber_is_ended_as_lagged_without_delaying_the_others() -> None:
    store = SessionStore()
    session = store.create("s", created_at=1)
    total = 1500
    pad = "x" * 8000  # 12 MB in all: more than the stalled client's socket buffers hold

    async def run(url: str, metrics: GatewayMetrics) -> tuple[list[Any], float]:
        fast = await subscribe(url, {"id": "s"})
        await until(lambda: active(metrics) == 2)
        started = time.perf_counter()
        for i in range(total):  # ~200 events/s: a reading subscriber keeps up, even loaded
            session.append(TURN, {"i": i, "pad": pad})
            if i % 2 == 1:
                await asyncio.sleep(0.01)
        got = await take(fast, total)
        took = time.perf_counter() - started
        await fast.close()
        return got, took

    config = GatewayConfig(subscription_buffer=100)
    with serving(store, config) as (url, metrics):
        with RawWebSocket(url.replace("ws://", "http://").removesuffix("/graphql"), 4096) as slow:
            slow.send({"type": "connection_init"})
            assert slow.recv()["type"] == "connection_ack"
            payload = {"query": DOCUMENT, "variables": {"id": "s"}}
            slow.send({"type": "subscribe", "id": "1", "payload": payload})
            fast_got, took = asyncio.run(run(url, metrics))  # the slow one never reads here
            seqs, error = [], None
            while (message := slow.recv())["type"] != "complete":
                if message["payload"].get("errors"):
                    error = message["payload"]["errors"][0]
                else:
                    seqs.append(message["payload"]["data"]["sessionEvents"]["seq"])
        lagged = metrics.value("graphql_subscription_lagged_total")
    assert fast_got == log_of(session)  # the reader got everything, in order
    assert took < 30
    assert error is not None and error["extensions"]["code"] == "SUBSCRIPTION_LAGGED"
    last = error["extensions"]["lastSeq"]
    assert seqs == list(range(last + 1)) and last < total - 1  # sent until it stalled
    assert lagged == 1


def test_a_revoked_token_ends_only_its_own_subscriptions() -> None:
    store = SessionStore()
    session = store.create("s", created_at=1)
    valid = {"Bearer a": Principal("a", ("all",)), "Bearer b": Principal("b", ("all",))}

    async def authenticate(value: str | None) -> Principal:
        if value not in valid:
            raise Unauthenticated("unknown token")
        return valid[value]

    async def run(url: str, metrics: GatewayMetrics) -> tuple[list[Any], list[Any], list[Any]]:
        a1 = await subscribe(url, {"id": "s"}, "Bearer a")
        a2 = await subscribe(url, {"id": "s"}, "Bearer a")  # shares a1's execution
        b = await subscribe(url, {"id": "s"}, "Bearer b")
        await until(lambda: active(metrics) == 3)
        for i in range(5):
            session.append(TURN, {"i": i})
        before = [await take(ws, 5) for ws in (a1, a2, b)]
        assert before == [log_of(session)] * 3
        del valid["Bearer a"]
        ended = []
        for ws in (a1, a2):
            message = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert message["type"] == "error", message
            ended.append(message["payload"][0]["extensions"]["code"])
        for i in range(5, 10):
            session.append(TURN, {"i": i})
        after = await take(b, 5)
        for ws in (a1, a2, b):
            await ws.close()
        return ended, before[2], after

    config = GatewayConfig(reauth_interval=0.2)
    with serving(store, config, authenticate=authenticate) as (url, metrics):
        ended, before, after = asyncio.run(run(url, metrics))
    assert ended == ["UNAUTHENTICATED", "UNAUTHENTICATED"]
    assert before + after == log_of(session)  # b goes on, every event once, in order
