"""SPEC §11 over the wire: `sessionEvents` with the npm graphql-ws client, a raw
WebSocket client for protocol errors and the lag drill, and httpx over SSE, against
a real uvicorn server while an agent task on the server's loop appends."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway import SessionQuery, SessionStore, create_app
from gateway.observability import GatewayMetrics
from gateway.persistence import SqlPersistence, migrate
from gateway.server.config import GatewayConfig
from gateway.server.principal import Principal, Unauthenticated
from tests.support.node_tools import run_subscription
from tests.support.server import running_server

TURN = "turn/start"
PROTOCOL = "graphql-transport-ws"
SUBSCRIPTION = """
subscription Tail($id: ID!, $after: Int) {
  sessionEvents(sessionId: $id, afterSeq: $after) { seq type surface data }
}
"""
SECRET = "Bearer test-secret"


async def check_secret(value: str | None) -> Principal:
    """A stand-in for the token store (issue #8): one fixed secret."""
    if value != SECRET:
        raise Unauthenticated("unknown token")
    return Principal("tester", ("all",))


@contextmanager
def serving(
    store: SessionStore,
    agent: Callable[[], Coroutine[Any, Any, Any]] | None = None,
    persistence: Any = None,
    config: GatewayConfig | None = None,
    **collaborators: Any,
) -> Iterator[tuple[str, GatewayMetrics]]:
    metrics = GatewayMetrics()
    query = SessionQuery(live=[store], persistence=persistence)
    background = [agent] if agent else ()
    app = create_app(query, config, metrics=metrics, background=background, **collaborators)
    with running_server(app) as base:
        yield base, metrics


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/graphql"


def seqs_of(results: list[dict[str, Any]]) -> list[int]:
    return [r["data"]["sessionEvents"]["seq"] for r in results if r.get("data")]


def live_session(n: int) -> tuple[SessionStore, Any]:
    store = SessionStore()
    session = store.create("s", created_at=1)
    for i in range(n):
        session.append(TURN, {"i": i})
    return store, session


async def until(predicate: Callable[[], bool], limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.001)


# -- graphql-ws client (node) ------------------------------------------------------------


def test_every_event_once_in_order_across_a_replay_raced_by_appends() -> None:
    store, session = live_session(3000)
    seen: dict[str, float] = {}

    async def agent() -> None:
        await until(lambda: session.listener_count > 0)
        seen["sent_at_first_append"] = metrics.value("graphql_subscription_events_total")
        for i in range(600):
            session.append(TURN, {"late": i})
            if i % 5 == 0:
                await asyncio.sleep(0)

    with serving(store, agent) as (base, metrics):
        out = run_subscription(
            {
                "url": ws_url(base),
                "query": SUBSCRIPTION,
                "variables": {"id": "s"},
                "stopAfter": 3600,
            }
        )
    assert out["error"] is None, out["error"]
    assert seqs_of(out["results"]) == list(range(3600))
    assert seen["sent_at_first_append"] < 3000  # the appends raced the replay
    first = out["results"][0]["data"]["sessionEvents"]
    assert first == {"seq": 0, "type": TURN, "surface": "LOG_ONLY", "data": {"i": 0}}


def test_reconnecting_with_after_seq_continues_without_gap_or_duplicate() -> None:
    store, session = live_session(50)
    stop = threading.Event()

    async def agent() -> None:
        while not stop.is_set():
            session.append(TURN, {})
            await asyncio.sleep(0.002)

    with serving(store, agent) as (base, _):
        spec = {"url": ws_url(base), "query": SUBSCRIPTION, "variables": {"id": "s"}}
        first = run_subscription({**spec, "stopAfter": 80})
        last = seqs_of(first["results"])[-1]
        second = run_subscription(
            {**spec, "variables": {"id": "s", "after": last}, "stopAfter": 40}
        )
        stop.set()
    assert seqs_of(first["results"]) == list(range(80))
    assert seqs_of(second["results"]) == list(range(80, 120))


def test_a_live_session_leaving_its_store_completes_the_subscription() -> None:
    store, session = live_session(3)

    async def agent() -> None:
        await until(lambda: session.listener_count > 0)
        for _ in range(5):
            session.append(TURN, {})
            await asyncio.sleep(0.005)
        store.remove("s")

    with serving(store, agent) as (base, metrics):
        out = run_subscription(
            {"url": ws_url(base), "query": SUBSCRIPTION, "variables": {"id": "s"}}
        )
        active = metrics.value("graphql_subscriptions_active")
    assert out["completed"] is True and out["error"] is None
    assert seqs_of(out["results"]) == list(range(8))
    assert active == 0


def test_a_persisted_only_session_completes_after_the_replay(tmp_path: Any) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'tail.db'}"
    _, source = live_session(0)
    source.append("user/message", {"content": []}, surface_op="append")
    for i in range(599):
        source.append(TURN, {"i": i})
    header, events = source.snapshot()

    async def fill() -> None:
        await migrate(url)
        db = SqlPersistence(url)
        await db.create(header)
        await db.append("s", list(events))
        await db.close()

    asyncio.run(fill())
    db = SqlPersistence(url)
    try:
        with serving(SessionStore(), persistence=db) as (base, _):
            out = run_subscription(
                {"url": ws_url(base), "query": SUBSCRIPTION, "variables": {"id": "s", "after": 9}}
            )
    finally:
        asyncio.run(db.close())
    assert out["completed"] is True and out["error"] is None
    assert seqs_of(out["results"]) == list(range(10, 600))


def test_an_unknown_session_is_session_not_found_over_graphql_ws() -> None:
    store, _ = live_session(0)
    with serving(store) as (base, _):
        out = run_subscription(
            {"url": ws_url(base), "query": SUBSCRIPTION, "variables": {"id": "nope"}}
        )
    assert out["error"][0]["extensions"]["code"] == "SESSION_QUERY_SESSION_NOT_FOUND"


def test_auth_takes_the_token_from_connection_init_or_the_header() -> None:
    store, _ = live_session(2)
    with serving(store, authenticate=check_secret) as (base, _):
        spec = {
            "url": ws_url(base),
            "query": SUBSCRIPTION,
            "variables": {"id": "s"},
            "stopAfter": 2,
        }
        by_payload = run_subscription({**spec, "connectionParams": {"authorization": SECRET}})
        by_header = run_subscription({**spec, "headers": {"Authorization": SECRET}})
        refused = run_subscription({**spec, "connectionParams": {"authorization": "Bearer x"}})
    assert seqs_of(by_payload["results"]) == [0, 1] and by_payload["error"] is None
    assert seqs_of(by_header["results"]) == [0, 1] and by_header["error"] is None
    assert refused["error"]["code"] == 4403 and not refused["results"]


# -- lag drill: a raw client that stops reading ----------------------------------------


class RawWebSocket:
    """A minimal blocking graphql-transport-ws client on a plain socket, so that "stops
    reading" means exactly that (client libraries keep draining the socket)."""

    def __init__(self, base: str, rcvbuf: int) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(60)
        self.sock.connect((host, int(port)))
        self.sock.sendall(
            (
                f"GET /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n"
            ).encode()
        )
        self.reader = self.sock.makefile("rb")
        status = self.reader.readline()
        assert b" 101 " in status, status
        while self.reader.readline() not in (b"\r\n", b""):
            pass

    def __enter__(self) -> RawWebSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.close()
        self.sock.close()

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        size = len(data)
        head = bytes([0x81]) + (
            bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + size.to_bytes(2, "big")
        )
        self.sock.sendall(head + b"\0\0\0\0" + data)  # an all-zero mask leaves data as is

    def recv(self) -> dict[str, Any]:
        first, second = self.reader.read(2)
        size = second & 0x7F
        if size == 126:
            size = int.from_bytes(self.reader.read(2), "big")
        elif size == 127:
            size = int.from_bytes(self.reader.read(8), "big")
        payload = self.reader.read(size)
        assert first & 0x0F == 1, f"expected a text frame, got opcode {first & 0x0F}"
        result: dict[str, Any] = json.loads(payload)
        return result


def test_a_consumer_that_stops_reading_lags_with_last_seq_and_resumes_gap_free() -> None:
    store, session = live_session(0)
    total = 4000
    blob = "x" * 4000  # 16 MB in all: more than the socket buffers hold

    async def agent() -> None:  # ~1,000 events/s: a reading subscriber keeps up
        await until(lambda: session.listener_count > 0)
        for i in range(total):
            session.append(TURN, {"i": i, "pad": blob})
            if i % 10 == 9:
                await asyncio.sleep(0.01)

    def stalled_client(base: str) -> tuple[list[int], Any]:
        with RawWebSocket(base, rcvbuf=4096) as ws:
            ws.send({"type": "connection_init"})
            assert ws.recv()["type"] == "connection_ack"
            query = 'subscription { sessionEvents(sessionId: "s") { seq data } }'
            ws.send({"type": "subscribe", "id": "1", "payload": {"query": query}})
            deadline = time.monotonic() + 60
            while len(session) < total:  # not reading while the agent appends it all
                assert time.monotonic() < deadline, "the agent did not finish"
                time.sleep(0.01)
            seqs, error = [], None
            while (message := ws.recv())["type"] != "complete":
                payload = message["payload"]
                if payload.get("errors"):
                    error = payload["errors"][0]
                else:
                    seqs.append(payload["data"]["sessionEvents"]["seq"])
            return seqs, error

    with serving(store, agent, config=GatewayConfig(subscription_buffer=100)) as (base, metrics):
        seqs, error = stalled_client(base)
        last = error["extensions"]["lastSeq"]
        resumed = run_subscription(
            {
                "url": ws_url(base),
                "query": "subscription($id: ID!, $after: Int) { sessionEvents(sessionId: $id, "
                "afterSeq: $after) { seq } }",
                "variables": {"id": "s", "after": last},
                "stopAfter": total - last - 1,
                "timeoutMs": 60000,
            }
        )
    assert error["extensions"]["code"] == "SUBSCRIPTION_LAGGED"
    assert seqs == list(range(last + 1)) and 100 < last < total - 1  # sent until it stalled
    assert seqs_of(resumed["results"]) == list(range(last + 1, total))
    assert metrics.value("graphql_subscription_lagged_total") == 1


# -- protocol errors -----------------------------------------------------------------------


async def closed_with(ws: Any) -> tuple[int, str]:
    with pytest.raises(ConnectionClosed) as info:
        while True:
            await asyncio.wait_for(ws.recv(), 10)
    assert info.value.rcvd is not None
    return info.value.rcvd.code, info.value.rcvd.reason


def protocol_case(case: Callable[[str], Coroutine[Any, Any, None]], **options: Any) -> None:
    store, _ = live_session(1)
    with serving(store, **options) as (base, _):
        asyncio.run(case(ws_url(base)))


def subscribe(op_id: str, query: str = SUBSCRIPTION) -> str:
    payload = {"query": query, "variables": {"id": "s"}}
    return json.dumps({"type": "subscribe", "id": op_id, "payload": payload})


INIT = json.dumps({"type": "connection_init"})


def test_a_malformed_message_closes_with_4400() -> None:
    async def case(url: str) -> None:
        async with connect(url, subprotocols=[PROTOCOL]) as ws:
            await ws.send(INIT)
            await ws.recv()
            await ws.send("{not json")
            assert (await closed_with(ws))[0] == 4400
        async with connect(url, subprotocols=[PROTOCOL]) as ws:
            await ws.send(INIT)
            await ws.recv()
            await ws.send(json.dumps({"type": "subscribe", "id": "1", "payload": "x"}))
            assert (await closed_with(ws))[0] == 4400
        async with connect(url, subprotocols=[PROTOCOL]) as ws:
            await ws.send(b"\x00binary")
            assert (await closed_with(ws))[0] == 4400

    protocol_case(case)


def test_subscribe_before_the_ack_closes_with_4401() -> None:
    async def case(url: str) -> None:
        async with connect(url, subprotocols=[PROTOCOL]) as ws:
            await ws.send(subscribe("1"))
            assert await closed_with(ws) == (4401, "Unauthorized")

    protocol_case(case)


def test_no_connection_init_in_time_closes_with_4408() -> None:
    async def case(url: str) -> None:
        async with connect(url, subprotocols=[PROTOCOL]) as ws:
            started = time.monotonic()
            assert (await closed_with(ws))[0] == 4408
            assert 0.2 <= time.monotonic() - started < 5

    protocol_case(case, config=GatewayConfig(connection_init_timeout=0.3))


def test_a_duplicate_operation_id_closes_with_4409_and_ping_gets_pong() -> None:
    async def case(url: str) -> None:
        async with connect(url, subprotocols=[PROTOCOL]) as ws:
            await ws.send(INIT)
            await ws.recv()
            await ws.send(json.dumps({"type": "ping"}))
            assert json.loads(await ws.recv()) == {"type": "pong"}
            await ws.send(subscribe("a"))
            assert json.loads(await ws.recv())["type"] == "next"  # seq 0, still running
            await ws.send(subscribe("a"))
            assert await closed_with(ws) == (4409, "Subscriber for a already exists")

    protocol_case(case)


def test_at_most_ten_subscriptions_run_on_one_connection() -> None:
    async def case(url: str) -> None:
        async with connect(url, subprotocols=[PROTOCOL]) as ws:
            await ws.send(INIT)
            await ws.recv()
            for i in range(10):
                await ws.send(subscribe(str(i)))
            for _ in range(10):
                assert json.loads(await ws.recv())["type"] == "next"
            await ws.send(subscribe("eleven"))
            refused = json.loads(await ws.recv())
            assert refused["type"] == "error" and refused["id"] == "eleven"
            assert refused["payload"][0]["extensions"]["code"] == "TOO_MANY_SUBSCRIPTIONS"
            await ws.send(json.dumps({"type": "complete", "id": "0"}))
            await ws.send(subscribe("eleven"))
            assert json.loads(await ws.recv())["id"] == "eleven"

    protocol_case(case)


def test_websocket_origin_is_same_origin_or_a_cors_origin_and_legacy_protocol_is_off() -> None:
    async def case(url: str) -> None:
        port = url.split(":")[2].split("/")[0]
        for origin in ("http://evil.example", f"http://localhost:{int(port) + 1}"):
            with pytest.raises(InvalidStatus) as info:
                async with connect(url, subprotocols=[PROTOCOL], origin=origin):  # type: ignore[arg-type]
                    pass
            assert info.value.response.status_code == 403
        for origin in (f"http://127.0.0.1:{port}", "https://app.example"):
            async with connect(url, subprotocols=[PROTOCOL], origin=origin) as ws:  # type: ignore[arg-type]
                await ws.send(INIT)
                assert json.loads(await ws.recv())["type"] == "connection_ack"
        with pytest.raises(InvalidStatus):
            async with connect(url, subprotocols=["graphql-ws"]):  # type: ignore[list-item]
                pass

    protocol_case(case, config=GatewayConfig(cors_origins=("https://app.example",)))


# -- SSE -------------------------------------------------------------------------------


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    event = None
    for line in lines:
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event is not None:
            data = line.removeprefix("data: ")
            yield event, json.loads(data) if data else None
            event = None


def test_sse_streams_replay_then_appends_then_completes_when_the_session_leaves() -> None:
    store, session = live_session(400)

    async def agent() -> None:
        await until(lambda: session.listener_count > 0)
        for i in range(300):
            session.append(TURN, {"late": i})
            if i % 3 == 0:
                await asyncio.sleep(0)
        store.remove("s")

    with serving(store, agent) as (base, _):
        body = {"query": SUBSCRIPTION, "variables": {"id": "s", "after": 99}}
        with httpx.stream(
            "POST",
            base + "/graphql",
            json=body,
            headers={"Accept": "text/event-stream"},
            timeout=30,
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = list(sse_events(response.iter_lines()))
    assert events[-1] == ("complete", None)
    seqs = [data["data"]["sessionEvents"]["seq"] for kind, data in events if kind == "next"]
    assert seqs == list(range(100, 700))


def test_sse_over_get_for_event_source_and_errors() -> None:
    store, session = live_session(3)

    async def agent() -> None:
        await until(lambda: session.listener_count > 0)
        store.remove("s")

    with serving(store, agent) as (base, _):
        params = {"query": SUBSCRIPTION, "variables": json.dumps({"id": "s", "after": 0})}
        with httpx.stream(
            "GET", base + "/graphql", params=params, headers={"Accept": "text/event-stream"}
        ) as response:
            events = list(sse_events(response.iter_lines()))
        assert [e[1]["data"]["sessionEvents"]["seq"] for e in events[:-1]] == [1, 2]
        bad = httpx.post(
            base + "/graphql",
            json={"query": 'subscription { sessionEvents(sessionId: "s") { nope } }'},
            headers={"Accept": "text/event-stream"},
        )
        assert bad.status_code == 400
        assert bad.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
        params = {"query": SUBSCRIPTION, "variables": json.dumps({"id": "missing"})}
        with httpx.stream(
            "GET", base + "/graphql", params=params, headers={"Accept": "text/event-stream"}
        ) as response:
            events = list(sse_events(response.iter_lines()))
    code = events[0][1]["errors"][0]["extensions"]["code"]
    assert code == "SESSION_QUERY_SESSION_NOT_FOUND" and events[-1][0] == "complete"


def test_a_subscription_posted_for_one_json_answer_is_refused_with_the_ways_to_stream() -> None:
    store, _ = live_session(1)
    with serving(store) as (base, _):
        response = httpx.post(
            base + "/graphql", json={"query": SUBSCRIPTION, "variables": {"id": "s"}}
        )
    assert response.status_code == 405
    message = response.json()["errors"][0]["message"]
    assert "graphql-transport-ws" in message and "text/event-stream" in message
