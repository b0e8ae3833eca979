"""Live tail of one session (SPEC §11): replay what is recorded, then follow appends.

`tail_session(obs, session_id, after_seq)` yields every event with
seq > `after_seq` exactly once, in seq order, with no gap:

1. A live session is registered with first (`LiveSession.listen`), which
   returns the log length at that instant; events before it are replayed from
   the live log in pages, events from it on arrive through the listener into
   a bounded per-subscriber buffer. Appends racing the replay therefore land in
   the buffer, never in a gap; a seq already sent is skipped (defensive: the
   two ranges do not overlap). The tail completes after the last buffered event
   once the session leaves its store (`SessionStore.remove`).
2. A persisted-only session is replayed page by page through the observation's
   view (the backend's ranged reads when it has them), then completes.

Backpressure: the buffer holds at most `buffer_size` events (default 1,000).
The listener never blocks the appender: when the buffer is full it drops the
buffer and marks the subscriber lagged; the consumer then gets `TailLagged`
with the last seq it was given, and can resume with `after_seq=last_seq`.
Memory per subscriber is bounded by the buffer, whatever the client does.

The tail yields the loop after every page of events (`page_size`), so a long
replay or backlog never holds the event loop even when the transport's sends
do not block. Appends may come from any thread: the listener only appends to a deque and,
when the consumer is waiting, wakes it (directly on the loop's own thread,
through `call_soon_threadsafe` from another).

Knows nothing of GraphQL; the server layer maps `TailItem`s to `Event`s and
`TailLagged` to `SUBSCRIPTION_LAGGED`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncGenerator
from typing import NamedTuple

from .fold import EventSurface
from .model import SessionEvent
from .observation import Observation

DEFAULT_TAIL_BUFFER = 1_000
"""Events a subscriber may fall behind by before it is disconnected as lagged."""

REPLAY_PAGE = 256
"""Events read per step of a replay (live log or backend page)."""


class TailItem(NamedTuple):
    """One streamed event and its class as of its emission (for a live session: read
    from the session's fold when the event is handed on, even after the session has
    left its store)."""

    event: SessionEvent
    surface: EventSurface


class TailLagged(Exception):
    """The subscriber fell behind by more than its buffer; `last_seq` is the last seq
    it was given (resume after it)."""

    def __init__(self, last_seq: int, buffer_size: int) -> None:
        super().__init__(
            f"the subscriber fell more than {buffer_size} events behind the session; "
            f"resume with afterSeq: {last_seq}"
        )
        self.last_seq = last_seq
        self.buffer_size = buffer_size


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class TailBuffer:
    """One subscriber's bounded buffer: the `AppendListener` a tail registers."""

    __slots__ = ("_loop", "_thread", "_waiter", "capacity", "done", "items", "lagged")

    def __init__(self, capacity: int, loop: asyncio.AbstractEventLoop) -> None:
        if type(capacity) is not int or capacity < 1:
            raise ValueError(f"buffer size must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self.items: deque[SessionEvent] = deque()
        self.lagged = False
        self.done = False
        self._loop = loop
        self._thread = threading.get_ident()
        self._waiter: asyncio.Future[None] | None = None

    # -- listener side (the appender's thread, session lock held: never block) -------

    def appended(self, event: SessionEvent) -> None:
        if self.lagged:
            return
        if len(self.items) >= self.capacity:
            self.lagged = True
            self.items.clear()  # a lagged subscriber holds nothing
        else:
            self.items.append(event)
        self._wake()

    def closed(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is None:
            return
        self._waiter = None
        if threading.get_ident() == self._thread:
            _release(waiter)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(_release, waiter)

    # -- consumer side (the subscriber's event loop) ---------------------------------

    async def wait(self) -> None:
        """Until something was appended, the subscriber lagged or the session closed."""
        waiter = self._loop.create_future()
        self._waiter = waiter
        # re-check after publishing the waiter: an append in between either saw it or
        # left its event for us to see here
        if self.items or self.lagged or self.done:
            self._waiter = None
            return
        try:
            await waiter
        finally:
            self._waiter = None


async def tail_session(
    obs: Observation,
    session_id: str,
    after_seq: int = -1,
    *,
    buffer_size: int = DEFAULT_TAIL_BUFFER,
    page_size: int = REPLAY_PAGE,
) -> AsyncGenerator[TailItem, None]:
    """Every event of the session with seq > `after_seq`, then each new append (see the
    module docstring). Raises SESSION_NOT_FOUND / SOURCE_CONFLICT / PERSISTENCE_FAILED
    like an exact read (on the first step), `TailLagged` when the subscriber lags."""
    next_seq = max(after_seq + 1, 0)
    live = obs.live_session(session_id)
    if live is None:
        view = await obs.view(session_id)
        while next_seq < view.length:
            page = await view.page(next_seq - 1 if next_seq else None, page_size, None)
            for item in page.items:
                yield TailItem(item.event, item.surface)
                next_seq = item.event.seq + 1
            await asyncio.sleep(0)
            if not page.has_next or not page.items:
                return
        return

    buffer = TailBuffer(buffer_size, asyncio.get_running_loop())
    length, closed, unlisten = live.listen(buffer)
    try:
        if closed:  # already gone from its store: what it holds is all there will be
            length = len(live)
        while next_seq < length:
            if buffer.lagged:
                raise TailLagged(next_seq - 1, buffer_size)
            stop = min(next_seq + page_size, length)
            for item in await live.view().events_at(range(next_seq, stop)):
                yield TailItem(item.event, item.surface)
                next_seq = item.event.seq + 1
            await asyncio.sleep(0)  # a long replay must not hold the loop
        if closed:
            return
        items = buffer.items
        while True:
            while True:
                if buffer.lagged:
                    raise TailLagged(next_seq - 1, buffer_size)
                try:
                    event = items.popleft()
                except IndexError:
                    break
                if event.seq < next_seq:
                    continue  # already sent by the replay
                if event.seq != next_seq:  # pragma: no cover - would be a bug
                    raise RuntimeError(f"tail gap: expected seq {next_seq}, got {event.seq}")
                yield TailItem(event, live.surface_of(event.seq))
                next_seq += 1
                if next_seq % page_size == 0:
                    await asyncio.sleep(0)  # nor a long backlog
            if buffer.done:
                if items:  # appended just before the session closed
                    continue
                return
            await buffer.wait()
    finally:
        unlisten()


__all__ = [
    "DEFAULT_TAIL_BUFFER",
    "REPLAY_PAGE",
    "TailBuffer",
    "TailItem",
    "TailLagged",
    "tail_session",
]
