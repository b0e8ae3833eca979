"""Filtered pages and counts of sessions (SPEC §12), as one observation answers them.

The same page as `Corpus.sessions_page` over the matching sessions only: the
backend's keyset page with every clause but `availability` pushed down
(`FilterReads.filtered_headers_page`) merged with the live overlay filtered by
the same predicates (`filters.header_matches`), a live session shadowing its
stored twin. `availability` is decided here: LIVE keeps the live sessions,
PERSISTED the stored ones (a live session with a stored twin is both), so a
LIVE-only filter asks the backend no page at all.

A backend without `FilterReads` still answers: its `headers_page` is walked in
chunks and filtered here (costs what it skips), and a list/load backend's
listing is filtered whole. Scope (§10) applies first, as for every page.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Awaitable, Callable

from .backend import FilterReads, ScopeFilter
from .batching import Lifetime, PerKey
from .corpus import Corpus, SessionKey, SessionsPage, corpus_key
from .filters import Availability, SessionFilter, availability_matches, header_matches
from .loaders import call_backend
from .model import SessionHeader
from .sources import LiveSources, StoredSources
from .visibility import Visibility

_WALK_CHUNK = 500
"""Headers per `headers_page` call when a backend without `FilterReads` is filtered here."""


def matches_nothing(f: SessionFilter) -> bool:
    """Whether an empty list makes `f` match no session at all."""
    return any(v is not None and not v for v in (f.ids, f.cwd, f.parent, f.availability))


class FilteredSessions:
    """`Corpus`'s pages and counts under a `SessionFilter` (see the module docstring)."""

    def __init__(
        self,
        live: LiveSources,
        stored: StoredSources,
        visibility: Visibility,
        corpus: Corpus,
        filters: FilterReads | None,
        lifetime: Lifetime,
    ) -> None:
        self._live = live
        self._stored = stored
        self._visibility = visibility
        self._corpus = corpus
        self._filters = filters
        self._totals: PerKey[SessionFilter, int] = PerKey(lifetime, self._count)

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _wants(f: SessionFilter) -> tuple[bool, bool]:
        """(live sessions may match, stored sessions may match) by `availability`."""
        if f.availability is None:
            return True, True
        return Availability.LIVE in f.availability, Availability.PERSISTED in f.availability

    async def _live_matching(self, f: SessionFilter) -> dict[str, SessionHeader]:
        """Visible live headers matching every clause of `f` (availability included)."""
        every = self._live.headers()
        part = f.stored_part
        kept = [h for h in every.values() if part is None or header_matches(part, h)]
        visible = await self._visibility.visible_only(kept)
        allow_live, allow_stored = self._wants(f)
        if allow_live:
            return {h.id: h for h in visible}
        if not allow_stored:
            return {}
        twins = await self._stored.headers_of([h.id for h in visible])
        return {h.id: h for h in visible if h.id in twins}

    async def _stored_rows(
        self, after: SessionKey | None, limit: int, part: SessionFilter | None
    ) -> list[SessionHeader]:
        """Up to `limit` stored headers after `after` matching `part`, in corpus order."""
        corpus = self._stored.corpus
        assert corpus is not None
        reads, filters = corpus.reads, self._filters
        where = await self._visibility.session_filter()
        scope: tuple[ScopeFilter, ...] = () if where is None else (where,)

        def key(k: SessionKey | None) -> tuple[int, str] | None:
            return None if k is None else (-k[0], k[1])

        if part is None or filters is not None:
            call: Callable[[], Awaitable[list[SessionHeader]]]
            if part is None:
                call = lambda: reads.headers_page(key(after), limit, *scope)  # noqa: E731
            else:
                assert filters is not None
                call = lambda: filters.filtered_headers_page(  # noqa: E731
                    key(after), limit, part, *scope
                )
            found: list[SessionHeader] = await call_backend("page sessions", call)
            return found
        out: list[SessionHeader] = []
        cursor = after
        while len(out) < limit:
            chunk: list[SessionHeader] = await call_backend(
                "page sessions",
                lambda c=cursor: reads.headers_page(key(c), _WALK_CHUNK, *scope),  # type: ignore[misc]
            )
            out.extend(h for h in chunk if header_matches(part, h))
            if len(chunk) < _WALK_CHUNK:
                break
            cursor = corpus_key(chunk[-1])
        return out[:limit]

    # -- pages and counts -----------------------------------------------------------------

    async def page(
        self, f: SessionFilter, after: SessionKey | None, first: int, *, with_total: bool = True
    ) -> SessionsPage:
        """`first` matching records after `after`, in corpus order; `total` is the number
        of matching sessions (-1 unless `with_total`)."""
        if matches_nothing(f):
            return SessionsPage([], False, after is not None, 0)
        if not self._corpus.pushdown:
            records = [
                r
                for r in await self._corpus.records()
                if header_matches(f, r.header)
                and availability_matches(f, live=r.live, persisted=r.persisted)
            ]
            keys = [corpus_key(r.header) for r in records]
            start = 0 if after is None else bisect_right(keys, after)
            stop = min(start + first, len(records))
            return SessionsPage(records[start:stop], stop < len(records), start > 0, len(records))
        _, allow_stored = self._wants(f)
        every_live = self._live.headers()

        async def rows() -> list[SessionHeader]:
            if not allow_stored or self._stored.corpus is None:
                return []
            return await self._stored_rows(after, first + 1, f.stored_part)

        async def no_total() -> int:
            return -1

        live, page_rows, total = await asyncio.gather(
            self._live_matching(f), rows(), self.total(f) if with_total else no_total()
        )
        merged = [h for h in page_rows if h.id not in every_live]
        merged.extend(h for h in live.values() if after is None or corpus_key(h) > after)
        merged.sort(key=corpus_key)
        records = await self._corpus.records_of(merged[:first])
        return SessionsPage(records, len(merged) > first, after is not None, total)

    async def total(self, f: SessionFilter) -> int:
        """How many (visible) sessions match `f`, counted once per observation and filter."""
        return await self._totals.get(f)

    async def _count(self, f: SessionFilter) -> int:
        if matches_nothing(f):
            return 0
        if not self._corpus.pushdown:
            return (await self.page(f, None, 0)).total
        allow_live, allow_stored = self._wants(f)
        live = await self._live_matching(f)
        corpus = self._stored.corpus
        if not allow_stored or corpus is None:
            return len(live)
        part = f.stored_part
        reads, filters = corpus.reads, self._filters
        where = await self._visibility.session_filter()
        scope: tuple[ScopeFilter, ...] = () if where is None else (where,)

        async def stored_count() -> int:
            if part is None:
                return int(
                    await call_backend("count sessions", lambda: reads.count_sessions(*scope))
                )
            if filters is not None:
                return int(
                    await call_backend(
                        "count sessions", lambda: filters.count_filtered_sessions(part, *scope)
                    )
                )
            count, cursor = 0, None
            while True:
                chunk = await self._stored_rows(cursor, _WALK_CHUNK, None)
                count += sum(1 for h in chunk if header_matches(part, h))
                if len(chunk) < _WALK_CHUNK:
                    return count
                cursor = corpus_key(chunk[-1])

        persisted, twins = await asyncio.gather(stored_count(), self._stored.headers_of(list(live)))
        if not allow_live:
            return persisted  # live ones here all have a stored twin, counted in it
        return persisted + sum(1 for sid in live if sid not in twins)
