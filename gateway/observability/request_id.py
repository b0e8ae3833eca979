"""The request id: one per HTTP request or WebSocket, in log lines, masked errors and the
`X-Request-Id` response header.

The middleware does what asgi-correlation-id's `CorrelationIdMiddleware` does, set to our
rules: a client's `X-Request-Id` is kept when it is 1-128 chars of `[A-Za-z0-9._-]` (safe
to echo in a header and a log line), else a fresh id (32 hex digits, a version-4 UUID) is
used, written into the request's headers, and one WARNING line names it (logger
`asgi_correlation_id`, the library's message). The id lives in the library's contextvar:
`current_request_id()` reads it, `request_id_scope()` sets it for non-HTTP work,
`RequestIdFilter` stamps it on log records, so the middleware, the logs and the error
masking share one variable (and Sentry, when installed, gets the library's tag).

Not the library's class itself: it parses the request's headers and the response's into
Starlette `MutableHeaders` on every request and makes its id with `uuid.uuid4()`, which
cost about 20 us of CPU per request (`benchmarks/bench_middleware.py`) for a header
lookup and an append; this one scans the header list once and appends one pair.

Every response sent through the middleware carries the header, the 401/413/421/429
answers of the middlewares inside it included. An exception escaping the whole app is
answered by Starlette's outermost ServerErrorMiddleware, without it (the GraphQL endpoint
masks its own errors inside, so those carry it).

Added to the library: the contextvar is reset when the request ends (the library only sets
it, so a caller that runs the app in its own task, as httpx's ASGITransport does, would
keep the last request's id).

Imports Starlette (the library does): server code imports this module; what `--help`
loads (`gateway.observability.logging`) must not.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import Final

from asgi_correlation_id import correlation_id
from asgi_correlation_id.extensions.sentry import get_sentry_extension
from asgi_correlation_id.middleware import FAILED_VALIDATION_MESSAGE
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER: Final = "x-request-id"
_HEADER: Final = REQUEST_ID_HEADER.encode("latin-1")
_SANE_REQUEST_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,128}")
_library_logger = logging.getLogger("asgi_correlation_id")


def new_request_id() -> str:
    """A fresh request id: a random version-4 UUID as 32 lowercase hex digits (what
    `uuid.uuid4().hex` gives, without building a `UUID`, which is most of its cost)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


def current_request_id() -> str | None:
    """The id of the request being handled in this context, or None outside one."""
    return correlation_id.get()


def is_sane_request_id(value: str) -> bool:
    """Whether a client-supplied id may be reused: 1-128 chars of `[A-Za-z0-9._-]`."""
    return _SANE_REQUEST_ID.fullmatch(value) is not None


@contextlib.contextmanager
def request_id_scope(value: str | None = None) -> Iterator[str]:
    """Run a block under request id `value` (a new one when None); yields the id."""
    rid = value or new_request_id()
    token = correlation_id.set(rid)
    try:
        yield rid
    finally:
        correlation_id.reset(token)


class RequestIdFilter(logging.Filter):
    """Stamps the current request id on a record as `request_id`, and nothing outside a
    request (so a JSON line has no `request_id` then; a plain line shows `-`).

    Not the library's CorrelationIdFilter: that one always sets the attribute (None outside
    a request) and names it `correlation_id`."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = correlation_id.get()
        if rid is not None and "request_id" not in record.__dict__:
            record.request_id = rid
        return True


class RequestIdMiddleware:
    """The request id of every HTTP request and WebSocket (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._sentry = get_sentry_extension()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        rid = _request_id_of(scope)
        token = correlation_id.set(rid)
        try:
            self._sentry(rid)
            if scope["type"] == "websocket":
                # no response head to add it to, and a wrapper would be a call per frame
                await self.app(scope, receive, send)
                return

            async def send_with_id(message: Message) -> None:
                # the id as it is when the answer starts (the library's rule)
                if message["type"] == "http.response.start" and (now := correlation_id.get()):
                    message["headers"] = [
                        *message.get("headers", ()),
                        (_HEADER, now.encode("latin-1")),
                    ]
                await send(message)

            await self.app(scope, receive, send_with_id)
        finally:
            correlation_id.reset(token)


def _request_id_of(scope: Scope) -> str:
    """The client's id when it is sane, else a fresh one (written into the request's
    headers, as the library does, and named in a warning when the client's was refused)."""
    headers: list[tuple[bytes, bytes]] = scope.get("headers") or []
    sent = None
    for name, value in headers:
        if name == _HEADER:
            sent = value.decode("latin-1")
            break
    if sent and is_sane_request_id(sent):
        return sent
    rid = new_request_id()
    if sent:
        _library_logger.warning(FAILED_VALIDATION_MESSAGE, rid)
    # as the library's `MutableHeaders(scope)[name] = id`: on a copy of the list, the
    # first such header replaced and any other dropped, else the header appended
    pair = (_HEADER, rid.encode("latin-1"))
    if sent is None:  # none to replace (the usual case): one copy with it appended
        scope["headers"] = [*headers, pair]
        return rid
    kept: list[tuple[bytes, bytes]] = []
    placed = False
    for name, value in headers:
        if name != _HEADER:
            kept.append((name, value))
        elif not placed:
            kept.append(pair)
            placed = True
    if not placed:
        kept.append(pair)
    scope["headers"] = kept
    return rid


__all__ = [
    "REQUEST_ID_HEADER",
    "RequestIdFilter",
    "RequestIdMiddleware",
    "current_request_id",
    "is_sane_request_id",
    "new_request_id",
    "request_id_scope",
]
