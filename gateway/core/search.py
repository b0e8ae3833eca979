"""Full-text search over one observation of the logical corpus (SPEC §13).

`search_sessions` and `search_events` answer the contract's ranking over the
corpus of §3 as one observation, scoped (§10) first:

* a **live** session is searched in its live log, through the index its store
  kept as the events were committed (`gateway.core.indexed_text`): nothing is
  re-extracted or re-tokenized, and its persisted copy is left out of the
  stored search (`StoredSearch.shadowed`);
* **stored** sessions go to the backend's `SearchReads` when it has them (one
  ranked, keyset-paged call); a backend with only `list()`/`load()` (or stored
  derivations but no index) has its visible logs loaded and matched here, with
  the same matching code as the live path.

Pages are keysets over `RankKey.order()`: a page after a key holds the hits
ranked strictly after it, `limit + 1` are asked of each source to know whether
more follow, and the two sources' pages merge by that order. A session ranks
by its best event, so paging sessions compares each session's best key with
the cursor (never "the best of what is left"). Snippets and highlights
(`matching.snippet`) are made for the page only.

`availability` is the core's to apply (it is about the live stores); every
other clause of the filters goes to the backend. Matching a big live log, or
indexing loaded stored logs, runs in a worker thread so the event loop stays
free.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .backend import SearchReads, StoredHit, StoredSearch
from .errors import ErrorCode, SessionQueryError
from .filters import (
    Availability,
    EventFilter,
    SessionFilter,
    availability_matches,
    check_event_filter,
    check_query,
    check_session_filter,
    event_matches,
    header_matches,
)
from .fold import EventSurface
from .indexed_text import IndexedText, index_event
from .loaders import call_backend
from .matching import RankKey, TextRange, query_terms, snippet, text_spans
from .model import SessionEvent, SessionHeader
from .observation import Observation
from .results import EventRecord, SessionRecord
from .views import SessionView

DEFAULT_SEARCH_LIMIT = 20
MAX_SEARCH_LIMIT = 100
INLINE_SCAN_EVENTS = 2_000
"""Events matched on the event loop at most; a bigger scan goes to a worker thread."""
LOAD_BATCH = 16
"""Stored logs loaded at once by the fallback (bounds its memory)."""


# -- results --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EventHit:
    """One matching event: its record and payload, where it matched, and its rank."""

    record: EventRecord
    event: SessionEvent
    snippet: str
    highlights: tuple[TextRange, ...]
    match_count: int
    key: RankKey

    @property
    def session_id(self) -> str:
        return self.record.session_id


@dataclass(frozen=True, slots=True)
class SessionHit:
    """One matching session and its best event (which ranks it)."""

    session: SessionRecord
    best_match: EventHit

    @property
    def key(self) -> RankKey:
        return self.best_match.key


@dataclass(frozen=True, slots=True)
class EventSearchPage:
    """A page of event hits, best first. Pass `next_after` as `after` for the next page."""

    hits: tuple[EventHit, ...]
    has_next: bool
    has_previous: bool

    @property
    def next_after(self) -> RankKey | None:
        """The last hit's key when more hits follow (else None)."""
        return self.hits[-1].key if self.has_next and self.hits else None


@dataclass(frozen=True, slots=True)
class SessionSearchPage:
    """A page of session hits, ranked by their best events. `next_after` pages on."""

    hits: tuple[SessionHit, ...]
    has_next: bool
    has_previous: bool

    @property
    def next_after(self) -> RankKey | None:
        return self.hits[-1].key if self.has_next and self.hits else None


class ArgumentNames(NamedTuple):
    """How the caller names the arguments, for error messages (GraphQL by default)."""

    query: str = "query"
    session_filter: str = "filter"
    event_filter: str = "eventFilter"


GRAPHQL_SESSIONS = ArgumentNames()
GRAPHQL_EVENTS = ArgumentNames(event_filter="filter")
PYTHON = ArgumentNames("text", "session_filter", "event_filter")


# -- validation -------------------------------------------------------------------------


def check_limit(limit: object) -> int:
    """`limit` as a page size: an int (not a bool) from 1 to MAX_SEARCH_LIMIT."""
    if type(limit) is not int or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_SEARCH_LIMIT}, got {limit!r}")
    return limit


def check_after(after: object) -> RankKey | None:
    if after is None or isinstance(after, RankKey):
        return after
    raise TypeError(f"after must be a RankKey from a previous page, got {type(after).__name__}")


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """A checked search: the normalized query, its phrase and the filters."""

    query: str
    phrase: tuple[str, ...]
    session_filter: SessionFilter | None
    event_filter: EventFilter | None


def check_search(
    text: str,
    session_filter: SessionFilter | None,
    event_filter: EventFilter | None,
    names: ArgumentNames = GRAPHQL_SESSIONS,
) -> SearchRequest:
    """INVALID_QUERY / INVALID_FILTER for what the contract refuses (a search's filters
    take no `text`); the normalized query and its tokens otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"{names.query} must be a string, got {type(text).__name__}")
    query = check_query(text, names.query)
    if session_filter is not None:
        check_session_filter(session_filter, names.session_filter)
    if event_filter is not None:
        check_event_filter(event_filter, names.event_filter, text_allowed=False)
    return SearchRequest(query, query_terms(query), session_filter, event_filter)


# -- matching one log -------------------------------------------------------------------


class Candidate(NamedTuple):
    """A matching event before the page is chosen: its rank and text (indexed, on the
    live and fallback paths: the page's spans are made from its words)."""

    key: RankKey
    text: str
    indexed: IndexedText | None = None


def _unsurfaced(f: EventFilter | None) -> EventFilter | None:
    """The clauses of `f` that need no classification (None when there are none)."""
    if f is None or (f.seq is None and f.time is None and f.types is None):
        return None
    return dataclasses.replace(f, surface=None, text=None)


def match_log(
    session_id: str,
    events: Sequence[SessionEvent],
    texts: Sequence[IndexedText | None] | None,
    phrase: Sequence[str],
    event_filter: EventFilter | None,
) -> list[Candidate]:
    """The events of one log that match `phrase` and the filter's clauses but
    `surface` (the caller classifies the matches). `texts` is the log's index (None:
    index each event now, for a loaded stored log)."""
    plain = _unsurfaced(event_filter)
    out: list[Candidate] = []
    for i, event in enumerate(events):
        indexed = index_event(event.type, event.data) if texts is None else texts[i]
        if indexed is None:
            continue
        count = indexed.match_count(phrase)
        if not count:
            continue
        if plain is not None and not event_matches(plain, event, EventSurface.CURRENT):
            continue
        key = RankKey(count, indexed.length, event.time, session_id, event.seq)
        out.append(Candidate(key, indexed.text, indexed))
    return out


class _Log(NamedTuple):
    view: SessionView
    events: Sequence[SessionEvent]
    texts: Sequence[IndexedText | None] | None


def _match_logs(
    logs: Sequence[_Log], phrase: Sequence[str], event_filter: EventFilter | None
) -> list[list[Candidate]]:
    return [
        match_log(log.view.session_id, log.events, log.texts, phrase, event_filter) for log in logs
    ]


async def _match(
    logs: Sequence[_Log], phrase: Sequence[str], event_filter: EventFilter | None
) -> list[list[Candidate]]:
    """Each log's candidates, the surface clause applied; off the loop when big."""
    scanned = sum(len(log.events) for log in logs)
    indexing = any(log.texts is None for log in logs)
    if scanned > INLINE_SCAN_EVENTS or (indexing and scanned > INLINE_SCAN_EVENTS // 10):
        found = await asyncio.to_thread(_match_logs, logs, phrase, event_filter)
    else:
        found = _match_logs(logs, phrase, event_filter)
    wanted = None if event_filter is None else event_filter.surface
    if wanted is None:
        return found
    kept = set(wanted)

    async def classified(log: _Log, candidates: list[Candidate]) -> list[Candidate]:
        if not candidates:
            return candidates
        items = await log.view.events_at([c.key.seq for c in candidates])
        return [c for c, item in zip(candidates, items, strict=True) if item.surface in kept]

    return list(
        await asyncio.gather(*(classified(log, c) for log, c in zip(logs, found, strict=True)))
    )


async def _log_of(obs: Observation, session_id: str) -> _Log:
    """A session's log as this observation sees it, with the live index when live."""
    view = await obs.view(session_id)
    live = obs.live_session(session_id) if view.live else None
    if live is not None:
        return _Log(view, await view.window(0, view.length - 1), live.indexed_texts(view.length))
    return _Log(view, await view.window(0, view.length - 1), None)


def _after(candidates: Sequence[Candidate], after: RankKey | None) -> list[Candidate]:
    if after is None:
        return list(candidates)
    bound = after.order()
    return [c for c in candidates if c.key.order() > bound]


def _best(candidates: Sequence[Candidate]) -> Candidate | None:
    return min(candidates, key=_order, default=None)


def _order(c: Candidate) -> tuple[int, int, int, str, int]:
    return c.key.order()


def _ranked(candidates: list[Candidate], limit: int) -> list[Candidate]:
    """The best `limit + 1` (one more than a page: whether another page follows)."""
    return heapq.nsmallest(limit + 1, candidates, key=_order)


# -- the backend's index ----------------------------------------------------------------


def _checked_hits(found: object) -> list[Candidate]:
    if not isinstance(found, list) or not all(
        isinstance(h, StoredHit) and isinstance(h.key, RankKey) and isinstance(h.text, str)
        for h in found
    ):
        raise SessionQueryError(
            ErrorCode.PERSISTENCE_FAILED,
            "persistence backend answered a search with something other than a list of StoredHit",
        )
    return [Candidate(h.key, h.text) for h in found]


async def _stored_events(reads: SearchReads, search: StoredSearch) -> list[Candidate]:
    found = await call_backend("search events", lambda: reads.search_events(search))
    return _checked_hits(found)


async def _stored_sessions(reads: SearchReads, search: StoredSearch) -> list[Candidate]:
    found = await call_backend("search sessions", lambda: reads.search_sessions(search))
    return _checked_hits(found)


# -- making the page ----------------------------------------------------------------------


async def _hit(obs: Observation, phrase: Sequence[str], c: Candidate) -> EventHit | None:
    """The page's hit for a candidate: its event classified as of the observation's view,
    the snippet and highlights (None if its session left the corpus meanwhile)."""
    sid, seq = c.key.session_id, c.key.seq
    try:
        view = await obs.view(sid)
    except SessionQueryError as exc:
        if exc.code is ErrorCode.SESSION_NOT_FOUND:
            return None
        raise
    if seq >= view.length:  # appended after this observation's view of the log
        return None
    (item,) = await view.events_at([seq])
    spans = c.indexed.spans(phrase) if c.indexed is not None else text_spans(c.text, phrase)
    shown, highlights = snippet(c.text, spans)
    event = item.event.detached()
    return EventHit(
        record=EventRecord(sid, seq, event.type, event.time, item.surface),
        event=event,
        snippet=shown,
        highlights=tuple(highlights),
        match_count=c.key.match_count,
        key=c.key,
    )


async def _hits(
    obs: Observation, phrase: Sequence[str], chosen: Sequence[Candidate]
) -> list[EventHit]:
    made = await asyncio.gather(*(_hit(obs, phrase, c) for c in chosen))
    return [h for h in made if h is not None]


# -- the two searches -----------------------------------------------------------------------


async def search_events(
    obs: Observation,
    session_id: str,
    text: str,
    event_filter: EventFilter | None = None,
    limit: int = DEFAULT_SEARCH_LIMIT,
    after: RankKey | None = None,
    *,
    names: ArgumentNames = GRAPHQL_EVENTS,
) -> EventSearchPage:
    """The events of one session matching `text`, ranked (SPEC §13); SESSION_NOT_FOUND
    for an absent or invisible id."""
    request = check_search(text, None, event_filter, names)
    limit, after = check_limit(limit), check_after(after)
    await obs.locate(session_id)  # proves it (and its visibility) before anything else
    phrase = request.phrase
    if not phrase:
        return EventSearchPage((), False, after is not None)
    reads = obs.stored_search
    if obs.live_session(session_id) is None and reads is not None:
        search = StoredSearch(
            phrase,
            request.query,
            limit + 1,
            after=after,
            events=event_filter,
            session_id=session_id,
        )
        ranked = await _stored_events(reads, search)
    else:
        log = await _log_of(obs, session_id)
        (found,) = await _match([log], phrase, event_filter)
        ranked = _ranked(_after(found, after), limit)
    hits = await _hits(obs, phrase, ranked[:limit])
    return EventSearchPage(tuple(hits), len(ranked) > limit, after is not None)


async def search_sessions(
    obs: Observation,
    text: str,
    session_filter: SessionFilter | None = None,
    event_filter: EventFilter | None = None,
    limit: int = DEFAULT_SEARCH_LIMIT,
    after: RankKey | None = None,
    *,
    names: ArgumentNames = GRAPHQL_SESSIONS,
) -> SessionSearchPage:
    """The sessions with an event matching `text`, ranked by their best event (SPEC §13)."""
    request = check_search(text, session_filter, event_filter, names)
    limit, after = check_limit(limit), check_after(after)
    phrase = request.phrase
    if not phrase:
        return SessionSearchPage((), False, after is not None)
    wants_stored = session_filter is None or availability_matches(
        session_filter, live=False, persisted=True
    )
    live, stored = await asyncio.gather(
        _live_bests(obs, phrase, session_filter, event_filter),
        _stored_bests(obs, request, limit, after) if wants_stored else _nothing(),
    )
    merged = _after(live, after)
    merged.extend(stored)
    ranked = _ranked(merged, limit)
    chosen = ranked[:limit]
    hits, records = await asyncio.gather(
        _hits(obs, phrase, chosen), _records(obs, [c.key.session_id for c in chosen])
    )
    by_id = {h.session_id: h for h in hits}
    page = [
        SessionHit(records[sid], by_id[sid])
        for sid in (c.key.session_id for c in chosen)
        if sid in by_id and sid in records
    ]
    return SessionSearchPage(tuple(page), len(ranked) > limit, after is not None)


async def _nothing() -> list[Candidate]:
    return []


async def _live_candidates(
    obs: Observation, session_filter: SessionFilter | None
) -> list[SessionHeader]:
    """The visible live sessions the session filter keeps (availability included)."""
    headers = [
        h
        for h in obs.live_headers().values()
        if session_filter is None or header_matches(session_filter, h)
    ]
    headers = await obs.visible_only(headers)
    if session_filter is None or session_filter.availability is None:
        return headers
    if Availability.LIVE in session_filter.availability:
        return headers
    if Availability.PERSISTED not in session_filter.availability:
        return []
    persisted = await asyncio.gather(*(obs.is_persisted(h.id) for h in headers))
    return [h for h, p in zip(headers, persisted, strict=True) if p]


async def _live_bests(
    obs: Observation,
    phrase: Sequence[str],
    session_filter: SessionFilter | None,
    event_filter: EventFilter | None,
) -> list[Candidate]:
    """Each matching live session's best candidate."""
    headers = await _live_candidates(obs, session_filter)
    logs = await asyncio.gather(*(_log_of(obs, h.id) for h in headers))
    found = await _match(logs, phrase, event_filter)
    return [best for c in found if (best := _best(c)) is not None]


async def _stored_bests(
    obs: Observation, request: SearchRequest, limit: int, after: RankKey | None
) -> list[Candidate]:
    """The best `limit + 1` stored sessions after `after` (live ids left out), ranked:
    by the backend's index, else by loading and matching the visible stored logs."""
    sf, ef = request.session_filter, request.event_filter
    shadowed = tuple(sorted(obs.live_headers()))
    reads = obs.stored_search
    if reads is not None:
        search = StoredSearch(
            request.phrase,
            request.query,
            limit + 1,
            after=after,
            where=await obs.scope_filter(),
            sessions=None if sf is None else sf.stored_part,
            events=ef,
            shadowed=shadowed,
        )
        return await _stored_sessions(reads, search)
    if not obs.has_backend:
        return []
    ids = [
        r.header.id
        for r in await obs.records()
        if not r.live and (sf is None or header_matches(sf, r.header))
    ]
    bests: list[Candidate] = []
    for start in range(0, len(ids), LOAD_BATCH):
        batch = ids[start : start + LOAD_BATCH]
        logs = await asyncio.gather(*(_log_of(obs, sid) for sid in batch))
        found = await _match(logs, request.phrase, ef)
        bests.extend(best for c in found if (best := _best(c)) is not None)
    return _ranked(_after(bests, after), limit)


async def _records(obs: Observation, session_ids: Sequence[str]) -> dict[str, SessionRecord]:
    """The corpus records of the page's sessions (live ones checked against their
    stored twins: SOURCE_CONFLICT stays exact for what the answer holds)."""
    live = obs.live_headers()

    async def one(sid: str) -> SessionRecord | None:
        header = live.get(sid)
        if header is not None:
            return await obs.live_record(header)
        return await obs.record(sid)

    found = await asyncio.gather(*(one(sid) for sid in session_ids))
    return {r.header.id: r for r in found if r is not None}


__all__ = [
    "DEFAULT_SEARCH_LIMIT",
    "MAX_SEARCH_LIMIT",
    "PYTHON",
    "ArgumentNames",
    "EventHit",
    "EventSearchPage",
    "SearchRequest",
    "SessionHit",
    "SessionSearchPage",
    "check_limit",
    "check_search",
    "match_log",
    "search_events",
    "search_sessions",
]
