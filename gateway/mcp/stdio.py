"""The agent tools over MCP's stdio transport: one client, one process, one scope.

The process's stdout is the protocol channel, so nothing else may write to it:
logs go to stderr (`session-gateway mcp` configures that before it starts).
"""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from gateway.agent_tools import AgentTools
from gateway.core import Scope

from .server import build_server


async def serve_stdio(tools: AgentTools, scope: Scope | None) -> None:
    """Answer MCP requests on stdin/stdout within `scope` (None: the whole corpus)
    until the client closes stdin."""
    server = build_server(tools, lambda ctx: scope)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


__all__ = ["serve_stdio"]
