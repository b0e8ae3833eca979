"""A stand-in for the gateway's auth middleware, for tests of what runs behind it.

Token auth (`serve --auth tokens`) is built in parallel; until it is on this
branch, the tests of CORS, trusted documents and rate limits put this in its
place: it calls the app's own `authenticate` (from `create_app(authenticate=...)`)
and attaches the principal with `attach_principal`, exactly where the real
middleware goes (inside CORS, outside the rate limit).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.server.principal import Authenticate, Unauthenticated, attach_principal
from gateway.server.ratelimit import RateLimit

PROTECTED = ("/graphql", "/metrics")


class StandInAuth:
    def __init__(self, app: ASGIApp, authenticate: Authenticate) -> None:
        self.app = app
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        open_request = (
            scope["path"] not in PROTECTED
            or scope["method"] == "OPTIONS"
            or (scope["method"] == "GET" and "text/html" in headers.get("accept", ""))
        )
        if open_request:
            await self.app(scope, receive, send)
            return
        try:
            principal = await self.authenticate(headers.get("authorization"))
        except Unauthenticated as exc:
            body = json.dumps(
                {"errors": [{"message": str(exc), "extensions": {"code": "UNAUTHENTICATED"}}]}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b"Bearer"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        attach_principal(scope, principal)
        await self.app(scope, receive, send)


def with_stand_in_auth(app: Any) -> Any:
    """`app` with `StandInAuth` (on `app.state.authenticate`) just outside its rate limit."""
    stack = app.user_middleware
    at = next((i for i, m in enumerate(stack) if m.cls is RateLimit), len(stack))
    stack.insert(at, Middleware(StandInAuth, authenticate=app.state.authenticate))
    return app


def fixed_tokens(tokens: dict[str, Any]) -> Authenticate:
    """An `authenticate` accepting `Bearer SECRET` for each SECRET -> Principal in `tokens`."""

    async def authenticate(header: str | None) -> Any:
        scheme, _, secret = (header or "").partition(" ")
        if scheme.lower() != "bearer" or secret.strip() not in tokens:
            raise Unauthenticated("a valid bearer token is required")
        return tokens[secret.strip()]

    return authenticate
