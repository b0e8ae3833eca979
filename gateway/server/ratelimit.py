"""Per-caller rate limits on `/graphql` and `/metrics` (`serve --rate-limit "100/second"`).

The counting is the `limits` library's (its string notation, e.g. `100/second`
or `10/second;1000/hour`, and its in-memory async storage). A caller is its
token (`principal.name`) when the auth layer attached a principal, else its
client address (which uvicorn takes from `X-Forwarded-For` only for the proxies
it trusts). Over the limit: HTTP 429, `Retry-After` in whole seconds (at least
1) and a GraphQL-over-HTTP error body with code `RATE_LIMITED`.

Strategy: fixed window. Each window of the rate's length starts at the
caller's first request in it and admits `amount` requests; a burst straddling
two windows can reach twice the rate. The moving window would be exact, but it
keeps one timestamp per admitted request (memory O(rate) per caller, and each
hit inserts into a list of that length), whereas a fixed window is one counter
per caller. Since the counter is per process anyway (N replicas admit up to N
times the rate), exactness within one process buys little.

The counter is per-process state by nature. "Nothing cached across requests"
is about answers (data); this holds no data, only counts keyed by caller, and
the library forgets a key once its window has passed.

Only `/graphql` and `/metrics` are limited: never `/healthz`, `/readyz`, static
files, or an `OPTIONS` request (a CORS preflight is answered further out, by
the CORS middleware, in any case). The middleware sits inside the auth
middleware and reads the principal at request time (`principal_of`), so it
limits tokens once auth has run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence

from limits import RateLimitItem, parse_many
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import FixedWindowRateLimiter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .codes import GatewayCode
from .errors import send_error, simple_error
from .principal import principal_of

RATE_LIMITED = GatewayCode.RATE_LIMITED


def parse_rate(text: str) -> tuple[RateLimitItem, ...]:
    """The limits in `text` (`100/second`, `10/second;1000/hour`); ValueError if none."""
    try:
        items = tuple(parse_many(text.strip())) if isinstance(text, str) else ()
    except ValueError:
        items = ()
    if not items:
        raise ValueError(
            f"rate limit {text!r} is not understood: write AMOUNT/PERIOD, e.g. '100/second', "
            "'6000/minute' or '10/second;1000/hour'"
        )
    for item in items:
        if item.amount < 1:
            raise ValueError(f"rate limit {text!r} admits nothing: the amount must be at least 1")
    return items


def describe(item: RateLimitItem) -> str:
    """`100 per second`, `10 per 5 minutes`: how a refusal names the limit it hit."""
    unit = item.GRANULARITY.name
    if item.multiples == 1:
        return f"{item.amount} per {unit}"
    return f"{item.amount} per {item.multiples} {unit}s"


class RateLimit:
    """ASGI middleware: at most `rate` requests per caller to `paths` (see the module docstring)."""

    def __init__(self, app: ASGIApp, rate: str, paths: Iterable[str]) -> None:
        self.app = app
        self.items: Sequence[RateLimitItem] = parse_rate(rate)
        self.paths = frozenset(paths)
        self.limiter = FixedWindowRateLimiter(MemoryStorage())

    def limits(self, scope: Scope) -> bool:
        """Whether this request is limited at all (never a preflight, a probe or a file)."""
        return (
            scope["type"] == "http"
            and scope.get("method") != "OPTIONS"
            and scope.get("path") in self.paths
        )

    async def retry_after(self, items: Sequence[RateLimitItem], key: str) -> int:
        """Whole seconds (at least 1) until `key` may pass every one of `items` again."""
        reset = max([(await self.limiter.get_window_stats(i, key)).reset_time for i in items])
        return max(1, math.ceil(reset - time.time()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.limits(scope):
            await self.app(scope, receive, send)
            return
        key = self.caller(scope)
        refused = [item for item in self.items if not await self.limiter.hit(item, key)]
        if not refused:
            await self.app(scope, receive, send)
            return
        await self.refuse(scope, send, refused[0], await self.retry_after(refused, key))

    @staticmethod
    def caller(scope: Scope) -> str:
        principal = principal_of(scope)
        if principal is not None:
            return f"token:{principal.name}"
        client = scope.get("client")
        return f"address:{client[0] if client else 'unknown'}"

    async def refuse(self, scope: Scope, send: Send, item: RateLimitItem, retry_after: int) -> None:
        who = "this token" if principal_of(scope) is not None else "this client"
        await _refuse(scope, send, f"{who} may make {describe(item)}", retry_after)


class FailedAuthLimit(RateLimit):
    """ASGI middleware outside auth: failed authentications count per client address.

    `RateLimit` sits inside auth and counts per token, so a request whose token is
    missing, unknown or revoked (401) never reached it: a client could send bad
    tokens without limit, each one a token-store read. Here each 401 on `paths`
    counts against the client's address at the same rate, and an address that has
    used it up is refused (429) before auth runs, so its next guesses cost no read.
    Valid tokens are never counted. The price: every caller behind that address
    (one NAT, one proxy not trusted for X-Forwarded-For) waits out the window too.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.limits(scope):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        key = f"failed-auth:{client[0] if client else 'unknown'}"
        spent = [item for item in self.items if not await self.limiter.test(item, key)]
        if spent:
            allowance = f"this client may fail authentication {describe(spent[0])}"
            await _refuse(scope, send, allowance, await self.retry_after(spent, key))
            return
        status = 0

        async def watching_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.app(scope, receive, watching_send)
        if status == 401:
            for item in self.items:
                await self.limiter.hit(item, key)


async def _refuse(scope: Scope, send: Send, allowance: str, retry_after: int) -> None:
    error = simple_error(
        RATE_LIMITED, f"rate limit exceeded: {allowance}; retry after {retry_after} s"
    )
    error["extensions"]["retryAfter"] = retry_after
    await send_error(scope, send, 429, error, {"Retry-After": str(retry_after)})


__all__ = ["RATE_LIMITED", "FailedAuthLimit", "RateLimit", "describe", "parse_rate"]
