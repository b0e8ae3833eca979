"""GraphQL over Server-Sent Events, "distinct connections" mode, on `/graphql`.

A GET or POST to `/graphql` whose `Accept` lists `text/event-stream` gets one
operation's results as an event stream (the graphql-sse protocol's distinct
connections mode): `event: next` with `data: {"data": ..., "errors"?: ...}`
per result, then `event: complete`. A document that does not parse or
validate is answered before the stream starts, like any other request error
of the HTTP view (a JSON body, status 400). Subscriptions are allowed over
GET here (unlike the JSON answers), since a browser's `EventSource` can only GET.

The principal is attached by the HTTP auth middleware; the context is made by
the same `make_context` as every HTTP request. A comment line is sent every
`keepalive` seconds so idle proxies keep the stream open. A client that goes
away ends the stream (Starlette cancels it on `http.disconnect`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import strawberry
from graphql import GraphQLError, parse, validate
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.core.tail import DEFAULT_TAIL_BUFFER
from gateway.observability.metrics import GatewayMetrics

from .context import Context
from .errors import format_error
from .subscriptions import StreamRoot, run_stream

EVENT_STREAM = "text/event-stream"
DEFAULT_KEEPALIVE = 15.0


def wants_event_stream(accept: str | None) -> bool:
    """Whether `Accept` lists text/event-stream (at a q above 0)."""
    for part in (accept or "").split(","):
        media, *params = (p.strip().lower() for p in part.split(";"))
        if media == EVENT_STREAM and "q=0" not in params:
            return True
    return False


def _frame(event: str, payload: Any) -> bytes:
    data = "" if payload is None else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event}\ndata: {data}\n\n".encode()


class EventStream:
    """Runs one operation for an SSE request (hooked into `GraphQLHTTP`)."""

    def __init__(
        self,
        schema: strawberry.Schema,
        make_context: Callable[[Request], Context],
        *,
        metrics: GatewayMetrics | None = None,
        buffer_size: int = DEFAULT_TAIL_BUFFER,
        keepalive: float = DEFAULT_KEEPALIVE,
    ) -> None:
        self.schema = schema
        self.make_context = make_context
        self.metrics = metrics
        self.buffer_size = buffer_size
        self.keepalive = keepalive

    async def respond(
        self,
        request: Request,
        query: str,
        operation_name: str | None,
        variables: dict[str, Any] | None,
        extensions: dict[str, Any] | None,
        on_request_error: Callable[[list[dict[str, Any]]], Response],
    ) -> Response:
        def renew() -> Context:
            return self.make_context(request)

        document_errors = self._check_document(query)
        if document_errors:
            return on_request_error(document_errors)
        root = StreamRoot(renew, self.buffer_size, self.metrics)
        frames = run_stream(
            self.schema, renew(), root, query, variables, operation_name, extensions
        )
        return StreamingResponse(
            self._body(frames),
            media_type=EVENT_STREAM,
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    def _check_document(self, query: str) -> list[dict[str, Any]]:
        """Parse and validation errors, answered before the stream starts (HTTP 400)."""
        try:
            document = parse(query)
        except GraphQLError as exc:
            return [format_error(exc)]
        return [format_error(e) for e in validate(self.schema._schema, document)]

    async def _body(self, frames: AsyncIterator[tuple[str, Any]]) -> AsyncIterator[bytes]:
        yield b":\n\n"  # headers out now, before the first event
        async with contextlib.aclosing(frames):  # type: ignore[type-var]
            pending: asyncio.Future[tuple[str, Any]] | None = None
            try:
                while True:
                    if pending is None:
                        pending = asyncio.ensure_future(anext(frames))
                    done, _ = await asyncio.wait({pending}, timeout=self.keepalive)
                    if not done:
                        yield b":\n\n"
                        continue
                    finished, pending = pending, None
                    try:
                        kind, payload = finished.result()
                    except StopAsyncIteration:
                        break
                    if kind == "error":  # refused by a limit after the stream started
                        payload = {"errors": payload}
                    yield _frame("next", payload)
            finally:
                if pending is not None:
                    pending.cancel()
                    with contextlib.suppress(BaseException):
                        await pending
        yield _frame("complete", None)


__all__ = ["DEFAULT_KEEPALIVE", "EVENT_STREAM", "EventStream", "wants_event_stream"]
