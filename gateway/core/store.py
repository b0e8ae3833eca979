"""Live, in-process session stores (SPEC §2, §6).

A host appends events as its agent runs; the store validates every append with
the surface fold's incremental path (O(1) amortised, no rescan) and refuses an
event that would break the log, leaving the log unchanged. Readers take
snapshots, which are always a consistent prefix even while appends go on in
another thread.
"""

from __future__ import annotations

import threading
import time as _time
from collections.abc import Iterable, Sequence
from typing import Any

from .fold import SurfaceFold
from .ids import id_problem, shown
from .jsonvalue import JsonValue, clone_json
from .model import SessionEvent, SessionHeader
from .views import LiveView


def now_ms() -> int:
    """The current time in epoch milliseconds."""
    return _time.time_ns() // 1_000_000


class LiveSession:
    """One live session: an immutable header and an append-only, always-valid log."""

    __slots__ = ("_cited_by", "_events", "_fold", "_lock", "header")

    def __init__(self, header: SessionHeader, seed: Sequence[SessionEvent] = ()) -> None:
        self.header = header
        self._lock = threading.Lock()
        self._events: list[SessionEvent] = []
        self._fold = SurfaceFold(self._events.__getitem__)
        # who cites whom, kept as appends go: seq -> citing seqs in log order
        self._cited_by: dict[int, list[int]] = {}
        for event in seed:  # a seed that breaks a rule raises here: no session is made
            self._commit(event)

    def _commit(self, event: SessionEvent) -> None:
        """Validate and record one event (the caller holds the lock, or owns the session)."""
        self._fold.apply(event)
        self._events.append(event)
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
        return event.detached()

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

    def view(self) -> LiveView:
        """The session as of now, without copying the log: the answers of the view
        stay those of this moment while appends go on (see `LiveView`)."""
        with self._lock:
            return LiveView(self, len(self._events))

    def locked_state(
        self,
    ) -> tuple[threading.Lock, list[SessionEvent], SurfaceFold, dict[int, list[int]]]:
        """The lock, log, fold and citation index, for `LiveView` (hold the lock to read
        the fold and the index; events below a view's length never change)."""
        return self._lock, self._events, self._fold, self._cited_by


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
        """Forget a session (e.g. once it is checkpointed and closed); returns it, if present."""
        with self._lock:
            return self._sessions.pop(session_id, None)

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._sessions

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
