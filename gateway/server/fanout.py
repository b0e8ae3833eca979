"""Shared subscription executions (issue 21.5): one execution per event, however many subscribe.

Subscribers whose operations would answer every event with the same bytes share
one `SharedExecution`: same document text, operation name, variables and
extensions, and the same caller as far as an answer can tell (`SharingKey`: the
token's grants, which scope what it sees, and its name, which signs its
cursors; the client address has no say with auth off). The execution runs the
operation once (the pipeline's `_subscription`, in a task of its own), writes
each event's payload once as JSON bytes, and offers that frame to every
member. A member costs its own queue, its wakeup and its socket write.

What stays per subscriber (the pipeline's `stream` drives a `Member`):

* its own position: a member that joins once the execution has published events
  is told the handover seq (`Member.handover`, the seq of the next frame it will
  be offered); the pipeline replays `after..handover-1` for it through a private
  execution that stops there, then hands it the shared frames from `handover` on.
  It joins (and learns the handover) in one step on the loop, so nothing is
  published in between: no gap, no duplicate.
* its buffer: at most `limit` frames wait for it (`subscription_buffer`, as the
  tail's own); one more and it is lagged (SUBSCRIPTION_LAGGED with the last seq
  it was given), its queue dropped. Offering never waits, so a slow member holds
  up no one.
* its credentials (re-checked every `reauth_interval` by the pipeline, per
  member), its subscription slot, its metrics.

The execution runs in a task of its own, started by its first member: its logs
and its operation span (with tracing on) are that member's, and its budget is
checked once per event for all (the same bytes for each).

The execution ends when its stream does (every member gets the end) or when its
last member leaves (its task is cancelled). Executions are found per event loop.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from .operation import Frame
from .principal import Principal

END = None
"""What a member takes when the shared stream is over."""

AHEAD = 8
"""Frames an execution may run ahead of its fastest member: it waits (and so does its
replay or tail) while every member has this many queued, so members that do not read
cost no execution, and the execution's own tail lags if they all fall behind."""


@dataclass(frozen=True, slots=True)
class SharingKey:
    """What makes two subscriptions answer every event with the same bytes."""

    text: str
    operation_name: str | None
    variables: str
    extensions: str
    grants: tuple[str, ...] | None
    audience: str | None

    @classmethod
    def of(
        cls,
        text: str,
        operation_name: str | None,
        variables: dict[str, Any] | None,
        extensions: dict[str, Any] | None,
        principal: Principal | None,
    ) -> SharingKey:
        return cls(
            text,
            operation_name,
            _canonical(variables),
            _canonical(extensions),
            tuple(principal.grants) if principal is not None else None,
            principal.name if principal is not None else None,
        )


def _canonical(value: dict[str, Any] | None) -> str:
    return json.dumps(value or {}, sort_keys=True, separators=(",", ":"), default=repr)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One shared frame and the seq of the event it answers (None for a frame that
    answers no event: an error that ends the stream)."""

    frame: Frame
    seq: int | None


class Member:
    """One subscriber's place in a shared execution: its bounded queue and its wakeup."""

    __slots__ = ("execution", "handover", "lagged", "limit", "queue", "waiter")

    def __init__(self, execution: SharedExecution, limit: int, handover: int | None) -> None:
        self.execution = execution
        self.limit = limit
        self.handover = handover
        self.queue: deque[Delivery | None] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.lagged = False

    def take(self) -> Delivery | None:
        """The next queued item (there is one); tells the execution when it may go on."""
        item = self.queue.popleft()
        execution = self.execution
        if execution.pausing is not None and len(self.queue) < AHEAD:
            execution.resume()
        return item

    def offer(self, item: Delivery | None) -> None:
        """Queue `item` (never waits); past the limit the member is lagged instead."""
        if self.lagged:
            return
        if item is not None and len(self.queue) >= self.limit:
            self.lagged = True
            self.queue.clear()
        else:
            self.queue.append(item)
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Until something is queued, the member is lagged, or `wake` is called."""
        if self.queue or self.lagged:
            return
        waiter = self.waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self.waiter = None

    def leave(self) -> None:
        self.execution.leave(self)


class SharedExecution:
    """One running execution and its members (see the module docstring)."""

    __slots__ = (
        "_current",
        "_next_seq",
        "ended",
        "key",
        "members",
        "pausing",
        "registry",
        "task",
    )

    def __init__(self, registry: SharedExecutions, key: SharingKey) -> None:
        self.registry = registry
        self.key = key
        self.members: dict[Member, None] = {}
        self.task: asyncio.Task[None] | None = None
        self.ended = False
        self._current: int | None = None  # the seq of the event being executed
        self._next_seq: int | None = None  # after the last published event; None: none yet
        self.pausing: asyncio.Future[None] | None = None  # set while waiting for a member

    def join(self, limit: int) -> Member:
        member = Member(self, limit, self._next_seq)
        self.members[member] = None
        if self.pausing is not None:
            self.resume()
        return member

    async def paced(self) -> None:
        """Until some member (not lagged) has fewer than `AHEAD` frames queued."""
        while not any(len(m.queue) < AHEAD and not m.lagged for m in self.members):
            if not self.members:
                return
            self.pausing = asyncio.get_running_loop().create_future()
            try:
                await self.pausing
            finally:
                self.pausing = None

    def resume(self) -> None:
        pausing = self.pausing
        if pausing is not None and not pausing.done():
            pausing.set_result(None)

    def leave(self, member: Member) -> None:
        self.members.pop(member, None)
        if not self.members and not self.ended:
            self._end()
            if self.task is not None and self.task is not asyncio.current_task():
                self.task.cancel()

    def executing(self, seq: int) -> None:
        """The execution is about to answer the event `seq` (its resolver says so)."""
        self._current = seq

    def publish(self, frame: Frame) -> None:
        """Offer `frame` (the answer to the event last `executing`, if any) to every member."""
        seq, self._current = self._current, None
        if seq is not None:
            self._next_seq = seq + 1
        delivery = Delivery(frame, seq)
        for member in self.members:
            member.offer(delivery)

    def finish(self) -> None:
        """The stream is over: every member takes the end once it has what was queued."""
        if not self.ended:
            self._end()
            for member in self.members:
                member.offer(END)

    def _end(self) -> None:
        self.ended = True
        self.registry.forget(self)


Runner = Callable[[SharedExecution], Coroutine[Any, Any, None]]


class SharedExecutions:
    """The running shared executions of one app, per event loop (see the module docstring).

    `started` and `events` count executions begun and events they published: the
    measure of sharing (N members of one execution: 1 started, not N)."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[SharingKey, SharedExecution]
        ] = weakref.WeakKeyDictionary()
        self.started = 0

    def join(self, key: SharingKey, limit: int, run: Runner) -> Member:
        """A member of the running execution for `key`, started with `run` when none is."""
        loop = asyncio.get_running_loop()
        running = self._by_loop.get(loop)
        if running is None:
            running = self._by_loop[loop] = {}
        execution = running.get(key)
        if execution is None:
            execution = running[key] = SharedExecution(self, key)
            member = execution.join(limit)
            execution.task = loop.create_task(run(execution), name="shared-subscription")
            self.started += 1
            return member
        return execution.join(limit)

    def forget(self, execution: SharedExecution) -> None:
        running = self._by_loop.get(asyncio.get_running_loop())
        if running is not None and running.get(execution.key) is execution:
            del running[execution.key]

    def running(self) -> int:
        """Executions running on this loop."""
        return len(self._by_loop.get(asyncio.get_running_loop(), ()))


__all__ = [
    "AHEAD",
    "END",
    "Delivery",
    "Member",
    "SharedExecution",
    "SharedExecutions",
    "SharingKey",
]
