"""Lineage walks over both sources (SPEC §4 trace_session, §10): the records a lineage needs.

A lineage is a session's parent chain and every descendant, through live and
stored sessions alike. Stored chains and subtrees come from the backend's
batched walks, each seed's own answer (`gateway.core.reach`); live sessions
come from the overlay, and a walk continues below a live session until
nothing new is reached. In a scoped observation the chain stops at the first
invisible parent and the descendants are the visible sessions reached through
visible ones, in the backend too. Each target's records are gathered once per
observation: that memo entry is the target's whole lineage.
"""

from __future__ import annotations

import asyncio

from .batching import Lifetime, PerKey
from .corpus import Corpus
from .errors import session_not_found
from .model import SessionHeader
from .reach import Headers, WalkSeed, below, proves_absent
from .results import SessionRecord
from .sources import LiveSources, StoredSources
from .visibility import Visibility


class Walks:
    """Lineage records of one observation's (scoped) corpus."""

    def __init__(
        self,
        live: LiveSources,
        stored: StoredSources,
        visibility: Visibility,
        corpus: Corpus,
        lifetime: Lifetime,
    ) -> None:
        self._live = live
        self._stored = stored
        self._visibility = visibility
        self._corpus = corpus
        self._lineages: PerKey[str, dict[str, SessionRecord]] = PerKey(lifetime, self._lineage)

    async def lineage_records(self, session_id: str) -> dict[str, SessionRecord]:
        """The records a lineage of `session_id` needs: its ancestor chain (up to the
        first missing parent or a revisit) and every descendant, over both sources."""
        if not self._corpus.pushdown:
            return await self._corpus.record_map()
        return await self._lineages.get(session_id)

    async def _lineage(self, session_id: str) -> dict[str, SessionRecord]:
        target = await self._corpus.record(session_id)
        if target is None:
            raise session_not_found(session_id, "it is not in the corpus")
        up, down = await asyncio.gather(
            self._ancestors(target.header), self._descendants(target.header)
        )
        if self._visibility.scope is not None:
            up = await self._visible_chain(up)
        headers = {session_id: target.header, **up, **down}
        live = self._live.headers()
        records = await self._corpus.records_of([live.get(sid, h) for sid, h in headers.items()])
        return {r.header.id: r for r in records}

    async def _visible_chain(self, up: dict[str, SessionHeader]) -> dict[str, SessionHeader]:
        """The chain cut at its first invisible parent (which becomes the unresolved one);
        the descendants are already the visible ones reached through visible ones."""
        chain: dict[str, SessionHeader] = {}
        for sid, header in up.items():  # parent first, then upward
            if not await self._visibility.visible(header):
                break
            chain[sid] = header
        return chain

    async def _ancestors(self, target: SessionHeader) -> dict[str, SessionHeader]:
        """The parent chain of `target` up to the first id the corpus lacks or a revisit,
        asking the backend for a stored parent's whole stored chain at once."""
        corpus = self._stored.corpus
        live = self._live.headers()
        chain: dict[str, SessionHeader] = {}
        stored: Headers = {}  # the stored chain last read
        child = target
        node = target.parent_session
        while node is not None and node != target.id and node not in chain:
            if node in live:
                chain[node] = live[node]
            else:
                if node not in stored:
                    if corpus is None or proves_absent(stored, child, node):
                        break
                    reached = await corpus.ancestry.load(node)
                    stored = reached.headers if reached is not None else {}
                if node not in stored:
                    break
                chain[node] = stored[node]
            child = chain[node]
            node = child.parent_session
        return chain

    async def _descendants(self, target: SessionHeader) -> dict[str, SessionHeader]:
        """Every session below `target`: stored ones by the backend's walk, live ones by
        the overlay, walking again below live sessions until nothing new is reached."""
        corpus = self._stored.corpus
        visibility = self._visibility
        scope = visibility.scope
        live = self._live.headers()
        if scope is not None:  # walk through visible sessions only, in the backend too
            live = {h.id: h for h in await visibility.visible_only(list(live.values()))}
        seeded: set[str] = set()
        frontier = [target.id]
        pool: dict[str, SessionHeader] = {}
        while True:
            seeded.update(frontier)
            if corpus is not None:
                seeds = [target if sid == target.id else live[sid] for sid in frontier]
                if scope is not None and scope.has_trees:
                    inside = await asyncio.gather(*(visibility.tree_member(h) for h in seeds))
                else:
                    inside = [False] * len(seeds)
                within = visibility.walk_filter
                keys = [WalkSeed(h.id, within, i) for h, i in zip(seeds, inside, strict=True)]
                parts = await asyncio.gather(*(corpus.descendancy.load(k) for k in keys))
                if not live:  # nothing to overlay: the target's own walk is the answer
                    own = parts[0].headers if parts[0] is not None else {}
                    return {sid: h for sid, h in own.items() if sid != target.id}
                for part in parts:
                    if part is not None:
                        pool.update(part.headers)
            pool.update(live)
            reached = below(target.id, pool)
            frontier = [sid for sid in reached if sid in live and sid not in seeded]
            if not frontier:
                return {sid: pool[sid] for sid in reached}
