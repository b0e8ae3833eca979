"""The GraphQL schema of SPEC §7: the `Query` root and `build_schema`.

Every root field maps one core operation over the request's observation
(`gateway.server.context.Context`); the document checks of
`gateway.server.preparation` are installed as a per-operation extension
(a class, never a shared instance). The operation pipeline runs the queries
and mutations it prepared on graphql-core itself (`gateway.server.pipeline`),
so the schema's extensions run only for what Strawberry runs: subscriptions,
and the schema executed directly (a test, an embedding host). An extension
that must see every query belongs in the pipeline too.
"""

from __future__ import annotations

import strawberry
from strawberry.extensions import SchemaExtension
from strawberry.schema.config import StrawberryConfig

from gateway.observability.metrics import GatewayMetrics, metrics_extension

from .config import Limits
from .context import Context
from .execution import GatewayExecutionContext
from .limits import prepared_documents
from .preparation import DocumentPreparer
from .types.events import Event, EventConnection, EventTrace, ReadWindow
from .types.filters import EventFilter, SessionFilter
from .types.lineage import SessionTrace
from .types.node import MAX_NODE_IDS, Node, resolve_node, resolve_nodes
from .types.plain import install_plain_resolvers
from .types.scalars import SCALAR_MAP, EventSurface, resolver
from .types.search import (
    EventSearchConnection,
    SessionSearchConnection,
    search_events,
    search_sessions,
)
from .types.selection import selects_data
from .types.sessions import (
    Session,
    SessionConnection,
    event_by_seq,
    events_page,
    read_window,
    sessions_page,
)

Info = strawberry.Info[Context, None]


@strawberry.type(
    description=(
        "Exact, read-only inspection of agent-session history across live stores and "
        "persistence. Every request observes the sources afresh; within a request, each "
        "session's log is loaded at most once."
    )
)
class Query:
    @resolver(
        "Every session, newest first by createdAt (ties by id), only those matching `filter` "
        "when given (SPEC §12). `first` defaults to 50 (at most 500); `after` is a cursor "
        "from a previous page with the same filter."
    )
    async def sessions(
        self,
        info: Info,
        first: int | None = strawberry.UNSET,
        after: str | None = strawberry.UNSET,
        filter: SessionFilter | None = strawberry.UNSET,
    ) -> SessionConnection:
        return await sessions_page(info.context, first, after, filter)

    @resolver("One session by id (null plus SESSION_QUERY_SESSION_NOT_FOUND if absent).")
    async def session(self, info: Info, id: strawberry.ID) -> Session | None:
        return Session.of(await info.context.session(id))

    @resolver(
        "A session's raw events in seq order, optionally only those whose classification "
        "is in `surface` and that match `filter` (SPEC §12); paged like `sessions`."
    )
    async def events(
        self,
        info: Info,
        session_id: strawberry.ID,
        surface: list[EventSurface] | None = strawberry.UNSET,
        first: int | None = strawberry.UNSET,
        after: str | None = strawberry.UNSET,
        filter: EventFilter | None = strawberry.UNSET,
    ) -> EventConnection:
        return await events_page(
            info.context, session_id, surface, first, after, filter, with_data=selects_data(info)
        )

    @resolver("One event (null plus SESSION_QUERY_EVENT_NOT_FOUND / _SESSION_NOT_FOUND).")
    async def event(self, info: Info, session_id: strawberry.ID, seq: int) -> Event | None:
        return await event_by_seq(info.context, session_id, seq)

    @resolver(
        "An event with `before`/`after` raw neighbours (each 0..readWindowMax, default 0; "
        "else SESSION_QUERY_INVALID_WINDOW), clipped to the log."
    )
    async def read_event(
        self,
        info: Info,
        session_id: strawberry.ID,
        seq: int,
        before: int | None = strawberry.UNSET,
        after: int | None = strawberry.UNSET,
    ) -> ReadWindow:
        return await read_window(info.context, session_id, seq, before, after)

    @resolver("A session's lineage: ancestors, descendants, root, graph.")
    async def trace_session(self, info: Info, session_id: strawberry.ID) -> SessionTrace:
        return SessionTrace.of(await info.context.trace_session(session_id))

    @resolver("How an event replaces and cites others, and is replaced/cited.")
    async def trace_event(self, info: Info, session_id: strawberry.ID, seq: int) -> EventTrace:
        return EventTrace.of(await info.context.trace_event(session_id, seq))

    @resolver(
        "The object with this node id (Relay), read exactly as its own field reads it: a "
        "Session's id as `session(id:)`, an Event's as `event(sessionId:, seq:)`; null plus "
        "that read's error when it is absent or out of the caller's scope."
    )
    async def node(self, info: Info, id: strawberry.ID) -> Node | None:
        return await resolve_node(info.context, id)

    @resolver(
        f"The objects with these node ids, in order, each as `node(id:)` answers it (null "
        f"plus an error at its index when missing); at most {MAX_NODE_IDS} ids, each "
        "session loaded once."
    )
    async def nodes(self, info: Info, ids: list[strawberry.ID]) -> list[Node | None]:
        return await resolve_nodes(info.context, ids)

    @resolver(
        "Sessions with an event whose text holds `query` as a phrase (SQLite FTS5 unicode61 "
        "tokens: case and diacritics folded), ranked by their best event: matchCount "
        "descending, then shorter text, newer time, session id, higher seq. `filter` narrows "
        "the sessions, `eventFilter` the events (neither takes `text`). `first` defaults to "
        "20 (1..100); `after` is a cursor of the same search."
    )
    async def search_sessions(
        self,
        info: Info,
        query: str,
        filter: SessionFilter | None = strawberry.UNSET,
        event_filter: EventFilter | None = strawberry.UNSET,
        first: int | None = strawberry.UNSET,
        after: str | None = strawberry.UNSET,
    ) -> SessionSearchConnection:
        return await search_sessions(info.context, query, filter, event_filter, first, after)

    @resolver(
        "A session's events whose text holds `query` as a phrase, ranked like "
        "`searchSessions`' best matches (SESSION_QUERY_SESSION_NOT_FOUND for an absent id). "
        "`filter` narrows the events (no `text`); `first` defaults to 20 (1..100)."
    )
    async def search_events(
        self,
        info: Info,
        session_id: strawberry.ID,
        query: str,
        filter: EventFilter | None = strawberry.UNSET,
        first: int | None = strawberry.UNSET,
        after: str | None = strawberry.UNSET,
    ) -> EventSearchConnection:
        return await search_events(info.context, session_id, query, filter, first, after)


class GatewaySchema(strawberry.Schema):
    """The schema, with the document preparer its operations go through
    (`gateway.server.preparation`; the pipeline prepares, then runs queries on
    graphql-core and subscriptions through Strawberry).

    Errors are logged (once, with a correlation id) by the pipeline's formatter,
    not by Strawberry."""

    preparer: DocumentPreparer

    def process_errors(self, errors: list[object], execution_context: object = None) -> None:  # type: ignore[override]
        return None


def build_schema(
    limits: Limits | None = None,
    metrics: GatewayMetrics | None = None,
    tracing: type[SchemaExtension] | None = None,
) -> GatewaySchema:
    """The schema with `limits` installed (defaults when None), and `metrics` recording
    each operation Strawberry runs (outermost, so it times the other hooks too);
    `tracing` (from `gateway.observability.tracing.operation_tracing`) outside them
    all. The pipeline records and traces the queries it runs itself."""
    preparer = DocumentPreparer(limits or Limits())
    extensions: list[type[SchemaExtension]] = [prepared_documents(preparer)]
    if metrics is not None:
        extensions.insert(0, metrics_extension(metrics))
    if tracing is not None:
        extensions.insert(0, tracing)
    from .subscriptions import Subscription  # imports the event types, like Query

    schema = GatewaySchema(
        query=Query,
        subscription=Subscription,
        config=StrawberryConfig(scalar_map=SCALAR_MAP),
        extensions=extensions,
        execution_context_class=GatewayExecutionContext,
    )
    schema.preparer = preparer
    install_plain_resolvers(schema._schema)
    return schema


def schema_sdl() -> str:
    """The SDL of the schema (what `session-gateway export-schema` prints)."""
    return build_schema().as_str() + "\n"
