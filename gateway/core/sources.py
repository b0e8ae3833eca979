"""The two sources of the logical corpus as one observation sees them (SPEC §3).

`LiveSources` reads the live stores and never touches persistence: a broken
backend cannot make a live session unreadable. `StoredSources` reads the
mounted backend through its required surface (`list()`, `load()`) and its
batched loaders (`gateway.core.loaders`); each session is proved and each
log loaded once per observation. Neither applies a scope: that is
`gateway.core.visibility`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from .backend import PersistenceBackend, StoredSession
from .batching import Lifetime, Once, PerKey
from .errors import (
    ErrorCode,
    SessionQueryError,
    backend_failure,
    session_not_found,
    source_conflict,
)
from .ids import can_exist
from .loaders import CorpusLoaders, DerivedLoaders, call_backend, check_header
from .model import SessionEvent, SessionHeader
from .store import LiveSession, SessionStore

NO_BACKEND = "no live store holds it and no persistence is mounted"
NOT_STORED = "it is in no live store and not in persistence"


class LiveSources:
    """The live stores' sessions, each looked up once per observation."""

    def __init__(self, stores: Sequence[SessionStore]) -> None:
        self._stores = tuple(stores)
        self._sessions: dict[str, LiveSession] = {}
        self._headers: dict[str, SessionHeader] | None = None

    def session(self, session_id: str) -> LiveSession | None:
        """The live session of this id, if a live store holds it (SOURCE_CONFLICT if two)."""
        found = self._sessions.get(session_id)
        if found is not None:
            return found
        hits = [s for s in (store.get(session_id) for store in self._stores) if s is not None]
        if len(hits) > 1:
            raise SessionQueryError(
                ErrorCode.SOURCE_CONFLICT,
                f"session {session_id!r} is held by {len(hits)} live stores",
            )
        if hits:
            self._sessions[session_id] = hits[0]
            return hits[0]
        return None

    def headers(self) -> dict[str, SessionHeader]:
        """Every live header by id, listed once per observation."""
        if self._headers is None:
            out: dict[str, SessionHeader] = {}
            for store in self._stores:
                for session in store.list():
                    if session.id in out:
                        raise SessionQueryError(
                            ErrorCode.SOURCE_CONFLICT,
                            f"session {session.id!r} is held by more than one live store",
                        )
                    out[session.id] = session.header
            self._headers = out
        return self._headers


class StoredSources:
    """The mounted backend (if any), its answers remembered for one observation."""

    def __init__(
        self,
        backend: PersistenceBackend | None,
        corpus: CorpusLoaders | None,
        derived: DerivedLoaders | None,
        lifetime: Lifetime,
    ) -> None:
        self.backend = backend
        self.corpus = corpus
        self.derived = derived
        self._listing: Once[dict[str, SessionHeader]] = Once(lifetime, self._list)
        self._stored: PerKey[str, StoredSession | None] = PerKey(lifetime, self._read_stored)
        self._logs: PerKey[str, Sequence[SessionEvent]] = PerKey(lifetime, self._whole_log)

    async def listing(self) -> dict[str, SessionHeader]:
        """The backend's whole listing by id (empty with no backend), made once."""
        return await self._listing.get()

    async def _list(self) -> dict[str, SessionHeader]:
        backend = self.backend
        if backend is None:
            return {}
        headers = await call_backend("list sessions", backend.list)
        out: dict[str, SessionHeader] = {}
        for header in headers:
            check_header(header)
            seen = out.get(header.id)
            if seen is not None and (diff := seen.conflicts_with(header)):
                raise source_conflict(header.id, "two persisted headers", diff)
            out[header.id] = header
        return out

    async def stored(self, session_id: str) -> StoredSession | None:
        """The stored session of this id as the backend has it now (None if not stored).

        Asked once per id: through the stored derivations' row read when the
        backend has one (header, size and counts in one read), else by id,
        else from the listing.
        """
        if self.backend is None or not can_exist(session_id):  # no backend is asked
            return None
        derived = self.derived
        if derived is not None and not self._listing.asked:
            # The row read answers it, remembered per id by its own loader: awaited
            # directly, not through a task of `_stored`'s (two turns of the loop more).
            return await derived.sessions.load(session_id)
        return await self._stored.get(session_id)

    async def _read_stored(self, session_id: str) -> StoredSession | None:
        derived = self.derived
        if derived is not None and derived.sessions.asked(session_id):
            return await derived.sessions.load(session_id)  # asked before: that answer
        if self._listing.asked:
            header = (await self.listing()).get(session_id)
            if header is None or self.derived is None:
                return None if header is None else StoredSession(header, -1)
        if self.derived is not None:
            return await self.derived.sessions.load(session_id)
        if self.corpus is not None:
            found = await self.corpus.headers.load(session_id)
        else:
            found = (await self.listing()).get(session_id)
        return None if found is None else StoredSession(check_header(found), -1)

    async def headers_of(self, ids: Sequence[str]) -> dict[str, SessionHeader]:
        """The stored headers of these ids (batched, once per id)."""
        if self.backend is None or not ids:
            return {}
        stored = await asyncio.gather(*(self.stored(i) for i in ids))
        return {s.header.id: s.header for s in stored if s is not None}

    async def proved(self, session_id: str) -> StoredSession:
        """The stored session of this id, SESSION_NOT_FOUND when it is not stored."""
        if self.backend is None:
            raise session_not_found(session_id, NO_BACKEND)
        stored = await self.stored(session_id)
        if stored is None:
            raise session_not_found(session_id, NOT_STORED)
        return stored

    async def log(self, session_id: str) -> Sequence[SessionEvent]:
        """The whole stored log, loaded once (backends without stored derivations)."""
        return await self._logs.get(session_id)

    async def _whole_log(self, session_id: str) -> Sequence[SessionEvent]:
        listed = (await self.proved(session_id)).header
        backend = self.backend
        assert backend is not None
        try:
            loaded = await backend.load(session_id)
        except KeyError:  # removed between the proof and the load
            raise session_not_found(
                session_id, "it was removed from persistence while being read"
            ) from None
        except SessionQueryError:
            raise
        except Exception as exc:
            raise backend_failure("load sessions", exc) from exc
        header, events = _unpack(session_id, loaded)
        if not isinstance(header, SessionHeader):
            raise SessionQueryError(
                ErrorCode.PERSISTENCE_FAILED,
                f"persistence backend loaded {type(header).__name__} for {session_id!r}, "
                "not a SessionHeader",
            )
        if diff := listed.conflicts_with(header):
            raise source_conflict(session_id, "the listed and the loaded persisted header", diff)
        return events


def _unpack(session_id: str, loaded: object) -> tuple[object, tuple[SessionEvent, ...]]:
    """A loaded (header, events) pair, PERSISTENCE_FAILED when it is not one."""
    pair: Any = loaded  # checked here, whatever the backend returned
    try:
        header, events = pair
        return header, tuple(events)
    except (TypeError, ValueError) as exc:
        raise SessionQueryError(
            ErrorCode.PERSISTENCE_FAILED,
            f"persistence backend returned a malformed log for {session_id!r}: {exc}",
        ) from exc
