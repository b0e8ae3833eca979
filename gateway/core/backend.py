"""What the core asks of a persistence backend (SPEC §6, §3a), as named capabilities.

Every backend has the required `PersistenceBackend` surface: `list()` and
`load()`. A backend may also offer narrower questions, each a protocol below;
the core asks `capabilities_of(backend)` once per observation which of them
it has and uses them, so a request costs what it answers instead of what the
corpus or the log holds. The answers must be exactly what `list()`/`load()`
and the fold would give (SPEC §3a); `session-gateway verify` checks the
stored derivations of `SqlPersistence`.

Batched methods take many keys and return a dict; a key the backend does not
hold is left out of the answer. The core coalesces one observation's keys into
one call and remembers each key's own answer (`gateway.core.batching`); the
lineage walks answer with the union over their seeds, which the core splits per
seed (`gateway.core.reach`), so that union must contain everything any seed
reaches, a seed that another seed reaches included.

Surface codes stored by a writer (`gateway.core.fold`: LOG_ONLY_CODE 0,
CURRENT_CODE 1, SHADOWED_CODE 2) are "as of the whole stored log". A reader
that saw a log of `as_of` events classifies an event as of that length: a
SHADOWED event whose `replaced_by >= as_of` was still CURRENT then (replacers
only ever come later), which keeps one request's answers consistent while
appends go on.
"""

from __future__ import annotations

import builtins
import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeGuard, runtime_checkable

from .filters import EventFilter, SessionFilter, TimeRange
from .matching import RankKey
from .model import SessionEvent, SessionHeader


@runtime_checkable
class PersistenceBackend(Protocol):
    """The required surface of a backend: authoritative headers and whole logs."""

    async def list(self) -> builtins.list[SessionHeader]: ...

    async def load(self, session_id: str) -> tuple[SessionHeader, builtins.list[SessionEvent]]: ...


# -- pushdown of corpus questions ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScopeFilter:
    """The stored sessions a scoped question may see (SPEC §10), as a backend applies it.

    A stored session matches when its cwd equals a prefix or starts with prefix
    + "/", when its id matches a glob (`*` any run, `?` one character, all else
    literal), or when it is one of `tree_seeds` or reached from one by child
    links through stored sessions. The core puts in the seeds both the granted
    tree roots and the live sessions inside a granted tree, so that stored
    sessions below a live-only one are found too.
    """

    cwd_prefixes: tuple[str, ...] = ()
    id_globs: tuple[str, ...] = ()
    tree_seeds: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    """Sessions matched by id alone (no descendants): tree roots, where the caller
    walks the tree itself (`load_children`, `load_descendancy`)."""


@runtime_checkable
class CorpusReads(Protocol):
    """Corpus questions answered by index instead of by listing every header."""

    async def load_headers(self, session_ids: Sequence[str]) -> dict[str, SessionHeader]:
        """The stored headers of these ids."""
        ...

    async def count_sessions(self, where: ScopeFilter | None = None) -> int:
        """How many sessions are stored (that match `where`, when given)."""
        ...

    async def headers_page(
        self, after: tuple[int, str] | None, limit: int, where: ScopeFilter | None = None
    ) -> builtins.list[SessionHeader]:
        """Up to `limit` headers in corpus order (createdAt descending, id ascending),
        strictly after the key `(created_at, id)` when `after` is given, only those
        matching `where` when given."""
        ...

    async def load_children(
        self, parent_ids: Sequence[str], where: ScopeFilter | None = None
    ) -> dict[str, builtins.list[SessionHeader]]:
        """The stored sessions whose parentSession is each id (ids with none left out),
        only those matching `where` when given; each list ordered by createdAt, then id."""
        ...

    async def load_ancestry(self, session_ids: Sequence[str]) -> dict[str, SessionHeader]:
        """Every stored header on the chain of any of these ids: the id itself when
        stored, then its parentSession links followed while the parent is stored.
        Terminates on cycles.

        The union over all ids, which the core splits into each id's own chain (the
        parent links followed from it within the answer): so the answer must hold
        every header on every id's chain."""
        ...

    async def load_descendancy(
        self,
        session_ids: Sequence[str],
        where: ScopeFilter | None = None,
        inside: Sequence[str] = (),
    ) -> dict[str, SessionHeader]:
        """Every stored header reached from any of these ids by one or more child links
        (sessions whose parentSession is the id, their children, and so on). An id is
        itself in the answer exactly when it is so reached: from another of the ids
        (a seed below another seed), or from itself through a cycle. Terminates on
        cycles.

        The union over all ids, which the core splits into each id's own descendants
        (the child links followed from it within the answer): that is exact only if a
        seed reached from another seed is in the answer, since the walk from the upper
        seed passes through it. Leaving such a seed out (as "one of the ids") cuts the
        upper seed's lineage short.

        With `where` (a scope, SPEC §10): the walk goes only through visible sessions.
        A session is inside a granted tree when its id is in `where.ids` or its parent
        is inside (the given ids listed in `inside` are); it is visible when inside or
        when it matches `where`'s cwd prefixes or id globs. Visibility is a property of
        the session, whichever seed the walk came from, so the same per-seed split holds."""
        ...


# -- stored derivations of the fold ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A stored session's header and log size, as one read saw them.

    `counts` is (log_only, current, shadowed) as of `event_count` when the
    writer's derivations cover the whole stored log; None when they do not
    (a log written by other means): then the core loads and folds the log.
    """

    header: SessionHeader
    event_count: int
    counts: tuple[int, int, int] | None = None


class StoredEvent(NamedTuple):
    """One stored event with its stored derivations (as of the whole stored log).

    `event.data` is None when the query did not ask for payloads.
    """

    event: SessionEvent
    surface: int
    replaced_by: int | None


@dataclass(frozen=True, slots=True)
class EventQuery:
    """A ranged read: events of one session with `lo <= seq <= hi` and `seq < as_of`,
    ascending by seq, at most `limit` (None: all), and when `surfaces` is given only
    those whose class as of `as_of` is one of these codes; payloads only `with_data`.

    `time` and `types` (SPEC §12) narrow it further; the core sets them only for a
    backend that offers `FilterReads` (a `read_events` that does not know them
    would ignore them)."""

    session_id: str
    lo: int
    hi: int
    as_of: int
    surfaces: frozenset[int] | None = None
    limit: int | None = None
    with_data: bool = True
    time: TimeRange | None = None
    types: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class StoredTrace:
    """The stored relations of one event, as of a log length.

    `replacement_chain`: its replacers from the immediate one on, each < as_of.
    `replaced`: the seqs it shadowed itself, in surface order.
    `derived`: the seqs < as_of that cite it, ascending.
    """

    replacement_chain: tuple[int, ...]
    replaced: tuple[int, ...]
    derived: tuple[int, ...]


@runtime_checkable
class DerivedReads(Protocol):
    """A backend whose writer stores the fold's derivations (SPEC §3a)."""

    async def load_sessions(self, session_ids: Sequence[str]) -> dict[str, StoredSession]:
        """Header, log size and class counts of each stored id (one read of the row)."""
        ...

    async def read_events(
        self, queries: Sequence[EventQuery]
    ) -> dict[EventQuery, builtins.list[StoredEvent]]:
        """Each ranged read (see `EventQuery`); queries of unknown sessions left out."""
        ...

    async def read_events_at(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], StoredEvent]:
        """Single events by (session id, seq), payloads included."""
        ...

    async def read_surfaces(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], builtins.list[StoredEvent]]:
        """For each (session id, as_of): the surface as it stood when the log had
        `as_of` events, in model-visible order, payloads included."""
        ...

    async def read_traces(
        self, keys: Sequence[tuple[str, int, int]]
    ) -> dict[tuple[str, int, int], StoredTrace]:
        """For each (session id, seq, as_of): the event's stored relations."""
        ...


# -- filters of the pages (SPEC §12) -----------------------------------------------------


@runtime_checkable
class FilterReads(Protocol):
    """A backend that answers the clauses of SPEC §12 by index: all but `availability`
    (the core's: it is about the live stores) and `text` (the core's literal scan).

    Offering it also promises that `DerivedReads.read_events` honours
    `EventQuery.time` and `EventQuery.types`. A backend without it still works: the
    core then filters what `headers_page` / `read_events` / `list()` return."""

    async def filtered_headers_page(
        self,
        after: tuple[int, str] | None,
        limit: int,
        sessions: SessionFilter,
        where: ScopeFilter | None = None,
    ) -> builtins.list[SessionHeader]:
        """`CorpusReads.headers_page`, only headers matching `sessions` (its
        `availability` ignored)."""
        ...

    async def count_filtered_sessions(
        self, sessions: SessionFilter, where: ScopeFilter | None = None
    ) -> int:
        """How many stored sessions match `sessions` (and `where`, when given)."""
        ...

    async def count_events(self, queries: Sequence[EventQuery]) -> dict[EventQuery, int]:
        """How many events each ranged read matches, its `limit` ignored (queries of
        unknown sessions left out)."""
        ...


# -- full-text search and titles (SPEC §13, §14) ---------------------------------------


@dataclass(frozen=True, slots=True)
class StoredSearch:
    """One phrase search of the stored event texts (SPEC §13), as a backend answers it.

    `phrase` is the normalized query's unicode61 tokens (never empty: a query with
    no tokens is answered by the core with nothing). An event hit matches `where`
    (the scope), `sessions` (its session's filter, `availability` left to the core),
    `events` (seq, time, types and surface as stored as of the whole stored log;
    never `text`), lies in `session_id` when given (`searchEvents`), and not in a
    session of `shadowed` (those are live: the core searches their live log).
    Hits come in `RankKey.order()`, strictly after `after` when given, at most `limit`.
    """

    phrase: tuple[str, ...]
    query: str
    limit: int
    after: RankKey | None = None
    where: ScopeFilter | None = None
    sessions: SessionFilter | None = None
    events: EventFilter | None = None
    session_id: str | None = None
    shadowed: tuple[str, ...] = ()


class StoredHit(NamedTuple):
    """One matching stored event: its place in the ranking, type, and indexed text
    (`gateway.core.words.indexable` of its §13 text), from which the core makes
    the snippet."""

    key: RankKey
    type: str
    text: str


@runtime_checkable
class SearchReads(Protocol):
    """A backend whose writer indexes event texts in the transaction that writes them."""

    async def search_events(self, search: StoredSearch) -> builtins.list[StoredHit]:
        """The matching events, ranked (see `StoredSearch`)."""
        ...

    async def search_sessions(self, search: StoredSearch) -> builtins.list[StoredHit]:
        """Each matching session's best event, sessions ranked by it (see `StoredSearch`)."""
        ...


@runtime_checkable
class TitleReads(Protocol):
    """A backend whose writer stores each session's title seq (SPEC §14)."""

    async def load_titles(self, session_ids: Sequence[str]) -> dict[str, SessionEvent]:
        """The last `session/title` event of each stored id that has one (one read)."""
        ...


class BackendSnapshot(NamedTuple):
    """A backend whose reads share one snapshot of the store (SPEC §7), for one
    observation: `backend` has the capabilities of the one that made it; `close()`
    (sync, never waiting) releases the snapshot. `moved()`, of a snapshot asked
    `retryable`: whether its reads found the store changed between two of them (they
    then fail); the observation is not one, and its owner makes it again."""

    backend: PersistenceBackend
    close: Callable[[], None]
    moved: Callable[[], bool] | None = None


@runtime_checkable
class ReadSnapshots(Protocol):
    """A backend that can hold one snapshot across the reads of one observation."""

    def read_snapshot(self, *, retryable: bool = False) -> BackendSnapshot | None:
        """This backend reading through one snapshot, or None when it cannot now.
        `retryable`: its owner can make the observation again from the start, so the
        backend may read without holding a snapshot and tell instead when the store
        changed between two reads (`BackendSnapshot.moved`)."""
        ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a mounted backend can answer besides `list()`/`load()` (None: it cannot)."""

    corpus: CorpusReads | None
    derived: DerivedReads | None
    search: SearchReads | None = None
    titles: TitleReads | None = None
    filters: FilterReads | None = None
    snapshots: ReadSnapshots | None = None
    retryable: bool = False
    """Whether `snapshots.read_snapshot` takes `retryable` (one written before it did
    not: its snapshots are then all strict)."""


_PROTOCOLS = (CorpusReads, DerivedReads, SearchReads, TitleReads, FilterReads, ReadSnapshots)
_OFFERED: weakref.WeakKeyDictionary[object, tuple[bool, ...]] = weakref.WeakKeyDictionary()
"""Which of `_PROTOCOLS` each backend object offers (flags only: a value holding the
backend would keep its key alive)."""


def capabilities_of(backend: PersistenceBackend) -> Capabilities:
    """The named capabilities `backend` offers (checked by protocol, not by name), checked
    once per backend object: runtime-Protocol checks cost microseconds each, per request."""
    try:
        offered = _OFFERED.get(backend)
        if offered is None:
            offered = _OFFERED[backend] = _offered(backend)
    except TypeError:  # not weakly referable or not hashable: checked each time
        offered = _offered(backend)
    corpus, derived, search, titles, filters, snapshots = (
        backend if flag else None for flag in offered[:-1]
    )
    return Capabilities(corpus, derived, search, titles, filters, snapshots, offered[-1])  # type: ignore[arg-type]


def _offered(backend: object) -> tuple[bool, ...]:
    flags = tuple(isinstance(backend, protocol) for protocol in _PROTOCOLS)
    return (*flags, flags[-1] and _takes_retryable(backend))


def _takes_retryable(backend: object) -> bool:
    try:
        parameters = inspect.signature(backend.read_snapshot).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return False
    return "retryable" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def is_backend(backend: object) -> TypeGuard[PersistenceBackend]:
    """Whether `backend` has the required surface (`list()` and `load()`)."""
    return isinstance(backend, PersistenceBackend)
