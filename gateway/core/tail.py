"""Live tail of one session (SPEC §11): replay what is recorded, then follow appends.

`tail_batches(obs, session_id, after_seq)` (and `tail_session`, one event at a
time) yields every event with seq > `after_seq` exactly once, in seq order,
with no gap:

1. A live session: the subscriber is registered first, then reads the
   session's own append-only log from `after_seq + 1` on, in pages: what was
   recorded before it registered (the replay) and what is appended after (the
   tail) come from the same log through the same cursor, so appends racing
   the replay can neither be lost nor sent twice. It completes after the last
   event announced before the session left its store (`SessionStore.remove`).
2. A persisted-only session is replayed page by page, keyset by seq (each page
   the events after the last seq sent), then completes when a page says it is
   the last. Each page is a short read: through a fresh observation (`observe`)
   that is closed once the page is read, inside the app's `ReplayGate`, and only
   then handed on. A subscriber whose client does not read therefore holds one
   page of events and nothing shared (no pooled connection, no transaction, no
   gate, no memo of the pages before), and no number of replays can take more
   than the gate's share of the database pool. A page is classified as of the
   log its read proved, so appends to the stored log during a replay are sent
   too, once, in order (seqs are dense). Pages start at `FIRST_STORED_PAGE`
   events and double while the client takes them quickly (up to `page_size`),
   so a client that does not read holds a small page. A backend without ranged
   reads (whose view is the whole log, folded) is read once and paged from memory.

Notification: the session announces each append to its listeners
(`LiveSession.listen`). The tail registers one listener per session and event
loop, a `_Feed` shared by that loop's subscribers of the session: it records
the announced length and asks the loop's `_Waker` to wake the waiting
subscribers. An append therefore costs the same with one subscriber as with a
thousand (one listener call, no per-subscriber copy), and may come from any
thread. Wakeups are coalesced: at most one round per `WAKE_INTERVAL` after the
previous round's subscribers have run, so a busy session's subscribers take
their events in batches and the loop keeps time for other work.

Backpressure: each subscriber's buffer is its cursor into the log, bounded by
`buffer_size` (default 1,000): a subscriber with more than `buffer_size`
events appended since it registered and not yet taken gets `TailLagged` with
the last seq it was given (resume with `after_seq=last_seq`). A subscriber
holds no events itself, so its memory stays bounded whatever its client does.
A long replay or backlog yields the loop after every page (`page_size`).

Knows nothing of GraphQL; the server layer maps `TailItem`s to `Event`s and
`TailLagged` to `SUBSCRIPTION_LAGGED`.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import NamedTuple

from .fold import EventSurface
from .model import SessionEvent
from .observation import Observation
from .store import LiveSession
from .stored_view import StoredView
from .views import EventPage, SessionView

DEFAULT_TAIL_BUFFER = 1_000
"""Events a subscriber may fall behind by before it is disconnected as lagged."""

REPLAY_PAGE = 256
"""Events read per step of a replay or a backlog (live log or backend page)."""

FIRST_STORED_PAGE = 16
"""Events of a persisted replay's first page; each page the client takes within
`QUICK_TAKE` seconds doubles the next (up to the page size), a slower one halves it:
a client that does not read holds a page this small, one that reads gets big pages."""

QUICK_TAKE = 0.25
"""Seconds within which a client taking a replay page counts as keeping up."""

WAKE_INTERVAL = 0.005
"""Seconds a loop is left to other work between two wake rounds of its subscribers."""


class ReplayGate:
    """At most `readers` persisted replay pages read at once (per event loop), so
    replays queue here, not in the database pool, and leave the pool to queries.

    One per app; a semaphore per loop it is used on (a test may serve one app from
    several loops), dropped with the loop."""

    __slots__ = ("_by_loop", "readers")

    def __init__(self, readers: int) -> None:
        if type(readers) is not int or readers < 1:
            raise ValueError(f"replay readers must be a positive integer, got {readers!r}")
        self.readers = readers
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._by_loop = weakref.WeakKeyDictionary()

    def semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is None:
            found = self._by_loop[loop] = asyncio.Semaphore(self.readers)
        return found


class TailItem(NamedTuple):
    """One streamed event and its class as of its emission (for a live session: read
    from the session's fold when the event is handed on, even after the session has
    left its store)."""

    event: SessionEvent
    surface: EventSurface


class TailBatch(NamedTuple):
    """Consecutive events of one session, in seq order (shared immutable values).

    `surfaces` holds their classes when the read already had them (a persisted
    replay); for a live session it is None and `surface(i)` reads the session's
    fold as of the call, so classification is paid only by those who ask for it.
    """

    events: list[SessionEvent]
    surfaces: list[EventSurface] | None
    live: LiveSession | None

    def surface(self, i: int) -> EventSurface:
        if self.surfaces is not None:
            return self.surfaces[i]
        assert self.live is not None
        return self.live.surface_of(self.events[i].seq)


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


class _Subscriber:
    """One tail's place in a feed: where it registered and what wakes it."""

    __slots__ = ("registered_at", "waiter")

    def __init__(self, registered_at: int) -> None:
        self.registered_at = registered_at
        self.waiter: asyncio.Future[None] | None = None


class _Feed:
    """The listener of one live session for one event loop's subscribers.

    `appended`/`closed` run on the appender's thread under the session's lock:
    they only record the announced length and queue the feed on the waker. The
    subscriber set is touched on the loop's thread only.
    """

    __slots__ = ("done", "key", "length", "queued", "session", "subscribers", "unlisten", "waker")

    def __init__(self, session: LiveSession, waker: _Waker) -> None:
        self.session = session
        self.waker = waker
        self.key = id(session)
        self.subscribers: set[_Subscriber] = set()
        self.queued = False
        length, closed, unlisten = session.listen(self)
        self.length = len(session) if closed else length
        self.done = closed
        self.unlisten: Callable[[], None] = unlisten

    def appended(self, event: SessionEvent) -> None:
        self.length = event.seq + 1
        if not self.queued:
            self.queued = True
            self.waker.wake(self)

    def closed(self) -> None:
        self.done = True
        if not self.queued:
            self.queued = True
            self.waker.wake(self)

    def release(self) -> None:
        """Wake every waiting subscriber (loop thread)."""
        self.queued = False
        for sub in self.subscribers:
            waiter = sub.waiter
            if waiter is not None:
                sub.waiter = None
                if not waiter.done():
                    waiter.set_result(None)


class _Waker:
    """Wakes one event loop's waiting subscribers, one round per burst of appends.

    The first feed queued after a round schedules a single `flush` on the loop
    (`call_soon_threadsafe` from another thread: one self-pipe write per burst).
    A flush comes at once when the previous round's subscribers finished at least
    `WAKE_INTERVAL` ago, else when they did: a quiet session's subscribers wake
    at once, a busy one's in batches, and an appender on the same loop always
    gets time between rounds.
    """

    __slots__ = (
        "__weakref__",
        "_in_round",
        "_lock",
        "_pending",
        "_ready_at",
        "feeds",
        "loop",
        "thread",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread = threading.get_ident()  # made on the loop's own thread
        self.feeds: dict[int, _Feed] = {}  # id(session) -> its feed on this loop
        self._lock = threading.Lock()
        self._pending: list[_Feed] | None = None  # None: no flush scheduled or due
        self._ready_at = 0.0
        self._in_round = False

    def feed(self, session: LiveSession) -> _Feed:
        found = self.feeds.get(id(session))
        if found is None or found.session is not session:
            found = self.feeds[id(session)] = _Feed(session, self)
        return found

    def leave(self, feed: _Feed, sub: _Subscriber) -> None:
        feed.subscribers.discard(sub)
        if not feed.subscribers and self.feeds.get(feed.key) is feed:
            del self.feeds[feed.key]
            feed.unlisten()

    def wake(self, feed: _Feed) -> None:
        """Queue `feed` for the next round (any thread)."""
        with self._lock:
            if self._pending is not None:
                self._pending.append(feed)
                return
            self._pending = [feed]
        if threading.get_ident() == self.thread:
            self._schedule()
        elif not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._schedule)

    def _schedule(self) -> None:
        if self._in_round:
            return  # `_round_done` schedules it
        delay = self._ready_at - self.loop.time()
        if delay > 0:
            self.loop.call_later(delay, self._flush)
        else:
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending or [], None
        self._in_round = True
        for feed in pending:
            feed.release()
        # runs after the subscribers just woken (scheduled before it)
        self.loop.call_soon(self._round_done)

    def _round_done(self) -> None:
        self._in_round = False
        self._ready_at = self.loop.time() + WAKE_INTERVAL
        with self._lock:
            due = self._pending is not None
        if due:
            self.loop.call_later(WAKE_INTERVAL, self._flush)


# One waker per running loop, dropped with the loop: every tail on a loop shares it.
# It holds the loop's feeds (live sessions with subscribers on that loop) and nothing
# once they have left.
_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waker] = weakref.WeakKeyDictionary()


def _waker_of(loop: asyncio.AbstractEventLoop) -> _Waker:
    waker = _wakers.get(loop)
    if waker is None:
        waker = _wakers[loop] = _Waker(loop)
    return waker


async def _live_batches(
    live: LiveSession, after_seq: int, buffer_size: int, page_size: int
) -> AsyncGenerator[TailBatch, None]:
    loop = asyncio.get_running_loop()
    waker = _waker_of(loop)
    feed = waker.feed(live)
    sub = _Subscriber(feed.length)
    feed.subscribers.add(sub)
    next_seq = max(after_seq + 1, 0)
    try:
        while True:
            head = feed.length
            if head - max(next_seq, sub.registered_at) > buffer_size:
                raise TailLagged(next_seq - 1, buffer_size)
            if next_seq < head:
                stop = min(head, next_seq + page_size)
                yield TailBatch(live.events_between(next_seq, stop), None, live)
                next_seq = stop
                if next_seq < feed.length:
                    await asyncio.sleep(0)  # a long replay or backlog must not hold the loop
                continue
            if feed.done:
                return
            waiter = loop.create_future()
            sub.waiter = waiter
            # re-check after publishing the waiter: an append in between either queued a
            # wake that will see it, or moved the length we read here
            if feed.length == head and not feed.done:
                try:
                    await waiter
                finally:
                    sub.waiter = None
            else:
                sub.waiter = None
    finally:
        waker.leave(feed, sub)


def tail_batches(
    obs: Observation,
    session_id: str,
    after_seq: int = -1,
    *,
    buffer_size: int = DEFAULT_TAIL_BUFFER,
    page_size: int = REPLAY_PAGE,
    observe: Callable[[], Observation] | None = None,
    gate: ReplayGate | None = None,
) -> AsyncGenerator[TailBatch, None]:
    """Every event of the session with seq > `after_seq`, then each new append (see the
    module docstring), in batches of at most `page_size`: a busy session costs a
    subscriber one wakeup per batch, not per event, and no per-event work it does not
    ask for. A persisted replay reads each page through `observe()` (a fresh
    observation of the same scope; `obs` itself when None) inside `gate`. Raises
    SOURCE_CONFLICT at once, SESSION_NOT_FOUND / PERSISTENCE_FAILED on the first step
    (like an exact read), `TailLagged` when the subscriber lags."""
    if type(buffer_size) is not int or buffer_size < 1:
        raise ValueError(f"buffer size must be a positive integer, got {buffer_size!r}")
    live = obs.live_session(session_id)
    if live is not None:
        return _live_batches(live, after_seq, buffer_size, page_size)
    return _stored_batches(obs, session_id, after_seq, page_size, observe, gate)


async def _stored_batches(
    obs: Observation,
    session_id: str,
    after_seq: int,
    page_size: int,
    observe: Callable[[], Observation] | None,
    gate: ReplayGate | None,
) -> AsyncGenerator[TailBatch, None]:
    loop = asyncio.get_running_loop()
    next_seq = max(after_seq + 1, 0)
    pinned = obs if observe is None else None  # an observation kept for the whole replay
    size = min(FIRST_STORED_PAGE, page_size)
    try:
        while True:
            page_obs = pinned if pinned is not None else _fresh(observe)
            keep = False
            try:
                if gate is None:
                    view, page = await _replay_page(page_obs, session_id, next_seq, size)
                else:
                    async with gate.semaphore():
                        view, page = await _replay_page(page_obs, session_id, next_seq, size)
                # a backend without ranged reads: the whole log is in memory now, page it
                keep = pinned is None and not isinstance(view, StoredView)
            finally:
                if page_obs is not pinned and not keep:
                    page_obs.close()
            if keep:
                pinned = page_obs
            # the read is over (its connection back in the pool, the gate released)
            # before the page is handed on: a client that does not read holds this page
            if page.items:
                events = [item.event for item in page.items]
                handed = loop.time()
                yield TailBatch(events, [item.surface for item in page.items], None)
                next_seq = events[-1].seq + 1
                quick = loop.time() - handed < QUICK_TAKE
                size = min(size * 2, page_size) if quick else max(size // 2, 1)
            if not page.has_next or not page.items:
                return
            await asyncio.sleep(0)
    finally:
        if pinned is not None and pinned is not obs:
            pinned.close()


def _fresh(observe: Callable[[], Observation] | None) -> Observation:
    assert observe is not None
    return observe()


async def _replay_page(
    obs: Observation, session_id: str, next_seq: int, page_size: int
) -> tuple[SessionView, EventPage]:
    """One page of a persisted replay: the events from `next_seq` on, as `obs` sees
    the log (its proof, view and page read together, then nothing more)."""
    view = await obs.view(session_id)
    if next_seq >= view.length:
        return view, EventPage([], False, next_seq > 0, view.length)
    return view, await view.page(next_seq - 1 if next_seq else None, page_size, None)


async def tail_session(
    obs: Observation,
    session_id: str,
    after_seq: int = -1,
    *,
    buffer_size: int = DEFAULT_TAIL_BUFFER,
    page_size: int = REPLAY_PAGE,
    observe: Callable[[], Observation] | None = None,
    gate: ReplayGate | None = None,
) -> AsyncGenerator[TailItem, None]:
    """`tail_batches`, one event at a time (what a GraphQL subscription streams)."""
    batches = tail_batches(
        obs,
        session_id,
        after_seq,
        buffer_size=buffer_size,
        page_size=page_size,
        observe=observe,
        gate=gate,
    )
    try:
        async for batch in batches:
            for i, event in enumerate(batch.events):
                yield TailItem(event, batch.surface(i))  # classified as it is handed on
    finally:
        await batches.aclose()


__all__ = [
    "DEFAULT_TAIL_BUFFER",
    "FIRST_STORED_PAGE",
    "REPLAY_PAGE",
    "WAKE_INTERVAL",
    "ReplayGate",
    "TailBatch",
    "TailItem",
    "TailLagged",
    "tail_batches",
    "tail_session",
]
