"""`InFlightLimit`: at most N HTTP requests worked on at once; past it a 503 at once.

A request past the limit is answered `503 SERVER_BUSY` with `Retry-After` and the
gateway's usual error body (`gateway.server.errors.send_error`) before anything of it
is read, so an overload costs a refusal, not a queue that grows with memory held by
every waiting answer. Not uvicorn's `limit_concurrency`: that one answers plain text,
counts idle connections as well as requests, and refuses `/healthz` too.

`/healthz` is never counted nor refused (a load balancer must see the process is up
while it is busy). A response that starts a `text/event-stream` gives its slot back
when it starts: a subscription stream is bounded by the subscription limits, and
holding a slot for its whole life would let a few subscribers refuse every query.
WebSockets are not HTTP requests here (their connection is counted by the connection
cap, their subscriptions by the subscription limits).
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .codes import GatewayCode
from .errors import send_error, simple_error

RETRY_AFTER_SECONDS = 1
EXEMPT_PATHS = ("/healthz",)
_EVENT_STREAM = b"text/event-stream"


class InFlightLimit:
    """ASGI middleware: refuse HTTP requests past `max_in_flight` being worked on."""

    def __init__(
        self, app: ASGIApp, max_in_flight: int, exempt: Collection[str] = EXEMPT_PATHS
    ) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.exempt = frozenset(exempt)
        self.in_flight = 0
        """Requests admitted and not yet answered (this app's, in this process)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.exempt:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            await self._refuse(scope, send)
            return
        self.in_flight += 1  # no await between the check and this: one loop, no race
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.in_flight -= 1

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start" and _is_event_stream(message):
                release()
            await send(message)

        try:
            await self.app(scope, receive, watching_send)
        finally:
            release()

    async def _refuse(self, scope: Scope, send: Send) -> None:
        message = (
            f"the server is working on {self.max_in_flight} requests already, its limit; "
            f"retry after {RETRY_AFTER_SECONDS} s"
        )
        await send_error(
            scope,
            send,
            503,
            simple_error(GatewayCode.SERVER_BUSY, message),
            {"Retry-After": str(RETRY_AFTER_SECONDS)},
        )


def _is_event_stream(message: Message) -> bool:
    for name, value in message.get("headers", ()):
        if name.lower() == b"content-type":
            return bool(value.lower().startswith(_EVENT_STREAM))
    return False


__all__ = ["EXEMPT_PATHS", "RETRY_AFTER_SECONDS", "InFlightLimit"]
