"""Filtered pages of one session's events (SPEC §12), over any `SessionView`.

Order, paging and the total are those of the unfiltered page over the matching
events only. The `surface` argument and `filter.surface` are ANDed
(`and_surface`). Every clause but `text` is the view's `select` / `count`: the
backend's indexes for a stored session (`StoredView`), the log in memory for a
live or folded one; a filter of `surface` alone is the view's own classified
page, unchanged. `text` (`gateway.core.text_filter`) tests the candidates the
other clauses select, read `SCAN_CHUNK` events at a time with their payloads
(memory stays bounded for a long log), the regex run off the event loop for a
full chunk. Only the event types that can have a text (§13) are candidates.

`total` is counted only when asked (`FilteredEvents.total()`): with `text` it
scans the whole session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from .event_text import TEXT_EVENT_TYPES
from .filters import EventFilter
from .fold import EventSurface
from .text_filter import TextMatcher
from .views import SCAN_CHUNK, Classified, SessionView, page_start

_OFF_LOOP = 64
"""Candidates from which a chunk's text test runs in a worker thread."""


@dataclass(frozen=True, slots=True)
class FilteredEvents:
    """A page of a session's matching events; `total()` counts them all when asked."""

    items: list[Classified]
    has_next: bool
    has_previous: bool
    total: Callable[[], Awaitable[int]]


def and_surface(f: EventFilter | None, surface: frozenset[EventSurface] | None) -> EventFilter:
    """The filter with the `surface` argument ANDed into `filter.surface`."""
    f = f or EventFilter()
    if surface is None:
        return f
    if f.surface is None:
        return replace(f, surface=tuple(sorted(surface)))
    return replace(f, surface=tuple(s for s in f.surface if s in surface))


def only_surface(f: EventFilter) -> bool:
    """Whether `f` constrains nothing but the classification (the view's own page)."""
    return f.seq is None and f.time is None and f.types is None and f.text is None


def _matches_nothing(f: EventFilter) -> bool:
    return (f.types is not None and not f.types) or (f.surface is not None and not f.surface)


def _text_candidates(f: EventFilter) -> EventFilter:
    """`f` narrowed to the event types that can have a text (§13)."""
    types = TEXT_EVENT_TYPES if f.types is None else TEXT_EVENT_TYPES.intersection(f.types)
    return replace(f, types=tuple(sorted(types)), text=None)


def _hits(matcher: TextMatcher, chunk: list[Classified]) -> list[Classified]:
    test = matcher.matches
    return [item for item in chunk if test(item.event.type, item.event.data)]


async def _scan(
    view: SessionView,
    lo: int,
    hi: int,
    f: EventFilter,
    matcher: TextMatcher | None,
    want: int | None,
    *,
    keep: bool = True,
    with_data: bool = True,
) -> tuple[list[Classified], int]:
    """Matching events in `lo..hi` (at most `want`) and how many matched (`keep=False`:
    counted, not kept)."""
    if matcher is None:
        found = await view.select(lo, hi, f, want, with_data)
        return (found if keep else []), len(found)
    candidates = _text_candidates(f)
    out: list[Classified] = []
    n = 0
    start = lo
    while start <= hi and (want is None or n < want):
        chunk = await view.select(start, hi, candidates, SCAN_CHUNK, True)
        if not chunk:
            break
        if len(chunk) >= _OFF_LOOP:
            hits = await asyncio.to_thread(_hits, matcher, chunk)
        else:
            hits = _hits(matcher, chunk)
        n += len(hits)
        if keep:
            out.extend(hits)
        if len(chunk) < SCAN_CHUNK:
            break
        start = chunk[-1].event.seq + 1
    if want is not None:
        n = min(n, want)
        del out[want:]
    return out, n


def _seq_bounds(f: EventFilter, lo: int, hi: int) -> tuple[int, int]:
    if f.seq is not None:
        if f.seq.from_ is not None:
            lo = max(lo, f.seq.from_)
        if f.seq.to is not None:
            hi = min(hi, f.seq.to)
    return lo, hi


async def matcher_of(text: str | None) -> TextMatcher | None:
    """The matcher of a checked `text` clause, compiled off the event loop (the first
    compile builds the case-folding table)."""
    return None if text is None else await asyncio.to_thread(TextMatcher, text)


async def filtered_page(
    view: SessionView, after_seq: int | None, first: int, f: EventFilter, text: str | None
) -> FilteredEvents:
    """Up to `first` matching events after `after_seq`; `text` is `f.text` as checked
    (trimmed) by `filters.check_event_filter`."""
    if _matches_nothing(f):

        async def zero() -> int:
            return 0

        return FilteredEvents([], False, False, zero)
    if only_surface(f):
        wanted = None if f.surface is None else frozenset(f.surface)
        page = await view.page(after_seq, first, wanted)

        async def known() -> int:
            return page.total

        return FilteredEvents(page.items, page.has_next, page.has_previous, known)
    matcher = await matcher_of(text)
    n = view.length
    start = page_start(after_seq, n)
    lo, hi = _seq_bounds(f, start, n - 1)
    before_lo, before_hi = _seq_bounds(f, 0, start - 1)

    async def earlier() -> bool:
        if before_lo > before_hi:
            return False
        return (await _scan(view, before_lo, before_hi, f, matcher, 1, keep=False))[1] > 0

    (items, _), has_previous = await asyncio.gather(
        _scan(view, lo, hi, f, matcher, first + 1), earlier()
    )

    async def total() -> int:
        if matcher is None:
            return await view.count(f)
        whole_lo, whole_hi = _seq_bounds(f, 0, n - 1)
        return (await _scan(view, whole_lo, whole_hi, f, matcher, None, keep=False))[1]

    return FilteredEvents(items[:first], len(items) > first, has_previous, total)


async def all_matching(view: SessionView, f: EventFilter, text: str | None) -> list[Classified]:
    """Every matching event by seq (payloads left out where no clause needs them)."""
    if _matches_nothing(f):
        return []
    matcher = await matcher_of(text)
    lo, hi = _seq_bounds(f, 0, view.length - 1)
    if matcher is None:
        return await view.select(lo, hi, f, None, with_data=False)
    found, _ = await _scan(view, lo, hi, f, matcher, None)
    return found
