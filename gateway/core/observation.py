"""One observation of the logical corpus (SPEC §3).

An `Observation` resolves sessions across the live stores and the mounted
backend, and remembers what it loaded for as long as it lives: within one
observation the corpus is listed at most once and each session's log is
loaded at most once, so nested questions see one consistent state and the
backend work does not grow with how a question is nested. Nothing outlives
it: `SessionQuery` makes a new one per operation, the GraphQL layer one per
request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .backend import has_method
from .batching import Batcher, gather_singles
from .errors import ErrorCode, SessionQueryError
from .fold import FoldResult, fold_surface
from .gcpause import gc_paused
from .model import SessionEvent, SessionHeader
from .results import SessionRecord
from .store import SessionStore

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SessionLog:
    """A resolved session: its header, its raw log and where it came from.

    `complete_data` is False when the backend's fold-only fast path left
    payloads out (they are `None` except on tool/result events).
    """

    header: SessionHeader
    events: Sequence[SessionEvent]
    live: bool
    complete_data: bool = True


def _key(record: SessionRecord) -> tuple[int, str]:
    return (-record.header.created_at, record.header.id)


class Observation:
    """A consistent, memoising view of the corpus for one operation or request."""

    def __init__(self, stores: Sequence[SessionStore], backend: object | None) -> None:
        self._stores = tuple(stores)
        self._backend = backend
        self._memo: dict[tuple[Any, ...], asyncio.Future[Any]] = {}
        self._batchers: dict[str, Batcher[Any, Any] | None] = {}

    # -- memo -------------------------------------------------------------

    async def _once(self, key: tuple[Any, ...], make: Callable[[], Awaitable[T]]) -> T:
        """Run `make` once per key; concurrent and later askers share its outcome."""
        fut = self._memo.get(key)
        if fut is None:
            fut = asyncio.ensure_future(make())
            self._memo[key] = fut
        result: T = await asyncio.shield(fut)
        return result

    # -- backend calls, each wrapped into the closed error set ------------

    async def _call_backend(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except SessionQueryError:
            raise
        except Exception as exc:  # any backend failure is PERSISTENCE_FAILED
            detail = str(exc).strip() or type(exc).__name__
            raise SessionQueryError(
                ErrorCode.PERSISTENCE_FAILED,
                f"persistence backend failed to {what}: {type(exc).__name__}: {detail}",
            ) from exc

    async def backend_headers(self) -> dict[str, SessionHeader]:
        """The backend's headers by id (empty with no backend), listed once."""
        return await self._once(("backend-list",), self._list_backend)

    async def _list_backend(self) -> dict[str, SessionHeader]:
        backend = self._backend
        if backend is None:
            return {}
        headers = await self._call_backend("list sessions", backend.list)  # type: ignore[attr-defined]
        out: dict[str, SessionHeader] = {}
        for header in headers:
            if not isinstance(header, SessionHeader):
                raise SessionQueryError(
                    ErrorCode.PERSISTENCE_FAILED,
                    f"persistence backend listed {type(header).__name__}, not a SessionHeader",
                )
            seen = out.get(header.id)
            if seen is not None and (diff := seen.conflicts_with(header)):
                raise _conflict(header.id, "two persisted headers", diff)
            out[header.id] = header
        return out

    # -- live side ---------------------------------------------------------

    def _live_session(self, session_id: str) -> Any:
        found = [s for s in (store.get(session_id) for store in self._stores) if s is not None]
        if len(found) > 1:
            raise SessionQueryError(
                ErrorCode.SOURCE_CONFLICT,
                f"session {session_id!r} is held by {len(found)} live stores",
            )
        return found[0] if found else None

    def _live_headers(self) -> dict[str, SessionHeader]:
        out: dict[str, SessionHeader] = {}
        for store in self._stores:
            for session in store.list():
                if session.id in out:
                    raise SessionQueryError(
                        ErrorCode.SOURCE_CONFLICT,
                        f"session {session.id!r} is held by more than one live store",
                    )
                out[session.id] = session.header
        return out

    # -- the corpus --------------------------------------------------------

    async def records(self) -> list[SessionRecord]:
        """Every session, newest first (ties by id): the cross-corpus list, made once."""
        return list(await self._once(("records",), self._make_records))

    async def _make_records(self) -> tuple[SessionRecord, ...]:
        persisted = await self.backend_headers()
        live = self._live_headers()
        records = []
        for sid, header in live.items():
            stored = persisted.get(sid)
            if stored is not None and (diff := header.conflicts_with(stored)):
                raise _conflict(sid, "the live and the persisted header", diff)
            records.append(SessionRecord(header, live=True, persisted=stored is not None))
        for sid, header in persisted.items():
            if sid not in live:
                records.append(SessionRecord(header, live=False, persisted=True))
        records.sort(key=_key)
        return tuple(records)

    async def record_map(self) -> dict[str, SessionRecord]:
        return await self._once(("record-map",), self._make_record_map)

    async def _make_record_map(self) -> dict[str, SessionRecord]:
        return {r.header.id: r for r in await self.records()}

    # -- exact reads -------------------------------------------------------

    def live_log(self, session_id: str) -> SessionLog | None:
        """The live snapshot of a session, if a live store holds it. Never touches persistence."""
        key = ("live", session_id)
        fut = self._memo.get(key)
        if fut is None:
            session = self._live_session(session_id)
            log = None
            if session is not None:
                header, events = session.snapshot()
                log = SessionLog(header, events, live=True)
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(log)
            self._memo[key] = fut
        result: SessionLog | None = fut.result()
        return result

    async def log(self, session_id: str, *, need_data: bool = True) -> SessionLog:
        """A session's whole log: live snapshot first, else the backend's (proved, checked).

        With `need_data=False` the backend's fold-only fast path may serve it.
        """
        live = self.live_log(session_id)
        if live is not None:
            return live
        full = self._memo.get(("log", session_id))
        backend = self._backend
        has_fold_path = has_method(backend, "load_fold_logs") or has_method(
            backend, "load_fold_log"
        )
        if full is not None or need_data or not has_fold_path:
            return await self._once(("log", session_id), lambda: self._load(session_id, True))
        return await self._once(("fold-log", session_id), lambda: self._load(session_id, False))

    def _batcher(self, batch: str, single: str, what: str) -> Batcher[Any, Any] | None:
        """The per-observation loader for one backend call, batched when the backend can."""
        if batch in self._batchers:
            return self._batchers[batch]
        backend = self._backend
        fetch: Callable[[Sequence[Any]], Awaitable[dict[Any, Any]]]
        if has_method(backend, batch):
            fetch = getattr(backend, batch)
        elif has_method(backend, single):
            one = getattr(backend, single)
            fetch = gather_singles(lambda key: one(*key) if isinstance(key, tuple) else one(key))
        else:
            self._batchers[batch] = None
            return None

        async def guarded(keys: Sequence[Any]) -> dict[Any, Any]:
            found = await self._call_backend(what, lambda: fetch(keys))
            if not isinstance(found, dict):
                raise SessionQueryError(
                    ErrorCode.PERSISTENCE_FAILED,
                    f"persistence backend's {batch} returned {type(found).__name__}, not a dict",
                )
            return found

        loader: Batcher[Any, Any] = Batcher(guarded)
        self._batchers[batch] = loader
        return loader

    async def persisted_header(self, session_id: str) -> SessionHeader:
        """Prove a session is in the backend and return its listed header (once per id).

        Uses this observation's listing when it has one; otherwise a by-id
        lookup when the backend offers one (same answer, without listing
        every session), else the listing.
        """
        if self._backend is None:
            raise _not_found(session_id, "no live store holds it and no persistence is mounted")
        return await self._once(("header", session_id), lambda: self._prove(session_id))

    async def _prove(self, session_id: str) -> SessionHeader:
        lookup = None
        if ("backend-list",) not in self._memo:
            lookup = self._batcher("load_headers", "load_header", "look up sessions")
        if lookup is not None:
            header = await lookup.load(session_id)
        else:
            header = (await self.backend_headers()).get(session_id)
        if header is None:
            raise _not_found(session_id, "it is in no live store and not in persistence")
        if not isinstance(header, SessionHeader):
            raise SessionQueryError(
                ErrorCode.PERSISTENCE_FAILED,
                f"persistence backend returned {type(header).__name__}, not a SessionHeader",
            )
        return header

    async def _load(self, session_id: str, full: bool) -> SessionLog:
        listed = await self.persisted_header(session_id)
        if full:
            loader = self._batcher("load_logs", "load", "load sessions")
        else:
            loader = self._batcher("load_fold_logs", "load_fold_log", "load sessions")
        assert loader is not None  # `load` is required of every backend
        loaded = await loader.load(session_id)
        if loaded is None:
            raise _not_found(session_id, "it was removed from persistence while being read")
        header, events = _unpack(session_id, loaded)
        _check_loaded(session_id, listed, header)
        return SessionLog(header, events, live=False, complete_data=full)

    async def window(
        self, session_id: str, start: int, end: int
    ) -> tuple[SessionHeader, Sequence[SessionEvent]]:
        """The header and the events with start <= seq <= end that exist, ascending.

        Served from what this observation already holds, else by the backend's
        ranged read when it has one, so a window never loads a long log.
        """
        loaded = self.live_log(session_id) or self._loaded_full(session_id)
        ranged = None
        if loaded is None:
            ranged = self._batcher("load_windows", "load_window", "read a window")
            if ranged is None:
                loaded = await self.log(session_id)
        if loaded is not None:
            return loaded.header, loaded.events[start : end + 1]
        assert ranged is not None
        loader = ranged

        async def read() -> tuple[SessionHeader, tuple[SessionEvent, ...]]:
            listed = await self.persisted_header(session_id)
            found = await loader.load((session_id, start, end))
            if found is None:
                raise _not_found(session_id, "it was removed from persistence while being read")
            header, events = _unpack(session_id, found)
            _check_loaded(session_id, listed, header)
            return header, events

        return await self._once(("window", session_id, start, end), read)

    def _loaded_full(self, session_id: str) -> SessionLog | None:
        fut = self._memo.get(("log", session_id))
        if fut is not None and fut.done() and fut.exception() is None:
            loaded: SessionLog = fut.result()
            return loaded
        return None

    async def fold(self, session_id: str) -> tuple[SessionLog, FoldResult]:
        """A session's log and its fold, each made once."""
        log = await self.log(session_id, need_data=False)

        async def make() -> FoldResult:
            with gc_paused():
                return fold_surface(log.events)

        return log, await self._once(("fold", session_id), make)


def _not_found(session_id: str, why: str) -> SessionQueryError:
    return SessionQueryError(
        ErrorCode.SESSION_NOT_FOUND, f"session {session_id!r} was not found: {why}"
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


def _check_loaded(session_id: str, listed: SessionHeader, loaded: object) -> None:
    if not isinstance(loaded, SessionHeader):
        raise SessionQueryError(
            ErrorCode.PERSISTENCE_FAILED,
            f"persistence backend loaded {type(loaded).__name__} for {session_id!r}, "
            "not a SessionHeader",
        )
    if diff := listed.conflicts_with(loaded):
        raise _conflict(session_id, "the listed and the loaded persisted header", diff)
