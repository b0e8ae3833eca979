"""`graphql-transport-ws` on `/graphql` (the protocol of the `graphql-ws` npm library).

Written here rather than taken from Strawberry: Strawberry's handler lives
inside its own views (`strawberry.asgi.GraphQL`), builds contexts with its own
`get_context`, and has no per-connection subscription limit, no origin check
and no auth seam on `connection_init`; our HTTP side is our own view
(`gateway.server.http`), and the protocol is small. Execution itself is
Strawberry's (`schema.stream`, through `gateway.server.subscriptions.run_stream`).

Rules (close codes from the protocol):

* the client must offer the `graphql-transport-ws` subprotocol (the legacy
  `graphql-ws` protocol is refused at the handshake, HTTP 403);
* the `Origin` header, when present, must be the request's own origin (host:port
  equal to `Host`) or one of `app.state.cors_origins`; else the handshake is
  refused (HTTP 403);
* `connection_init` within `init_timeout` (default 10 s), else 4408; a second
  one is 4429; with auth on (`app.state.authenticate`), the `authorization`
  field of its payload, else the request's `Authorization` header, must
  authenticate, else 4403 "Forbidden"; the principal is attached to the
  connection's scope, and every operation's context is made from it by the
  app's `make_context`;
* `subscribe` before `connection_ack` is 4401; an id already running is 4409;
  a malformed message is 4400; at most `max_subscriptions` operations run at
  once per connection (the next gets an `error` message, TOO_MANY_SUBSCRIPTIONS);
* `ping` gets `pong`; `complete` from the client stops that operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

import strawberry
from starlette.requests import HTTPConnection
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from gateway.core.tail import DEFAULT_TAIL_BUFFER
from gateway.observability.metrics import GatewayMetrics

from .context import Context
from .errors import masked_error, simple_error
from .principal import Unauthenticated, attach_principal
from .subscriptions import TOO_MANY_SUBSCRIPTIONS, StreamRoot, run_stream

logger = logging.getLogger("gateway.server")

PROTOCOL = "graphql-transport-ws"
DEFAULT_INIT_TIMEOUT = 10.0
DEFAULT_MAX_SUBSCRIPTIONS = 10


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _Gone(Exception):
    """The connection can no longer be written to."""


def origin_allowed(origin: str | None, host: str | None, allowed: tuple[str, ...]) -> bool:
    """Same origin (Origin absent, or its host:port equal to Host), or a listed origin."""
    if origin is None:
        return True
    if origin.rstrip("/") in {a.rstrip("/") for a in allowed}:
        return True
    parts = urlsplit(origin)
    if not parts.hostname or host is None:
        return False
    default = {"http": 80, "https": 443}.get(parts.scheme)
    port = parts.port or default
    h = urlsplit(f"//{host}")
    host_port = h.port or default
    return (parts.hostname.lower(), port) == ((h.hostname or "").lower(), host_port)


class GraphQLWebSocket:
    """The `/graphql` WebSocket endpoint (see the module docstring)."""

    def __init__(
        self,
        schema: strawberry.Schema,
        make_context: Callable[[HTTPConnection], Context],
        *,
        metrics: GatewayMetrics | None = None,
        buffer_size: int = DEFAULT_TAIL_BUFFER,
        init_timeout: float = DEFAULT_INIT_TIMEOUT,
        max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS,
    ) -> None:
        self.schema = schema
        self.make_context = make_context
        self.metrics = metrics
        self.buffer_size = buffer_size
        self.init_timeout = init_timeout
        self.max_subscriptions = max_subscriptions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)
        offered = scope.get("subprotocols") or ()
        state = getattr(websocket.app, "state", None)
        allowed = tuple(getattr(state, "cors_origins", ()) or ())
        if PROTOCOL not in offered:
            await websocket.close(code=4406, reason="Subprotocol not acceptable")
            return
        headers = websocket.headers
        if not origin_allowed(headers.get("origin"), headers.get("host"), allowed):
            await websocket.close(code=4403, reason="Origin not allowed")
            return
        await websocket.accept(subprotocol=PROTOCOL)
        connection = _Connection(self, websocket, getattr(state, "authenticate", None))
        await connection.run()


class _Connection:
    """One accepted WebSocket: its handshake state and running operations."""

    def __init__(self, endpoint: GraphQLWebSocket, websocket: WebSocket, authenticate: Any) -> None:
        self.endpoint = endpoint
        self.websocket = websocket
        self.authenticate = authenticate
        self.acknowledged = False
        self.init_received = False
        self.operations: dict[str, asyncio.Task[None]] = {}
        self.send_lock = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
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
                    await self.handle(text)
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
        if self.init_received:
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
            raise _Close(4400, "Invalid message received: not a text frame")
        return text

    async def close(self, code: int, reason: str) -> None:
        if self.websocket.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                async with self.send_lock:
                    await self.websocket.close(code=code, reason=reason)

    async def handle(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            raise _Close(4400, "Invalid message received: not JSON") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise _Close(4400, "Invalid message received: no type")
        kind = message["type"]
        if kind == "connection_init":
            await self.on_init(message.get("payload"))
        elif kind == "ping":
            await self.send({"type": "pong"})
        elif kind == "pong":
            return
        elif kind == "subscribe":
            await self.on_subscribe(message)
        elif kind == "complete":
            op_id = message.get("id")
            if not isinstance(op_id, str):
                raise _Close(4400, "Invalid message received: complete without an id")
            task = self.operations.pop(op_id, None)
            if task is not None:
                task.cancel()
        else:
            raise _Close(4400, f"Invalid message received: unknown type {kind!r}")

    async def on_init(self, payload: Any) -> None:
        if self.init_received:
            raise _Close(4429, "Too many initialisation requests")
        self.init_received = True
        if payload is not None and not isinstance(payload, dict):
            raise _Close(4400, "Invalid message received: connection_init payload")
        if self.authenticate is not None:
            given = (payload or {}).get("authorization")
            credentials = given if isinstance(given, str) else None
            if credentials is None:
                credentials = self.websocket.headers.get("authorization")
            try:
                principal = await self.authenticate(credentials)
            except Unauthenticated:
                raise _Close(4403, "Forbidden") from None
            except Exception as exc:  # the token store failed: not the client's fault
                masked_error(exc, "authenticating a WebSocket")
                raise _Close(1011, "Internal error") from None
            attach_principal(cast(dict[str, Any], self.websocket.scope), principal)
        self.acknowledged = True
        await self.send({"type": "connection_ack"})

    async def on_subscribe(self, message: dict[str, Any]) -> None:
        if not self.acknowledged:
            raise _Close(4401, "Unauthorized")
        op_id = message.get("id")
        payload = message.get("payload")
        if not isinstance(op_id, str) or not op_id or not isinstance(payload, dict):
            raise _Close(4400, "Invalid message received: subscribe needs an id and a payload")
        query = payload.get("query")
        variables = payload.get("variables")
        operation_name = payload.get("operationName")
        extensions = payload.get("extensions")
        if (
            not isinstance(query, str)
            or (variables is not None and not isinstance(variables, dict))
            or (operation_name is not None and not isinstance(operation_name, str))
            or (extensions is not None and not isinstance(extensions, dict))
        ):
            raise _Close(4400, "Invalid message received: malformed subscribe payload")
        if op_id in self.operations:
            raise _Close(4409, f"Subscriber for {op_id} already exists")
        if len(self.operations) >= self.endpoint.max_subscriptions:
            limit = self.endpoint.max_subscriptions
            error = simple_error(
                TOO_MANY_SUBSCRIPTIONS,
                f"at most {limit} subscriptions may run at once on one connection",
            )
            await self.send({"type": "error", "id": op_id, "payload": [error]})
            return
        self.operations[op_id] = asyncio.create_task(
            self.run_operation(op_id, query, variables, operation_name, extensions),
            name=f"graphql-ws-{op_id}",
        )

    async def run_operation(
        self,
        op_id: str,
        query: str,
        variables: dict[str, Any] | None,
        operation_name: str | None,
        extensions: dict[str, Any] | None,
    ) -> None:
        endpoint = self.endpoint
        websocket = self.websocket

        def renew() -> Context:
            return endpoint.make_context(websocket)

        completed_by_error = False
        try:
            root = StreamRoot(renew, endpoint.buffer_size, endpoint.metrics)
            frames = run_stream(
                endpoint.schema, renew(), root, query, variables, operation_name, extensions
            )
            async with contextlib.aclosing(frames):  # type: ignore[type-var]
                async for kind, payload in frames:
                    if kind == "error":
                        completed_by_error = True
                        await self.send({"type": "error", "id": op_id, "payload": payload})
                        return
                    await self.send({"type": "next", "id": op_id, "payload": payload})
        except asyncio.CancelledError:
            raise
        except _Gone:
            return  # the client went away mid-send
        except Exception as exc:  # a bug: never a traceback to the client
            error = masked_error(exc, "streaming an operation")
            await self._send_quietly({"type": "next", "id": op_id, "payload": {"errors": [error]}})
        finally:
            if self.operations.get(op_id) is asyncio.current_task():
                del self.operations[op_id]
                if not completed_by_error:
                    await self._send_quietly({"type": "complete", "id": op_id})

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            await self.send(message)


__all__ = [
    "DEFAULT_INIT_TIMEOUT",
    "DEFAULT_MAX_SUBSCRIPTIONS",
    "PROTOCOL",
    "GraphQLWebSocket",
    "origin_allowed",
]
