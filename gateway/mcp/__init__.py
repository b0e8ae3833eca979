"""MCP for agents: the read-only agent tools (`gateway.agent_tools`) over the official
`mcp` SDK. `build_server` maps them onto a low-level MCP `Server`; `serve_stdio`
runs it for `session-gateway mcp`; `/mcp` on `serve` mounts it over streamable
HTTP (`gateway.server.mcp_endpoint`). Imported only where MCP is served: the
SDK is not loaded by the rest of the gateway.
"""

from .server import SERVER_NAME, build_server
from .stdio import serve_stdio

__all__ = ["SERVER_NAME", "build_server", "serve_stdio"]
