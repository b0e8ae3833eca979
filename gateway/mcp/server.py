"""The agent tools as an MCP server (the SDK's low-level `Server`): only mapping.

`tools/list` shows `gateway.agent_tools`' schemas, each with an output schema
derived from its result dataclass (so the SDK's client can check every
`structuredContent` against it) and the read-only hints; `tools/call` asks
`AgentTools` and answers its text as a `TextContent` and its data as
`structuredContent`.

The low-level `Server` rather than `MCPServer`: the argument schemas are the
reference's, written out, and argument errors must carry the gateway's codes,
which a signature-derived schema and the SDK's own validation would replace.

A failed call is a tool error (`isError`), never a protocol error: its text
starts with the code (`SESSION_QUERY_INVALID_FILTER: created_at_from ... has
no time zone ...`), so a model can read what to fix. Anything unexpected is
logged with a correlation id and answered `INTERNAL_ERROR` with that id; no
traceback reaches the client.

Who asks decides what is seen: `scope_of(ctx)` gives the scope of each call
(stdio: the `--grant`s the process was started with; HTTP: the principal of
the request that carried the call, see `gateway.server.mcp_endpoint`).
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from pydantic import TypeAdapter

from gateway.agent_tools import AgentTools, ToolInputError, ToolSchema
from gateway.agent_tools.results import (
    EventReadResult,
    EventSearchResult,
    EventTraceResult,
    SessionSearchResult,
    SessionTraceResult,
)
from gateway.core import Scope, SessionQueryError

logger = logging.getLogger("gateway.mcp")

SERVER_NAME = "session-gateway"
INTERNAL_ERROR = "INTERNAL_ERROR"
INSTRUCTIONS = (
    "Read-only inspection of recorded agent sessions. Use session_search to find earlier "
    "work across sessions, or session_event_search within one session; follow a hit with "
    "session_trace (lineage), session_event_trace (how an event replaces and cites others) "
    "or session_event_read (the exact event). Times are ISO 8601 with a zone. Searches "
    "return at most a fixed number of hits and say so when they stop: narrow the query "
    "rather than asking for more."
)

RESULT_TYPES: dict[str, type] = {
    "session_search": SessionSearchResult,
    "session_event_search": EventSearchResult,
    "session_trace": SessionTraceResult,
    "session_event_trace": EventTraceResult,
    "session_event_read": EventReadResult,
}

ScopeOf = Callable[[ServerRequestContext[Any, Any]], Scope | None]


@functools.cache
def _schema_of(result_type: type) -> str:
    return json.dumps(TypeAdapter(result_type).json_schema(mode="serialization"))


def output_schema(result_type: type) -> dict[str, Any]:
    """The JSON Schema of a result dataclass, as its `asdict` form serializes (made once
    per process: it is a property of the code, and every app would otherwise pay for it;
    each caller gets its own copy)."""
    return dict(json.loads(_schema_of(result_type)))


def _tool(schema: ToolSchema) -> types.Tool:
    return types.Tool(
        name=schema.name,
        title=schema.title,
        description=schema.description,
        input_schema=schema.input_schema,
        output_schema=output_schema(RESULT_TYPES[schema.name]),
        annotations=types.ToolAnnotations(
            title=schema.title,
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )


def tool_error(code: str, message: str) -> types.CallToolResult:
    """A tool error whose text names the code and what was wrong."""
    return types.CallToolResult(
        content=[types.TextContent(text=f"{code}: {message}")], is_error=True
    )


def _version() -> str:
    try:
        return version("session-query-gateway")
    except PackageNotFoundError:
        return ""


def build_server(tools: AgentTools, scope_of: ScopeOf) -> Server[Any]:
    """An MCP server answering `tools` within the scope `scope_of` gives each call."""
    listed = [_tool(schema) for schema in tools.schemas]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            answer = await tools.call(params.name, params.arguments, scope_of(ctx))
        except ToolInputError as exc:
            return tool_error(exc.code, exc.message)
        except SessionQueryError as exc:
            return tool_error(exc.code.value, exc.message)
        except Exception:
            correlation = secrets.token_hex(8)
            logger.exception("MCP tool %s failed (correlation id %s)", params.name, correlation)
            return tool_error(
                INTERNAL_ERROR,
                f"the gateway failed to answer {params.name} (correlation id {correlation})",
            )
        return types.CallToolResult(
            content=[types.TextContent(text=answer.text)],
            structured_content=answer.structured,
        )

    return Server(
        SERVER_NAME,
        version=_version(),
        title="Session-query gateway",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda name: next(
            (s.input_schema for s in tools.schemas if s.name == name), None
        ),
    )


__all__ = ["INSTRUCTIONS", "RESULT_TYPES", "SERVER_NAME", "build_server", "output_schema"]
