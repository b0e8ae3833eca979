"""What a model is shown of the five tools: names, descriptions, argument schemas.

The names and arguments are the dsh reference's model-facing session-query
tools (flat snake_case filters, ISO 8601 times with a zone, no cursor, no page
size), so an agent prompt written for one works with the other. The gateway has
no "current session", so every tool that reads one session takes `session_id`
(required). The schemas are JSON Schema objects; `gateway.agent_tools.arguments`
checks every value again, since a client need not validate what it sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .arguments import AVAILABILITY_VALUES, SURFACE_VALUES

_TIME = "ISO 8601 time with a zone (Z or ±HH:MM), e.g. 2026-07-10T14:30:00Z"


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _integer(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "description": description}


def _strings(description: str, values: list[str] | None = None) -> dict[str, Any]:
    items: dict[str, Any] = {"type": "string"} if values is None else {"enum": values}
    return {"type": "array", "items": items, "minItems": 1, "description": description}


def _schema(properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_SURFACES = list(SURFACE_VALUES)
_SESSION_ID = _string("The session's id (as a search or trace result shows it).")
_SEQ = _integer("The event's seq (zero-based position in the session's log).")

SESSION_SEARCH = _schema(
    {
        "query": _string(
            "Words to find, matched as one phrase (case and accents ignored); "
            "operators like OR or quotes are plain text."
        ),
        "session_ids": _strings("Only these sessions."),
        "created_at_from": _string(f"Sessions created at or after this {_TIME}."),
        "created_at_to": _string(f"Sessions created at or before this {_TIME}."),
        "parent_session_ids": _strings("Only sessions forked directly from one of these."),
        "include_root_sessions": {
            "type": "boolean",
            "description": "With parent_session_ids (or alone): also sessions with no parent.",
        },
        "availability": _strings(
            "Only sessions held live now, or persisted now (either listed suffices).",
            list(AVAILABILITY_VALUES),
        ),
        "event_seq_from": _integer("Only events with seq at or above this."),
        "event_seq_to": _integer("Only events with seq at or below this."),
        "event_time_from": _string(f"Only events recorded at or after this {_TIME}."),
        "event_time_to": _string(f"Only events recorded at or before this {_TIME}."),
        "event_types": _strings("Only events of these types (e.g. user/message, tool/result)."),
        "event_surfaces": _strings(
            "Only events that are current (the model still sees them), shadowed "
            "(replaced) or log-only (never on the surface).",
            _SURFACES,
        ),
    },
    ["query"],
)

SESSION_EVENT_SEARCH = _schema(
    {
        "session_id": _SESSION_ID,
        "query": _string("Words to find in this session's events, matched as one phrase."),
        "seq_from": _integer("Only events with seq at or above this."),
        "seq_to": _integer("Only events with seq at or below this."),
        "time_from": _string(f"Only events recorded at or after this {_TIME}."),
        "time_to": _string(f"Only events recorded at or before this {_TIME}."),
        "event_types": _strings("Only events of these types."),
        "surfaces": _strings("Only events on these surfaces.", _SURFACES),
    },
    ["session_id", "query"],
)

SESSION_TRACE = _schema({"session_id": _SESSION_ID}, ["session_id"])

SESSION_EVENT_TRACE = _schema({"session_id": _SESSION_ID, "seq": _SEQ}, ["session_id", "seq"])

SESSION_EVENT_READ = _schema(
    {
        "session_id": _SESSION_ID,
        "seq": _SEQ,
        "before": _integer("How many raw events before the target to summarize (default 0)."),
        "after": _integer("How many raw events after the target to summarize (default 0)."),
    },
    ["session_id", "seq"],
)


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """One tool as a model is shown it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]

    @property
    def argument_names(self) -> tuple[str, ...]:
        return tuple(self.input_schema["properties"])


TOOL_SCHEMAS: tuple[ToolSchema, ...] = (
    ToolSchema(
        "session_search",
        "Search sessions",
        "Find earlier agent sessions whose events contain a phrase; each session comes "
        "with its best-matching event and an excerpt. Follow a hit with session_trace, "
        "session_event_trace or session_event_read.",
        SESSION_SEARCH,
    ),
    ToolSchema(
        "session_event_search",
        "Search one session's events",
        "Find the events of one session that contain a phrase, best match first, each "
        "with an excerpt.",
        SESSION_EVENT_SEARCH,
    ),
    ToolSchema(
        "session_trace",
        "Trace a session's lineage",
        "Show where a session comes from and what was forked from it: its ancestors, "
        "nearest first, and the whole tree of its descendants.",
        SESSION_TRACE,
    ),
    ToolSchema(
        "session_event_trace",
        "Trace an event's relations",
        "Show how one event relates to others: what replaced it (and what replaced that), "
        "what it replaced, the events it cites as sources, and the events citing it.",
        SESSION_EVENT_TRACE,
    ),
    ToolSchema(
        "session_event_read",
        "Read an event",
        "Read one event whole (its exact JSON), with short summaries of the raw events "
        "just before and after it when asked.",
        SESSION_EVENT_READ,
    ),
)

__all__ = ["TOOL_SCHEMAS", "ToolSchema"]
