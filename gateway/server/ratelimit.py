"""Per-caller rate limits (`serve --rate-limit "100/second"`): the counting.

The counting is the `limits` library's (its string notation, e.g. `100/second`
or `10/second;1000/hour`, and its in-memory async storage). Who counts as a
caller, and when a request is counted, is `gateway.server.access`'s: every
operation on every transport (a WebSocket `subscribe` included) counts once
against its token, or its client address without one (which uvicorn takes
from `X-Forwarded-For` only for the proxies it trusts), and every failed
authentication counts against the client address.

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
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from limits import RateLimitItem, parse_many
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import FixedWindowRateLimiter

from .codes import GatewayCode

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


@dataclass(frozen=True, slots=True)
class Spent:
    """A key that has used up one of the limits: which one, and when to come back."""

    item: RateLimitItem
    retry_after: int
    """Whole seconds (at least 1) until the key passes every limit again."""


class RateCounter:
    """Fixed-window counters of `items` per key, in one in-memory storage."""

    def __init__(self, items: Sequence[RateLimitItem]) -> None:
        self.items = tuple(items)
        self._limiter = FixedWindowRateLimiter(MemoryStorage())

    async def hit(self, key: str) -> Spent | None:
        """Count one request of `key`; what it ran out of, or None when it passed."""
        refused = [item for item in self.items if not await self._limiter.hit(item, key)]
        return await self._spent(refused, key)

    async def check(self, key: str) -> Spent | None:
        """Whether `key` has used up a limit, without counting a request."""
        refused = [item for item in self.items if not await self._limiter.test(item, key)]
        return await self._spent(refused, key)

    async def _spent(self, refused: list[RateLimitItem], key: str) -> Spent | None:
        if not refused:
            return None
        resets = [(await self._limiter.get_window_stats(i, key)).reset_time for i in refused]
        return Spent(refused[0], max(1, math.ceil(max(resets) - time.time())))


__all__ = ["RATE_LIMITED", "RateCounter", "Spent", "describe", "parse_rate"]
