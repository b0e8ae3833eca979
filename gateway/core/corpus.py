"""The corpus across both sources, as one observation answers it (SPEC §3, §3a).

Records, pages, counts and children: by the backend's indexes when it has
them (`CorpusReads`: a page costs a page), else from one listing of every
header. Live headers overlay stored ones (the live header wins, and every
live id an answer includes is checked against its stored twin), and the
observation's scope (`gateway.core.visibility`) applies to all of it.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from .backend import ScopeFilter
from .batching import Lifetime, Once
from .errors import ErrorCode, SessionQueryError, source_conflict
from .lineage import children_index
from .loaders import ChildrenKey, call_backend
from .model import SessionHeader
from .results import SessionRecord
from .sources import LiveSources, StoredSources
from .visibility import Visibility

SessionKey = tuple[int, str]
"""A session's place in corpus order: (-createdAt, id) ascending."""


def corpus_key(header: SessionHeader) -> SessionKey:
    return (-header.created_at, header.id)


@dataclass(frozen=True, slots=True)
class SessionsPage:
    """A page of the corpus in its order, and the size of the whole corpus."""

    records: list[SessionRecord]
    has_next: bool
    has_previous: bool
    total: int


class Corpus:
    """Records, pages, counts and children of one observation's (scoped) corpus."""

    def __init__(
        self,
        live: LiveSources,
        stored: StoredSources,
        visibility: Visibility,
        lifetime: Lifetime,
    ) -> None:
        self._live = live
        self._stored = stored
        self._visibility = visibility
        self._seen_stored: dict[str, SessionHeader] = {}  # headers stored answers included
        self._all_records: Once[tuple[SessionRecord, ...]] = Once(lifetime, self._make_records)
        self._records: Once[tuple[SessionRecord, ...]] = Once(lifetime, self._visible_records)
        self._record_map: Once[dict[str, SessionRecord]] = Once(lifetime, self._make_record_map)
        self._total: Once[int] = Once(lifetime, self._count_sessions)
        self._children_index: Once[dict[str, list[SessionRecord]]] = Once(
            lifetime, self._make_children_index
        )

    @property
    def pushdown(self) -> bool:
        """Whether corpus questions go to the backend's indexes (else: one listing)."""
        return self._stored.backend is None or self._stored.corpus is not None

    # -- the whole listing (backends without pushdown) -----------------------------------

    async def records(self) -> list[SessionRecord]:
        """Every (visible) session, newest first (ties by id): the cross-corpus list, made once."""
        return list(await self._records.get())

    async def _visible_records(self) -> tuple[SessionRecord, ...]:
        every = await self._all_records.get()
        if self._visibility.scope is None:
            return every
        kept = await self._visibility.visible_only([r.header for r in every])
        ids = {h.id for h in kept}
        return tuple(r for r in every if r.header.id in ids)

    async def _make_records(self) -> tuple[SessionRecord, ...]:
        persisted = await self._stored.listing()
        live = self._live.headers()
        records = []
        for sid, header in live.items():
            stored = persisted.get(sid)
            if stored is not None and (diff := header.conflicts_with(stored)):
                raise source_conflict(sid, "the live and the persisted header", diff)
            records.append(SessionRecord(header, live=True, persisted=stored is not None))
        for sid, header in persisted.items():
            if sid not in live:
                records.append(SessionRecord(header, live=False, persisted=True))
        records.sort(key=lambda r: corpus_key(r.header))
        return tuple(records)

    async def record_map(self) -> dict[str, SessionRecord]:
        return await self._record_map.get()

    async def _make_record_map(self) -> dict[str, SessionRecord]:
        return {r.header.id: r for r in await self.records()}

    async def children_index(self) -> dict[str, list[SessionRecord]]:
        """parent id -> children over the whole listing (backends without pushdown)."""
        return await self._children_index.get()

    async def _make_children_index(self) -> dict[str, list[SessionRecord]]:
        return children_index(await self.record_map())

    # -- records --------------------------------------------------------------------------

    async def live_record(self, header: SessionHeader) -> SessionRecord:
        """The record of a live session that an answer includes: its persisted header
        is looked up and must agree (SPEC §3a: conflicts exact for what is answered)."""
        stored = await self._stored.stored(header.id) if self._stored.backend is not None else None
        if stored is not None and (diff := header.conflicts_with(stored.header)):
            raise source_conflict(header.id, "the live and the persisted header", diff)
        return SessionRecord(header, live=True, persisted=stored is not None)

    async def record(self, session_id: str) -> SessionRecord | None:
        """One session's corpus record, or None when the corpus lacks it."""
        if not self.pushdown:
            return (await self.record_map()).get(session_id)
        if self._visibility.scope is not None:
            try:
                await self._visibility.require(session_id)
            except SessionQueryError as exc:
                if exc.code is ErrorCode.SESSION_NOT_FOUND:
                    return None
                raise
        live = self._live.headers().get(session_id)
        if live is not None:
            return await self.live_record(live)
        seen = self._seen_stored.get(session_id)
        if seen is not None:
            return SessionRecord(seen, live=False, persisted=True)
        stored = await self._stored.stored(session_id)
        return None if stored is None else SessionRecord(stored.header, False, True)

    async def records_of(self, headers: Sequence[SessionHeader]) -> list[SessionRecord]:
        """Records for headers an answer includes: live ones checked against the backend
        (all at once), stored ones remembered so that a later `record()` asks nothing."""
        live = self._live.headers()
        checks = [self.live_record(live[h.id]) for h in headers if h.id in live]
        checked = iter(await asyncio.gather(*checks))
        out = []
        for header in headers:
            if header.id in live:
                out.append(next(checked))
            else:
                self._seen_stored.setdefault(header.id, header)
                out.append(SessionRecord(header, live=False, persisted=True))
        return out

    # -- pages and counts -------------------------------------------------------------------

    async def sessions_total(self) -> int:
        """How many (visible) sessions the corpus holds, counted once per observation:
        the backend's count (scoped when the observation is) plus live-only sessions."""
        return await self._total.get()

    async def _count_sessions(self) -> int:
        corpus = self._stored.corpus
        if self._stored.backend is not None and corpus is None:
            return len(await self.records())
        every_live = self._live.headers()
        live = [h.id for h in await self._visibility.visible_only(list(every_live.values()))]
        if corpus is None:
            return len(live)
        reads = corpus.reads
        where = await self._visibility.session_filter()
        persisted, stored_live = await asyncio.gather(
            call_backend(
                "count sessions",
                lambda: reads.count_sessions() if where is None else reads.count_sessions(where),
            ),
            self._stored.headers_of(live),
        )
        return int(persisted) + sum(1 for sid in live if sid not in stored_live)

    async def sessions_page(
        self, after: SessionKey | None, first: int, *, with_total: bool = True
    ) -> SessionsPage:
        """`first` records after the key `after`, in corpus order, and the corpus size
        (`total`; -1 unless `with_total`, since a scoped count can cost more than the
        page: see `sessions_total`).

        With a backend that pages by index: its keyset page merged with the live
        overlay (live ids it also holds are skipped in its page and counted once).
        `first + 1` stored rows always suffice: an item of the merged page is live
        (the overlay has it) or stored-only with at most `first` stored rows before it.
        """
        corpus = self._stored.corpus
        if self._stored.backend is not None and corpus is None:
            records = await self.records()
            keys = [corpus_key(r.header) for r in records]
            start = 0 if after is None else bisect_right(keys, after)
            stop = min(start + first, len(records))
            return SessionsPage(records[start:stop], stop < len(records), start > 0, len(records))
        every_live = self._live.headers()
        live = {h.id: h for h in await self._visibility.visible_only(list(every_live.values()))}
        where = await self._visibility.session_filter()

        async def rows() -> list[SessionHeader]:
            if corpus is None:
                return []
            reads = corpus.reads
            found: list[SessionHeader] = await call_backend(
                "page sessions",
                lambda: reads.headers_page(
                    None if after is None else (-after[0], after[1]),
                    first + 1,
                    *(() if where is None else (where,)),
                ),
            )
            return found

        async def no_total() -> int:
            return -1

        page_rows, total = await asyncio.gather(
            rows(), self.sessions_total() if with_total else no_total()
        )
        merged = [h for h in page_rows if h.id not in every_live]
        merged.extend(h for h in live.values() if after is None or corpus_key(h) > after)
        merged.sort(key=corpus_key)
        chosen = merged[:first]
        records = await self.records_of(chosen)
        return SessionsPage(records, len(merged) > first, after is not None, total)

    # -- children ---------------------------------------------------------------------------

    async def children(self, session_id: str) -> list[SessionRecord]:
        """The sessions forked from this one, by createdAt then id."""
        if not self.pushdown:
            return list((await self.children_index()).get(session_id, ()))
        corpus = self._stored.corpus
        found: list[SessionHeader] = []
        if corpus is not None:
            key = ChildrenKey(session_id, await self._below_filter(session_id))
            found.extend(await corpus.children.load(key) or ())  # scoped by `within`
        live = self._live.headers()
        merged = {h.id: h for h in found if h.id not in live}
        forks = [h for h in live.values() if h.parent_session == session_id]
        merged.update((h.id, h) for h in await self._visibility.visible_only(forks))
        ordered = sorted(merged.values(), key=lambda h: (h.created_at, h.id))
        return await self.records_of(ordered)

    async def _below_filter(self, session_id: str) -> ScopeFilter | None:
        """What a scoped backend read of this session's children must match: nothing
        (None) when unscoped or when the session lies in a granted tree (all below it
        is visible); else a cwd prefix, an id glob, or being a granted tree's root."""
        visibility = self._visibility
        scope = visibility.scope
        if scope is None:
            return None
        parent = await self.record(session_id)
        if parent is not None and scope.has_trees and await visibility.tree_member(parent.header):
            return None
        return visibility.walk_filter
