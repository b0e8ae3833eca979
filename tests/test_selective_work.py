"""Work only for what is selected (issue 21.2) and the HTTP stack (21.3).

* a cursor is signed (an HMAC) only when `edges{cursor}` or `pageInfo{start/endCursor}`
  is selected, and the values are the codec's own for the same keys;
* the document cache keeps every limit exact: a refused text is refused again, the
  same text with other variables is costed by its variables;
* no schema extension hooks per-field resolution, and plain attribute fields have no
  resolver;
* `serve`'s protocol classes keep the header timeout and the connection cap on both
  uvicorn parsers (httptools and h11), checked against a real uvicorn server;
* a response's head leaves with its body in one send (`HeadWithBody`), on a real
  socket pair; a head whose body comes later is not held past its loop turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from strawberry.extensions import SchemaExtension

from gateway import SessionQuery, SessionStore, create_app
from gateway.observability.metrics import GatewayMetrics, metrics_extension
from gateway.server.config import ConnectionLimits, GatewayConfig, Limits
from gateway.server.connections import (
    HeadWithBody,
    LimitedH11Protocol,
    LimitedHttpToolsProtocol,
    gated_listener,
    http_protocol,
    limited_protocol,
)
from gateway.server.cursors import CursorCodec
from gateway.server.schema import build_schema
from tests.test_graphql_helpers import codes, gql, header, simple_log

SECRET = "selective-work-test"
SID = "s-selective"


@pytest.fixture
def signed(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every payload the cursor codec MACs (the real `_mac`, counted)."""
    seen: list[bytes] = []
    real = CursorCodec._mac

    def counting(self: CursorCodec, payload: bytes) -> bytes:
        seen.append(payload)
        return real(self, payload)

    monkeypatch.setattr(CursorCodec, "_mac", counting)
    return seen


def _app(n_events: int = 60, n_sessions: int = 30) -> Any:
    store = SessionStore()
    live = store.create(SID, created_at=10_000)
    for e in simple_log(n_events):
        live.append(e.type, e.data, e.surface_op, time=e.time)
    for i in range(n_sessions):
        store.create(f"other-{i:03d}", created_at=1_000 + i)
    return create_app(SessionQuery(live=[store]), GatewayConfig(cursor_secret=SECRET))


EVENTS = """query($sid: ID!) { session(id: $sid) { events(first: 20) {
  nodes { seq type surface } pageInfo { hasNextPage %s } %s } } }"""
SESSIONS = "{ sessions(first: 25) { nodes { id } pageInfo { hasNextPage %s } %s } }"


async def test_a_page_whose_selection_names_no_cursor_signs_none(signed: list[bytes]) -> None:
    app = _app()
    body = await gql(app, EVENTS % ("", ""), {"sid": SID})
    page = body["data"]["session"]["events"]
    assert [n["seq"] for n in page["nodes"]] == list(range(20))
    assert page["pageInfo"] == {"hasNextPage": True}
    sessions = (await gql(app, SESSIONS % ("", "")))["data"]["sessions"]
    assert len(sessions["nodes"]) == 25
    assert signed == []


async def test_selected_cursors_are_signed_once_each_with_the_codecs_values(
    signed: list[bytes],
) -> None:
    app = _app()
    codec = CursorCodec(SECRET)  # the independent model: the same key, the same keys
    body = await gql(app, EVENTS % ("endCursor", ""), {"sid": SID})
    info = body["data"]["session"]["events"]["pageInfo"]
    assert info["endCursor"] == codec.event(SID, 19)
    assert len(signed) == 2  # the page's end cursor, and the model's own
    signed.clear()
    both = "startCursor endCursor"
    body = await gql(app, EVENTS % (both, "edges { cursor node { seq } }"), {"sid": SID})
    page = body["data"]["session"]["events"]
    assert [e["cursor"] for e in page["edges"]] == [codec.event(SID, s) for s in range(20)]
    assert page["pageInfo"]["startCursor"] == codec.event(SID, 0)
    assert page["pageInfo"]["endCursor"] == codec.event(SID, 19)
    assert len(signed) == 22 + 22  # 20 edges and 2 page cursors, then the model's 22
    signed.clear()
    sessions = (await gql(app, SESSIONS % ("endCursor", "edges { cursor }")))["data"]
    edges = sessions["sessions"]["edges"]
    assert len(signed) == 26
    # the next page starts strictly after the end cursor (values are live cursors)
    after = sessions["sessions"]["pageInfo"]["endCursor"]
    assert after == edges[-1]["cursor"]
    rest = await gql(
        app, "query($a: String) { sessions(after: $a) { nodes { id } } }", {"a": after}
    )
    assert len(rest["data"]["sessions"]["nodes"]) == 31 - 25


async def test_an_empty_page_has_null_cursors_and_signs_none(signed: list[bytes]) -> None:
    app = _app(n_events=0)
    body = await gql(app, EVENTS % ("startCursor endCursor", "edges { cursor }"), {"sid": SID})
    page = body["data"]["session"]["events"]
    assert page["pageInfo"] == {"hasNextPage": False, "startCursor": None, "endCursor": None}
    assert page["edges"] == [] and signed == []


# -- the document cache keeps the limits exact -------------------------------------------

DEEP = "{ sessions { nodes { events { nodes { session { events { nodes { seq } } } } } } } }"
COSTED = "query($n: Int) { sessions(first: $n) { nodes { events(first: $n) { nodes { seq } } } } }"


async def test_a_document_refused_once_is_refused_again_from_the_cache() -> None:
    app = create_app(SessionQuery(live=[SessionStore()]), GatewayConfig(limits=Limits(max_depth=4)))
    for text in (DEEP, "{ sessions { nodes { id } ", "{ nosuchfield }"):
        first = await gql(app, text, status=None)
        again = await gql(app, text, status=None)
        assert codes(first) and first == again, (text, first, again)


async def test_the_same_text_with_other_variables_is_costed_by_its_variables() -> None:
    app = create_app(
        SessionQuery(live=[SessionStore()]), GatewayConfig(limits=Limits(max_cost=1_000))
    )
    for n, refused in ((5, False), (100, True), (5, False), (100, True), (20, False)):
        body = await gql(app, COSTED, {"n": n}, status=None)
        assert (codes(body) == ["QUERY_TOO_COSTLY"]) is refused, (n, body)
        assert refused or body["data"] == {"sessions": {"nodes": []}}


# -- no per-field overhead ---------------------------------------------------------------


def test_no_schema_extension_hooks_each_field_resolution() -> None:
    schema = build_schema(Limits(), metrics=GatewayMetrics())
    hooked = [
        e
        for e in schema.extensions
        if isinstance(e, type) and e.resolve is not SchemaExtension.resolve
    ]
    assert schema.extensions and hooked == []
    assert metrics_extension(GatewayMetrics()).resolve is SchemaExtension.resolve


def test_plain_event_and_header_fields_resolve_without_a_resolver() -> None:
    schema = build_schema()
    plain = {"Event": ["id", "sessionId", "seq", "type", "time", "ignorable"]}
    plain["SessionHeader"] = ["id", "createdAt", "cwd"]
    plain["PageInfo"] = ["hasNextPage", "hasPreviousPage"]
    for type_name, fields in plain.items():
        definition = schema.get_type_by_name(type_name)
        assert definition is not None
        by_name = {f.graphql_name or f.python_name: f for f in definition.fields}  # type: ignore[union-attr]
        for name in fields:
            field = next(
                f for key, f in by_name.items() if key == name or _camel(f.python_name) == name
            )
            assert field.base_resolver is None, (type_name, name)
    assert header(SID, 1).cwd == "/w"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


# -- the HTTP stack ---------------------------------------------------------------------


async def _answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def _serving(
    http: str, limits: ConnectionLimits, cap: int, app: Any = _answer
) -> AsyncIterator[tuple[int, uvicorn.Server]]:
    protocol = limited_protocol(limits, cap, http)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http=protocol, lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[gated_listener(sock, protocol.gate)]))
    for _ in range(1_000):  # started: uvicorn has no event to wait on
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield port, server
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def _served(
    http: str, limits: ConnectionLimits, cap: int, app: Any = _answer
) -> AsyncIterator[int]:
    async with _serving(http, limits, cap, app) as (port, _server):
        yield port


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> float | None:
    start = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), seconds):
            pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return time.monotonic() - start


REQUEST = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"


def test_serve_picks_httptools_when_installed() -> None:
    assert http_protocol() == "httptools"
    assert issubclass(limited_protocol(ConnectionLimits(), 4), LimitedH11Protocol)
    served = limited_protocol(ConnectionLimits(), 4, http_protocol())
    assert issubclass(served, LimitedHttpToolsProtocol)


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_the_header_timeout_and_the_cap_hold_on_either_parser(http: str) -> None:
    limits = ConnectionLimits(header_timeout=0.6, keep_alive_timeout=30, log_interval=60)
    async with _served(http, limits, cap=4) as port:
        silent = await asyncio.open_connection("127.0.0.1", port)
        half = await asyncio.open_connection("127.0.0.1", port)
        half[1].write(b"GET / HTTP/1.1\r\nHost: loc")
        kept = await asyncio.open_connection("127.0.0.1", port)
        kept[1].write(REQUEST)
        assert (await kept[0].readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        # one past the cap is answered 503 and closed
        extra = await asyncio.open_connection("127.0.0.1", port)
        over = await asyncio.open_connection("127.0.0.1", port)
        answer = await asyncio.wait_for(over[0].read(), 5)
        assert answer.startswith(b"HTTP/1.1 503") and b"SERVER_BUSY" in answer
        for reader in (silent[0], half[0], extra[0]):
            took = await _closed_within(reader, 5)
            assert took is not None and took < 3
        # a keep-alive connection idle past the header timeout is kept; a later request's
        # headers are timed from its first byte
        assert await _closed_within(kept[0], 0.3) is None
        kept[1].write(b"GET / HTTP/1.1\r\n")
        started = time.monotonic()
        assert await _closed_within(kept[0], 5) is not None
        assert 0.4 <= time.monotonic() - started <= 3
        fresh = await asyncio.open_connection("127.0.0.1", port)
        fresh[1].write(REQUEST + REQUEST)  # pipelined: both answered, then kept
        data = b""
        while data.count(b"ok") < 2:
            data += await asyncio.wait_for(fresh[0].read(65536), 5)
        assert data.count(b"HTTP/1.1 200") == 2
        assert await _closed_within(fresh[0], 1.0) is None  # answered: waits idle, kept
        for _, writer in (silent, half, kept, extra, over, fresh):
            writer.close()


@contextlib.asynccontextmanager
async def _socket_pair() -> AsyncIterator[tuple[asyncio.Transport, socket.socket]]:
    """A real asyncio transport on one end of a socket pair, the other end a plain
    non-blocking socket: what the transport sends is in the peer's buffer at once."""
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, ours)
    try:
        yield transport, peer  # type: ignore[misc]
    finally:
        transport.close()
        peer.close()


def _pending(peer: socket.socket) -> bytes:
    try:
        return peer.recv(65536)
    except BlockingIOError:
        return b"<nothing>"


async def test_a_response_head_leaves_with_its_body_in_one_send() -> None:
    async with _socket_pair() as (transport, peer):
        wire = HeadWithBody(transport)
        wire.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        assert _pending(peer) == b"<nothing>"  # held for the body
        wire.write(b"ok")
        assert _pending(peer) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
        wire.write(b"more")  # later writes go straight out
        assert _pending(peer) == b"more"
        await asyncio.sleep(0)
        assert _pending(peer) == b"<nothing>"  # the end-of-turn flush sends nothing again


async def test_a_held_head_is_sent_at_the_end_of_its_turn_or_on_close() -> None:
    async with _socket_pair() as (transport, peer):
        wire = HeadWithBody(transport)
        wire.write(b"HTTP/1.1 200 OK\r\n\r\n")
        await asyncio.sleep(0)
        assert _pending(peer) == b"HTTP/1.1 200 OK\r\n\r\n"  # a streamed body comes later
    async with _socket_pair() as (transport, peer):
        wire = HeadWithBody(transport)
        wire.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        wire.close()
        await asyncio.sleep(0.05)
        assert peer.recv(65536) == b"HTTP/1.1 204 No Content\r\n\r\n"
        assert peer.recv(65536) == b""  # then the end


async def _slow_body(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await asyncio.sleep(0.5)
    await send({"type": "http.response.body", "body": b"late"})


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_a_served_head_is_not_held_for_a_body_that_comes_later(http: str) -> None:
    async with _serving(http, ConnectionLimits(), 4, _slow_body) as (port, server):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        started = time.monotonic()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200") and time.monotonic() - started < 0.4
        # the request's cycle (either parser's) writes through a HeadWithBody
        (connection,) = server.server_state.connections
        assert isinstance(connection.cycle.transport, HeadWithBody)  # type: ignore[attr-defined]
        assert b"late" in await asyncio.wait_for(reader.readuntil(b"late"), 5)
        writer.close()


async def _echo_length(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"got %d" % size})


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_a_100_continue_is_sent_before_the_body_is_read(http: str) -> None:
    """The interim `100 Continue` is a write of its own before the request's body: it
    leaves by its turn's end, the client sends the body, then the answer comes."""
    async with _served(http, ConnectionLimits(), 4, _echo_length) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim.startswith(b"HTTP/1.1 100")
        writer.write(b"hello")
        answer = await asyncio.wait_for(reader.readuntil(b"got 5"), 5)
        assert answer.startswith(b"HTTP/1.1 200")
        writer.close()


@pytest.mark.parametrize("http", ["httptools", "h11"])
async def test_a_head_request_gets_its_head_and_the_connection_goes_on(http: str) -> None:
    """A HEAD answer is a head alone (uvicorn writes no body): it leaves by its turn's
    end, and the next request on the connection is answered after it."""
    async with _served(http, ConnectionLimits(), 4) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200")
        writer.write(REQUEST)
        answer = await asyncio.wait_for(reader.readuntil(b"ok"), 5)
        assert answer.startswith(b"HTTP/1.1 200")  # nothing of the HEAD's before it
        writer.close()
