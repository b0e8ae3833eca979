"""One observation of the logical corpus (SPEC §3, §3a): the facade the layers above use.

An `Observation` resolves sessions across the live stores and the mounted
backend and remembers what it read for as long as it lives: within one
observation each session is proved and read once, each backend question is
asked once, and questions asked in the same event-loop turn share one batched
backend call, so nested questions see one consistent state and the backend
work follows the answer, not how the question is nested. Nothing outlives it:
`SessionQuery` makes a new one per operation, the GraphQL layer one per
request, and `close()` cancels whatever backend work is still running (a
timed-out request leaves none behind).

It composes the pieces that do the work, each in its own module:

* `batching`: `Lifetime`, `Once`, `PerKey`, `Loader` (the memo rule: a key's
  remembered answer is that key's own whole answer);
* `loaders`: the typed registry of the backend's batched questions;
* `sources`: the live stores and the backend, unscoped;
* `visibility`: the scope (SPEC §10), the one place it is applied;
* `corpus`: records, pages, counts, children;
* `walks`: lineage records (ancestors and descendants over both sources);
* one session's log as a `SessionView` (here): live, stored by index, or folded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

from .backend import (
    Capabilities,
    EventQuery,
    PersistenceBackend,
    ScopeFilter,
    SearchReads,
    StoredEvent,
    StoredSession,
    StoredTrace,
    capabilities_of,
)
from .batching import Lifetime, PerKey
from .corpus import Corpus, SessionKey, SessionsPage, corpus_key
from .errors import session_not_found
from .filters import SessionFilter
from .fold import fold_surface
from .loaders import (
    CorpusLoaders,
    DerivedLoaders,
    StoredEventReads,
    TitleLoaders,
    call_backend,
)
from .model import SessionEvent, SessionHeader
from .results import SessionRecord
from .scope import Scope
from .session_filter import FilteredSessions
from .sources import NO_BACKEND, NOT_STORED, LiveSources, StoredSources
from .store import LiveSession, SessionStore
from .stored_view import StoredView
from .titles import SessionTitle, last_title_event, title_of
from .views import FoldedView, SessionView
from .visibility import Visibility
from .walks import Walks

__all__ = ["Observation", "SessionKey", "SessionsPage", "corpus_key"]

_NONE_OFFERED = Capabilities(None, None)


class Observation:
    """A consistent, memoising view of the corpus for one operation or request."""

    def __init__(
        self,
        stores: Sequence[SessionStore],
        backend: PersistenceBackend | None,
        scope: Scope | None = None,
        *,
        capabilities: Capabilities | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        """`capabilities`: which ones `backend` offers, when the caller knows (else checked
        here), each present one answered by `backend` itself (`capabilities_of` finds them
        on it; a snapshot view offers its origin's, so `SessionQuery.observe` passes the
        origin's rather than rebuilding them per view); `on_close`: what `close()` also
        releases (the backend snapshot of its reads)."""
        self._lifetime = lifetime = Lifetime()
        self._on_close = on_close
        caps = capabilities
        if caps is None and backend is not None:
            caps = capabilities_of(backend)
        offered = caps if caps is not None and backend is not None else _NONE_OFFERED
        b: Any = backend  # it has what `offered` says
        corpus = CorpusLoaders(b, lifetime) if offered.corpus is not None else None
        filters = b if offered.filters is not None else None
        derived = DerivedLoaders(b, lifetime, filters) if offered.derived is not None else None
        self._event_reads = StoredEventReads(derived) if derived is not None else None
        self._search = b if offered.search is not None else None
        self._derived_reads = b if offered.derived is not None else None
        self._titles = TitleLoaders(b, lifetime) if offered.titles is not None else None
        self._filters = filters if corpus is not None else None
        self._live = LiveSources(stores)
        self._stored = StoredSources(backend, corpus, derived, lifetime)
        self._visibility = Visibility(scope, self._live, self._stored, lifetime)
        self._live_views: dict[str, SessionView] = {}
        self._indexed_views: dict[str, StoredView] = {}
        """Stored views answered by index, made by the first asker once its session is
        proved (a view is cheap to make: no task of its own); folded ones below."""
        self._folded_views: PerKey[str, SessionView] = PerKey(lifetime, self._folded_view)

    # The corpus-wide parts are made on first use: a request for one session by id (the
    # common persisted read) never pages, filters or walks, and pays nothing for them.

    @cached_property
    def _corpus(self) -> Corpus:
        return Corpus(self._live, self._stored, self._visibility, self._lifetime)

    @cached_property
    def _walks(self) -> Walks:
        return Walks(self._live, self._stored, self._visibility, self._corpus, self._lifetime)

    @cached_property
    def _filtered(self) -> FilteredSessions:
        return FilteredSessions(
            self._live, self._stored, self._visibility, self._corpus, self._filters, self._lifetime
        )

    def close(self) -> None:
        """Cancel every backend call still running for this observation, and release its
        backend snapshot."""
        self._lifetime.close()
        release, self._on_close = self._on_close, None
        if release is not None:
            release()

    # -- the sources ----------------------------------------------------------------------

    def live_session(self, session_id: str) -> LiveSession | None:
        """The live session of this id, if a live store holds it (SOURCE_CONFLICT if two)."""
        return self._live.session(session_id)

    def live_headers(self) -> dict[str, SessionHeader]:
        """Every live header by id, listed once per observation."""
        return self._live.headers()

    @property
    def has_backend(self) -> bool:
        return self._stored.backend is not None

    @property
    def stored_search(self) -> SearchReads | None:
        """The backend's full-text index, when it has one (`gateway.core.search`)."""
        return self._search

    async def backend_headers(self) -> dict[str, SessionHeader]:
        """The backend's whole listing by id (empty with no backend), made once."""
        return await self._stored.listing()

    async def stored(self, session_id: str) -> StoredSession | None:
        """The stored session of this id as the backend has it now (None if not stored)."""
        return await self._stored.stored(session_id)

    async def persisted_header(self, session_id: str) -> SessionHeader:
        """Prove a session is in the backend and return its header (SESSION_NOT_FOUND if not)."""
        await self._visibility.require(session_id)
        return (await self._stored.proved(session_id)).header

    async def is_persisted(self, session_id: str) -> bool:
        return await self._stored.stored(session_id) is not None

    async def persisted_headers(self, ids: Sequence[str]) -> dict[str, SessionHeader]:
        """The stored headers of these ids (batched, once per id)."""
        return await self._stored.headers_of(ids)

    # -- the scope (SPEC §10) ---------------------------------------------------------------

    @property
    def scope(self) -> Scope | None:
        """The scope this observation answers within (None: the whole corpus)."""
        return self._visibility.scope

    async def visible(self, header: SessionHeader) -> bool:
        """Whether the scope lets this session be seen (always, when unscoped)."""
        return await self._visibility.visible(header)

    async def visible_only(self, headers: Sequence[SessionHeader]) -> list[SessionHeader]:
        """The headers the scope lets be seen, in their order."""
        return await self._visibility.visible_only(headers)

    async def scope_filter(self) -> ScopeFilter | None:
        """The scope as a backend predicate over stored sessions (None when unscoped)."""
        return await self._visibility.session_filter()

    async def require_visible(self, session_id: str) -> None:
        """SESSION_NOT_FOUND, worded as for an absent id, when the scope hides the session."""
        await self._visibility.require(session_id)

    async def locate(self, session_id: str) -> tuple[SessionHeader, bool, bool | None]:
        """A session by id: (header, live, persisted). Live stores first, never touching
        persistence for a live one (`persisted` is then None: not asked); else proved in
        the backend. SESSION_NOT_FOUND / SOURCE_CONFLICT / PERSISTENCE_FAILED as usual."""
        await self._visibility.require(session_id)
        live = self._live.session(session_id)
        if live is not None:
            return live.header, True, None
        return (await self._stored.proved(session_id)).header, False, True

    # -- one session's log ------------------------------------------------------------------

    async def view(self, session_id: str) -> SessionView:
        """The session's log as of the first time this observation touched it.

        A live session is viewed through its own fold (never touching
        persistence); a stored one through the stored derivations when they
        cover its log, else loaded whole and folded off the event loop.
        """
        await self._visibility.require(session_id)
        live = self._live.session(session_id)
        if live is not None:
            view = self._live_views.get(session_id)
            if view is None:
                view = self._live_views[session_id] = live.view()
            return view
        indexed = self._indexed_views.get(session_id)
        if indexed is not None:
            return indexed
        if self._event_reads is not None:
            stored = await self._stored.proved(session_id)
            if stored.counts is not None:  # askers meanwhile proved the same answer
                made = StoredView(self._event_reads, stored)
                return self._indexed_views.setdefault(session_id, made)
        return await self._folded_views.get(session_id)

    async def _folded_view(self, session_id: str) -> SessionView:
        """A stored session whose derivations do not cover its log (or a backend without
        them): its whole log, loaded once and folded off the event loop."""
        stored = await self._stored.proved(session_id)
        events = await self._stored.log(session_id)
        fold = await asyncio.to_thread(fold_surface, events)
        return FoldedView(stored.header, events, fold, live=False)

    async def length(self, session_id: str) -> int:
        """How many events the session's log has, as this observation sees it."""
        await self._visibility.require(session_id)
        if self._live.session(session_id) is not None:
            return (await self.view(session_id)).length
        stored = await self._stored.proved(session_id)
        if stored.event_count >= 0:
            return stored.event_count
        return len(await self._stored.log(session_id))

    async def window(
        self, session_id: str, lo: int, hi: int
    ) -> tuple[SessionHeader, list[SessionEvent]]:
        """The header and the raw events lo..hi that exist (no fold needed): a live view,
        a ranged read of the backend when it has one, else the whole log."""
        await self._visibility.require(session_id)
        if self._live.session(session_id) is not None:
            view = await self.view(session_id)
            return view.header, await view.window(lo, hi)
        stored = await self._stored.proved(session_id)
        lo = max(lo, 0)
        if self._event_reads is not None and stored.event_count >= 0:
            hi = min(hi, stored.event_count - 1)
            if lo > hi:
                return stored.header, []
            query = EventQuery(session_id, lo, hi, stored.event_count)
            return stored.header, [r.event for r in await self._event_reads.events(query)]
        return stored.header, list((await self._stored.log(session_id))[lo : hi + 1])

    async def log_extent(self, session_id: str) -> tuple[SessionHeader, int]:
        """The header and log length of a session as this observation sees it (no fold:
        an invalid log is still a log); SESSION_NOT_FOUND etc. as for `locate`."""
        await self._visibility.require(session_id)
        if self._live.session(session_id) is not None:
            view = await self.view(session_id)
            return view.header, view.length
        stored = await self._stored.proved(session_id)
        if self._derived_reads is not None and stored.event_count >= 0:
            return stored.header, stored.event_count
        return stored.header, len(await self._stored.log(session_id))

    async def log_slice(self, session_id: str, lo: int, hi: int) -> list[SessionEvent]:
        """The raw events lo..hi of the log `log_extent` measured, read afresh and not
        remembered: for streaming a whole log page by page (an export) in memory that
        follows the page, not the log. Events are shared values: do not mutate them."""
        _, length = await self.log_extent(session_id)
        lo, hi = max(lo, 0), min(hi, length - 1)
        if lo > hi:
            return []
        if self._live.session(session_id) is not None:
            return await (await self.view(session_id)).window(lo, hi)
        derived = self._derived_reads
        stored = await self._stored.proved(session_id)
        if derived is None or stored.event_count < 0:
            return list((await self._stored.log(session_id))[lo : hi + 1])
        query = EventQuery(session_id, lo, hi, length)
        found = await call_backend("read events", lambda: derived.read_events([query]))
        rows = found.get(query) if isinstance(found, dict) else None
        if rows is None:
            raise session_not_found(session_id, "it was removed from persistence while being read")
        return [row.event for row in rows]

    async def raw_log(self, session_id: str) -> Sequence[SessionEvent]:
        """The whole stored log, loaded once (backends without stored derivations)."""
        return await self._stored.log(session_id)

    # -- its title (SPEC §14) ------------------------------------------------------------------

    async def title(self, session_id: str) -> SessionTitle | None:
        """The session's title: what its last `session/title` event says, None when it has
        none or that event is malformed (`gateway.core.titles`).

        For a session this observation has already found (a page's records, a located
        id): a live one answers from the seqs its store remembers, as of this
        observation's view (persistence untouched); a stored one from the backend's
        `TitleReads`, the ids asked in one turn in one call; any other backend by
        scanning the log of the session's view.
        """
        event = await self.title_event(session_id)
        return None if event is None else title_of(event)

    async def title_event(self, session_id: str) -> SessionEvent | None:
        """The session's last `session/title` event (see `title`), or None."""
        await self._visibility.require(session_id)
        live = self._live.session(session_id)
        if live is not None:
            return live.title_event((await self.view(session_id)).length)
        if self._titles is not None:
            return await self._titles.titles.load(session_id)
        view = await self.view(session_id)
        return last_title_event(await view.window(0, view.length - 1))

    # -- stored derivations, batched (what a `StoredView` reads) ------------------------------

    def _reads(self, session_id: str) -> StoredEventReads:
        if self._event_reads is None:
            raise session_not_found(
                session_id, NO_BACKEND if self._stored.backend is None else NOT_STORED
            )
        return self._event_reads

    async def read_events(self, query: EventQuery) -> list[StoredEvent]:
        return await self._reads(query.session_id).events(query)

    async def read_events_at(self, session_id: str, seqs: Sequence[int]) -> list[StoredEvent]:
        return await self._reads(session_id).events_at(session_id, seqs)

    async def read_surface(self, session_id: str, as_of: int) -> list[StoredEvent]:
        return await self._reads(session_id).surface(session_id, as_of)

    async def read_trace(self, session_id: str, seq: int, as_of: int) -> StoredTrace:
        return await self._reads(session_id).trace(session_id, seq, as_of)

    # -- the corpus ---------------------------------------------------------------------------

    @property
    def pushdown(self) -> bool:
        """Whether corpus questions go to the backend's indexes (else: one listing)."""
        return self._corpus.pushdown

    async def records(self) -> list[SessionRecord]:
        """Every (visible) session, newest first (ties by id): the cross-corpus list, made once."""
        return await self._corpus.records()

    async def record_map(self) -> dict[str, SessionRecord]:
        return await self._corpus.record_map()

    async def record(self, session_id: str) -> SessionRecord | None:
        """One session's corpus record, or None when the corpus lacks it."""
        return await self._corpus.record(session_id)

    async def live_record(self, header: SessionHeader) -> SessionRecord:
        """The record of a live session an answer includes, checked against its stored twin."""
        return await self._corpus.live_record(header)

    async def sessions_total(self) -> int:
        """How many (visible) sessions the corpus holds, counted once per observation."""
        return await self._corpus.sessions_total()

    async def sessions_page(
        self, after: SessionKey | None, first: int, *, with_total: bool = True
    ) -> SessionsPage:
        """`first` records after the key `after`, in corpus order (see `Corpus.sessions_page`)."""
        return await self._corpus.sessions_page(after, first, with_total=with_total)

    async def filtered_sessions_page(
        self,
        f: SessionFilter,
        after: SessionKey | None,
        first: int,
        *,
        with_total: bool = True,
    ) -> SessionsPage:
        """`sessions_page` over the sessions matching `f` (SPEC §12; see
        `gateway.core.session_filter`); `f` is checked by `filters.check_session_filter`."""
        return await self._filtered.page(f, after, first, with_total=with_total)

    async def filtered_sessions_total(self, f: SessionFilter) -> int:
        """How many (visible) sessions match `f`, counted once per observation and filter."""
        return await self._filtered.total(f)

    async def children(self, session_id: str) -> list[SessionRecord]:
        """The sessions forked from this one, by createdAt then id."""
        return await self._corpus.children(session_id)

    async def children_index(self) -> dict[str, list[SessionRecord]]:
        """parent id -> children over the whole listing (backends without pushdown)."""
        return await self._corpus.children_index()

    async def lineage_records(self, session_id: str) -> dict[str, SessionRecord]:
        """The records a lineage of `session_id` needs: its ancestor chain and every
        descendant, over both sources (see `gateway.core.walks`)."""
        return await self._walks.lineage_records(session_id)
