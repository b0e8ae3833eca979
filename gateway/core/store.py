"""Live, in-process session stores (SPEC §2, §6).

A host appends events as its agent runs; the store validates every append with
the surface fold's incremental path (O(1) amortised, no rescan) and refuses an
event that would break the log, leaving the log unchanged. Readers take
snapshots, which are always a consistent prefix even while appends go on in
another thread.

Listeners (`LiveSession.listen`) hear of each append as it is committed, in
seq order, and of the session leaving its store (`SessionStore.remove`). They
are called synchronously under the session's lock so that registration and
delivery are exact (every seq at or after the length `listen` returns reaches
the listener, none before it); a listener must therefore only hand the event
on (e.g. into a bounded buffer, `gateway.core.tail`). With nobody listening an
append pays one attribute test; a listener that raises is logged and dropped,
never breaking the append.
"""

from __future__ import annotations

import logging
import threading
import time as _time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from .fold import SURFACE_BY_CODE, EventSurface, SurfaceFold
from .ids import id_problem, shown
from .indexed_text import IndexedText, index_event
from .jsonvalue import JsonValue, clone_json
from .model import SessionEvent, SessionHeader
from .titles import TITLE_EVENT
from .views import LiveState, LiveView

logger = logging.getLogger("gateway.core")


class AppendListener(Protocol):
    """What `LiveSession.listen` calls: cheap, non-blocking, under the session's lock."""

    def appended(self, event: SessionEvent) -> None:
        """`event` was just committed (the shared immutable value: do not mutate its data)."""

    def closed(self) -> None:
        """The session left its store: no event follows."""


def now_ms() -> int:
    """The current time in epoch milliseconds."""
    return _time.time_ns() // 1_000_000


class LiveSession:
    """One live session: an immutable header and an append-only, always-valid log."""

    __slots__ = (
        "_cited_by",
        "_closed",
        "_events",
        "_fold",
        "_listeners",
        "_lock",
        "_texts",
        "_title_seqs",
        "header",
    )

    def __init__(self, header: SessionHeader, seed: Sequence[SessionEvent] = ()) -> None:
        self.header = header
        self._lock = threading.Lock()
        self._events: list[SessionEvent] = []
        self._fold = SurfaceFold(self._events.__getitem__)
        # who cites whom, kept as appends go: seq -> citing seqs in log order
        self._cited_by: dict[int, list[int]] = {}
        # the search index, kept as appends go: seq -> the event's indexed text (or None)
        self._texts: list[IndexedText | None] = []
        # the seqs of its `session/title` events, ascending (SPEC §14), kept as appends go
        self._title_seqs: list[int] = []
        self._listeners: tuple[AppendListener, ...] = ()  # replaced, never mutated
        self._closed = False
        for event in seed:  # a seed that breaks a rule raises here: no session is made
            self._commit(event)

    def _commit(self, event: SessionEvent) -> None:
        """Validate, index and record one event (the caller holds the lock, or owns the
        session). The text is indexed first: whatever fails leaves the log as it was."""
        indexed = index_event(event.type, event.data)
        self._fold.apply(event)
        self._events.append(event)
        self._texts.append(indexed)
        if event.type == TITLE_EVENT:
            self._title_seqs.append(event.seq)
        sources = event.source_event_seqs
        if sources:
            cited_by = self._cited_by
            for source in sources:
                cited = cited_by.get(source)
                if cited is None:
                    cited_by[source] = [event.seq]
                else:
                    cited.append(event.seq)

    @property
    def id(self) -> str:
        return self.header.id

    def __len__(self) -> int:
        return len(self._events)

    def append(
        self,
        event_type: str,
        data: JsonValue,
        surface_op: JsonValue = None,
        source_event_seqs: Iterable[int] | None = None,
        time: int | None = None,
        ignorable: bool = False,
    ) -> SessionEvent:
        """Append the next event and return a detached copy of it.

        `surface_op` is `"append"` or `{"op": "replace", "start": S, "end": E}`;
        `None` means no surfaceOp (required on surface types, forbidden on the
        rest). `time` defaults to now (epoch ms). Raises
        `SessionQueryError(SESSION_QUERY_INVALID_SURFACE)` naming the broken
        rule, or TypeError/ValueError for values that are not JSON or not
        integers; in every case the log is left as it was.
        """
        if not isinstance(event_type, str) or not event_type:
            raise ValueError(f"event type must be a non-empty string, got {event_type!r}")
        if time is not None and (type(time) is not int or time < 0):
            raise ValueError(f"time must be a non-negative integer (epoch ms), got {time!r}")
        payload = clone_json(data)
        op = clone_json(surface_op)
        sources = None if source_event_seqs is None else tuple(source_event_seqs)
        with self._lock:
            event = SessionEvent(
                type=event_type,
                seq=len(self._events),
                time=now_ms() if time is None else time,
                data=payload,
                surface_op=op,
                source_event_seqs=sources,
                ignorable=bool(ignorable),
            )
            self._commit(event)
            if self._listeners:
                self._notify(event)
        return event.detached()

    def _notify(self, event: SessionEvent) -> None:
        """Tell every listener of `event` (lock held); a raising listener is dropped."""
        try:
            for listener in self._listeners:
                listener.appended(event)
        except Exception:
            failed = listener
            logger.exception("append listener %r failed; it is removed", failed)
            listeners = self._listeners
            self._listeners = tuple(x for x in listeners if x is not failed)
            for rest in listeners[listeners.index(failed) + 1 :]:
                try:
                    rest.appended(event)
                except Exception:
                    logger.exception("append listener %r failed; it is removed", rest)
                    self._listeners = tuple(x for x in self._listeners if x is not rest)

    def listen(self, listener: AppendListener) -> tuple[int, bool, Callable[[], None]]:
        """Register `listener` for every event appended from now on.

        Returns `(length, closed, unlisten)`: the log length at registration
        (events with seq >= length reach the listener, earlier ones do not),
        whether the session has already left its store (then nothing will be
        delivered and `closed()` is not called), and a function removing the
        listener (idempotent).
        """
        with self._lock:
            length, closed = len(self._events), self._closed
            if not closed:
                self._listeners = (*self._listeners, listener)

        def unlisten() -> None:
            with self._lock:
                self._listeners = tuple(x for x in self._listeners if x is not listener)

        return length, closed, unlisten

    def close(self) -> None:
        """Mark the session as having left its store and tell its listeners (idempotent);
        `SessionStore.remove` calls it. Appends after this are still recorded but no
        longer announced."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            listeners, self._listeners = self._listeners, ()
            for listener in listeners:
                try:
                    listener.closed()
                except Exception:
                    logger.exception("append listener %r failed on close", listener)

    @property
    def listener_count(self) -> int:
        return len(self._listeners)

    def snapshot(self) -> tuple[SessionHeader, tuple[SessionEvent, ...]]:
        """The header and the log as of now: a consistent prefix of what follows.

        The events are shared immutable values; detach (`SessionEvent.detached`)
        before handing their data to anyone who might mutate it.
        """
        with self._lock:
            return self.header, tuple(self._events)

    def events(self) -> list[SessionEvent]:
        """A detached copy of the whole log."""
        return [e.detached() for e in self.snapshot()[1]]

    def events_between(self, start: int, stop: int) -> list[SessionEvent]:
        """The shared immutable events start..stop-1 that exist (one slice under the lock;
        detach before handing their data to anyone who might mutate it)."""
        with self._lock:
            return self._events[max(start, 0) : stop]

    def indexed_texts(self, stop: int) -> list[IndexedText | None]:
        """The indexed texts of events 0..stop-1 (one slice under the lock; entries never
        change once committed), for searching a view of `stop` events."""
        with self._lock:
            return self._texts[:stop]

    def surface_of(self, seq: int) -> EventSurface:
        """The class of event `seq` (< len) as of now, from the incremental fold."""
        with self._lock:
            return SURFACE_BY_CODE[self._fold.code(seq)]

    def title_event(self, length: int) -> SessionEvent | None:
        """The last `session/title` event among the first `length` events (a view's
        moment), or None: the remembered seqs are searched, the log is not scanned."""
        with self._lock:
            seqs = self._title_seqs
            at = bisect_left(seqs, length)
            return self._events[seqs[at - 1]] if at else None

    def view(self) -> LiveView:
        """The session as of now, without copying the log: the answers of the view
        stay those of this moment while appends go on (see `LiveView`)."""
        with self._lock:
            return LiveView(self.header, len(self._events), self.locked_state())

    def locked_state(self) -> LiveState:
        """The lock, log, fold and citation index, for `LiveView` (hold the lock to read
        the fold and the index; events below a view's length never change)."""
        return LiveState(self._lock, self._events, self._fold, self._cited_by)


class SessionStore:
    """A registry of live sessions, keyed by id. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, LiveSession] = {}

    def create(
        self,
        session_id: str,
        *,
        created_at: int | None = None,
        cwd: str | None = None,
        parent_session: str | None = None,
        seed_length: int | None = None,
        origin: str | None = None,
        delegation_depth: int | None = None,
        agent_preset: str | None = None,
        seed: Sequence[SessionEvent | dict[str, Any]] | None = None,
        version: int = 0,
    ) -> LiveSession:
        """Create a live session (`created_at` defaults to now).

        `seed` is an initial log (events or their JSON objects, seqs from 0),
        validated as a whole: a seed that breaks a surface rule raises
        INVALID_SURFACE and nothing is created. An id already in this store
        raises ValueError.
        """
        header = SessionHeader(
            id=session_id,
            created_at=now_ms() if created_at is None else created_at,
            version=version,
            cwd=cwd,
            parent_session=parent_session,
            seed_length=seed_length,
            origin=origin,
            delegation_depth=delegation_depth,
            agent_preset=agent_preset,
        )
        return self.add(header, seed)

    def add(
        self,
        header: SessionHeader,
        seed: Sequence[SessionEvent | dict[str, Any]] | None = None,
    ) -> LiveSession:
        """Register a live session for an existing header (see `create`); an id that
        cannot exist (`gateway.core.ids`) raises ValueError."""
        if (problem := id_problem(header.id)) is not None:
            raise ValueError(f"session id {shown(header.id)} {problem}")
        events = [
            SessionEvent.from_json(e) if isinstance(e, dict) else e.detached() for e in seed or ()
        ]
        session = LiveSession(header, events)
        with self._lock:
            if header.id in self._sessions:
                raise ValueError(f"session {header.id!r} already exists in this store")
            self._sessions[header.id] = session
        return session

    def get(self, session_id: str) -> LiveSession | None:
        with self._lock:
            return self._sessions.get(session_id)

    def list(self) -> list[LiveSession]:
        """Every live session, in creation order."""
        with self._lock:
            return list(self._sessions.values())

    def remove(self, session_id: str) -> LiveSession | None:
        """Forget a session (e.g. once it is checkpointed and closed); returns it, if present.

        Its listeners (live tails) are told it has closed."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._sessions

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
