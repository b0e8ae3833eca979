"""The per-request context: one corpus observation, made fresh for each request.

Every resolver of one GraphQL request works from the same `Context`:

* `obs` is one `Observation` from `SessionQuery.observe()`. It proves and reads
  each session once, asks each backend question once, and batches the
  questions asked in one event-loop turn (a page of fifty sessions asking for
  their children is one backend call), so nested fields see one consistent
  state and the backend work does not grow with how a query nests. Nothing
  survives the request; `close()` cancels backend work still running (the
  HTTP layer calls it when a request ends or times out).

The context only calls the core; the GraphQL types map what it returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.core import (
    Classified,
    EventSurface,
    EventTrace,
    Observation,
    PersistenceBackend,
    Scope,
    SessionHeader,
    SessionQuery,
    SessionRecord,
    SessionTrace,
    SessionView,
)
from gateway.core.filters import EventFilter
from gateway.core.query import HeldSnapshot, trace_event, trace_session

from .budget import ResponseBudget
from .cursors import CursorCodec
from .principal import Principal
from .yielding import checkpoint

if TYPE_CHECKING:
    from .preparation import Prepared


@dataclass(frozen=True, slots=True)
class SessionRef:
    """A session as one request knows it: header, whether live, and (when known) persisted.

    `persisted` is None for a session found in a live store by an exact read:
    whether the backend also holds it is only asked when a client wants to know,
    so reading a live session never depends on persistence.
    """

    header: SessionHeader
    live: bool
    persisted: bool | None

    @classmethod
    def of(cls, record: SessionRecord) -> SessionRef:
        return cls(record.header, record.live, record.persisted)


_CURRENT_ONLY = EventFilter(surface=(EventSurface.CURRENT,))

current_context: ContextVar[Context | None] = ContextVar("gateway_context", default=None)
"""The context of the operation this task runs (set by the pipeline), for resolvers called
once per item that would otherwise ask Strawberry for `info` only to reach it (about
2 us a call: `Event.data` charging the response budget)."""


@dataclass
class Context:
    """Everything request-scoped; see the module docstring."""

    query: SessionQuery
    obs: Observation
    cursors: CursorCodec
    read_window_max: int
    started: float = field(default_factory=time.thread_time)  # for `checkpoint`
    prepared: Prepared | None = None
    """The document the pipeline prepared for this operation (Strawberry runs it as is)."""
    budget: ResponseBudget = field(default_factory=ResponseBudget)
    """What the answer may still hold (`gateway.server.budget`); unlimited unless the
    pipeline set the operation's limits."""
    _surfaces: dict[str, asyncio.Future[list[Classified]]] = field(default_factory=dict)

    @classmethod
    def for_request(
        cls,
        query: SessionQuery,
        cursors: CursorCodec,
        principal: Principal | None = None,
        *,
        backend_view: Callable[[PersistenceBackend], PersistenceBackend] | None = None,
        budget: ResponseBudget | None = None,
        snapshot: HeldSnapshot | None = None,
    ) -> Context:
        """The context of one request, within the caller's scope when auth is on: its
        observation sees the scoped corpus and its cursors are the caller's own.
        `backend_view` wraps the mounted backend for this app (tracing) without
        changing the caller's `SessionQuery`; `budget` is the operation's (else an
        unlimited one), its start the context's (one clock read, not two); `snapshot`
        the one its reads share (its credentials were read in it)."""
        if budget is None:
            budget = ResponseBudget()
        if principal is None:
            obs = query.observe(through=backend_view, snapshot=snapshot)
            return cls(query, obs, cursors, query.read_window_max, budget.started, budget=budget)
        scope = Scope.parse(principal.grants)
        return cls(
            query,
            query.observe(scope, through=backend_view, snapshot=snapshot),
            cursors.for_audience(principal.name),
            query.read_window_max,
            budget.started,
            budget=budget,
        )

    def close(self) -> None:
        """Cancel whatever backend work this request still has running."""
        self.obs.close()

    async def session(self, session_id: str) -> SessionRef:
        """One session by id: live stores first (never touching persistence), else the backend.

        Raises SESSION_NOT_FOUND / SOURCE_CONFLICT / PERSISTENCE_FAILED like the
        core's exact reads.
        """
        await checkpoint(self.started)
        self.budget.check()
        header, live, persisted = await self.obs.locate(session_id)
        return SessionRef(header, live, persisted)

    async def view(self, session_id: str) -> SessionView:
        await checkpoint(self.started)
        self.budget.check()
        return await self.obs.view(session_id)

    async def surface(self, session_id: str) -> list[Classified]:
        """A session's current surface, read once per request however many fields ask
        for it, each asking field counted against the cost limit (`budget.listed`).
        When the log is long enough to pass the limit, the surface's length is asked
        first (the stored class counts: no read), so a surface too long is never read."""
        view = await self.view(session_id)
        budget = self.budget
        limit = budget.max_objects
        counted = limit is not None and budget.objects + view.length > limit
        if counted:
            budget.listed(await view.count(_CURRENT_ONLY))
        found = self._surfaces.get(session_id)
        if found is not None:
            surface = await found
        else:  # the first asker reads it (no task of its own), the others wait for it
            found = self._surfaces[session_id] = asyncio.get_running_loop().create_future()
            try:
                surface = await view.surface()
            except asyncio.CancelledError:
                found.cancel()
                raise
            except Exception as exc:
                found.set_exception(exc)
                found.exception()  # retrieved: only other askers need it
                raise
            found.set_result(surface)
        if not counted:
            budget.listed(len(surface))
        await self.loaded()
        return surface

    async def loaded(self) -> None:
        """Called when a resolver has read a page (or list) and is about to hand it to
        the executor, which completes it without suspending: a long answer yields here
        between its pages (`checkpoint`), so a timed-out one stops, and one past its
        budget stops here too."""
        await checkpoint(self.started)
        self.budget.check()

    async def record(self, session_id: str) -> SessionRecord | None:
        """A session's corpus record, or None when the corpus (or the scope) lacks it."""
        return await self.obs.record(session_id)

    def is_persisted(self, session_id: str) -> Awaitable[bool]:
        return self.obs.is_persisted(session_id)

    async def children(self, session_id: str) -> list[SessionRecord]:
        return await self.obs.children(session_id)

    async def trace_session(self, session_id: str) -> SessionTrace:
        self.budget.check()
        return await trace_session(self.obs, session_id)

    async def trace_event(self, session_id: str, seq: int) -> EventTrace:
        return await trace_event(self.obs, session_id, seq)


__all__ = ["Context", "SessionRef", "current_context"]
