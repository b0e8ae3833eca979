"""Session types: `SessionHeader`, `Session`, `SessionConnection`.

A `Session` wraps a `SessionRef` (header, live, persisted). Every field is
answered from the request's observation: indexed corpus questions for
`parent`, `children` and `lineage`, the session's view (made once) for
`events`, `surface` and `event`, `read_event` for `window`, and the
observation's batched title reads for `title`.
"""

from __future__ import annotations

from functools import partial
from typing import cast

import strawberry

from gateway.core import EventSurface as CoreEventSurface
from gateway.core import Observation, SessionRecord
from gateway.core import SessionHeader as CoreHeader
from gateway.core.event_filter import and_surface, filtered_page
from gateway.core.filters import SessionFilter as CoreSessionFilter
from gateway.core.filters import check_event_filter, check_session_filter, filter_key
from gateway.core.query import read_event

from ..context import Context, SessionRef
from ..cursors import filter_digest
from .events import Event, EventConnection, ReadWindow, event_connection
from .filters import EventFilter, SessionFilter, to_event_filter, to_session_filter
from .lineage import SessionTrace
from .node import Node
from .pagination import CURSOR, PageInfo, Sign, edge_cursor, given, page_info, page_size
from .scalars import TO_CORE_SURFACE, EpochMillis, EventSurface, resolver
from .selection import selects_data
from .titles import SessionTitle

Info = strawberry.Info[Context, None]


@strawberry.type(
    description=(
        "A session's immutable header. Optional fields absent from the record are null, "
        "never invented."
    )
)
class SessionHeader:
    version: int = strawberry.field(description="Format version (0 today).")
    id: strawberry.ID = strawberry.field(description="Session id.")
    created_at: EpochMillis = strawberry.field(description="Creation time (epoch ms).")
    cwd: str | None = strawberry.field(description="Working directory.")
    parent_session_id: strawberry.ID | None = strawberry.field(
        description="The session this one was forked from (a lineage edge)."
    )
    seed_length: int | None = strawberry.field(
        description="How many leading events were inherited from the parent."
    )
    origin: str | None = strawberry.field(description="Where it came from, e.g. `subagent`.")
    delegation_depth: int | None = strawberry.field(
        description="How deep in a delegation chain it runs (null means 0)."
    )
    agent_preset: str | None = strawberry.field(description="The agent preset it ran with.")

    @classmethod
    def of(cls, h: CoreHeader) -> SessionHeader:
        return cls(
            version=h.version,
            id=strawberry.ID(h.id),
            created_at=EpochMillis(h.created_at),
            cwd=h.cwd,
            parent_session_id=None if h.parent_session is None else strawberry.ID(h.parent_session),
            seed_length=h.seed_length,
            origin=h.origin,
            delegation_depth=h.delegation_depth,
            agent_preset=h.agent_preset,
        )


def _wanted(surface: list[EventSurface] | None) -> frozenset[CoreEventSurface] | None:
    return None if surface is None else frozenset(TO_CORE_SURFACE[s] for s in surface)


async def events_page(
    ctx: Context,
    session_id: str,
    surface: list[EventSurface] | None,
    first: int | None,
    after: str | None,
    filter: EventFilter | None = None,
    with_data: bool = True,
) -> EventConnection:
    """`events(surface, first, after, filter)` of one session: the matching events by seq
    (SPEC §12; `surface` and `filter.surface` ANDed), cursors bound to the filter.
    `with_data=False` when the selection reads no payload (`selects_data`): a stored
    page then neither reads nor decodes one."""
    size = page_size(first)
    given_filter = to_event_filter(given(filter))
    text = None if given_filter is None else check_event_filter(given_filter)
    digest = filter_digest(filter_key(given_filter))
    after = given(after)
    after_seq = (
        None if after is None else ctx.cursors.decode_event(after, session_id, digest=digest)
    )
    view = await ctx.view(session_id)
    wanted = _wanted(given(surface))
    if given_filter is None:
        page = await view.page(after_seq, size, wanted, with_data=with_data)
        await ctx.loaded()
        return event_connection(ctx, session_id, page)
    effective = and_surface(given_filter, wanted)
    filtered = await filtered_page(view, after_seq, size, effective, text)
    await ctx.loaded()
    return event_connection(ctx, session_id, filtered, digest)


@strawberry.type(
    description=(
        "A session of the logical corpus: live (in an in-process store), persisted "
        "(in the database), or both, in which case the live header and log are reported."
    )
)
class Session(Node):
    id: strawberry.ID = strawberry.field(
        description="Session id (also its node id: `node(id:)` fetches it again)."
    )
    live: bool = strawberry.field(description="A live store holds it.")
    ref: strawberry.Private[SessionRef]

    @classmethod
    def of(cls, ref: SessionRef) -> Session:
        return cls(id=strawberry.ID(ref.header.id), live=ref.live, ref=ref)

    @classmethod
    def of_record(cls, record: SessionRecord) -> Session:
        return cls.of(SessionRef.of(record))

    @resolver("Its immutable header.")
    def header(self) -> SessionHeader:
        return SessionHeader.of(self.ref.header)

    @resolver(
        "Its title: what its last `session/title` event says; null when it has none or "
        "that event is malformed. A page's stored titles are read in one backend call."
    )
    async def title(self, info: Info) -> SessionTitle | None:
        title = await info.context.obs.title(self.ref.header.id)
        return None if title is None else SessionTitle.of(title)

    @resolver("The persistence backend holds it.")
    def persisted(self, info: Info) -> bool:
        known = self.ref.persisted
        if known is not None:
            return known
        return cast(bool, info.context.is_persisted(self.ref.header.id))

    @resolver(
        "The session it was forked from; null when it has none or the parent is not "
        "in the corpus (see `lineage.unresolvedParentId`)."
    )
    async def parent(self, info: Info) -> Session | None:
        parent_id = self.ref.header.parent_session
        if parent_id is None:
            return None
        record = await info.context.record(parent_id)
        return None if record is None else Session.of_record(record)

    @resolver("Sessions forked from it, ordered by createdAt then id.")
    async def children(self, info: Info) -> list[Session]:
        children = await info.context.children(self.ref.header.id)
        info.context.budget.listed(len(children))
        return [Session.of_record(r) for r in children]

    @resolver(
        "Its lineage: ancestors, the full descendant tree, root, and a flat graph "
        "(prefer `graph` for deep trees: the nested tree is limited by query depth)."
    )
    async def lineage(self, info: Info) -> SessionTrace:
        return SessionTrace.of(await info.context.trace_session(self.ref.header.id))

    @resolver(
        "Its raw events in seq order, optionally only those whose classification is in "
        "`surface` and that match `filter` (SPEC §12). `first` defaults to 50 (at most "
        "500); `after` is a cursor from a previous page with the same filter."
    )
    async def events(
        self,
        info: Info,
        surface: list[EventSurface] | None = strawberry.UNSET,
        first: int | None = strawberry.UNSET,
        after: str | None = strawberry.UNSET,
        filter: EventFilter | None = strawberry.UNSET,
    ) -> EventConnection:
        return await events_page(
            info.context,
            self.ref.header.id,
            surface,
            first,
            after,
            filter,
            with_data=selects_data(info),
        )

    @resolver("The current surface: what the model sees, in its order.")
    async def surface(self, info: Info) -> list[Event]:
        sid = self.ref.header.id
        surface = await info.context.surface(sid)  # counted against the cost limit
        return Event.of_all(sid, surface)

    @resolver("One event by seq (null plus an error when there is none).")
    async def event(self, info: Info, seq: int) -> Event | None:
        return await event_by_seq(info.context, self.ref.header.id, seq)

    @resolver(
        "The event `seq` with `before` and `after` neighbours (each 0..readWindowMax, "
        "default 0), clipped to the log."
    )
    async def window(
        self,
        info: Info,
        seq: int,
        before: int | None = strawberry.UNSET,
        after: int | None = strawberry.UNSET,
    ) -> ReadWindow:
        return await read_window(info.context, self.ref.header.id, seq, before, after)


async def event_by_seq(ctx: Context, session_id: str, seq: int) -> Event | None:
    """Event `seq` of a session (`read_event` with an empty window); EVENT_NOT_FOUND if absent."""
    window = await read_event(ctx.obs, session_id, seq, 0, 0, ctx.read_window_max)
    return Event.wrap(session_id, window.target, None)


async def read_window(
    ctx: Context, session_id: str, seq: int, before: int | None, after: int | None
) -> ReadWindow:
    window = await read_event(
        ctx.obs,
        session_id,
        seq,
        given(before) or 0,
        given(after) or 0,
        ctx.read_window_max,
    )
    await ctx.loaded()
    return ReadWindow.of(window)


@strawberry.type(description="A session and the cursor that points at it.")
class SessionEdge:
    cursor: str = strawberry.field(resolver=edge_cursor, description=CURSOR)
    node: Session = strawberry.field(description="The session.")
    _sign: strawberry.Private[Sign]


@strawberry.type(
    description=(
        "A page of sessions, newest first by createdAt, ties by id (Relay cursor connection)."
    )
)
class SessionConnection:
    edges: list[SessionEdge] = strawberry.field(description="The page, with a cursor each.")
    nodes: list[Session] = strawberry.field(description="The page's sessions (edges.node).")
    page_info: PageInfo = strawberry.field(description="Cursors and whether more pages exist.")
    _obs: strawberry.Private[Observation]
    _filter: strawberry.Private[CoreSessionFilter | None] = None

    @resolver("How many sessions the corpus holds now (that match the filter, when given).")
    async def total_count(self) -> int:
        # Counted only when asked: a scoped count reads what the scope lets through.
        if self._filter is not None:
            return await self._obs.filtered_sessions_total(self._filter)
        return await self._obs.sessions_total()


async def sessions_page(
    ctx: Context, first: int | None, after: str | None, filter: SessionFilter | None = None
) -> SessionConnection:
    """`sessions(first, after, filter)`: the matching sessions in corpus order (SPEC §12),
    cursors bound to the filter."""
    size = page_size(first)
    core_filter = to_session_filter(given(filter))
    if core_filter is not None:
        check_session_filter(core_filter)
    digest = filter_digest(filter_key(core_filter))
    key = None
    after = given(after)
    if after is not None:
        created_at, session_id = ctx.cursors.decode_session(after, digest=digest)
        key = (-created_at, session_id)
    if core_filter is None:
        page = await ctx.obs.sessions_page(key, size, with_total=False)
    else:
        page = await ctx.obs.filtered_sessions_page(core_filter, key, size, with_total=False)
    sign = ctx.cursors.session
    edges = [
        SessionEdge(
            node=Session.of_record(r),
            _sign=partial(sign, r.header.created_at, r.header.id, digest),
        )
        for r in page.records
    ]
    return SessionConnection(
        edges=edges,
        nodes=[e.node for e in edges],
        page_info=page_info(
            page.has_next, page.has_previous, [e._sign for e in edges[:1] + edges[-1:]]
        ),
        _obs=ctx.obs,
        _filter=core_filter,
    )
