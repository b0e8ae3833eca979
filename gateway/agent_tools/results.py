"""What the five tools answer, as data: the structured half of every result.

Plain frozen dataclasses of JSON-ready values (strings, numbers, lists), so a
transport can publish their schema and send them as they are (MCP's
`structuredContent`). Times come twice: as ISO 8601 UTC text for a model to
read and as epoch milliseconds (`*_ms`) for a program to compare; surfaces are
the reference's lower-case names (`current`, `shadowed`, `log-only`). No
cursor appears anywhere: a search says `capped` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session as a result shows it: id, title (None when it has none), header facts
    and which sources hold it."""

    id: str
    title: str | None
    created_at: str
    created_at_ms: int
    cwd: str | None
    parent_session_id: str | None
    live: bool
    persisted: bool


@dataclass(frozen=True, slots=True)
class Highlight:
    """A match inside a snippet, in code points of the snippet."""

    start: int
    length: int


@dataclass(frozen=True, slots=True)
class EventMatch:
    """One matching event: where it is, and where in its text the query matched."""

    seq: int
    type: str
    surface: str
    time: str
    time_ms: int
    snippet: str
    highlights: list[Highlight]
    match_count: int


@dataclass(frozen=True, slots=True)
class SessionMatch:
    """A matching session and its best-ranked event."""

    session: SessionInfo
    best_match: EventMatch


@dataclass(frozen=True, slots=True)
class SessionSearchResult:
    """`session_search`: sessions ranked by their best event, at most `cap` of them;
    `capped` when more matched than were collected."""

    query: str
    sessions: list[SessionMatch]
    capped: bool
    cap: int


@dataclass(frozen=True, slots=True)
class EventSearchResult:
    """`session_event_search`: one session's matching events, ranked, at most `cap`."""

    session_id: str
    title: str | None
    query: str
    events: list[EventMatch]
    capped: bool
    cap: int


@dataclass(frozen=True, slots=True)
class Descendant:
    """A session forked, at some depth, from the traced one. The tree comes flat, depth
    first with siblings by creation time then id: `depth` 1 is a child, and
    `parent_id` names the entry it hangs from (flat, so no tree is too deep to send)."""

    session: SessionInfo
    depth: int
    parent_id: str


@dataclass(frozen=True, slots=True)
class SessionTraceResult:
    """`session_trace`: ancestors nearest first and the whole tree of descendants. A
    chain that reaches a session outside what the caller sees is `complete: false`
    with `unresolved_parent_id`; a complete one names its `root_id`."""

    session: SessionInfo
    ancestors: list[SessionInfo]
    complete: bool
    root_id: str | None
    unresolved_parent_id: str | None
    descendants: list[Descendant]


@dataclass(frozen=True, slots=True)
class EventInfo:
    """An event's place in its log."""

    seq: int
    type: str
    surface: str
    time: str
    time_ms: int


@dataclass(frozen=True, slots=True)
class EventTraceResult:
    """`session_event_trace`: how one event replaces and cites others, and is replaced
    and cited (direct relations only; `replacement_chain` runs to the last replacer)."""

    session_id: str
    title: str | None
    target: EventInfo
    replaced_by: int | None
    replacement_chain: list[int]
    replaced_event_seqs: list[int]
    source_event_seqs: list[int]
    derived_event_seqs: list[int]


@dataclass(frozen=True, slots=True)
class NeighborEvent:
    """A raw event next to the one read: its place and (the start of) its text."""

    seq: int
    type: str
    time: str
    time_ms: int
    text: str
    text_truncated: bool


@dataclass(frozen=True, slots=True)
class EventReadResult:
    """`session_event_read`: the target event whole (its JSON as stored, camelCase), and
    summaries of the raw events `before` and `after` it (clipped to the log)."""

    session_id: str
    title: str | None
    event: dict[str, Any]
    before: list[NeighborEvent]
    after: list[NeighborEvent]
    start_seq: int
    end_seq: int


ToolResult = (
    SessionSearchResult
    | EventSearchResult
    | SessionTraceResult
    | EventTraceResult
    | EventReadResult
)


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """A tool's answer: the text a model reads, and the same facts as data (`data`, and
    `structured`: the same as plain JSON values, ready to send)."""

    text: str
    data: ToolResult
    structured: dict[str, Any]


__all__ = [
    "Descendant",
    "EventInfo",
    "EventMatch",
    "EventReadResult",
    "EventSearchResult",
    "EventTraceResult",
    "Highlight",
    "NeighborEvent",
    "SessionInfo",
    "SessionMatch",
    "SessionSearchResult",
    "SessionTraceResult",
    "ToolAnswer",
    "ToolResult",
]
