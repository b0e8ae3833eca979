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

import time
from dataclasses import dataclass, field

from gateway.core import (
    Observation,
    Scope,
    SessionHeader,
    SessionQuery,
    SessionRecord,
    SessionView,
)

from .cursors import CursorCodec
from .principal import Principal
from .yielding import checkpoint


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


@dataclass
class Context:
    """Everything request-scoped; see the module docstring."""

    query: SessionQuery
    obs: Observation
    cursors: CursorCodec
    read_window_max: int
    started: float = field(default_factory=time.thread_time)  # for `checkpoint`

    @classmethod
    def for_request(
        cls, query: SessionQuery, cursors: CursorCodec, principal: Principal | None = None
    ) -> Context:
        """The context of one request, within the caller's scope when auth is on: its
        observation sees the scoped corpus and its cursors are the caller's own."""
        if principal is None:
            return cls(query, query.observe(), cursors, query.read_window_max)
        scope = Scope.parse(principal.grants)
        return cls(
            query,
            query.observe(scope),
            cursors.for_audience(principal.name),
            query.read_window_max,
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
        header, live, persisted = await self.obs.locate(session_id)
        return SessionRef(header, live, persisted)

    async def view(self, session_id: str) -> SessionView:
        await checkpoint(self.started)
        return await self.obs.view(session_id)


__all__ = ["Context", "SessionRef"]
