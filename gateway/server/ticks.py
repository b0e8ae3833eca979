"""`with_ticks`: a stream's items, and a tick every so often whether items come or not.

Both streaming transports need to act on a clock while they wait for the next
item of a stream: the pipeline re-checks a subscription's credentials every
`reauth_interval` seconds, SSE writes a keep-alive comment every `keepalive`
seconds. Waiting for the next item must not be cancelled for that (a
cancelled `anext` would end the subscription), so the next item is awaited
as one future that outlives the ticks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

T = TypeVar("T")


async def with_ticks(
    items: AsyncIterator[T], every: float | None
) -> AsyncGenerator[T | None, None]:
    """Each item of `items` in order, and None each time `every` seconds have passed
    since the last tick (never when `every` is None). Ends when `items` ends; closing
    it cancels the wait for the next item (closing `items` is its owner's)."""
    loop = asyncio.get_running_loop()
    due = None if every is None else loop.time() + every
    pending: asyncio.Future[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            wait = None if due is None else max(0.0, due - loop.time())
            done, _ = await asyncio.wait({pending}, timeout=wait)
            if not done:
                assert every is not None
                due = loop.time() + every
                yield None
                continue
            finished, pending = pending, None
            try:
                item = finished.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


__all__ = ["with_ticks"]
