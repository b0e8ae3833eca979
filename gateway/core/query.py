"""`SessionQuery`: the five exact-inspection operations over one logical corpus (SPEC §4).

Each call observes the live stores and the mounted backend afresh; use
`observe()` to ask several questions of one consistent observation.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from .backend import (
    BackendSnapshot,
    Capabilities,
    PersistenceBackend,
    capabilities_of,
    is_backend,
)
from .errors import ErrorCode, SessionQueryError
from .event_filter import all_matching
from .filters import EventFilter, SessionFilter, check_event_filter, check_session_filter
from .lineage import trace_lineage
from .matching import RankKey
from .observation import Observation
from .results import EventRecord, EventTrace, ReadWindow, SessionRecord, SessionTrace
from .scope import Scope
from .search import (
    DEFAULT_SEARCH_LIMIT,
    PYTHON,
    EventSearchPage,
    SessionSearchPage,
    search_events,
    search_sessions,
)
from .store import SessionStore
from .titles import SessionTitle

DEFAULT_READ_WINDOW_MAX = 50
T = TypeVar("T")


def _is_int(value: object) -> bool:
    return type(value) is int


class _Operations:
    """The five operations (SPEC §4), each over a fresh observation of `observe()`."""

    read_window_max: int

    def observe(self) -> Observation:
        raise NotImplementedError

    async def _run(self, op: Callable[[Observation], Awaitable[T]]) -> T:
        """Run one operation over a fresh observation; cancel its leftovers after."""
        obs = self.observe()
        try:
            return await op(obs)
        finally:
            obs.close()

    async def list_sessions(self) -> list[SessionRecord]:
        return await self._run(list_sessions)

    async def list_events(self, session_id: str) -> list[EventRecord]:
        return await self._run(lambda obs: list_events(obs, session_id))

    async def read_event(
        self, session_id: str, seq: int, before: int = 0, after: int = 0
    ) -> ReadWindow:
        limit = self.read_window_max
        return await self._run(lambda obs: read_event(obs, session_id, seq, before, after, limit))

    async def trace_session(self, session_id: str) -> SessionTrace:
        return await self._run(lambda obs: trace_session(obs, session_id))

    async def trace_event(self, session_id: str, seq: int) -> EventTrace:
        return await self._run(lambda obs: trace_event(obs, session_id, seq))

    async def search_sessions(
        self,
        text: str,
        session_filter: SessionFilter | None = None,
        event_filter: EventFilter | None = None,
        limit: int = DEFAULT_SEARCH_LIMIT,
        after: RankKey | None = None,
    ) -> SessionSearchPage:
        """Sessions with an event matching `text`, ranked by their best event (SPEC §13);
        `after` is a previous page's `next_after`."""
        return await self._run(
            lambda obs: search_sessions(
                obs, text, session_filter, event_filter, limit, after, names=PYTHON
            )
        )

    async def search_events(
        self,
        session_id: str,
        text: str,
        event_filter: EventFilter | None = None,
        limit: int = DEFAULT_SEARCH_LIMIT,
        after: RankKey | None = None,
    ) -> EventSearchPage:
        """Events of one session matching `text`, ranked (SPEC §13)."""
        return await self._run(
            lambda obs: search_events(
                obs, session_id, text, event_filter, limit, after, names=PYTHON
            )
        )

    async def session_title(self, session_id: str) -> SessionTitle | None:
        """The session's title (SPEC §14), None when it has none; SESSION_NOT_FOUND when
        the corpus (or the scope) lacks the session."""
        return await self._run(lambda obs: session_title(obs, session_id))

    async def filter_sessions(self, f: SessionFilter) -> list[SessionRecord]:
        """The session records matching `f` (SPEC §12), newest first, ties by id."""
        return await self._run(lambda obs: filter_sessions(obs, f))

    async def filter_events(self, session_id: str, f: EventFilter) -> list[EventRecord]:
        """The event records of a session matching `f` (SPEC §12), by seq."""
        return await self._run(lambda obs: filter_events(obs, session_id, f))


class SessionQuery(_Operations):
    """Exact, read-only inspection of sessions held live and persisted.

    Live stores can be registered and unregistered, and a persistence backend
    mounted, replaced or unmounted, at any time; the query keeps no cache.
    """

    def __init__(
        self,
        live: Iterable[SessionStore] = (),
        persistence: object | None = None,
        read_window_max: int = DEFAULT_READ_WINDOW_MAX,
    ) -> None:
        if not _is_int(read_window_max) or read_window_max < 0:
            raise SessionQueryError(
                ErrorCode.INVALID_CONFIG,
                f"read_window_max must be a non-negative integer, got {read_window_max!r}",
            )
        self.read_window_max = read_window_max
        self._lock = threading.Lock()
        self._stores: list[SessionStore] = []
        for store in live:
            self.register_live(store)
        self._backend: PersistenceBackend | None = None
        self._caps: Capabilities | None = None  # the mounted backend's, asked once per mount
        if persistence is not None:
            self.mount_persistence(persistence)

    # -- sources -----------------------------------------------------------

    def register_live(self, store: SessionStore) -> None:
        """Add a live store to the corpus (registering it twice is a no-op)."""
        if not isinstance(store, SessionStore):
            raise SessionQueryError(
                ErrorCode.INVALID_CONFIG, f"not a SessionStore: {type(store).__name__}"
            )
        with self._lock:
            if all(s is not store for s in self._stores):
                self._stores.append(store)

    def unregister_live(self, store: SessionStore) -> bool:
        """Remove a live store; returns whether it was registered."""
        with self._lock:
            kept = [s for s in self._stores if s is not store]
            removed = len(kept) != len(self._stores)
            self._stores = kept
            return removed

    @property
    def live_stores(self) -> tuple[SessionStore, ...]:
        with self._lock:
            return tuple(self._stores)

    def mount_persistence(self, backend: object) -> None:
        """Mount (or replace) the persistence backend."""
        missing = [m for m in ("list", "load") if not callable(getattr(backend, m, None))]
        if missing or not is_backend(backend):
            raise SessionQueryError(
                ErrorCode.INVALID_CONFIG,
                f"a persistence backend needs async list() and load(); "
                f"{type(backend).__name__} lacks {', '.join(missing)}",
            )
        caps = capabilities_of(backend)
        with self._lock:
            self._backend, self._caps = backend, caps

    def unmount_persistence(self) -> PersistenceBackend | None:
        """Unmount the backend; returns the one that was mounted, if any."""
        with self._lock:
            backend, self._backend, self._caps = self._backend, None, None
            return backend

    @property
    def persistence(self) -> PersistenceBackend | None:
        with self._lock:
            return self._backend

    def hold_snapshot(self, *, retryable: bool = False) -> HeldSnapshot | None:
        """A snapshot of the mounted backend opened before its observation, for a read
        that must come first and belong to it (a caller's token, read at admission);
        `observe(snapshot=)` then reads in it. None without a backend that has them.
        The holder closes it when it never observes (`HeldSnapshot.close`).
        `retryable`: the holder makes the observation again when `HeldSnapshot.moved`
        (`ReadSnapshots.read_snapshot`)."""
        with self._lock:
            backend, caps = self._backend, self._caps
        if backend is None or caps is None:
            return None
        snapshot = _snapshot_of(caps, retryable)
        return None if snapshot is None else HeldSnapshot(snapshot, backend)

    def observe(
        self,
        scope: Scope | None = None,
        *,
        through: Callable[[PersistenceBackend], PersistenceBackend] | None = None,
        snapshot: HeldSnapshot | None = None,
    ) -> Observation:
        """A fresh observation: sources as of now, loads remembered until it is dropped;
        within `scope` when given (SPEC §10). `through` wraps the mounted backend for
        this observation only (a host's tracing proxy), leaving the query as it is.
        `snapshot` (from `hold_snapshot`) is the one its reads share, when it is still
        the mounted backend's; else it is closed and a new one is opened."""
        with self._lock:
            stores, backend, caps = tuple(self._stores), self._backend, self._caps
        release = None
        if snapshot is not None and (backend is None or snapshot.backend is not backend):
            snapshot.close()  # the backend was replaced since: its snapshot is not this one's
            snapshot = None
        if backend is not None and caps is not None:
            # one snapshot for the observation's reads, where the backend has them (SPEC §7)
            found = snapshot.snapshot if snapshot is not None else _snapshot_of(caps)
            if found is not None:  # a view with the origin's capabilities (Observation)
                backend, release = found.backend, found.close
            if through is not None:
                backend, caps = through(backend), None
        return Observation(stores, backend, scope, capabilities=caps, on_close=release)

    def scoped(self, grants: Scope | Iterable[str]) -> ScopedSessionQuery:
        """The same query seen through a caller's grants (`["cwd:/srv/app", "tree:s1"]`, or
        a parsed `Scope`): every operation answers as if the visible sessions were the
        whole corpus. For a host that authenticates its callers its own way; the
        sources stay this query's (registering or mounting goes through it)."""
        scope = grants if isinstance(grants, Scope) else Scope.parse(grants)
        return ScopedSessionQuery(self, scope)


@dataclass(frozen=True, slots=True)
class HeldSnapshot:
    """A backend snapshot opened ahead of its observation (`SessionQuery.hold_snapshot`),
    with the backend that made it: an observation uses it only while that backend is
    still the mounted one."""

    snapshot: BackendSnapshot
    backend: PersistenceBackend

    @property
    def reads(self) -> PersistenceBackend:
        """The backend reading in the snapshot."""
        return self.snapshot.backend

    @property
    def moved(self) -> bool:
        """Whether its reads found the store changed between two of them (a retryable
        one's: the observation is to be made again, `BackendSnapshot.moved`)."""
        moved = self.snapshot.moved
        return moved is not None and moved()

    def close(self) -> None:
        self.snapshot.close()


def _snapshot_of(caps: Capabilities, retryable: bool = False) -> BackendSnapshot | None:
    """The backend's snapshot for one observation, or None where it has none."""
    if caps.snapshots is None:
        return None
    snapshots = caps.snapshots
    snapshot: Any = (
        snapshots.read_snapshot(retryable=True)
        if retryable and caps.retryable
        else snapshots.read_snapshot()
    )
    if isinstance(snapshot, BackendSnapshot):
        return snapshot
    if inspect.iscoroutine(snapshot):  # a wrapper that made it a coroutine
        snapshot.close()
    return None


class ScopedSessionQuery(_Operations):
    """`SessionQuery`'s read operations within a scope (see `SessionQuery.scoped`)."""

    def __init__(self, query: SessionQuery, scope: Scope) -> None:
        self.query = query
        self.scope = scope
        self.read_window_max = query.read_window_max

    def observe(self) -> Observation:
        return self.query.observe(self.scope)


# The operations over a given observation: what `SessionQuery` runs per call, and
# what a request-scoped caller (the GraphQL layer) runs over its own observation.


async def list_sessions(obs: Observation) -> list[SessionRecord]:
    """Every session record, newest first by createdAt, ties by id."""
    return await obs.records()


async def list_events(obs: Observation, session_id: str) -> list[EventRecord]:
    """Every raw event of a session by seq, with its surface classification."""
    view = await obs.view(session_id)
    return [EventRecord(session_id, e.seq, e.type, e.time, cls) for e, cls in await view.classes()]


_FILTER_PAGE = 500
"""Records per filtered page when `filter_sessions` walks them all."""


async def filter_sessions(obs: Observation, f: SessionFilter) -> list[SessionRecord]:
    """Every session record matching `f`, in corpus order (walked page by page)."""
    _check_type("filter", f, SessionFilter)
    check_session_filter(f)
    out: list[SessionRecord] = []
    after = None
    while True:
        page = await obs.filtered_sessions_page(f, after, _FILTER_PAGE, with_total=False)
        out.extend(page.records)
        if not page.has_next or not page.records:
            return out
        last = page.records[-1].header
        after = (-last.created_at, last.id)


async def filter_events(obs: Observation, session_id: str, f: EventFilter) -> list[EventRecord]:
    """Every event record of a session matching `f`, by seq."""
    _check_type("filter", f, EventFilter)
    text = check_event_filter(f)
    view = await obs.view(session_id)
    return [
        EventRecord(session_id, e.seq, e.type, e.time, cls)
        for e, cls in await all_matching(view, f, text)
    ]


def _check_type(name: str, value: object, kind: type) -> None:
    if not isinstance(value, kind):
        raise SessionQueryError(
            ErrorCode.INVALID_FILTER,
            f"{name} must be a {kind.__name__}, got {type(value).__name__}",
        )


def check_window(before: object, after: object, limit: int) -> None:
    """INVALID_WINDOW unless both bounds are ints (not bools) in 0..limit."""
    for name, value in (("before", before), ("after", after)):
        if not _is_int(value) or not 0 <= value <= limit:  # type: ignore[operator]
            raise SessionQueryError(
                ErrorCode.INVALID_WINDOW,
                f"{name} must be an integer from 0 to {limit}, got {value!r}",
            )


def _event_not_found(session_id: str, seq: object, size: int | None = None) -> SessionQueryError:
    where = f" (the log has seqs 0..{size - 1})" if size else ""
    return SessionQueryError(
        ErrorCode.EVENT_NOT_FOUND, f"session {session_id!r} has no event seq {seq!r}{where}"
    )


async def read_event(
    obs: Observation, session_id: str, seq: int, before: int, after: int, limit: int
) -> ReadWindow:
    """The target event and its raw neighbours, clipped to the log (no fold needed)."""
    check_window(before, after, limit)
    if not _is_int(seq) or seq < 0:
        raise _event_not_found(session_id, seq)
    header, events = await obs.window(session_id, max(0, seq - before), seq + after)
    target = next((e for e in events if e.seq == seq), None)
    if target is None:
        raise _event_not_found(session_id, seq)
    window = [e.detached() for e in events]
    return ReadWindow(
        session=header,
        target=target.detached(),
        events=window,
        start_seq=window[0].seq,
        end_seq=window[-1].seq,
    )


async def trace_session(obs: Observation, session_id: str) -> SessionTrace:
    """Lineage of one session: its ancestors and descendants over both sources."""
    records = await obs.lineage_records(session_id)
    return trace_lineage(records, session_id)


async def trace_event(obs: Observation, session_id: str, seq: int) -> EventTrace:
    """How one event replaces and cites others, and is replaced and cited."""
    size = await obs.length(session_id)
    if not _is_int(seq) or not 0 <= seq < size:
        raise _event_not_found(session_id, seq, size)
    view = await obs.view(session_id)
    (item,), relations = await asyncio.gather(view.events_at([seq]), view.relations(seq))
    event = item.event
    sources = event.source_event_seqs
    chain = relations.replacement_chain
    return EventTrace(
        target=EventRecord(session_id, seq, event.type, event.time, item.surface),
        event=event.detached(),
        replaced_by=chain[0] if chain else None,
        replacement_chain=chain,
        replaced_event_seqs=relations.replaced,
        source_event_seqs=list(sources) if sources else [],
        derived_event_seqs=relations.derived,
    )


async def session_title(obs: Observation, session_id: str) -> SessionTitle | None:
    """A session's title: its last `session/title` event's, None when it has none or that
    event is malformed (`gateway.core.titles`); the session is located first."""
    await obs.locate(session_id)
    return await obs.title(session_id)
