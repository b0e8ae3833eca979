"""The typed registry of one observation's batched backend questions: one loader each.

Each capability the backend offers (`gateway.core.backend`) gets a registry
whose fields are its loaders, one per batched question, with a typed key and a
typed answer (`Loader[K, V]`, `gateway.core.batching`). A field is made on
first use, so an observation pays only for the questions it asks. Every
batch function here wraps backend failures into PERSISTENCE_FAILED, refuses
answers of the wrong shape, and, for the lineage walks, splits the backend's
union into each seed's own answer (`gateway.core.reach`) before the loader
remembers anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import NamedTuple, TypeVar

from .backend import (
    CorpusReads,
    DerivedReads,
    EventQuery,
    FilterReads,
    ScopeFilter,
    StoredEvent,
    StoredSession,
    StoredTrace,
    TitleReads,
)
from .batching import BatchFn, Lifetime, Loader
from .errors import ErrorCode, SessionQueryError, backend_failure, session_not_found
from .model import SessionEvent, SessionHeader
from .reach import Headers, Reached, WalkSeed, ancestry_per_seed, descendancy_per_seed

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


async def call_backend(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, any failure but the contract's own reported as PERSISTENCE_FAILED."""
    try:
        return await call()
    except SessionQueryError:
        raise
    except Exception as exc:  # any backend failure is PERSISTENCE_FAILED
        raise backend_failure(what, exc) from exc


def check_header(header: object) -> SessionHeader:
    """`header`, refused (PERSISTENCE_FAILED) unless it is a `SessionHeader`."""
    if not isinstance(header, SessionHeader):
        raise SessionQueryError(
            ErrorCode.PERSISTENCE_FAILED,
            f"persistence backend returned {type(header).__name__}, not a SessionHeader",
        )
    return header


def _dict(name: str, found: T) -> T:
    """`found`, refused (PERSISTENCE_FAILED) unless the backend answered with a dict."""
    if not isinstance(found, dict):
        raise SessionQueryError(
            ErrorCode.PERSISTENCE_FAILED,
            f"persistence backend's {name} returned {type(found).__name__}, not a dict",
        )
    return found


def _headers(name: str, found: Headers) -> Headers:
    """`found` (headers by id), refused unless a dict of `SessionHeader`s."""
    answered: Iterable[object] = _dict(name, found).values()  # whatever the backend sent
    for header in answered:
        if not isinstance(header, SessionHeader):  # inline: walks answer thousands
            check_header(header)
    return found


def _guarded(
    name: str, what: str, fetch: Callable[[Sequence[K]], Awaitable[Mapping[K, V]]]
) -> BatchFn[K, V]:
    """`fetch` with its failures reported as PERSISTENCE_FAILED and its answer a dict."""

    async def guarded(keys: Sequence[K]) -> Mapping[K, V]:
        return _dict(name, await call_backend(what, lambda: fetch(keys)))

    return guarded


class ChildrenKey(NamedTuple):
    """The children of `parent`, only those matching `within` when given (a scope)."""

    parent: str
    within: ScopeFilter | None = None


class CorpusLoaders:
    """The corpus questions of `CorpusReads`, batched and remembered per key (`reads`
    answers the unbatched ones: pages and counts)."""

    def __init__(self, reads: CorpusReads, lifetime: Lifetime) -> None:
        self.reads = reads
        self._lifetime = lifetime

    @cached_property
    def headers(self) -> Loader[str, SessionHeader]:
        """The stored header of an id."""
        reads = self.reads

        async def batch(ids: Sequence[str]) -> Headers:
            found = await call_backend("look up sessions", lambda: reads.load_headers(ids))
            return _headers("load_headers", found)

        return Loader(self._lifetime, batch)

    @cached_property
    def children(self) -> Loader[ChildrenKey, list[SessionHeader]]:
        """The stored sessions forked from a parent (scoped by `within`), by createdAt
        then id: one backend call per filter among a batch's keys, made together."""
        reads = self.reads

        async def one(
            within: ScopeFilter | None, parents: list[str]
        ) -> dict[str, list[SessionHeader]]:
            async def call() -> dict[str, list[SessionHeader]]:
                if within is None:  # the unscoped call, as a backend without `where` has it
                    return await reads.load_children(parents)
                return await reads.load_children(parents, within)

            return _dict("load_children", await call_backend("list children", call))

        async def batch(keys: Sequence[ChildrenKey]) -> dict[ChildrenKey, list[SessionHeader]]:
            groups: dict[ScopeFilter | None, list[str]] = {}
            for key in keys:
                groups.setdefault(key.within, []).append(key.parent)
            parts = await asyncio.gather(*(one(w, ids) for w, ids in groups.items()))
            out: dict[ChildrenKey, list[SessionHeader]] = {}
            for within, found in zip(groups, parts, strict=True):
                for parent, children in found.items():
                    out[ChildrenKey(parent, within)] = children
            return out

        return Loader(self._lifetime, batch)

    @cached_property
    def ancestry(self) -> Loader[str, Reached]:
        """A session's own stored chain: itself when stored, then its stored parents."""
        reads = self.reads

        async def union(seeds: Sequence[str]) -> Headers:
            found = await call_backend("trace lineage", lambda: reads.load_ancestry(seeds))
            return _headers("load_ancestry", found)

        return Loader(self._lifetime, ancestry_per_seed(union))

    @cached_property
    def descendancy(self) -> Loader[WalkSeed, Reached]:
        """A session's own stored descendants (through visible ones, `within` a scope)."""
        reads = self.reads

        async def whole(seeds: Sequence[str]) -> Headers:
            found = await call_backend("trace lineage", lambda: reads.load_descendancy(seeds))
            return _headers("load_descendancy", found)

        async def scoped(
            seeds: Sequence[str], within: ScopeFilter, inside: Sequence[str]
        ) -> Headers:
            found = await call_backend(
                "trace lineage", lambda: reads.load_descendancy(seeds, within, inside)
            )
            return _headers("load_descendancy", found)

        return Loader(self._lifetime, descendancy_per_seed(whole, scoped))


EventAt = tuple[str, int]
"""(session id, seq)."""
SurfaceAt = tuple[str, int]
"""(session id, as_of)."""
TraceAt = tuple[str, int, int]
"""(session id, seq, as_of)."""


class DerivedLoaders:
    """The stored derivations of `DerivedReads`, batched and remembered per key."""

    def __init__(
        self, reads: DerivedReads, lifetime: Lifetime, filters: FilterReads | None = None
    ) -> None:
        self._reads = reads
        self._lifetime = lifetime
        self.filters = filters

    @cached_property
    def sessions(self) -> Loader[str, StoredSession]:
        """A stored session's header, log size and class counts (one read of its row)."""
        reads = self._reads

        async def batch(ids: Sequence[str]) -> Mapping[str, StoredSession]:
            found = await call_backend("look up sessions", lambda: reads.load_sessions(ids))
            for stored in _dict("load_sessions", found).values():
                if not isinstance(stored, StoredSession):
                    raise SessionQueryError(
                        ErrorCode.PERSISTENCE_FAILED,
                        f"persistence backend returned {type(stored).__name__}, "
                        "not a StoredSession",
                    )
                check_header(stored.header)
            return found

        return Loader(self._lifetime, batch)

    @cached_property
    def events(self) -> Loader[EventQuery, list[StoredEvent]]:
        return Loader(
            self._lifetime, _guarded("read_events", "read events", self._reads.read_events)
        )

    @cached_property
    def events_at(self) -> Loader[EventAt, StoredEvent]:
        return Loader(
            self._lifetime, _guarded("read_events_at", "read events", self._reads.read_events_at)
        )

    @cached_property
    def surfaces(self) -> Loader[SurfaceAt, list[StoredEvent]]:
        return Loader(
            self._lifetime,
            _guarded("read_surfaces", "read the surface", self._reads.read_surfaces),
        )

    @cached_property
    def counts(self) -> Loader[EventQuery, int]:
        """How many events a ranged read matches (`FilterReads.count_events`)."""
        filters = self.filters
        assert filters is not None
        return Loader(
            self._lifetime, _guarded("count_events", "count events", filters.count_events)
        )

    @cached_property
    def traces(self) -> Loader[TraceAt, StoredTrace]:
        return Loader(
            self._lifetime, _guarded("read_traces", "trace an event", self._reads.read_traces)
        )


class TitleLoaders:
    """The stored titles of `TitleReads` (SPEC §14): a page's ids in one backend call."""

    def __init__(self, reads: TitleReads, lifetime: Lifetime) -> None:
        self._reads = reads
        self._lifetime = lifetime

    @cached_property
    def titles(self) -> Loader[str, SessionEvent]:
        """The last `session/title` event of a stored id (None: it has none)."""
        reads = self._reads

        async def batch(ids: Sequence[str]) -> Mapping[str, SessionEvent]:
            found = await call_backend("read titles", lambda: reads.load_titles(ids))
            for event in _dict("load_titles", found).values():
                if not isinstance(event, SessionEvent):
                    raise SessionQueryError(
                        ErrorCode.PERSISTENCE_FAILED,
                        f"persistence backend returned {type(event).__name__}, "
                        "not a SessionEvent, as a title",
                    )
            return found

        return Loader(self._lifetime, batch)


class StoredEventReads:
    """A stored log's events and relations by index, for `StoredView`: the derived
    loaders' answers, a missing one reported as the session having gone."""

    def __init__(self, loaders: DerivedLoaders) -> None:
        self._loaders = loaders

    @property
    def filters(self) -> bool:
        """Whether the backend answers `EventQuery.time` / `.types` and counts (§12)."""
        return self._loaders.filters is not None

    async def count(self, query: EventQuery) -> int:
        found = await self._loaders.counts.load(query)
        if found is None:
            raise _gone(query.session_id)
        return int(found)

    async def events(self, query: EventQuery) -> list[StoredEvent]:
        found = await self._loaders.events.load(query)
        if found is None:
            raise _gone(query.session_id)
        return found

    async def events_at(self, session_id: str, seqs: Sequence[int]) -> list[StoredEvent]:
        load = self._loaders.events_at.load
        found = await asyncio.gather(*(load((session_id, s)) for s in seqs))
        rows = [f for f in found if f is not None]
        if len(rows) != len(found):
            raise session_not_found(session_id, "its log changed in persistence while being read")
        return rows

    async def surface(self, session_id: str, as_of: int) -> list[StoredEvent]:
        found = await self._loaders.surfaces.load((session_id, as_of))
        if found is None:
            raise _gone(session_id)
        return found

    async def trace(self, session_id: str, seq: int, as_of: int) -> StoredTrace:
        found = await self._loaders.traces.load((session_id, seq, as_of))
        if found is None:
            raise _gone(session_id)
        return found


def _gone(session_id: str) -> SessionQueryError:
    return session_not_found(session_id, "it was removed from persistence while being read")
