"""Views of one session's log as of one moment: every per-session question the core asks.

A `SessionView` answers pages of classified events, single events, windows,
the current surface and an event's relations, all as of the log length it was
made at (`length`), so that one request sees one consistent log while a live
session goes on appending. Three kinds, one contract:

* `LiveView`: a live session's own incremental fold and citation index (made
  by `LiveSession.view()`, no copy of the log, no refold);
* `FoldedView`: a whole log and its fold, for backends that offer only
  `load()` and for stored logs without derivations;
* `StoredView` (`gateway.core.stored_view`): the backend's stored derivations,
  read by index through the observation's batched loaders.

"As of n": replacers always come later than what they replace, so an event
shadowed by a replacer with seq >= n was still CURRENT when the log had n
events; the surface as of n is the events current then, in label order.
"""

from __future__ import annotations

import heapq
import threading
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .filters import EventFilter, event_matches
from .fold import (
    CODE_BY_SURFACE,
    CURRENT_CODE,
    LOG_ONLY_CODE,
    SHADOWED_CODE,
    SURFACE_BY_CODE,
    EventSurface,
    FoldResult,
    SurfaceFold,
)
from .model import SessionEvent, SessionHeader

SCAN_CHUNK = 1000
"""Events a view reads at a time when it filters them itself (bounded memory)."""


class Classified(NamedTuple):
    """A raw event and its classification as of the view's moment."""

    event: SessionEvent
    surface: EventSurface


@dataclass(frozen=True, slots=True)
class EventPage:
    """A page of a log's events in seq order, maybe filtered by classification."""

    items: list[Classified]
    has_next: bool
    has_previous: bool
    total: int


@dataclass(frozen=True, slots=True)
class Relations:
    """How one event stands to others (see `trace_event`)."""

    replacement_chain: list[int]
    replaced: list[int]
    derived: list[int]


def codes_of(wanted: Iterable[EventSurface]) -> frozenset[int]:
    return frozenset(CODE_BY_SURFACE[w] for w in wanted)


def page_start(after_seq: int | None, length: int) -> int:
    """The first seq a page after `after_seq` may hold, clipped to the log."""
    return 0 if after_seq is None else min(max(after_seq + 1, 0), length)


class SessionView(ABC):
    """One session's log as of `length` events (see the module docstring)."""

    header: SessionHeader
    live: bool
    length: int

    @property
    def session_id(self) -> str:
        return self.header.id

    @abstractmethod
    async def page(
        self,
        after_seq: int | None,
        first: int,
        wanted: frozenset[EventSurface] | None,
        *,
        with_data: bool = True,
    ) -> EventPage:
        """Up to `first` events after `after_seq` whose class is in `wanted` (None: all).
        `with_data=False`: the caller reads no payload, which a stored view then does not
        read or decode (the events' `data` is None); a live view has them anyway."""

    @abstractmethod
    async def events_at(self, seqs: Sequence[int]) -> list[Classified]:
        """These events (each < length), in the order asked."""

    @abstractmethod
    async def window(self, lo: int, hi: int) -> list[SessionEvent]:
        """The raw events lo..hi that exist, ascending."""

    @abstractmethod
    async def surface(self) -> list[Classified]:
        """The surface in model-visible order."""

    @abstractmethod
    async def relations(self, seq: int) -> Relations:
        """Replacers, what it replaced, and who cites it (seq < length)."""

    @abstractmethod
    async def classes(self) -> list[Classified]:
        """Every event (payloads may be left out) with its class, by seq."""

    async def select(
        self, lo: int, hi: int, f: EventFilter, limit: int | None, with_data: bool = True
    ) -> list[Classified]:
        """Up to `limit` (None: all) events with `lo <= seq <= hi` (clipped to the log)
        matching every clause of `f` but `text`, ascending (SPEC §12).

        Here: the events read `SCAN_CHUNK` at a time and tested by the predicates (a
        log in memory); `StoredView` asks the backend's indexes instead."""
        lo, hi = max(lo, 0), min(hi, self.length - 1)
        out: list[Classified] = []
        start = lo
        while start <= hi and (limit is None or len(out) < limit):
            stop = min(start + SCAN_CHUNK, hi + 1)
            for item in await self.events_at(range(start, stop)):
                if event_matches(f, item.event, item.surface):
                    out.append(item)
                    if limit is not None and len(out) >= limit:
                        break
            start = stop
        return out

    async def count(self, f: EventFilter) -> int:
        """How many events of the log match every clause of `f` but `text`."""
        n = 0
        for start in range(0, self.length, SCAN_CHUNK):
            stop = min(start + SCAN_CHUNK, self.length)
            n += sum(
                1
                for item in await self.events_at(range(start, stop))
                if event_matches(f, item.event, item.surface)
            )
        return n


# -- scanning class codes -------------------------------------------------------------


def _find(codes: bytes | bytearray, code: int, start: int, stop: int) -> Iterator[int]:
    """Seqs in [start, stop) whose code is `code`, ascending (a C-speed scan)."""
    needle = bytes((code,))
    pos = codes.find(needle, start, stop)
    while pos != -1:
        yield pos
        pos = codes.find(needle, pos + 1, stop)


def scan_codes(
    codes: bytes | bytearray,
    wanted: frozenset[int],
    start: int,
    stop: int,
    limit: int,
    revived: Sequence[int] = (),
) -> list[int]:
    """Up to `limit` seqs in [start, stop) whose class as of `stop` is wanted.

    `codes` are the classes now; `revived` (ascending) are the seqs shadowed by a
    replacer at or after `stop`, which were CURRENT as of `stop`.
    """
    lanes: list[Iterator[int]] = []
    revived_set = set(revived)
    if LOG_ONLY_CODE in wanted:
        lanes.append(_find(codes, LOG_ONLY_CODE, start, stop))
    if CURRENT_CODE in wanted:
        lanes.append(_find(codes, CURRENT_CODE, start, stop))
        lanes.append(iter(s for s in revived if start <= s < stop))
    if SHADOWED_CODE in wanted:
        shadowed = _find(codes, SHADOWED_CODE, start, stop)
        if revived_set:
            shadowed = (s for s in shadowed if s not in revived_set)
        lanes.append(shadowed)
    out: list[int] = []
    if limit <= 0:
        return out
    for seq in heapq.merge(*lanes) if len(lanes) > 1 else (lanes[0] if lanes else ()):
        out.append(seq)
        if len(out) >= limit:
            break
    return out


def _filtered_page(
    codes: bytes | bytearray,
    wanted: frozenset[int],
    start: int,
    length: int,
    first: int,
    revived: Sequence[int],
) -> tuple[list[int], bool, bool]:
    seqs = scan_codes(codes, wanted, start, length, first + 1, revived)
    has_next = len(seqs) > first
    has_previous = bool(start and scan_codes(codes, wanted, 0, start, 1, revived))
    return seqs[:first], has_next, has_previous


# -- a live session ------------------------------------------------------------------


class LiveState(NamedTuple):
    """What a `LiveView` reads of its live session (`LiveSession.locked_state`): hold
    the lock to read the fold and the citation index; events below a view's length
    never change."""

    lock: threading.Lock
    events: list[SessionEvent]
    fold: SurfaceFold
    cited_by: dict[int, list[int]]


class LiveView(SessionView):
    """A live session as of `length` events, answered from its own fold state.

    Reads take the session's lock only while they look at the fold, for a
    time that follows the answer's size; the log itself is never copied.
    """

    live = True

    def __init__(self, header: SessionHeader, length: int, state: LiveState) -> None:
        self.header = header
        self.length = length
        self._lock, self._events, self._fold, self._cited_by = state

    def _class(self, seq: int) -> EventSurface:
        fold = self._fold
        code = fold.code(seq)
        if code == SHADOWED_CODE:
            by = fold.replaced_by(seq)
            if by is None or by >= self.length:
                return EventSurface.CURRENT
        return SURFACE_BY_CODE[code]

    def _revived(self) -> list[int]:
        """Seqs < length shadowed by replacers appended since (lock held)."""
        n = self.length
        if len(self._fold) == n:
            return []
        return sorted(
            s for made in self._fold.replacements_since(n) for s in made.shadowed if s < n
        )

    def _counts(self, revived: int) -> tuple[int, int, int]:
        """Events per class as of length (lock held): a C-speed count of the codes
        below length, with the `revived` ones (shadowed since) counted as current."""
        codes, n = self._fold.codes, self.length
        log_only, current, shadowed = (codes.count(bytes((c,)), 0, n) for c in range(3))
        return log_only, current + revived, shadowed - revived

    async def page(
        self,
        after_seq: int | None,
        first: int,
        wanted: frozenset[EventSurface] | None,
        *,
        with_data: bool = True,
    ) -> EventPage:
        n = self.length
        start = page_start(after_seq, n)
        events = self._events
        with self._lock:
            if wanted is None:
                stop = min(start + first, n)
                seqs: Sequence[int] = range(start, stop)
                has_next, has_previous, total = stop < n, start > 0, n
            else:
                codes = codes_of(wanted)
                revived = self._revived()
                seqs, has_next, has_previous = _filtered_page(
                    self._fold.codes, codes, start, n, first, revived
                )
                counts = self._counts(len(revived))
                total = sum(counts[c] for c in codes)
            items = [Classified(events[s], self._class(s)) for s in seqs]
        return EventPage(items, has_next, has_previous, total)

    async def events_at(self, seqs: Sequence[int]) -> list[Classified]:
        events = self._events
        with self._lock:
            return [Classified(events[s], self._class(s)) for s in seqs]

    async def window(self, lo: int, hi: int) -> list[SessionEvent]:
        return self._events[max(lo, 0) : min(hi, self.length - 1) + 1]

    async def surface(self) -> list[Classified]:
        n = self.length
        events = self._events
        with self._lock:
            fold = self._fold
            head, nxt = fold.nodes_linked()
            nodes: list[int] = []
            node = head
            while node != -1:
                nodes.append(node)
                node = nxt[node]
            if len(fold) != n:
                nodes = _rewind(nodes, n, fold.replacement)
            return [Classified(events[s], EventSurface.CURRENT) for s in nodes]

    async def relations(self, seq: int) -> Relations:
        n = self.length
        with self._lock:
            fold = self._fold
            chain = []
            by = fold.replaced_by(seq)
            while by is not None and by < n:
                chain.append(by)
                by = fold.replaced_by(by)
            own = fold.replacement(seq)
            cited = self._cited_by.get(seq, ())
            derived = list(cited[: bisect_left(cited, n)])
        return Relations(chain, list(own.shadowed) if own else [], derived)

    async def classes(self) -> list[Classified]:
        events = self._events
        with self._lock:
            return [Classified(events[s], self._class(s)) for s in range(self.length)]


def _rewind(nodes: list[int], n: int, replacement: object) -> list[int]:
    """The surface as of `n` from today's surface: undo every event >= n (an append
    leaves, a replacement gives back what it shadowed, recursively, in place)."""
    lookup = replacement  # fold.replacement(seq) -> Replacement | None
    out: list[int] = []
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        if node < n:
            out.append(node)
            continue
        made = lookup(node)  # type: ignore[operator]
        if made is not None:
            stack.extend(reversed(made.shadowed))
    return out


# -- a whole log and its fold ----------------------------------------------------------


class FoldedView(SessionView):
    """A whole loaded log and its fold (backends with only `load()`, or stored logs
    whose derivations are not stored)."""

    def __init__(
        self, header: SessionHeader, events: Sequence[SessionEvent], fold: FoldResult, live: bool
    ) -> None:
        self.header = header
        self.live = live
        self.length = len(events)
        self._events = events
        self._fold = fold
        self._cited_by: dict[int, list[int]] | None = None

    def _item(self, seq: int) -> Classified:
        return Classified(self._events[seq], self._fold.surface_of(seq))

    async def page(
        self,
        after_seq: int | None,
        first: int,
        wanted: frozenset[EventSurface] | None,
        *,
        with_data: bool = True,
    ) -> EventPage:
        n = self.length
        start = page_start(after_seq, n)
        if wanted is None:
            stop = min(start + first, n)
            return EventPage([self._item(s) for s in range(start, stop)], stop < n, start > 0, n)
        codes = codes_of(wanted)
        all_codes = self._fold.codes
        seqs, has_next, has_previous = _filtered_page(all_codes, codes, start, n, first, ())
        total = sum(all_codes.count(bytes((c,))) for c in codes)
        return EventPage([self._item(s) for s in seqs], has_next, has_previous, total)

    async def events_at(self, seqs: Sequence[int]) -> list[Classified]:
        return [self._item(s) for s in seqs]

    async def window(self, lo: int, hi: int) -> list[SessionEvent]:
        return list(self._events[max(lo, 0) : hi + 1])

    async def surface(self) -> list[Classified]:
        return [Classified(self._events[s], EventSurface.CURRENT) for s in self._fold.nodes]

    async def relations(self, seq: int) -> Relations:
        fold = self._fold
        own = fold.replacement(seq)
        if self._cited_by is None:
            index: dict[int, list[int]] = {}
            for event in self._events:
                sources = event.source_event_seqs
                if isinstance(sources, (list, tuple)):
                    for source in sources:
                        index.setdefault(source, []).append(event.seq)
            self._cited_by = index
        return Relations(
            fold.replacement_chain(seq),
            list(own.shadowed) if own else [],
            list(self._cited_by.get(seq, ())),
        )

    async def classes(self) -> list[Classified]:
        return [self._item(s) for s in range(self.length)]
