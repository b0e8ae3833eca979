"""The per-request context: one corpus observation and the loaders built on it.

Every resolver of one GraphQL request works from the same `Context`, made
fresh for that request and dropped with it:

* `obs` is one `Observation` from `SessionQuery.observe()`. It memoises what it
  loads, so within the request the corpus is listed at most once and each
  session's log is loaded (and folded) at most once, however the query nests;
  nothing survives the request, so the next request asks the sources afresh.
* `event_data` is a DataLoader for event payloads the backend's fold-only fast
  path left out: every payload one request asks for is fetched in one ranged
  read per session (per run of nearby seqs), never one read per event.
* `children()` is the lineage children index of the request's corpus listing,
  built once and shared by every `children` / `lineage` field.

The context only calls the core; the GraphQL types map what it returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strawberry.dataloader import DataLoader

from gateway.core import (
    FoldResult,
    Observation,
    SessionHeader,
    SessionLog,
    SessionQuery,
    SessionRecord,
)
from gateway.core.lineage import children_index

from .cursors import CursorCodec

# Seqs whose payloads are wanted are read in runs: a gap wider than this starts a
# new ranged read instead of reading (and discarding) the events in between.
MAX_WINDOW_GAP = 64


@dataclass(frozen=True, slots=True)
class SessionRef:
    """A session as one request knows it: header, whether live, and (when known) persisted.

    `persisted` is None for a session found in a live store by an exact read:
    whether the backend also holds it is only asked when a client wants to know,
    so reading a live session never depends on persistence.
    """

    header: SessionHeader
    live: bool
    persisted: bool | None

    @classmethod
    def of(cls, record: SessionRecord) -> SessionRef:
        return cls(record.header, record.live, record.persisted)


@dataclass
class Context:
    """Everything request-scoped; see the module docstring."""

    query: SessionQuery
    obs: Observation
    cursors: CursorCodec
    read_window_max: int
    _children: dict[str, list[SessionRecord]] | None = None
    event_data: DataLoader[tuple[str, int], Any] = field(init=False)

    def __post_init__(self) -> None:
        self.event_data = DataLoader(self._load_event_data)

    @classmethod
    def for_request(cls, query: SessionQuery, cursors: CursorCodec) -> Context:
        return cls(query, query.observe(), cursors, query.read_window_max)

    # -- the corpus ----------------------------------------------------------

    async def records(self) -> list[SessionRecord]:
        return await self.obs.records()

    async def record_map(self) -> dict[str, SessionRecord]:
        return await self.obs.record_map()

    async def children(self) -> dict[str, list[SessionRecord]]:
        records = await self.obs.record_map()
        if self._children is None:
            self._children = children_index(records)
        return self._children

    async def session(self, session_id: str) -> SessionRef:
        """One session by id: live stores first (never touching persistence), else the backend.

        Raises SESSION_NOT_FOUND / SOURCE_CONFLICT / PERSISTENCE_FAILED like the
        core's exact reads.
        """
        live = self.obs.live_log(session_id)
        if live is not None:
            return SessionRef(live.header, live=True, persisted=None)
        header = await self.obs.persisted_header(session_id)
        return SessionRef(header, live=False, persisted=True)

    async def is_persisted(self, session_id: str) -> bool:
        return session_id in await self.obs.backend_headers()

    # -- logs ------------------------------------------------------------------

    async def log(self, session_id: str) -> SessionLog:
        return await self.obs.log(session_id, need_data=False)

    async def fold(self, session_id: str) -> tuple[SessionLog, FoldResult]:
        return await self.obs.fold(session_id)

    def data_of(self, session_id: str, seq: int) -> Awaitable[Any]:
        return self.event_data.load((session_id, seq))

    async def _load_event_data(self, keys: list[tuple[str, int]]) -> list[Any]:
        by_session: dict[str, set[int]] = {}
        for sid, seq in keys:
            by_session.setdefault(sid, set()).add(seq)
        reads: list[tuple[str, int, int]] = []
        for sid, seqs in by_session.items():
            reads.extend((sid, lo, hi) for lo, hi in _runs(sorted(seqs)))
        windows = await asyncio.gather(*(self.obs.window(sid, lo, hi) for sid, lo, hi in reads))
        found: dict[tuple[str, int], Any] = {}
        for (sid, _, _), (_, events) in zip(reads, windows, strict=True):
            for event in events:
                found[(sid, event.seq)] = event.data
        return [found.get(key) for key in keys]


def _runs(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Split ascending seqs into (first, last) runs with gaps of at most MAX_WINDOW_GAP."""
    runs: list[tuple[int, int]] = []
    start = prev = seqs[0]
    for seq in seqs[1:]:
        if seq - prev > MAX_WINDOW_GAP:
            runs.append((start, prev))
            start = seq
        prev = seq
    runs.append((start, prev))
    return runs


__all__ = ["Context", "SessionRef"]
