"""The request id: one per HTTP request or WebSocket, in log lines, masked errors and the
`X-Request-Id` response header.

The middleware is asgi-correlation-id's (pure ASGI), set to our rules: a client's
`X-Request-Id` is kept when it is 1-128 chars of `[A-Za-z0-9._-]` (safe to echo in a
header and a log line), else a fresh id (32 hex digits) is used, and the library logs one
WARNING line naming it (logger `asgi_correlation_id`). The id lives in the library's
contextvar: `current_request_id()` reads it, `request_id_scope()` sets it for non-HTTP
work, `RequestIdFilter` stamps it on log records, so the middleware, the logs and the
error masking share one variable.

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
import re
import uuid
from collections.abc import Iterator
from typing import Final

from asgi_correlation_id import CorrelationIdMiddleware, correlation_id
from starlette.types import ASGIApp, Receive, Scope, Send

REQUEST_ID_HEADER: Final = "x-request-id"
_SANE_REQUEST_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,128}")


def new_request_id() -> str:
    """A fresh request id (32 lowercase hex digits)."""
    return uuid.uuid4().hex


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


class RequestIdMiddleware(CorrelationIdMiddleware):
    """asgi-correlation-id's middleware with our header, id format and check (see above)."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(
            app,
            header_name="X-Request-Id",
            generator=new_request_id,
            validator=is_sane_request_id,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = correlation_id.set(None)
        try:
            await super().__call__(scope, receive, send)
        finally:
            correlation_id.reset(token)


__all__ = [
    "REQUEST_ID_HEADER",
    "RequestIdFilter",
    "RequestIdMiddleware",
    "current_request_id",
    "is_sane_request_id",
    "new_request_id",
    "request_id_scope",
]
