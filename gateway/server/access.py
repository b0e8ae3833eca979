"""Who may run an operation, checked afresh for every one: authentication and rate limits.

`Access` is the one place these caller rules live. The operation pipeline
(`gateway.server.pipeline`) asks it for every operation on every transport —
an HTTP request, an SSE stream, each graphql-transport-ws `subscribe` — and
the `/metrics` and `/ui` routes ask it through `AccessMiddleware`, so no
transport can skip one:

1. **Failed-auth limit** (auth and a rate both on): a client address that has
   used up the rate on failed authentications is refused (429) before its
   credentials are even read, so guessing tokens costs no token-store read.
2. **Authentication** (auth on): the credentials resolve to a `Principal`
   now — a token revoked or expired since the last operation is refused
   (401 UNAUTHENTICATED, counted against the address's failed-auth limit); a
   token store that fails is 503 AUTH_UNAVAILABLE.
3. **Rate limit** (a rate on): one request counted against the token, or the
   client address without one; past it, 429 RATE_LIMITED with `Retry-After`.

`recheck` repeats step 2 alone, for streams that outlive one check (a running
subscription, every `reauth_interval` seconds): a revocation holds from the
next operation and stops the streams already running.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from limits import RateLimitItem
from starlette.datastructures import QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from .codes import GatewayCode
from .errors import new_correlation_id, send_error, simple_error
from .headers import header
from .operation import Caller, Refused
from .principal import (
    Authenticate,
    AuthenticateWithin,
    Principal,
    Unauthenticated,
    attach_principal,
)
from .ratelimit import RateCounter, Spent, describe

logger = logging.getLogger("gateway.server.auth")

UNAUTHENTICATED = GatewayCode.UNAUTHENTICATED
FORBIDDEN = GatewayCode.FORBIDDEN
AUTH_UNAVAILABLE = GatewayCode.AUTH_UNAVAILABLE
RATE_LIMITED = GatewayCode.RATE_LIMITED
CHALLENGE = 'Bearer realm="session-gateway"'


def caller_of(scope: Scope) -> Caller:
    """The caller of an HTTP request or a WebSocket handshake: its `Authorization`
    header and its client address."""
    client = scope.get("client")
    address = client[0] if client else "unknown"
    return Caller(header(scope, b"authorization"), address)


def _rate_limited(allowance: str, spent: Spent) -> Refused:
    seconds = spent.retry_after
    error = simple_error(RATE_LIMITED, f"rate limit exceeded: {allowance}; retry after {seconds} s")
    error["extensions"]["retryAfter"] = seconds
    return Refused(429, [error], headers={"Retry-After": str(seconds)})


class Access:
    """The caller rules of every operation (see the module docstring)."""

    def __init__(self, authenticate: Authenticate | None, rate: Sequence[RateLimitItem]) -> None:
        self._authenticate = authenticate
        self._within = authenticate.within if isinstance(authenticate, AuthenticateWithin) else None
        self._counter = RateCounter(rate) if rate else None

    @property
    def reads_in_snapshot(self) -> bool:
        """The credentials can be read in the request's snapshot (`AuthenticateWithin`)."""
        return self._within is not None

    @property
    def checks_credentials(self) -> bool:
        return self._authenticate is not None

    @property
    def enabled(self) -> bool:
        return self._authenticate is not None or self._counter is not None

    async def admit(self, caller: Caller, reads: object | None = None) -> Principal | None:
        """The principal of one operation (None with auth off), counted against its rate;
        its credentials read in `reads`' snapshot when given (`reads_in_snapshot`)."""
        principal = await self.authenticate(caller, reads)
        if self._counter is not None:
            key = f"token:{principal.name}" if principal else f"address:{caller.address}"
            spent = await self._counter.hit(key)
            if spent is not None:
                who = "this token" if principal is not None else "this client"
                raise _rate_limited(f"{who} may make {describe(spent.item)}", spent)
        return principal

    async def authenticate(self, caller: Caller, reads: object | None = None) -> Principal | None:
        """Steps 1 and 2 of the module docstring: the caller's principal now (read in
        `reads`' snapshot when given and the authenticator can)."""
        if self._authenticate is None:
            return None
        failed_key = f"failed-auth:{caller.address}"
        if self._counter is not None:
            spent = await self._counter.check(failed_key)
            if spent is not None:
                allowance = f"this client may fail authentication {describe(spent.item)}"
                raise _rate_limited(allowance, spent)
        try:
            if reads is not None and self._within is not None:
                return await self._within(caller.authorization, reads)
            return await self._authenticate(caller.authorization)
        except Unauthenticated as exc:
            if self._counter is not None:
                await self._counter.hit(failed_key)
            challenge = CHALLENGE + (', error="invalid_token"' if caller.authorization else "")
            error = simple_error(UNAUTHENTICATED, str(exc))
            raise Refused(401, [error], headers={"WWW-Authenticate": challenge}) from None
        except Exception:
            correlation = new_correlation_id()
            logger.exception("token check failed (correlation id %s)", correlation)
            message = f"cannot check the token right now (correlation id {correlation})"
            error = simple_error(AUTH_UNAVAILABLE, message)
            raise Refused(503, [error], headers={"Retry-After": "1"}) from None

    async def recheck(self, caller: Caller) -> None:
        """Refused (401/503) when the caller's credentials no longer authenticate."""
        if self._authenticate is not None:
            await self.authenticate(caller)


def _is_page_request(scope: Scope) -> bool:
    """A browser asking for the viewer page (no operation in it): it holds no data,
    and it is where a person types the token."""
    if scope.get("method") != "GET":
        return False
    accept = header(scope, b"accept") or ""
    params = QueryParams(scope.get("query_string", b""))
    return "text/html" in accept and "query" not in params and "documentId" not in params


class AccessMiddleware:
    """ASGI middleware applying `Access` to the routes that are not GraphQL operations
    (`/metrics`, which also needs an `all` grant, and `/ui`).

    `/graphql` is not behind it: the operation pipeline asks `Access` itself, once
    per operation, on every transport. Preflights (`OPTIONS`) and the viewer page
    pass.
    """

    def __init__(self, app: ASGIApp, access: Access, paths: Iterable[str]) -> None:
        self.app = app
        self.access = access
        self.paths = frozenset(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope.get("method") == "OPTIONS"
            or path not in self.paths
            or (path != "/metrics" and _is_page_request(scope))
        ):
            await self.app(scope, receive, send)
            return
        try:
            principal = await self.access.admit(caller_of(scope))
        except Refused as refused:
            await send_error(scope, send, refused.status, refused.errors[0], refused.headers)
            return
        if principal is not None:
            if path == "/metrics" and not principal.sees_all:
                message = "/metrics needs a token with the `all` grant"
                await send_error(scope, send, 403, simple_error(FORBIDDEN, message))
                return
            attach_principal(scope, principal)
        await self.app(scope, receive, send)


__all__ = ["Access", "AccessMiddleware", "caller_of"]
