"""Search types of SPEC §13: `TextRange`, `EventSearchHit`, `SessionSearchHit` and their
connections, and the two root fields' mapping onto `gateway.core.search`.

The core checks the query and the filters (INVALID_QUERY / INVALID_FILTER, naming
the argument); this layer checks `first` (1..100, default 20) and the cursor,
which is bound to the normalized query, the filters, the caller's token (the
request's codec) and, for `searchEvents`, the session id.
"""

from __future__ import annotations

from functools import partial

import strawberry

from gateway.core import EventFilter as CoreEventFilter
from gateway.core import SessionFilter as CoreSessionFilter
from gateway.core import search as core
from gateway.core.matching import RankKey

from ..context import Context
from ..cursors import SEARCH_EVENTS, SEARCH_SESSIONS, search_binding
from ..errors import bad_input
from .events import Event
from .filters import EventFilter, SessionFilter, to_event_filter, to_session_filter
from .pagination import CURSOR, PageInfo, Sign, edge_cursor, given, page_info
from .sessions import Session

DEFAULT_SEARCH_PAGE = core.DEFAULT_SEARCH_LIMIT
MAX_SEARCH_PAGE = core.MAX_SEARCH_LIMIT


@strawberry.type(description="A stretch of a snippet, in code points of the snippet.")
class TextRange:
    start: int = strawberry.field(description="Where it starts (code points).")
    length: int = strawberry.field(description="How many code points it spans.")


@strawberry.type(description="An event that matched a search, with the snippet around it.")
class EventSearchHit:
    event: Event = strawberry.field(description="The matching event.")
    snippet: str = strawberry.field(
        description="At most 240 code points of its text around the first match, whitespace "
        "runs made one space; an ellipsis (U+2026) marks a cut."
    )
    highlights: list[TextRange] = strawberry.field(
        description="Each match inside the snippet (overlapping matches are one)."
    )
    match_count: int = strawberry.field(
        description="How many times the phrase occurs in the event's text (what ranks it first)."
    )

    @classmethod
    def of(cls, hit: core.EventHit) -> EventSearchHit:
        return cls(
            event=Event.wrap(hit.session_id, hit.event, hit.record.surface),
            snippet=hit.snippet,
            highlights=[TextRange(start=r.start, length=r.length) for r in hit.highlights],
            match_count=hit.match_count,
        )


@strawberry.type(description="A session that matched a search, ranked by its best event.")
class SessionSearchHit:
    session: Session = strawberry.field(description="The matching session.")
    best_match: EventSearchHit = strawberry.field(description="Its best-ranked matching event.")


@strawberry.type(description="An event hit and the cursor that points at it.")
class EventSearchEdge:
    cursor: str = strawberry.field(resolver=edge_cursor, description=CURSOR)
    node: EventSearchHit = strawberry.field(description="The hit.")
    _sign: strawberry.Private[Sign]


@strawberry.type(
    description="A page of event hits, best first (matchCount, then shorter text, newer, "
    "session id, higher seq)."
)
class EventSearchConnection:
    edges: list[EventSearchEdge] = strawberry.field(description="The page, with a cursor each.")
    nodes: list[EventSearchHit] = strawberry.field(description="The page's hits (edges.node).")
    page_info: PageInfo = strawberry.field(description="Cursors and whether more pages exist.")


@strawberry.type(description="A session hit and the cursor that points at it.")
class SessionSearchEdge:
    cursor: str = strawberry.field(resolver=edge_cursor, description=CURSOR)
    node: SessionSearchHit = strawberry.field(description="The hit.")
    _sign: strawberry.Private[Sign]


@strawberry.type(description="A page of session hits, ranked by each session's best event.")
class SessionSearchConnection:
    edges: list[SessionSearchEdge] = strawberry.field(description="The page, with a cursor each.")
    nodes: list[SessionSearchHit] = strawberry.field(description="The page's hits (edges.node).")
    page_info: PageInfo = strawberry.field(description="Cursors and whether more pages exist.")


def search_page_size(first: int | None) -> int:
    """`first` checked: default 20, 1..100."""
    first = given(first)
    if first is None:
        return DEFAULT_SEARCH_PAGE
    if not 1 <= first <= MAX_SEARCH_PAGE:
        raise bad_input(
            f"`first` must be from 1 to {MAX_SEARCH_PAGE} for a search (got {first}); "
            "page with `after` instead",
            "first",
        )
    return first


def _session_filter(f: SessionFilter | None) -> CoreSessionFilter | None:
    found = to_session_filter(given(f))
    return None if found is None or found == CoreSessionFilter() else found


def _event_filter(f: EventFilter | None) -> CoreEventFilter | None:
    found = to_event_filter(given(f))
    return None if found is None or found == CoreEventFilter() else found


async def search_sessions(
    ctx: Context,
    query: str,
    filter: SessionFilter | None,
    event_filter: EventFilter | None,
    first: int | None,
    after: str | None,
) -> SessionSearchConnection:
    sf, ef = _session_filter(filter), _event_filter(event_filter)
    request = core.check_search(query, sf, ef, core.GRAPHQL_SESSIONS)
    size = search_page_size(first)
    binding = search_binding("sessions", request.query, sf, ef)
    key = _decode(ctx, SEARCH_SESSIONS, binding, after)
    page = await core.search_sessions(ctx.obs, query, sf, ef, size, key)
    sign = ctx.cursors.search_hit
    signs = [partial(sign, SEARCH_SESSIONS, binding, h.key) for h in page.hits]
    nodes = [
        SessionSearchHit(
            session=Session.of_record(h.session), best_match=EventSearchHit.of(h.best_match)
        )
        for h in page.hits
    ]
    return SessionSearchConnection(
        edges=[SessionSearchEdge(node=n, _sign=c) for c, n in zip(signs, nodes, strict=True)],
        nodes=nodes,
        page_info=page_info(page.has_next, page.has_previous, signs),
    )


async def search_events(
    ctx: Context,
    session_id: str,
    query: str,
    filter: EventFilter | None,
    first: int | None,
    after: str | None,
) -> EventSearchConnection:
    ef = _event_filter(filter)
    request = core.check_search(query, None, ef, core.GRAPHQL_EVENTS)
    size = search_page_size(first)
    binding = search_binding("events", request.query, ef, session_id)
    key = _decode(ctx, SEARCH_EVENTS, binding, after)
    page = await core.search_events(ctx.obs, session_id, query, ef, size, key)
    sign = ctx.cursors.search_hit
    signs = [partial(sign, SEARCH_EVENTS, binding, h.key) for h in page.hits]
    nodes = [EventSearchHit.of(h) for h in page.hits]
    return EventSearchConnection(
        edges=[EventSearchEdge(node=n, _sign=c) for c, n in zip(signs, nodes, strict=True)],
        nodes=nodes,
        page_info=page_info(page.has_next, page.has_previous, signs),
    )


def _decode(ctx: Context, kind: str, binding: str, after: str | None) -> RankKey | None:
    cursor = given(after)
    return None if cursor is None else ctx.cursors.decode_search_hit(cursor, kind, binding)


__all__ = [
    "EventSearchConnection",
    "EventSearchHit",
    "SessionSearchConnection",
    "SessionSearchHit",
    "TextRange",
    "search_events",
    "search_sessions",
]
