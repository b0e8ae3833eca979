"""One observation of the logical corpus (SPEC §3, §3a).

An `Observation` resolves sessions across the live stores and the mounted
backend and remembers what it read for as long as it lives: within one
observation each session is proved and read once, each backend question is
asked once, and questions asked in the same event-loop turn share one batched
backend call, so nested questions see one consistent state and the backend
work follows the answer, not how the question is nested. Nothing outlives it:
`SessionQuery` makes a new one per operation, the GraphQL layer one per
request, and `close()` cancels whatever backend work is still running (a
timed-out request leaves none behind).

The backend is used through its named capabilities (`gateway.core.backend`):
stored derivations when it has them (a page costs a page), whole logs folded
in a worker thread when it has only `load()`.

A scoped observation (`scope=`, SPEC §10) answers as if the sessions its
scope makes visible were the whole corpus. This is the one place a scope is
applied: every way in (a session by id, a page, children, lineage) checks
visibility here, an invisible id fails exactly like an absent one, and pages
and counts carry the scope down to the backend as a `SessionFilter`. Whether
a session lies in a granted tree is decided from its ancestry in the whole
(unscoped) corpus, walked once per observation.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from .backend import (
    Capabilities,
    EventQuery,
    SessionFilter,
    StoredEvent,
    StoredSession,
    StoredTrace,
    capabilities_of,
)
from .batching import Batcher
from .errors import ErrorCode, SessionQueryError, backend_failure
from .fold import fold_surface
from .ids import can_exist, shown
from .lineage import children_index
from .model import SessionEvent, SessionHeader
from .results import SessionRecord
from .scope import Scope
from .store import LiveSession, SessionStore
from .stored_view import StoredView
from .views import (
    FoldedView,
    SessionView,
)

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

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


class Observation:
    """A consistent, memoising view of the corpus for one operation or request."""

    def __init__(
        self,
        stores: Sequence[SessionStore],
        backend: object | None,
        scope: Scope | None = None,
    ) -> None:
        self._scope = None if scope is None or scope.sees_all else scope
        self._stores = tuple(stores)
        self._backend = backend
        self._caps = capabilities_of(backend) if backend is not None else Capabilities(None, None)
        self._memo: dict[tuple[Any, ...], asyncio.Future[Any]] = {}
        self._batchers: dict[str, Batcher[Any, Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._live_headers: dict[str, SessionHeader] | None = None
        self._live_sessions: dict[str, LiveSession] = {}
        self._seen_stored: dict[str, SessionHeader] = {}  # headers stored answers included
        self._ancestry: dict[str, SessionHeader] = {}  # stored headers lineage walks reached
        self._in_tree: dict[str, bool] = {}
        self._inside_seeds: set[str] = set()  # walk seeds known to lie in a granted tree

    # -- lifetime ---------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def close(self) -> None:
        """Cancel every backend call still running for this observation."""
        for task in list(self._tasks):
            task.cancel()

    async def _once(self, key: tuple[Any, ...], make: Callable[[], Awaitable[T]]) -> T:
        """Run `make` once per key; concurrent and later askers share its outcome.

        The shared task is shielded from any one asker's cancellation (another
        field of the same request may still want it); `close()` cancels it.
        """
        fut = self._memo.get(key)
        if fut is None:
            fut = self._spawn(_wrap(make))
            fut.add_done_callback(_consume)
            self._memo[key] = fut
        result: T = await asyncio.shield(fut)
        return result

    # -- backend calls, each wrapped into the closed error set -------------------------

    async def _call_backend(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except SessionQueryError:
            raise
        except Exception as exc:  # any backend failure is PERSISTENCE_FAILED
            raise _failed(what, exc) from exc

    def _batcher(
        self, name: str, what: str, fetch: Callable[[Sequence[K]], Awaitable[dict[K, V]]]
    ) -> Batcher[K, V]:
        """The per-observation loader of one batched backend question."""
        loader = self._batchers.get(name)
        if loader is None:

            async def guarded(keys: Sequence[K]) -> dict[K, V]:
                found = await self._call_backend(what, lambda: fetch(keys))
                if not isinstance(found, dict):
                    raise SessionQueryError(
                        ErrorCode.PERSISTENCE_FAILED,
                        f"persistence backend's {name} returned {type(found).__name__}, not a dict",
                    )
                return found

            loader = Batcher(guarded, self._spawn)
            self._batchers[name] = loader
        return cast(Batcher[K, V], loader)

    async def _load(self, name: str, what: str, fetch: Any, key: Any) -> Any:
        """One key of one batched backend question, asked once per observation: the
        batch's own future is remembered (no task per key), shielded from any one
        asker's cancellation like `_once`."""
        memo_key = ("ask", name, key)
        fut = self._memo.get(memo_key)
        if fut is None:
            fut = self._batcher(name, what, fetch).load(key)
            fut.add_done_callback(_consume)
            self._memo[memo_key] = fut
        return await asyncio.shield(fut)

    # -- the live side (never touches persistence) -------------------------------------

    def live_session(self, session_id: str) -> LiveSession | None:
        """The live session of this id, if a live store holds it (SOURCE_CONFLICT if two)."""
        found = self._live_sessions.get(session_id)
        if found is not None:
            return found
        hits = [s for s in (store.get(session_id) for store in self._stores) if s is not None]
        if len(hits) > 1:
            raise SessionQueryError(
                ErrorCode.SOURCE_CONFLICT,
                f"session {session_id!r} is held by {len(hits)} live stores",
            )
        if hits:
            self._live_sessions[session_id] = hits[0]
            return hits[0]
        return None

    def live_headers(self) -> dict[str, SessionHeader]:
        """Every live header by id, listed once per observation."""
        if self._live_headers is None:
            out: dict[str, SessionHeader] = {}
            for store in self._stores:
                for session in store.list():
                    if session.id in out:
                        raise SessionQueryError(
                            ErrorCode.SOURCE_CONFLICT,
                            f"session {session.id!r} is held by more than one live store",
                        )
                    out[session.id] = session.header
            self._live_headers = out
        return self._live_headers

    # -- the persisted side: proofs and headers ----------------------------------------

    @property
    def has_backend(self) -> bool:
        return self._backend is not None

    async def backend_headers(self) -> dict[str, SessionHeader]:
        """The backend's whole listing by id (empty with no backend), made once."""
        return await self._once(("backend-list",), self._list_backend)

    async def _list_backend(self) -> dict[str, SessionHeader]:
        backend = self._backend
        if backend is None:
            return {}
        headers = await self._call_backend("list sessions", backend.list)  # type: ignore[attr-defined]
        out: dict[str, SessionHeader] = {}
        for header in headers:
            _check_header(header)
            seen = out.get(header.id)
            if seen is not None and (diff := seen.conflicts_with(header)):
                raise _conflict(header.id, "two persisted headers", diff)
            out[header.id] = header
        return out

    async def stored(self, session_id: str) -> StoredSession | None:
        """The stored session of this id as the backend has it now (None if not stored).

        Asked once per id: through the stored derivations' row read when the
        backend has one (header, size and counts in one read), else by id,
        else from the listing.
        """
        if self._backend is None or not can_exist(session_id):  # no backend is asked
            return None
        return await self._once(("stored", session_id), lambda: self._read_stored(session_id))

    async def _read_stored(self, session_id: str) -> StoredSession | None:
        caps = self._caps
        if ("backend-list",) in self._memo:
            header = (await self.backend_headers()).get(session_id)
            if header is None or caps.derived is None:
                return None if header is None else StoredSession(header, -1)
        if caps.derived is not None:
            found = await self._load(
                "load_sessions", "look up sessions", caps.derived.load_sessions, session_id
            )
            if found is not None and not isinstance(found, StoredSession):
                raise SessionQueryError(
                    ErrorCode.PERSISTENCE_FAILED,
                    f"persistence backend returned {type(found).__name__}, not a StoredSession",
                )
            if found is not None:
                _check_header(found.header)
            return found
        if caps.corpus is not None:
            header = await self._load(
                "load_headers", "look up sessions", caps.corpus.load_headers, session_id
            )
        else:
            header = (await self.backend_headers()).get(session_id)
        if header is None:
            return None
        _check_header(header)
        return StoredSession(header, -1)

    async def persisted_header(self, session_id: str) -> SessionHeader:
        """Prove a session is in the backend and return its header (SESSION_NOT_FOUND if not)."""
        await self.require_visible(session_id)
        if self._backend is None:
            raise _not_found(session_id, "no live store holds it and no persistence is mounted")
        stored = await self.stored(session_id)
        if stored is None:
            raise _not_found(session_id, "it is in no live store and not in persistence")
        return stored.header

    async def is_persisted(self, session_id: str) -> bool:
        return await self.stored(session_id) is not None

    # -- the scope (SPEC §10) -----------------------------------------------------------

    @property
    def scope(self) -> Scope | None:
        """The scope this observation answers within (None: the whole corpus)."""
        return self._scope

    async def visible(self, header: SessionHeader) -> bool:
        """Whether the scope lets this session be seen (always, when unscoped)."""
        scope = self._scope
        if scope is None or scope.direct(header):
            return True
        return scope.has_trees and await self._tree_member(header)

    async def _tree_member(self, header: SessionHeader) -> bool:
        """Whether `header` lies in a granted tree: its ancestry in the whole corpus,
        walked once; every session on the walk gets its answer remembered."""
        known = self._in_tree.get(header.id)
        if known is not None:
            return known
        scope = self._scope
        assert scope is not None
        if header.id in scope.trees:
            return True
        chain = [header.id]
        seen = {header.id}
        node: SessionHeader | None = header
        while node is not None and node.parent_session is not None:
            parent = node.parent_session
            chain.append(parent)
            if parent in seen or parent in scope.trees or parent in self._in_tree:
                break
            seen.add(parent)
            node = await self._unscoped_header(parent)
        # The last id decides for everything below it: in a tree, or a walk that ended.
        last = chain[-1]
        member = last in scope.trees or self._in_tree.get(last, False)
        for i in range(len(chain) - 1, -1, -1):
            member = member or chain[i] in scope.trees
            if i < len(chain) - 1 or chain[i] in seen:
                self._in_tree.setdefault(chain[i], member)
        return self._in_tree[header.id]

    async def _unscoped_header(self, session_id: str) -> SessionHeader | None:
        """A header in the whole corpus (live first, then stored) for ancestry walks:
        a stored one comes with its whole stored chain in one backend read."""
        live = self.live_headers().get(session_id)
        if live is not None:
            return live
        if self._backend is None:
            return None
        if session_id not in self._ancestry:
            corpus = self._caps.corpus
            if corpus is not None:
                reached = await self._reach("load_ancestry", corpus.load_ancestry, session_id)
            else:
                reached = await self.backend_headers()
            self._ancestry.update(reached)
        return self._ancestry.get(session_id)

    async def require_visible(self, session_id: str) -> None:
        """SESSION_NOT_FOUND, worded as for an absent id, when the scope hides the session.

        An id the corpus lacks passes: the caller's own lookup reports it, so an
        invisible id and an absent one fail with the same message.
        """
        if self._scope is None:
            return
        await self._once(("visible", session_id), lambda: self._check_visible(session_id))

    async def _check_visible(self, session_id: str) -> None:
        live = self.live_session(session_id)
        header = live.header if live is not None else None
        if header is None and self._backend is not None:
            stored = await self.stored(session_id)
            header = stored.header if stored is not None else None
        if header is not None and not await self.visible(header):
            if self._backend is None:
                raise _not_found(session_id, "no live store holds it and no persistence is mounted")
            raise _not_found(session_id, "it is in no live store and not in persistence")

    async def _visible_only(self, headers: Sequence[SessionHeader]) -> list[SessionHeader]:
        if self._scope is None:
            return list(headers)
        kept = await asyncio.gather(*(self.visible(h) for h in headers))
        return [h for h, ok in zip(headers, kept, strict=True) if ok]

    async def _session_filter(self) -> SessionFilter | None:
        """The scope as a backend predicate: tree seeds are the granted roots and the
        live sessions inside a granted tree (stored sessions below a live-only one)."""
        scope = self._scope
        if scope is None:
            return None
        seeds = set(scope.trees)
        if scope.has_trees:
            live = list(self.live_headers().values())
            inside = await asyncio.gather(*(self._tree_member(h) for h in live))
            seeds.update(h.id for h, ok in zip(live, inside, strict=True) if ok)
        return SessionFilter(scope.cwd_prefixes, scope.id_globs, tuple(sorted(seeds)))

    async def locate(self, session_id: str) -> tuple[SessionHeader, bool, bool | None]:
        """A session by id: (header, live, persisted). Live stores first, never touching
        persistence for a live one (`persisted` is then None: not asked); else proved in
        the backend. SESSION_NOT_FOUND / SOURCE_CONFLICT / PERSISTENCE_FAILED as usual."""
        await self.require_visible(session_id)
        live = self.live_session(session_id)
        if live is not None:
            return live.header, True, None
        return await self.persisted_header(session_id), False, True

    # -- one session's log ------------------------------------------------------------

    async def view(self, session_id: str) -> SessionView:
        """The session's log as of the first time this observation touched it.

        A live session is viewed through its own fold (never touching
        persistence); a stored one through the stored derivations when they
        cover its log, else loaded whole and folded off the event loop.
        """
        await self.require_visible(session_id)
        live = self.live_session(session_id)
        if live is not None:
            memo = self._memo.get(("view", session_id))
            if memo is None:
                memo = asyncio.get_running_loop().create_future()
                memo.set_result(live.view())
                self._memo[("view", session_id)] = memo
            return cast(SessionView, memo.result())
        return await self._once(("view", session_id), lambda: self._stored_view(session_id))

    async def _stored_view(self, session_id: str) -> SessionView:
        stored = await self._proved(session_id)
        if self._caps.derived is not None and stored.counts is not None:
            return StoredView(self, stored)
        events = await self.raw_log(session_id)
        fold = await asyncio.to_thread(fold_surface, events)
        return FoldedView(stored.header, events, fold, live=False)

    async def _proved(self, session_id: str) -> StoredSession:
        if self._backend is None:
            raise _not_found(session_id, "no live store holds it and no persistence is mounted")
        stored = await self.stored(session_id)
        if stored is None:
            raise _not_found(session_id, "it is in no live store and not in persistence")
        return stored

    async def length(self, session_id: str) -> int:
        """How many events the session's log has, as this observation sees it."""
        await self.require_visible(session_id)
        live = self.live_session(session_id)
        if live is not None:
            return (await self.view(session_id)).length
        stored = await self._proved(session_id)
        if stored.event_count >= 0:
            return stored.event_count
        return len(await self.raw_log(session_id))

    async def window(
        self, session_id: str, lo: int, hi: int
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        """The header and the raw events lo..hi that exist (no fold needed): a live view,
        a ranged read of the backend when it has one, else the whole log."""
        await self.require_visible(session_id)
        live = self.live_session(session_id)
        if live is not None:
            view = await self.view(session_id)
            return view.header, await view.window(lo, hi)
        stored = await self._proved(session_id)
        lo = max(lo, 0)
        if self._caps.derived is not None and stored.event_count >= 0:
            hi = min(hi, stored.event_count - 1)
            if lo > hi:
                return stored.header, []
            query = EventQuery(session_id, lo, hi, stored.event_count)
            return stored.header, [r.event for r in await self.read_events(query)]
        return stored.header, list((await self.raw_log(session_id))[lo : hi + 1])

    async def raw_log(self, session_id: str) -> Sequence[SessionEvent]:
        """The whole stored log, loaded once (backends without stored derivations)."""
        return await self._once(("log", session_id), lambda: self._whole_log(session_id))

    async def _whole_log(self, session_id: str) -> Sequence[SessionEvent]:
        listed = (await self._proved(session_id)).header
        backend = self._backend
        assert backend is not None
        try:
            loaded = await backend.load(session_id)  # type: ignore[attr-defined]
        except KeyError:  # removed between the proof and the load
            raise _not_found(
                session_id, "it was removed from persistence while being read"
            ) from None
        except SessionQueryError:
            raise
        except Exception as exc:
            raise _failed("load sessions", exc) from exc
        header, events = _unpack(session_id, loaded)
        if not isinstance(header, SessionHeader):
            raise SessionQueryError(
                ErrorCode.PERSISTENCE_FAILED,
                f"persistence backend loaded {type(header).__name__} for {session_id!r}, "
                "not a SessionHeader",
            )
        if diff := listed.conflicts_with(header):
            raise _conflict(session_id, "the listed and the loaded persisted header", diff)
        return events

    # -- stored derivations, batched -----------------------------------------------------

    async def read_events(self, query: EventQuery) -> list[StoredEvent]:
        derived = self._caps.derived
        assert derived is not None
        found = await self._load("read_events", "read events", derived.read_events, query)
        if found is None:
            raise _not_found(query.session_id, "it was removed from persistence while being read")
        return cast(list[StoredEvent], found)

    async def read_events_at(self, session_id: str, seqs: Sequence[int]) -> list[StoredEvent]:
        derived = self._caps.derived
        assert derived is not None
        fetch = derived.read_events_at
        found = await asyncio.gather(
            *(self._load("read_events_at", "read events", fetch, (session_id, s)) for s in seqs)
        )
        if any(f is None for f in found):
            raise _not_found(session_id, "its log changed in persistence while being read")
        return cast(list[StoredEvent], found)

    async def read_surface(self, session_id: str, as_of: int) -> list[StoredEvent]:
        derived = self._caps.derived
        assert derived is not None
        found = await self._load(
            "read_surfaces", "read the surface", derived.read_surfaces, (session_id, as_of)
        )
        if found is None:
            raise _not_found(session_id, "it was removed from persistence while being read")
        return cast(list[StoredEvent], found)

    async def read_trace(self, session_id: str, seq: int, as_of: int) -> StoredTrace:
        derived = self._caps.derived
        assert derived is not None
        found = await self._load(
            "read_traces", "trace an event", derived.read_traces, (session_id, seq, as_of)
        )
        if found is None:
            raise _not_found(session_id, "it was removed from persistence while being read")
        return cast(StoredTrace, found)

    # -- the corpus ----------------------------------------------------------------------

    async def records(self) -> list[SessionRecord]:
        """Every (visible) session, newest first (ties by id): the cross-corpus list, made once."""
        return list(await self._once(("records",), self._visible_records))

    async def _visible_records(self) -> tuple[SessionRecord, ...]:
        every = await self._once(("all-records",), self._make_records)
        if self._scope is None:
            return every
        kept = await self._visible_only([r.header for r in every])
        ids = {h.id for h in kept}
        return tuple(r for r in every if r.header.id in ids)

    async def _make_records(self) -> tuple[SessionRecord, ...]:
        persisted = await self.backend_headers()
        live = self.live_headers()
        records = []
        for sid, header in live.items():
            stored = persisted.get(sid)
            if stored is not None and (diff := header.conflicts_with(stored)):
                raise _conflict(sid, "the live and the persisted header", diff)
            records.append(SessionRecord(header, live=True, persisted=stored is not None))
        for sid, header in persisted.items():
            if sid not in live:
                records.append(SessionRecord(header, live=False, persisted=True))
        records.sort(key=lambda r: corpus_key(r.header))
        return tuple(records)

    async def record_map(self) -> dict[str, SessionRecord]:
        return await self._once(("record-map",), self._make_record_map)

    async def _make_record_map(self) -> dict[str, SessionRecord]:
        return {r.header.id: r for r in await self.records()}

    @property
    def pushdown(self) -> bool:
        """Whether corpus questions go to the backend's indexes (else: one listing)."""
        return self._backend is None or self._caps.corpus is not None

    async def persisted_headers(self, ids: Sequence[str]) -> dict[str, SessionHeader]:
        """The stored headers of these ids (batched, once per id)."""
        if self._backend is None or not ids:
            return {}
        stored = await asyncio.gather(*(self.stored(i) for i in ids))
        return {s.header.id: s.header for s in stored if s is not None}

    async def live_record(self, header: SessionHeader) -> SessionRecord:
        """The record of a live session that an answer includes: its persisted header
        is looked up and must agree (SPEC §3a: conflicts exact for what is answered)."""
        stored = await self.stored(header.id) if self._backend is not None else None
        if stored is not None and (diff := header.conflicts_with(stored.header)):
            raise _conflict(header.id, "the live and the persisted header", diff)
        return SessionRecord(header, live=True, persisted=stored is not None)

    async def record(self, session_id: str) -> SessionRecord | None:
        """One session's corpus record, or None when the corpus lacks it."""
        if not self.pushdown:
            return (await self.record_map()).get(session_id)
        if self._scope is not None:
            try:
                await self.require_visible(session_id)
            except SessionQueryError as exc:
                if exc.code is ErrorCode.SESSION_NOT_FOUND:
                    return None
                raise
        live = self.live_headers().get(session_id)
        if live is not None:
            return await self.live_record(live)
        seen = self._seen_stored.get(session_id)
        if seen is not None:
            return SessionRecord(seen, live=False, persisted=True)
        stored = await self.stored(session_id)
        return None if stored is None else SessionRecord(stored.header, False, True)

    async def _records_of(self, headers: Sequence[SessionHeader]) -> list[SessionRecord]:
        """Records for headers an answer includes: live ones checked against the backend
        (all at once), stored ones remembered so that a later `record()` asks nothing."""
        live = self.live_headers()
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

    async def sessions_total(self) -> int:
        """How many (visible) sessions the corpus holds, counted once per observation:
        the backend's count (scoped when the observation is) plus live-only sessions."""
        return await self._once(("sessions-total",), self._count_sessions)

    async def _count_sessions(self) -> int:
        corpus = self._caps.corpus
        if self._backend is not None and corpus is None:
            return len(await self.records())
        every_live = self.live_headers()
        live = [h.id for h in await self._visible_only(list(every_live.values()))]
        if corpus is None:
            return len(live)
        where = await self._session_filter()
        persisted, stored_live = await asyncio.gather(
            self._call_backend(
                "count sessions",
                lambda: corpus.count_sessions() if where is None else corpus.count_sessions(where),
            ),
            self.persisted_headers(live),
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
        corpus = self._caps.corpus
        if self._backend is not None and corpus is None:
            records = await self.records()
            keys = [corpus_key(r.header) for r in records]
            start = 0 if after is None else bisect_right(keys, after)
            stop = min(start + first, len(records))
            return SessionsPage(records[start:stop], stop < len(records), start > 0, len(records))
        every_live = self.live_headers()
        live = {h.id: h for h in await self._visible_only(list(every_live.values()))}
        where = await self._session_filter()

        async def rows() -> list[SessionHeader]:
            if corpus is None:
                return []
            found: list[SessionHeader] = await self._call_backend(
                "page sessions",
                lambda: corpus.headers_page(
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
        records = await self._records_of(chosen)
        return SessionsPage(records, len(merged) > first, after is not None, total)

    async def children(self, session_id: str) -> list[SessionRecord]:
        """The sessions forked from this one, by createdAt then id."""
        if not self.pushdown:
            return list((await self.children_index()).get(session_id, ()))
        corpus = self._caps.corpus
        found: list[SessionHeader] = []
        where = await self._below_filter(session_id)
        if corpus is not None:
            if where is None:
                stored = await self._load(
                    "load_children", "list children", corpus.load_children, session_id
                )
            else:
                stored = await self._load(
                    "load_children_scoped",
                    "list children",
                    lambda ids: corpus.load_children(ids, where),
                    session_id,
                )
            found.extend(stored or ())  # scoped by the backend when `where` is given
        live = self.live_headers()
        merged = {h.id: h for h in found if h.id not in live}
        forks = [h for h in live.values() if h.parent_session == session_id]
        merged.update((h.id, h) for h in await self._visible_only(forks))
        ordered = sorted(merged.values(), key=lambda h: (h.created_at, h.id))
        return await self._records_of(ordered)

    async def _below_filter(self, session_id: str) -> SessionFilter | None:
        """What a scoped backend read of this session's children must match: nothing
        (None) when unscoped or when the session lies in a granted tree (all below it
        is visible); else a cwd prefix, an id glob, or being a granted tree's root."""
        scope = self._scope
        if scope is None:
            return None
        parent = await self.record(session_id)
        if parent is not None and scope.has_trees and await self._tree_member(parent.header):
            return None
        return _walk_filter(scope)

    async def children_index(self) -> dict[str, list[SessionRecord]]:
        """parent id -> children over the whole listing (backends without pushdown)."""

        async def make() -> dict[str, list[SessionRecord]]:
            return children_index(await self.record_map())

        return await self._once(("children-index",), make)

    async def lineage_records(self, session_id: str) -> dict[str, SessionRecord]:
        """The records a lineage of `session_id` needs: its ancestor chain (up to the
        first missing parent or a revisit) and every descendant, over both sources."""
        if not self.pushdown:
            return await self.record_map()
        return await self._once(("lineage", session_id), lambda: self._lineage(session_id))

    async def _reach(
        self,
        name: str,
        fetch: Callable[[Sequence[str]], Awaitable[dict[str, SessionHeader]]],
        seed: str,
    ) -> dict[str, SessionHeader]:
        """What one lineage walk reaches from `seed`; walks asked in the same loop turn
        share one backend call (each seed gets the union, which callers filter)."""

        async def shared(seeds: Sequence[str]) -> dict[str, dict[str, SessionHeader]]:
            union = await fetch(seeds)
            return dict.fromkeys(seeds, union)

        found = await self._load(name, "trace lineage", shared, seed)
        return cast(dict[str, SessionHeader], found or {})

    async def _lineage(self, session_id: str) -> dict[str, SessionRecord]:
        target = await self.record(session_id)
        if target is None:
            raise _not_found(session_id, "it is not in the corpus")
        up, down = await asyncio.gather(
            self._ancestors(target.header), self._descendants(target.header)
        )
        if self._scope is not None:
            up, down = await self._scoped_lineage(target.header, up, down)
        headers = {session_id: target.header, **up, **down}
        live = self.live_headers()
        records = await self._records_of([live.get(sid, h) for sid, h in headers.items()])
        return {r.header.id: r for r in records}

    async def _scoped_lineage(
        self,
        target: SessionHeader,
        up: dict[str, SessionHeader],
        down: dict[str, SessionHeader],
    ) -> tuple[dict[str, SessionHeader], dict[str, SessionHeader]]:
        """The chain cut at its first invisible parent (which becomes the unresolved
        one); the descendants are already the visible ones reached through visible ones."""
        chain: dict[str, SessionHeader] = {}
        for sid, header in up.items():  # parent first, then upward
            if not await self.visible(header):
                break
            chain[sid] = header
        return chain, down  # `_descendants` walked through visible sessions only

    async def _ancestors(self, target: SessionHeader) -> dict[str, SessionHeader]:
        """The parent chain of `target` up to the first id the corpus lacks or a revisit,
        asking the backend for whole stored chains at once."""
        corpus = self._caps.corpus
        live = self.live_headers()
        chain: dict[str, SessionHeader] = {}
        stored: dict[str, SessionHeader] = {}
        node = target.parent_session
        while node is not None and node != target.id and node not in chain:
            if node in live:
                chain[node] = live[node]
            else:
                if node not in stored and corpus is not None:
                    stored.update(await self._reach("load_ancestry", corpus.load_ancestry, node))
                if node not in stored:
                    break
                chain[node] = stored[node]
            node = chain[node].parent_session
        return chain

    async def _descendants(self, target: SessionHeader) -> dict[str, SessionHeader]:
        """Every session below `target`: stored ones by the backend's walk, live ones by
        the overlay, walking again below live sessions until nothing new is reached."""
        corpus = self._caps.corpus
        live = self.live_headers()
        fetch: Callable[[Sequence[str]], Awaitable[dict[str, SessionHeader]]] | None = None
        name = "load_descendancy"
        if corpus is not None:
            fetch = corpus.load_descendancy
        scope = self._scope
        if scope is not None:  # walk through visible sessions only, in the backend too
            live = {h.id: h for h in await self._visible_only(list(live.values()))}
            roots = _walk_filter(scope)
            inside = self._inside_seeds
            if corpus is not None:
                walk = corpus.load_descendancy
                name = "load_descendancy_scoped"

                def fetch(seeds: Sequence[str]) -> Awaitable[dict[str, SessionHeader]]:
                    return walk(seeds, roots, [s for s in seeds if s in inside])

        seeded: set[str] = set()
        frontier = [target.id]
        pool: dict[str, SessionHeader] = {}
        while True:
            seeded.update(frontier)
            if scope is not None and scope.has_trees:
                for sid in frontier:
                    header = target if sid == target.id else live[sid]
                    if await self._tree_member(header):
                        self._inside_seeds.add(sid)
            if fetch is not None:
                parts = await asyncio.gather(*(self._reach(name, fetch, f) for f in frontier))
                for part in parts:
                    pool.update(part)
            pool.update(live)
            reached = _reachable(target, pool)
            frontier = [sid for sid in reached if sid in live and sid not in seeded]
            if not frontier:
                return {sid: pool[sid] for sid in reached}


def _walk_filter(scope: Scope) -> SessionFilter:
    """The scope for a walk below a session that is not inside a granted tree: a cwd
    prefix, an id glob, or being a tree's root (whose subtree the walk then enters)."""
    return SessionFilter(scope.cwd_prefixes, scope.id_globs, ids=tuple(sorted(scope.trees)))


def _reachable(root: SessionHeader, pool: dict[str, SessionHeader]) -> list[str]:
    """Ids below `root` through child links among `pool` (excluding the root itself)."""
    index: dict[str, list[str]] = {}
    for sid, header in pool.items():
        parent = header.parent_session
        if parent is not None and sid != root.id:
            index.setdefault(parent, []).append(sid)
    out: list[str] = []
    seen = {root.id}
    stack = [root.id]
    while stack:
        for child in index.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out


async def _wrap(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _check_header(header: object) -> None:
    if not isinstance(header, SessionHeader):
        raise SessionQueryError(
            ErrorCode.PERSISTENCE_FAILED,
            f"persistence backend returned {type(header).__name__}, not a SessionHeader",
        )


def _failed(what: str, exc: Exception) -> SessionQueryError:
    return backend_failure(what, exc)


def _not_found(session_id: str, why: str) -> SessionQueryError:
    return SessionQueryError(
        ErrorCode.SESSION_NOT_FOUND, f"session {shown(session_id)} was not found: {why}"
    )


def _conflict(session_id: str, what: str, fields: list[str]) -> SessionQueryError:
    return SessionQueryError(
        ErrorCode.SOURCE_CONFLICT,
        f"session {session_id!r}: {what} disagree on {', '.join(fields) or 'their fields'}",
    )


def _unpack(session_id: str, loaded: Any) -> tuple[Any, tuple[SessionEvent, ...]]:
    try:
        header, events = loaded
        return header, tuple(events)
    except (TypeError, ValueError) as exc:
        raise SessionQueryError(
            ErrorCode.PERSISTENCE_FAILED,
            f"persistence backend returned a malformed log for {session_id!r}: {exc}",
        ) from exc
