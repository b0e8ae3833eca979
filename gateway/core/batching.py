"""Request coalescing: keys asked for in the same event-loop turn share one backend call.

This is what keeps a GraphQL page over fifty sessions at a handful of backend
calls instead of fifty. It lives only as long as its `Observation`, so it is
a per-request loader, never a cache across requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Sequence
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

BatchFn = Callable[[Sequence[K]], Awaitable[dict[K, V]]]
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


class Batcher(Generic[K, V]):
    """Collects keys until the loop turns, then resolves them all with one `fetch` call.

    `fetch(keys)` returns a dict; a key it leaves out resolves to `None`. An
    exception from `fetch` fails every key of that batch.
    """

    def __init__(self, fetch: BatchFn[K, V], spawn: Spawn | None = None) -> None:
        """`spawn` starts the batch's task (its owner may cancel it); default: a plain task."""
        self._fetch = fetch
        self._spawn: Spawn = spawn or asyncio.ensure_future
        self._pending: dict[K, asyncio.Future[V | None]] = {}

    def load(self, key: K) -> asyncio.Future[V | None]:
        fut = self._pending.get(key)
        if fut is not None:
            return fut
        loop = asyncio.get_running_loop()
        if not self._pending:
            loop.call_soon(self._dispatch)
        fut = loop.create_future()
        self._pending[key] = fut
        return fut

    def _dispatch(self) -> None:
        batch, self._pending = self._pending, {}
        task = self._spawn(self._run(batch))
        task.add_done_callback(_consume)

    async def _run(self, batch: dict[K, asyncio.Future[V | None]]) -> None:
        try:
            found = await self._fetch(list(batch))
        except asyncio.CancelledError:
            for fut in batch.values():
                fut.cancel()
            raise
        except BaseException as exc:
            for fut in batch.values():
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for key, fut in batch.items():
            if not fut.done():
                fut.set_result(found.get(key))


def _consume(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


def gather_singles(single: Callable[[K], Awaitable[V | None]]) -> BatchFn[K, V]:
    """A batch function for backends that only offer the one-key call."""

    async def fetch(keys: Sequence[K]) -> dict[K, V]:
        values = await asyncio.gather(*(single(k) for k in keys))
        return {k: v for k, v in zip(keys, values, strict=True) if v is not None}

    return fetch
