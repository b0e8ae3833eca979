"""The request-id middleware's own rules, next to the library behaviour it replaces
(asgi-correlation-id's `CorrelationIdMiddleware`): the id's format, the request's headers
as the app sees them, the response header."""

from __future__ import annotations

import asyncio
import uuid

from asgi_correlation_id import CorrelationIdMiddleware

from gateway.observability import request_id
from gateway.observability.request_id import (
    RequestIdMiddleware,
    current_request_id,
    is_sane_request_id,
    new_request_id,
)


def test_new_request_id_is_a_version_4_uuid_in_32_hex_digits():
    ids = {new_request_id() for _ in range(200)}
    assert len(ids) == 200
    for rid in ids:
        assert len(rid) == 32 and rid == rid.lower()
        parsed = uuid.UUID(hex=rid)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)


async def _exchange(middleware_class, headers, **kwargs):
    seen = {}

    async def app(scope, receive, send):
        seen["headers"] = list(scope["headers"])
        seen["rid"] = current_request_id()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"a", b"1")]})
        await send({"type": "http.response.body", "body": b""})

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/", "headers": list(headers)}
    await middleware_class(app, **kwargs)(scope, None, send)
    return seen, sent[0]["headers"]


FIXED = "0123456789abcdef0123456789abcdef"


def _library(app):
    return CorrelationIdMiddleware(
        app, header_name="X-Request-Id", generator=lambda: FIXED, validator=is_sane_request_id
    )


async def test_request_id_rule_rewrites_request_headers_as_the_library_does(monkeypatch):
    monkeypatch.setattr(request_id, "new_request_id", lambda: FIXED)
    cases = [
        [(b"host", b"h")],  # none: appended
        [(b"host", b"h"), (b"x-request-id", b"good-1")],  # kept as it is
        # refused: the first replaced in place, the others dropped
        [(b"x-request-id", b"bad id"), (b"host", b"h"), (b"x-request-id", b"x y")],
        [(b"x-request-id", b""), (b"host", b"h")],  # empty: replaced
    ]
    for headers in cases:
        ours = await _exchange(RequestIdMiddleware, headers)
        assert current_request_id() is None  # ours resets it; the library (own task) not
        theirs = await asyncio.create_task(_exchange(_library, headers))
        assert ours == theirs
        seen, response_headers = ours
        assert response_headers == [(b"a", b"1"), (b"x-request-id", seen["rid"].encode())]
    assert [h for h in ours[0]["headers"] if h[0] == b"x-request-id"] == [
        (b"x-request-id", FIXED.encode())
    ]
