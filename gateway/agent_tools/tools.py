"""The five read-only tools for agents, over the query core and nothing else.

`AgentTools.call(name, arguments, scope)` answers one tool call: its arguments
checked (`gateway.agent_tools.arguments`), the question asked of one fresh
observation of the corpus within the caller's scope (so every part of one
answer sees the same state, each session is read once, and nothing outlives the
call), and the answer made into text and data (`render`, `results`). It knows
no transport: the MCP server (`gateway.mcp`) maps its schemas and answers onto
the protocol, the same way for stdio and for `/mcp` over HTTP.

No cursor reaches the model: a search follows the core's pages itself, up to
`max_results` hits, and says `capped` when more matched (the reference's
choice: a cursor is stale by the time a model would reuse it, and a narrower
query is what a model can act on).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict
from typing import TypeVar

from gateway.core import (
    EventHit,
    EventRecord,
    Observation,
    RankKey,
    Scope,
    SessionQuery,
    SessionRecord,
    SessionTitle,
)
from gateway.core.event_text import event_text
from gateway.core.filters import check_query
from gateway.core.query import read_event, trace_event, trace_session
from gateway.core.search import MAX_SEARCH_LIMIT, ArgumentNames, search_events, search_sessions

from . import render
from .arguments import (
    BAD_USER_INPUT,
    SURFACE_NAMES,
    Arguments,
    ToolInputError,
    event_filter,
    iso_time,
    session_filter,
)
from .results import (
    Descendant,
    EventInfo,
    EventMatch,
    EventReadResult,
    EventSearchResult,
    EventTraceResult,
    Highlight,
    NeighborEvent,
    SessionInfo,
    SessionMatch,
    SessionSearchResult,
    SessionTraceResult,
    ToolAnswer,
    ToolResult,
)
from .schemas import TOOL_SCHEMAS, ToolSchema

DEFAULT_MAX_RESULTS = 100
"""Most hits one search collects (the reference's default): enough to choose from,
few enough to read; past it the answer says so."""
NEIGHBOR_TEXT = 300
"""Code points of a neighbouring event's text that `session_event_read` shows."""
LARGE_TREE = 500
"""Sessions in a lineage past which its answer is made off the event loop."""
_NAMES = ArgumentNames("query", "filters", "event filters")


class AgentTools:
    """The tools over one `SessionQuery`; see the module docstring."""

    def __init__(
        self,
        query: SessionQuery,
        *,
        max_results: int = DEFAULT_MAX_RESULTS,
        page_size: int = MAX_SEARCH_LIMIT,
    ) -> None:
        if type(max_results) is not int or max_results < 1:
            raise ValueError(f"max_results must be a positive integer, got {max_results!r}")
        if type(page_size) is not int or not 1 <= page_size <= MAX_SEARCH_LIMIT:
            raise ValueError(f"page_size must be an integer in 1..{MAX_SEARCH_LIMIT}")
        self.query = query
        self.max_results = max_results
        self.page_size = page_size
        self._bodies: dict[str, Callable[[Observation, Arguments], Awaitable[ToolAnswer]]] = {
            "session_search": self._session_search,
            "session_event_search": self._session_event_search,
            "session_trace": self._session_trace,
            "session_event_trace": self._session_event_trace,
            "session_event_read": self._session_event_read,
        }

    @property
    def schemas(self) -> tuple[ToolSchema, ...]:
        return TOOL_SCHEMAS

    async def call(
        self, name: str, arguments: Mapping[str, object] | None, scope: Scope | None
    ) -> ToolAnswer:
        """One tool call within `scope` (None: the whole corpus). Raises ToolInputError
        or SessionQueryError, each with the code of what was wrong."""
        schema = next((s for s in TOOL_SCHEMAS if s.name == name), None)
        if schema is None:
            raise ToolInputError(
                BAD_USER_INPUT,
                f"no tool named {name!r} (tools: {', '.join(s.name for s in TOOL_SCHEMAS)})",
            )
        args = Arguments(name, arguments, schema.argument_names)
        obs = self.query.observe(scope)
        try:
            return await self._bodies[name](obs, args)
        finally:
            obs.close()

    # -- the five bodies -----------------------------------------------------------------

    async def _session_search(self, obs: Observation, args: Arguments) -> ToolAnswer:
        text = args.string("query", required=True)
        assert text is not None
        sf = session_filter(args)
        ef = event_filter(
            args, seq="event_seq", time="event_time", types="event_types", surfaces="event_surfaces"
        )
        query = check_query(text)
        hits: list[tuple[SessionRecord, EventHit]] = []
        after: RankKey | None = None
        capped = False
        while True:
            limit = min(self.max_results - len(hits), self.page_size)
            page = await search_sessions(obs, text, sf, ef, limit, after, names=_NAMES)
            hits.extend((h.session, h.best_match) for h in page.hits)
            if not page.has_next or not page.hits:
                break
            if len(hits) >= self.max_results:
                capped = True
                break
            after = page.next_after
        titles = await _titles(obs, [record.id for record, _ in hits])
        result = SessionSearchResult(
            query=query,
            sessions=[
                SessionMatch(_session_info(record, titles[record.id]), _match(hit))
                for record, hit in hits
            ],
            capped=capped,
            cap=self.max_results,
        )
        return await _answer(result, render.session_search, large=False)

    async def _session_event_search(self, obs: Observation, args: Arguments) -> ToolAnswer:
        session_id = args.session_id()
        text = args.string("query", required=True)
        assert text is not None
        ef = event_filter(args, seq="seq", time="time", types="event_types", surfaces="surfaces")
        query = check_query(text)
        hits: list[EventHit] = []
        after: RankKey | None = None
        capped = False
        while True:
            limit = min(self.max_results - len(hits), self.page_size)
            page = await search_events(obs, session_id, text, ef, limit, after, names=_NAMES)
            hits.extend(page.hits)
            if not page.has_next or not page.hits:
                break
            if len(hits) >= self.max_results:
                capped = True
                break
            after = page.next_after
        title = await obs.title(session_id)
        result = EventSearchResult(
            session_id=session_id,
            title=_title_text(title),
            query=query,
            events=[_match(hit) for hit in hits],
            capped=capped,
            cap=self.max_results,
        )
        return await _answer(result, render.event_search, large=False)

    async def _session_trace(self, obs: Observation, args: Arguments) -> ToolAnswer:
        session_id = args.session_id()
        trace = await trace_session(obs, session_id)
        flat: list[tuple[SessionRecord, int, str]] = []
        stack = [(node, 1, session_id) for node in reversed(trace.descendants)]
        while stack:  # depth first, iteratively: a lineage may be thousands deep
            node, depth, parent = stack.pop()
            flat.append((node.session, depth, parent))
            below = reversed(node.descendants)
            stack.extend((child, depth + 1, node.session.id) for child in below)
        records = [trace.target, *trace.ancestors, *(record for record, _, _ in flat)]
        titles = await _titles(obs, [record.id for record in records])
        result = SessionTraceResult(
            session=_session_info(trace.target, titles[trace.target.id]),
            ancestors=[_session_info(r, titles[r.id]) for r in trace.ancestors],
            complete=trace.complete,
            root_id=trace.root.id if trace.root is not None else None,
            unresolved_parent_id=trace.unresolved_parent_id,
            descendants=[
                Descendant(_session_info(record, titles[record.id]), depth, parent)
                for record, depth, parent in flat
            ],
        )
        large = len(result.descendants) + len(result.ancestors) > LARGE_TREE
        return await _answer(result, render.session_trace, large=large)

    async def _session_event_trace(self, obs: Observation, args: Arguments) -> ToolAnswer:
        session_id = args.session_id()
        seq = args.integer("seq", required=True)
        assert seq is not None
        trace = await trace_event(obs, session_id, seq)
        title = await obs.title(session_id)
        result = EventTraceResult(
            session_id=session_id,
            title=_title_text(title),
            target=_event_info(trace.target),
            replaced_by=trace.replaced_by,
            replacement_chain=list(trace.replacement_chain),
            replaced_event_seqs=list(trace.replaced_event_seqs),
            source_event_seqs=list(trace.source_event_seqs),
            derived_event_seqs=list(trace.derived_event_seqs),
        )
        return await _answer(result, render.event_trace, large=False)

    async def _session_event_read(self, obs: Observation, args: Arguments) -> ToolAnswer:
        session_id = args.session_id()
        seq = args.integer("seq", required=True)
        assert seq is not None
        before = args.integer("before") or 0
        after = args.integer("after") or 0
        window = await read_event(obs, session_id, seq, before, after, self.query.read_window_max)
        title = await obs.title(session_id)
        neighbors = [_neighbor(e.seq, e.type, e.time, e.data) for e in window.events]
        result = EventReadResult(
            session_id=session_id,
            title=_title_text(title),
            event=window.target.to_json(),
            before=[n for n in neighbors if n.seq < seq],
            after=[n for n in neighbors if n.seq > seq],
            start_seq=window.start_seq,
            end_seq=window.end_seq,
        )
        # one event may hold megabytes (a tool's output): never encoded on the loop
        return await _answer(result, render.event_read, large=True)


# -- from the core's values to the results ---------------------------------------------


R = TypeVar("R", bound=ToolResult)


async def _answer(result: R, text_of: Callable[[R], str], *, large: bool) -> ToolAnswer:
    """The text and the plain data of `result`; made in a worker thread when `large`
    (an answer of unbounded size), so the event loop keeps serving."""
    if large:
        return await asyncio.to_thread(_made, result, text_of)
    return _made(result, text_of)


def _made(result: R, text_of: Callable[[R], str]) -> ToolAnswer:
    return ToolAnswer(text_of(result), result, asdict(result))


async def _titles(obs: Observation, ids: Sequence[str]) -> dict[str, str | None]:
    """Each session's title text, the ids asked in one turn (one backend read)."""
    unique = list(dict.fromkeys(ids))
    found = await asyncio.gather(*(obs.title(i) for i in unique))
    return {i: _title_text(t) for i, t in zip(unique, found, strict=True)}


def _title_text(title: SessionTitle | None) -> str | None:
    return None if title is None else title.title


def _session_info(record: SessionRecord, title: str | None) -> SessionInfo:
    header = record.header
    return SessionInfo(
        id=header.id,
        title=title,
        created_at=iso_time(header.created_at),
        created_at_ms=header.created_at,
        cwd=header.cwd,
        parent_session_id=header.parent_session,
        live=record.live,
        persisted=record.persisted,
    )


def _match(hit: EventHit) -> EventMatch:
    record = hit.record
    return EventMatch(
        seq=record.seq,
        type=record.type,
        surface=SURFACE_NAMES[record.surface],
        time=iso_time(record.time),
        time_ms=record.time,
        snippet=hit.snippet,
        highlights=[Highlight(h.start, h.length) for h in hit.highlights],
        match_count=hit.match_count,
    )


def _event_info(record: EventRecord) -> EventInfo:
    return EventInfo(
        seq=record.seq,
        type=record.type,
        surface=SURFACE_NAMES[record.surface],
        time=iso_time(record.time),
        time_ms=record.time,
    )


def _neighbor(seq: int, etype: str, time: int, data: object) -> NeighborEvent:
    text = event_text(etype, data)
    cut = len(text) > NEIGHBOR_TEXT
    return NeighborEvent(
        seq=seq,
        type=etype,
        time=iso_time(time),
        time_ms=time,
        text=text[:NEIGHBOR_TEXT] if cut else text,
        text_truncated=cut,
    )


__all__ = ["DEFAULT_MAX_RESULTS", "NEIGHBOR_TEXT", "AgentTools"]
