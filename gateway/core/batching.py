"""Per-request loading: each question answered once, batched ones one backend call a turn.

An observation asks many questions of the same few kinds (the stored row of
fifty ids, the children of fifty sessions). These types make that cheap and
consistent for as long as the observation lives, and no longer:

* `Lifetime` owns the tasks one observation starts, so `close()` cancels the
  backend work still running (a timed-out request leaves none behind);
* `Once[T]` answers a question that has one answer per observation;
* `PerKey[K, V]` answers a question per key, each computed once;
* `Loader[K, V]` answers a batched question: the keys asked in one event-loop
  turn go to the backend in one call, and each key's answer is remembered.

The memo rule, which every loader keeps by construction: what is remembered for
a key is exactly what the batch function returned for that key, that key's own
whole answer. A batch function that gets one shared answer from the backend
(a walk from many seeds at once) must derive each key's own answer from it
before returning (`gateway.core.reach`); a key's answer never depends on which
other keys shared its batch.

Awaiting a shared answer is shielded from any one asker's cancellation
(another field of the same request may still want it); `close()` cancels it.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
F = TypeVar("F", bound=Callable[..., Any])

BatchFn = Callable[[Sequence[K]], Awaitable[Mapping[K, V]]]
"""A batched question: the answer of each key it holds (a key left out has none)."""


class Lifetime:
    """The tasks of one observation: started through `spawn`, cancelled by `close`,
    and its memo tables, emptied by `close`.

    Emptying them is what frees an answer's data when its request ends: a memoised
    task holds a copy of the request's context variables, one of which is the
    request's context, which holds the observation and so the memo: a cycle that
    only a full collection frees (an 8 MB readEvent window stayed until then).
    """

    __slots__ = ("_forget", "_tasks")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._forget: list[Callable[[], None]] = []

    def remember(self, forget: Callable[[], None]) -> None:
        """Call `forget` (which empties a memo table) when this lifetime closes. The
        tables here ask on their first entry, not when made: an observation builds a
        dozen of them and a request asks one or two."""
        self._forget.append(forget)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def close(self) -> None:
        """Cancel every task still running, and forget every memoised answer."""
        for task in list(self._tasks):
            task.cancel()
        forgets, self._forget = self._forget, []  # (they hold their tables: no cycle left)
        for forget in forgets:
            forget()


def weakly(fn: F) -> F:
    """`fn`, holding its object weakly when it is a bound method.

    The parts of an observation keep their questions (`Once`, `PerKey`) and a
    question keeps the bound method that answers it: a reference cycle per part,
    which made each request's observation garbage that only the cyclic collector
    frees (under load a large share of the server's CPU). The object is the
    observation's part, alive as long as the observation; a question asked after
    its object is gone raises ReferenceError."""
    owner = getattr(fn, "__self__", None)
    func = getattr(fn, "__func__", None)
    if owner is None or func is None:
        return fn
    ref = weakref.ref(owner)

    def call(*args: Any) -> Any:
        alive = ref()
        if alive is None:
            raise ReferenceError(f"{func.__qualname__}: its object is gone")
        return func(alive, *args)

    return cast(F, call)


class Once(Generic[T]):
    """A question with one answer per observation, computed on first ask."""

    __slots__ = ("_fut", "_lifetime", "_make")

    def __init__(self, lifetime: Lifetime, make: Callable[[], Awaitable[T]]) -> None:
        self._lifetime = lifetime
        self._make = weakly(make)
        self._fut: asyncio.Future[T] | None = None

    def _forget(self) -> None:
        self._fut = None

    @property
    def asked(self) -> bool:
        """Whether the answer has been asked for (it may still be on its way)."""
        return self._fut is not None

    async def get(self) -> T:
        fut = self._fut
        if fut is None:
            lifetime = self._lifetime
            lifetime.remember(self._forget)  # on first ask: an unasked question costs nothing
            fut = self._fut = lifetime.spawn(_run(self._make))
            fut.add_done_callback(_consume)
        return await asyncio.shield(fut)


class PerKey(Generic[K, V]):
    """A question asked per key, each key's answer computed once by `make(key)`."""

    __slots__ = ("_lifetime", "_make", "_memo")

    def __init__(self, lifetime: Lifetime, make: Callable[[K], Awaitable[V]]) -> None:
        self._lifetime = lifetime
        self._make = weakly(make)
        self._memo: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K) -> V:
        memo = self._memo
        fut = memo.get(key)
        if fut is None:
            if not memo:  # its first entry: emptied when the lifetime closes
                self._lifetime.remember(memo.clear)
            fut = memo[key] = self._lifetime.spawn(_run_with(self._make, key))
            fut.add_done_callback(_consume)
        return await asyncio.shield(fut)


class Loader(Generic[K, V]):
    """One batched backend question of one observation (see the module docstring).

    `load(key)` resolves to the key's answer, None when the batch function left
    the key out. Keys asked before the loop turns wait for one call of `fetch`;
    each key is asked once (its batch's future is remembered: no task per key).
    An exception from `fetch` fails every key of that batch.
    """

    __slots__ = ("_fetch", "_lifetime", "_memo", "_pending", "_waiting")

    def __init__(self, lifetime: Lifetime, fetch: BatchFn[K, V]) -> None:
        self._lifetime = lifetime
        self._fetch = fetch
        self._memo: dict[K, asyncio.Future[V | None]] = {}
        self._pending: dict[K, asyncio.Future[V | None]] = {}
        self._waiting: dict[K, list[asyncio.Future[V | None]]] = {}
        """Each unanswered key's askers, each with a future of its own: an asker's
        cancellation cancels only its own (what `asyncio.shield` gives), and the batch
        answers them itself, a turn of the loop sooner than a shield's callback."""

    def asked(self, key: K) -> bool:
        """Whether `key` was asked in this lifetime (its answer is the one remembered)."""
        return key in self._memo

    def load(self, key: K) -> asyncio.Future[V | None]:
        """The key's answer to await (a future, so that gathering many makes no tasks)."""
        fut = self._memo.get(key)
        if fut is None:
            if not self._memo:  # its first entry: emptied when the lifetime closes
                self._lifetime.remember(self._memo.clear)
            pending = self._pending
            if not pending:
                # The batch's task, started now: its first step is the loop's next turn,
                # where it takes the keys asked until then (a callback that then started
                # a task cost one more turn of the loop per batch).
                pending = self._pending = {}
                task = self._lifetime.spawn(self._run(pending))
                task.add_done_callback(functools.partial(self._settle, pending))
            fut = self._memo[key] = pending[key] = asyncio.get_running_loop().create_future()
        elif fut.done():
            return fut  # answered: awaiting it returns at once and cancels nothing
        waiter = fut.get_loop().create_future()
        waiting = self._waiting.get(key)
        if waiting is None:
            self._waiting[key] = [waiter]
        else:
            waiting.append(waiter)
        return waiter

    def _settle(self, batch: dict[K, asyncio.Future[V | None]], task: asyncio.Task[None]) -> None:
        """A batch's task done: cancelled, maybe before its first step (its lifetime
        closed), its keys not answered are cancelled too, and no key joins it after."""
        _consume(task)
        if task.cancelled():
            if self._pending is batch:
                self._pending = {}
            self._answer(batch, cancelled=True)

    def _answer(
        self,
        batch: dict[K, asyncio.Future[V | None]],
        found: Mapping[K, V] | None = None,
        error: BaseException | None = None,
        *,
        cancelled: bool = False,
    ) -> None:
        """Each key's outcome, remembered and given to its askers still waiting."""
        waiting = self._waiting
        for key, fut in batch.items():
            if not fut.done():
                if cancelled:
                    fut.cancel()
                elif error is not None:
                    fut.set_exception(error)
                    fut.exception()  # retrieved: its askers have their own
                else:
                    fut.set_result(found.get(key) if found is not None else None)
            for waiter in waiting.pop(key, ()):
                if waiter.done():  # its asker was cancelled
                    continue
                if fut.cancelled():
                    waiter.cancel()
                elif (exc := fut.exception()) is not None:
                    waiter.set_exception(exc)
                else:
                    waiter.set_result(fut.result())

    async def _run(self, batch: dict[K, asyncio.Future[V | None]]) -> None:
        if self._pending is batch:  # its keys are all asked: the next key starts a batch
            self._pending = {}
        try:
            found = await self._fetch(list(batch))
        except asyncio.CancelledError:
            self._answer(batch, cancelled=True)
            raise
        except BaseException as exc:
            self._answer(batch, error=exc)
            if not isinstance(exc, Exception):
                raise
            return
        self._answer(batch, found)


async def _run(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


async def _run_with(make: Callable[[K], Awaitable[V]], key: K) -> V:
    return await make(key)


def _consume(fut: asyncio.Future[Any]) -> None:
    """Mark a shared outcome's exception as retrieved (nobody may be waiting for it)."""
    if not fut.cancelled():
        fut.exception()
