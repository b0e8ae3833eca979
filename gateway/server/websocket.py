"""`graphql-transport-ws` on `/graphql` (the protocol of the `graphql-ws` npm library): framing.

Written here rather than taken from Strawberry: Strawberry's handler lives
inside its own views (`strawberry.asgi.GraphQL`) and runs operations its own
way, while every operation here must go through the gateway's one pipeline
(`gateway.server.pipeline`), which applies the rules — credentials afresh for
each operation, rate limits, trusted documents, document limits — the same
for every transport. What is left here is the protocol:

* the client must offer the `graphql-transport-ws` subprotocol (else 4406);
* the `Origin` header, when present, must be the request's own origin or an
  allowed CORS origin (`gateway.server.cors.origin_allowed`), else 4403;
* `connection_init` within `init_timeout` (default 10 s), else 4408; a second
  one is 4429. With auth on, the `authorization` field of its payload, else
  the handshake's `Authorization` header, are the connection's credentials:
  they must authenticate (else 4403 "Forbidden"; past the address's
  failed-auth limit 4429; a token store that fails 1011), and are checked
  again for every `subscribe` and, while a subscription runs, every
  `reauth_interval` seconds (a revoked token's operations get an `error`
  UNAUTHENTICATED);
* `subscribe` carries `query` or `documentId`, as a POST body does; before
  `connection_ack` it is 4401; an id already running is 4409; a malformed
  message is 4400; at most `max_subscriptions` operations run at once per
  connection (the next gets an `error`, TOO_MANY_SUBSCRIPTIONS); an operation
  the pipeline refuses gets an `error` message with the refusal's errors, and
  the socket stays open;
* `ping` gets `pong`; `complete` from the client stops that operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Literal, NotRequired, TypedDict

from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from .access import caller_of
from .cors import origin_allowed
from .errors import masked_error, simple_error
from .operation import (
    Caller,
    ErrorJSON,
    MalformedRequest,
    OperationRequest,
    Refused,
    Transport,
    operation_request,
)
from .pipeline import OperationPipeline
from .subscriptions import TOO_MANY_SUBSCRIPTIONS

logger = logging.getLogger("gateway.server")

PROTOCOL = "graphql-transport-ws"


# -- the protocol's messages (server to client) -------------------------------------------


class ConnectionAck(TypedDict):
    type: Literal["connection_ack"]


class Pong(TypedDict):
    type: Literal["pong"]


class Next(TypedDict):
    type: Literal["next"]
    id: str
    payload: dict[str, Any]


class Error(TypedDict):
    type: Literal["error"]
    id: str
    payload: list[ErrorJSON]


class Complete(TypedDict):
    type: Literal["complete"]
    id: str


ServerMessage = ConnectionAck | Pong | Next | Error | Complete


# -- ... and client to server ---------------------------------------------------------------


class ConnectionInit(TypedDict):
    type: Literal["connection_init"]
    payload: NotRequired[dict[str, Any] | None]


class Subscribe(TypedDict):
    type: Literal["subscribe"]
    id: str
    payload: dict[str, Any]


class CompleteFromClient(TypedDict):
    type: Literal["complete"]
    id: str


class Ping(TypedDict):
    type: Literal["ping"]


ClientMessage = ConnectionInit | Subscribe | CompleteFromClient | Ping | Pong


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Gone(Exception):
    """The connection can no longer be written to."""


def _invalid(why: str) -> _Close:
    return _Close(4400, f"Invalid message received: {why}")


def read_message(text: str) -> ClientMessage:
    """The client message in `text`, checked against the protocol's shapes (else 4400)."""
    try:
        message = json.loads(text)
    except ValueError:
        raise _invalid("not JSON") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise _invalid("no type")
    kind = message["type"]
    if kind == "connection_init":
        payload = message.get("payload")
        if payload is not None and not isinstance(payload, dict):
            raise _invalid("connection_init payload")
        return ConnectionInit(type="connection_init", payload=payload)
    if kind == "subscribe":
        op_id, payload = message.get("id"), message.get("payload")
        if not isinstance(op_id, str) or not op_id or not isinstance(payload, dict):
            raise _invalid("subscribe needs an id and a payload")
        return Subscribe(type="subscribe", id=op_id, payload=payload)
    if kind == "complete":
        op_id = message.get("id")
        if not isinstance(op_id, str):
            raise _invalid("complete without an id")
        return CompleteFromClient(type="complete", id=op_id)
    if kind == "ping":
        return Ping(type="ping")
    if kind == "pong":
        return Pong(type="pong")
    raise _invalid(f"unknown type {kind!r}")


class GraphQLWebSocket:
    """The `/graphql` WebSocket endpoint (see the module docstring)."""

    def __init__(self, pipeline: OperationPipeline) -> None:
        self.pipeline = pipeline
        config = pipeline.config
        self.init_timeout = config.connection_init_timeout
        self.max_subscriptions = config.max_subscriptions_per_connection
        self.origins = config.cors_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)
        if PROTOCOL not in (scope.get("subprotocols") or ()):
            await websocket.close(code=4406, reason="Subprotocol not acceptable")
            return
        headers = websocket.headers
        if not origin_allowed(headers.get("origin"), headers.get("host"), self.origins):
            await websocket.close(code=4403, reason="Origin not allowed")
            return
        await websocket.accept(subprotocol=PROTOCOL)
        await _Connection(self, websocket).run()


class _Connection:
    """One accepted WebSocket: its handshake state, credentials and running operations."""

    def __init__(self, endpoint: GraphQLWebSocket, websocket: WebSocket) -> None:
        self.endpoint = endpoint
        self.pipeline = endpoint.pipeline
        self.websocket = websocket
        self.caller: Caller | None = None  # set by connection_init
        self.operations: dict[str, asyncio.Task[None]] = {}
        self.send_lock = asyncio.Lock()

    async def send(self, message: ServerMessage) -> None:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        await self.send_text(text)

    async def send_next(self, op_id: str, body: bytes) -> None:
        """A `next` message around a payload the pipeline already wrote as JSON."""
        head = json.dumps({"type": "next", "id": op_id}, separators=(",", ":"))[:-1]
        await self.send_text(f'{head},"payload":{body.decode("utf-8")}}}')

    async def send_text(self, text: str) -> None:
        async with self.send_lock:
            try:
                await self.websocket.send_text(text)
            except Exception as exc:  # closing or closed, whatever the server says
                raise _Gone from exc

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.endpoint.init_timeout
        try:
            while True:
                try:
                    text = await self.receive(deadline - loop.time())
                    await self.handle(read_message(text))
                except _Close as close:
                    await self.close(close.code, close.reason)
                    return
                except (WebSocketDisconnect, _Gone, RuntimeError):
                    return  # gone
        finally:
            tasks = list(self.operations.values())
            self.operations.clear()  # gone: no `complete` to send
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def receive(self, until_init: float) -> str:
        """The next text message; before `connection_init`, only until its deadline."""
        if self.caller is not None:
            message = await self.websocket.receive()
        else:
            try:
                message = await asyncio.wait_for(self.websocket.receive(), max(until_init, 0))
            except TimeoutError:
                raise _Close(4408, "Connection initialisation timeout") from None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        text = message.get("text")
        if not isinstance(text, str):
            raise _invalid("not a text frame")
        return text

    async def close(self, code: int, reason: str) -> None:
        if self.websocket.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                async with self.send_lock:
                    await self.websocket.close(code=code, reason=reason)

    async def handle(self, message: ClientMessage) -> None:
        if message["type"] == "connection_init":
            await self.on_init(message)
        elif message["type"] == "ping":
            await self.send(Pong(type="pong"))
        elif message["type"] == "subscribe":
            await self.on_subscribe(message)
        elif message["type"] == "complete":
            task = self.operations.pop(message["id"], None)
            if task is not None:
                task.cancel()

    async def on_init(self, message: ConnectionInit) -> None:
        if self.caller is not None:
            raise _Close(4429, "Too many initialisation requests")
        handshake = caller_of(self.websocket.scope)
        given = (message.get("payload") or {}).get("authorization")
        caller = Caller(
            given if isinstance(given, str) else handshake.authorization, handshake.address
        )
        if self.pipeline.access.checks_credentials:
            try:
                await self.pipeline.access.authenticate(caller)
            except Refused as refused:
                self.pipeline.count(refused.errors)
                if refused.status == 429:
                    raise _Close(4429, "Too many failed authentications") from None
                if refused.status == 401:
                    raise _Close(4403, "Forbidden") from None
                raise _Close(1011, "Internal error") from None
        self.caller = caller
        await self.send(ConnectionAck(type="connection_ack"))

    async def on_subscribe(self, message: Subscribe) -> None:
        if self.caller is None:
            raise _Close(4401, "Unauthorized")
        op_id = message["id"]
        try:
            operation = operation_request(message["payload"], Transport.WEBSOCKET, self.caller)
        except MalformedRequest as exc:
            raise _invalid(f"malformed subscribe payload: {exc}") from None
        if op_id in self.operations:
            raise _Close(4409, f"Subscriber for {op_id} already exists")
        if len(self.operations) >= self.endpoint.max_subscriptions:
            limit = self.endpoint.max_subscriptions
            error = simple_error(
                TOO_MANY_SUBSCRIPTIONS,
                f"at most {limit} subscriptions may run at once on one connection",
            )
            self.pipeline.count([error])
            await self.send(Error(type="error", id=op_id, payload=[error]))
            return
        self.operations[op_id] = asyncio.create_task(
            self.run_operation(op_id, operation), name=f"graphql-ws-{op_id}"
        )

    async def run_operation(self, op_id: str, operation: OperationRequest) -> None:
        ended_by_error = False
        try:
            try:
                admitted = await self.pipeline.admit(operation)
            except Refused as refused:
                ended_by_error = True
                await self.send(Error(type="error", id=op_id, payload=refused.errors))
                return
            frames = self.pipeline.stream(admitted)
            async with contextlib.aclosing(frames):  # type: ignore[type-var]
                async for frame in frames:
                    if frame.kind == "error":
                        ended_by_error = True
                        await self.send(Error(type="error", id=op_id, payload=frame.errors))
                        return
                    if frame.body is not None:
                        await self.send_next(op_id, frame.body)
                    else:
                        await self.send(Next(type="next", id=op_id, payload=frame.payload))
        except asyncio.CancelledError:
            raise
        except _Gone:
            return  # the client went away mid-send
        except Exception as exc:  # a bug: never a traceback to the client
            error = masked_error(exc, "streaming an operation")
            await self._send_quietly(Next(type="next", id=op_id, payload={"errors": [error]}))
        finally:
            if self.operations.get(op_id) is asyncio.current_task():
                del self.operations[op_id]
                if not ended_by_error:
                    await self._send_quietly(Complete(type="complete", id=op_id))

    async def _send_quietly(self, message: ServerMessage) -> None:
        with contextlib.suppress(Exception):
            await self.send(message)


__all__ = ["PROTOCOL", "GraphQLWebSocket", "read_message"]
