"""`StoredView`: a stored session answered from the backend's stored derivations.

Every question goes to the observation's batched, memoised loaders of the
backend's `DerivedReads` (`gateway.core.loaders.StoredEventReads`), as of the
log length the observation's proof of the session read, so a page costs a
page whatever the log's length (SPEC §3a). The view holds those reads, not the
observation that made it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from .backend import EventQuery, StoredEvent, StoredSession
from .filters import EventFilter, event_matches
from .fold import CURRENT_CODE, SHADOWED_CODE, SURFACE_BY_CODE, EventSurface
from .loaders import StoredEventReads
from .model import SessionEvent
from .views import (
    SCAN_CHUNK,
    Classified,
    EventPage,
    Relations,
    SessionView,
    codes_of,
    page_start,
)

_new_tuple = tuple.__new__


class StoredView(SessionView):
    """A stored session answered from the backend's stored derivations, by index."""

    live = False

    def __init__(self, reads: StoredEventReads, stored: StoredSession) -> None:
        assert stored.counts is not None
        self.header = stored.header
        self.length = stored.event_count
        self._counts = stored.counts
        self._reads = reads

    def _classify(self, row: StoredEvent) -> Classified:
        code = row.surface
        if code == SHADOWED_CODE and (row.replaced_by is None or row.replaced_by >= self.length):
            code = CURRENT_CODE
        return Classified(row.event, SURFACE_BY_CODE[code])

    def _classified(self, rows: Sequence[StoredEvent]) -> list[Classified]:
        """`_classify` of each row, in one loop: a page's rows, each a `Classified` built
        as the tuple it is (its generated `__new__` is a Python call per row)."""
        length, by_code, new = self.length, SURFACE_BY_CODE, _new_tuple
        shadowed, current = SHADOWED_CODE, CURRENT_CODE
        out: list[Classified] = []
        add = out.append
        for event, code, replaced_by in rows:
            if code == shadowed and (replaced_by is None or replaced_by >= length):
                code = current
            add(new(Classified, (event, by_code[code])))
        return out

    def _query(self, lo: int, hi: int, **kw: Any) -> EventQuery:
        return EventQuery(self.session_id, lo, hi, self.length, **kw)

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
        codes = None if wanted is None else codes_of(wanted)
        read = self._reads.events
        after = (
            read(self._query(start, n - 1, surfaces=codes, limit=first + 1, with_data=with_data))
            if start < n
            else None
        )
        if codes is None:
            rows = await after if after is not None else []
            has_previous, total = start > 0, n
        else:
            before = read(self._query(0, start - 1, surfaces=codes, limit=1)) if start else None
            rows, earlier = await asyncio.gather(_or_empty(after), _or_empty(before))
            has_previous = bool(earlier)
            total = sum(self._counts[c] for c in codes)
        return EventPage(self._classified(rows[:first]), len(rows) > first, has_previous, total)

    def _pushed(self, f: EventFilter) -> bool:
        """Whether the backend answers `f`'s time and types itself (else: filtered here)."""
        return self._reads.filters or (f.time is None and f.types is None)

    def _filtered_query(
        self, lo: int, hi: int, f: EventFilter, limit: int | None, with_data: bool
    ) -> EventQuery:
        codes = None if f.surface is None else codes_of(f.surface)
        return self._query(
            lo, hi, surfaces=codes, limit=limit, with_data=with_data, time=f.time, types=f.types
        )

    async def select(
        self, lo: int, hi: int, f: EventFilter, limit: int | None, with_data: bool = True
    ) -> list[Classified]:
        lo, hi = max(lo, 0), min(hi, self.length - 1)
        if lo > hi or (limit is not None and limit <= 0):
            return []
        if self._pushed(f):
            rows = await self._reads.events(self._filtered_query(lo, hi, f, limit, with_data))
            return self._classified(rows)
        # time or types on a backend that does not answer them: its classified ranged
        # reads, `SCAN_CHUNK` at a time, tested here
        bare = EventFilter(surface=f.surface)
        out: list[Classified] = []
        start = lo
        while start <= hi and (limit is None or len(out) < limit):
            chunk = await self._reads.events(
                self._filtered_query(start, hi, bare, SCAN_CHUNK, with_data)
            )
            for row in chunk:
                item = self._classify(row)
                if event_matches(f, item.event, item.surface):
                    out.append(item)
            if len(chunk) < SCAN_CHUNK:
                break
            start = chunk[-1].event.seq + 1
        return out if limit is None else out[:limit]

    async def count(self, f: EventFilter) -> int:
        if f.time is None and f.types is None and f.seq is None:
            codes = codes_of(f.surface) if f.surface is not None else frozenset(range(3))
            return sum(self._counts[c] for c in codes)
        lo, hi = 0, self.length - 1
        if f.seq is not None:
            lo = max(lo, f.seq.from_ if f.seq.from_ is not None else lo)
            hi = min(hi, f.seq.to if f.seq.to is not None else hi)
        if lo > hi:
            return 0
        if not self._reads.filters:
            return len(await self.select(lo, hi, f, None, with_data=False))
        return await self._reads.count(self._filtered_query(lo, hi, f, None, False))

    async def events_at(self, seqs: Sequence[int]) -> list[Classified]:
        rows = await self._reads.events_at(self.session_id, seqs)
        return [self._classify(r) for r in rows]

    async def window(self, lo: int, hi: int) -> list[SessionEvent]:
        lo, hi = max(lo, 0), min(hi, self.length - 1)
        if lo > hi:
            return []
        return [r.event for r in await self._reads.events(self._query(lo, hi))]

    async def surface(self) -> list[Classified]:
        rows = await self._reads.surface(self.session_id, self.length)
        return [Classified(r.event, EventSurface.CURRENT) for r in rows]

    async def relations(self, seq: int) -> Relations:
        trace = await self._reads.trace(self.session_id, seq, self.length)
        return Relations(list(trace.replacement_chain), list(trace.replaced), list(trace.derived))

    async def classes(self) -> list[Classified]:
        if self.length == 0:
            return []
        rows = await self._reads.events(self._query(0, self.length - 1, with_data=False))
        return [self._classify(r) for r in rows]


async def _or_empty(rows: Awaitable[list[StoredEvent]] | None) -> list[StoredEvent]:
    return [] if rows is None else await rows
