"""Event types: `Event`, `SurfaceOp`, `EventConnection`, `ReadWindow`, `EventTrace`.

An `Event` wraps one raw `SessionEvent` of a session's log and, when the
request already knows it, its classification. Relationship fields ask the
session's view (`gateway.core.views`), which the request makes once per
session and whose backend reads are batched across the whole request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, cast

import strawberry

from gateway.core import Classified, EventPage, SessionEvent, SessionView
from gateway.core import EventSurface as CoreEventSurface
from gateway.core import results as core
from gateway.core.event_filter import FilteredEvents

from ..context import Context, current_context
from .node import Node, event_id_text
from .pagination import CURSOR, PageInfo, Sign, edge_cursor, page_info
from .plain import plain, plain_function
from .scalars import JSON, TO_GRAPHQL_SURFACE, EpochMillis, EventSurface, SurfaceOpKind, resolver

if TYPE_CHECKING:
    from .sessions import Session, SessionHeader

Info = strawberry.Info[Context, None]


@strawberry.type(
    description=(
        "How a surface event changes the surface: APPEND adds it at the tail; REPLACE puts it "
        "in place of the surface nodes from `start` through `end` (seqs, both inclusive)."
    )
)
class SurfaceOp:
    kind: SurfaceOpKind = strawberry.field(description="APPEND or REPLACE.")
    start: int | None = strawberry.field(description="REPLACE only: first replaced node (seq).")
    end: int | None = strawberry.field(description="REPLACE only: last replaced node (seq).")


def _sources(raw: SessionEvent) -> list[int] | None:
    sources = raw.source_event_seqs
    return list(sources) if isinstance(sources, (list, tuple)) else None


_APPEND = SurfaceOp(kind=SurfaceOpKind.APPEND, start=None, end=None)


def _surface_op(op: Any) -> SurfaceOp | None:
    if op == "append":
        return _APPEND
    if isinstance(op, dict) and op.get("op") == "replace":
        start, end = op.get("start"), op.get("end")
        if type(start) is int and type(end) is int:
            return SurfaceOp(kind=SurfaceOpKind.REPLACE, start=start, end=end)
    return None


@strawberry.type(
    description=(
        "One entry of a session's append-only log, with its place on the model-visible "
        "surface and its relationships to other events."
    )
)
class Event(Node):
    id: strawberry.ID = strawberry.field(
        description=(
            "Node id: the session id, a NUL (U+0000) and the seq in decimal; no session id "
            "can hold a NUL, so it is unique across types. `node(id:)` fetches it again."
        )
    )
    session_id: strawberry.ID = strawberry.field(description="The session whose log holds it.")
    seq: int = strawberry.field(description="Zero-based position in the log.")
    type: str = strawberry.field(
        description="Event type, e.g. user/message, assistant/message, tool/result, turn/start."
    )
    time: EpochMillis = strawberry.field(description="When it was recorded (epoch ms).")
    ignorable: bool = strawberry.field(description="Recorded as ignorable by its producer.")
    raw: strawberry.Private[SessionEvent]
    klass: strawberry.Private[CoreEventSurface | None]

    @plain("The recorded payload, exactly as stored (any JSON value).")
    def data(self) -> JSON:
        context = current_context.get()  # not `info`: this runs once per event
        data = self.raw.data
        return cast(JSON, data if context is None else context.budget.payload(data))

    @plain("How it changes the surface (surface events only; null on log-only events).")
    def surface_op(self) -> SurfaceOp | None:
        return _surface_op(self.raw.surface_op)

    @plain(
        "Seqs of the earlier events it cites as its sources, in recorded order; "
        "null when none were recorded."
    )
    def source_event_seqs(self) -> list[int] | None:
        return _sources(self.raw)

    @plain("CURRENT, SHADOWED or LOG_ONLY under the session's fold.")
    def surface(self) -> EventSurface:
        if self.klass is not None:
            return TO_GRAPHQL_SURFACE[self.klass]
        context = current_context.get()  # set by the pipeline for every operation
        assert context is not None, "Event.surface resolved outside an operation"
        return cast(EventSurface, _surface_of(context, self.session_id, self.seq))

    @resolver("The session it belongs to.")
    async def session(
        self, info: Info
    ) -> Annotated[Session, strawberry.lazy("gateway.server.types.sessions")]:
        from .sessions import Session

        return Session.of(await info.context.session(self.session_id))

    @resolver("Its relationships: replacements, sources and derivations.")
    async def trace(self, info: Info) -> EventTrace:
        ctx = info.context
        return EventTrace.of(await ctx.trace_event(self.session_id, self.seq))

    @resolver("The event that removed it from the surface (if SHADOWED).")
    async def replaced_by(self, info: Info) -> Event | None:
        view = await info.context.view(self.session_id)
        chain = (await view.relations(self.seq)).replacement_chain
        found = await events_of(view, chain[:1])
        return found[0] if found else None

    @resolver("Its replacers, from the immediate one to the last (the one still current).")
    async def replacement_chain(self, info: Info) -> list[Event]:
        view = await info.context.view(self.session_id)
        return await events_of(view, (await view.relations(self.seq)).replacement_chain)

    @resolver("The surface nodes this event itself removed, in surface order.")
    async def replaced_events(self, info: Info) -> list[Event]:
        view = await info.context.view(self.session_id)
        return await events_of(view, (await view.relations(self.seq)).replaced)

    @resolver("The events it cites directly, in recorded order.")
    async def sources(self, info: Info) -> list[Event]:
        view = await info.context.view(self.session_id)
        return await events_of(view, _sources(self.raw) or [])

    @resolver("Later events that cite this one directly, in log order.")
    async def derived(self, info: Info) -> list[Event]:
        view = await info.context.view(self.session_id)
        return await events_of(view, (await view.relations(self.seq)).derived)

    # -- construction ------------------------------------------------------------

    @classmethod
    def of(cls, session_id: str, item: Classified) -> Event:
        return cls.wrap(session_id, item.event, item.surface)

    @classmethod
    def wrap(cls, session_id: str, raw: SessionEvent, klass: CoreEventSurface | None) -> Event:
        # The dataclass's fields set directly: its generated __init__ costs half again as
        # much, on every event of every page (its __eq__ and __repr__ are unchanged).
        event = _new(cls)
        event.__dict__ = {
            "id": event_id_text(session_id, raw.seq),
            "session_id": session_id,
            "seq": raw.seq,
            "type": raw.type,
            "time": raw.time,
            "ignorable": raw.ignorable,
            "raw": raw,
            "klass": klass,
        }
        return event

    @classmethod
    def of_all(cls, session_id: str, items: Sequence[Classified]) -> list[Event]:
        """`of` of each item (a page's events)."""
        wrap = cls.wrap
        return [wrap(session_id, raw, klass) for raw, klass in items]


_new = object.__new__


async def events_of(view: SessionView, seqs: Sequence[int]) -> list[Event]:
    """These events of a view, classified, in the order given."""
    if not seqs:
        return []
    sid = view.session_id
    return Event.of_all(sid, await view.events_at(seqs))


async def _surface_of_async(ctx: Context, session_id: str, seq: int) -> EventSurface:
    view = await ctx.view(session_id)
    (item,) = await view.events_at([seq])
    return TO_GRAPHQL_SURFACE[item.surface]


def _surface_of(ctx: Context, session_id: str, seq: int) -> Awaitable[EventSurface]:
    return _surface_of_async(ctx, session_id, seq)


@strawberry.type(description="An event and the cursor that points at it.")
class EventEdge:
    cursor: str = strawberry.field(resolver=edge_cursor, description=CURSOR)
    node: Event = strawberry.field(description="The event.")
    _sign: strawberry.Private[Sign]


@plain_function
def _connection_edges(root: strawberry.Parent[EventConnection]) -> list[EventEdge]:
    """`EventConnection.edges`, made only when selected: a page that lists `nodes` makes
    no edge per event."""
    return root._edges()


@strawberry.type(
    description=(
        "A page of a session's raw events in seq order, optionally filtered by surface "
        "classification (Relay cursor connection)."
    )
)
class EventConnection:
    edges: list[EventEdge] = strawberry.field(
        resolver=_connection_edges, description="The page, with a cursor per event."
    )
    nodes: list[Event] = strawberry.field(description="The page's events (same as edges.node).")
    page_info: PageInfo = strawberry.field(description="Cursors and whether more pages exist.")
    _total: strawberry.Private[Callable[[], Awaitable[int]]]
    _edges: strawberry.Private[Callable[[], list[EventEdge]]]

    @resolver("How many events match the filter in the whole log (not just this page).")
    async def total_count(self) -> int:
        # Counted only when asked: with a `text` filter it scans the session.
        return await self._total()


@strawberry.type(
    description="A bounded window of raw events around one target event, clipped to the log."
)
class ReadWindow:
    session: Annotated[SessionHeader, strawberry.lazy("gateway.server.types.sessions")] = (
        strawberry.field(description="The header of the session the window is from.")
    )
    target: Event = strawberry.field(description="The event the window is around.")
    events: list[Event] = strawberry.field(description="Events startSeq..endSeq, in seq order.")
    start_seq: int = strawberry.field(description="Seq of the window's first event.")
    end_seq: int = strawberry.field(description="Seq of the window's last event.")

    @classmethod
    def of(cls, window: core.ReadWindow) -> ReadWindow:
        from .sessions import SessionHeader

        sid = window.session.id
        return cls(
            session=SessionHeader.of(window.session),
            target=Event.wrap(sid, window.target, None),
            events=[Event.wrap(sid, e, None) for e in window.events],
            start_seq=window.start_seq,
            end_seq=window.end_seq,
        )


@strawberry.type(
    description=(
        "How one event replaces and cites others, and how others replace and cite it. "
        "Sources are direct, never followed transitively."
    )
)
class EventTrace:
    target: Event = strawberry.field(description="The traced event.")
    replaced_by: int | None = strawberry.field(
        description="Seq of the immediate replacer, if the event is SHADOWED."
    )
    replacement_chain: list[int] = strawberry.field(
        description="Seqs of its replacers, from the immediate one to the last."
    )
    replaced_event_seqs: list[int] = strawberry.field(
        description="Seqs of the surface nodes this event removed, in surface order."
    )
    source_event_seqs: list[int] = strawberry.field(
        description="Seqs it cites directly, in recorded order ([] when none were recorded)."
    )
    derived_event_seqs: list[int] = strawberry.field(
        description="Seqs of later events citing it directly, in log order."
    )

    @classmethod
    def of(cls, trace: core.EventTrace) -> EventTrace:
        target = trace.target
        return cls(
            target=Event.wrap(target.session_id, trace.event, target.surface),
            replaced_by=trace.replaced_by,
            replacement_chain=trace.replacement_chain,
            replaced_event_seqs=trace.replaced_event_seqs,
            source_event_seqs=trace.source_event_seqs,
            derived_event_seqs=trace.derived_event_seqs,
        )


def event_connection(
    ctx: Context, session_id: str, page: EventPage | FilteredEvents, digest: str = ""
) -> EventConnection:
    """A page of a session's events as a Relay connection; its cursors are bound to the
    filter of `digest` (`gateway.server.cursors`)."""
    cursors = ctx.cursors
    nodes = Event.of_all(session_id, page.items)
    sign = cursors.event

    def edges() -> list[EventEdge]:
        return [
            EventEdge(node=node, _sign=partial(sign, session_id, node.seq, digest))
            for node in nodes
        ]

    ends = nodes[:1] + nodes[-1:]
    total: Callable[[], Awaitable[int]]
    if isinstance(page, EventPage):
        known = page.total

        async def counted() -> int:
            return known

        total = counted
    else:
        total = page.total
    return EventConnection(
        nodes=nodes,
        page_info=page_info(
            page.has_next,
            page.has_previous,
            [partial(sign, session_id, node.seq, digest) for node in ends],
        ),
        _total=total,
        _edges=edges,
    )
