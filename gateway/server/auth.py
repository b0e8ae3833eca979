"""Bearer-token authentication for `/graphql` and `/metrics` (SPEC §10).

`AuthMiddleware` runs for HTTP requests when `create_app(authenticate=...)` is
given. It resolves `Authorization: Bearer SECRET` through that callable (for
`serve --auth tokens`: `token_authenticator` over the database's tokens) and
attaches the `Principal` to the request (`gateway.server.principal`), which the
context turns into the caller's scoped corpus. Missing, unknown, expired or
revoked credentials are 401 with `WWW-Authenticate: Bearer` and the GraphQL
error code `UNAUTHENTICATED`; `/metrics` also needs an `all` grant (403
`FORBIDDEN` otherwise).

Open without a token: `/healthz`, `/readyz`, static files, the GraphiQL page
itself (a browser GET that asks for HTML and carries no operation: the page
holds no data, and it is where a person types the token), and CORS preflights
(answered by the CORS middleware outside this one). WebSocket connections pass
through: the subscription transport authenticates `connection_init`.

Written by hand because the check is one header, one database read and one
attachment; Starlette's `AuthenticationMiddleware` would add a user/scopes
model the rest of the gateway does not use, and its error responses are plain
text, not GraphQL errors.
"""

from __future__ import annotations

import logging

from starlette.datastructures import Headers, QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.persistence.tokens import TokenRefused, TokenStore

from .codes import GatewayCode
from .errors import new_correlation_id, send_error, simple_error
from .principal import Authenticate, Principal, Unauthenticated, attach_principal

logger = logging.getLogger("gateway.server.auth")

UNAUTHENTICATED = GatewayCode.UNAUTHENTICATED
FORBIDDEN = GatewayCode.FORBIDDEN
AUTH_UNAVAILABLE = GatewayCode.AUTH_UNAVAILABLE
PROTECTED_PREFIXES = ("/graphql", "/metrics", "/ui")


def token_authenticator(tokens: TokenStore) -> Authenticate:
    """`Authenticate` over the database's access tokens (read afresh on every call)."""

    async def authenticate(authorization: str | None) -> Principal:
        if not authorization or not authorization.strip():
            raise Unauthenticated("this gateway needs an `Authorization: Bearer <token>` header")
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated("use `Authorization: Bearer <token>`")
        try:
            info = await tokens.authenticate(value.strip())
        except TokenRefused as refused:
            raise Unauthenticated(refused.reason) from None
        return Principal(info.name, info.grants, info.trusted_documents_only)

    return authenticate


def _is_protected(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PROTECTED_PREFIXES)


def _is_page_request(scope: Scope) -> bool:
    """A browser asking for the GraphiQL page (no operation in it)."""
    if scope.get("method") != "GET" or scope.get("path") not in ("/graphql", "/ui"):
        return False
    accept = Headers(scope=scope).get("accept", "")
    params = QueryParams(scope.get("query_string", b""))
    return "text/html" in accept and "query" not in params and "documentId" not in params


class AuthMiddleware:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, authenticate: Authenticate) -> None:
        self.app = app
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") == "OPTIONS"
            or not _is_protected(scope.get("path", ""))
            or _is_page_request(scope)
        ):
            await self.app(scope, receive, send)
            return
        authorization = Headers(scope=scope).get("authorization")
        try:
            principal = await self.authenticate(authorization)
        except Unauthenticated as exc:
            challenge = 'Bearer realm="session-gateway"'
            if authorization:
                challenge += ', error="invalid_token"'
            await send_error(
                scope, send, 401, simple_error(UNAUTHENTICATED, str(exc)),
                {"WWW-Authenticate": challenge},
            )  # fmt: skip
            return
        except Exception:
            correlation = new_correlation_id()
            logger.exception("token check failed (correlation id %s)", correlation)
            message = f"cannot check the token right now (correlation id {correlation})"
            await send_error(
                scope, send, 503, simple_error(AUTH_UNAVAILABLE, message), {"Retry-After": "1"}
            )
            return
        if scope.get("path") == "/metrics" and not principal.sees_all:
            message = "/metrics needs a token with the `all` grant"
            await send_error(scope, send, 403, simple_error(FORBIDDEN, message))
            return
        attach_principal(scope, principal)
        await self.app(scope, receive, send)


__all__ = ["AuthMiddleware", "token_authenticator"]
