"""Read-only tools for agents over the query core (the dsh reference's five
model-facing session-query tools), knowing no transport.

`AgentTools(query).call(name, arguments, scope)` answers one call with a
`ToolAnswer` (text for the model, the same facts as data); `TOOL_SCHEMAS` is
what a model is shown. `gateway.mcp` serves them over MCP.
"""

from .arguments import BAD_USER_INPUT, ToolInputError
from .results import ToolAnswer, ToolResult
from .schemas import TOOL_SCHEMAS, ToolSchema
from .tools import DEFAULT_MAX_RESULTS, AgentTools

__all__ = [
    "BAD_USER_INPUT",
    "DEFAULT_MAX_RESULTS",
    "TOOL_SCHEMAS",
    "AgentTools",
    "ToolAnswer",
    "ToolInputError",
    "ToolResult",
    "ToolSchema",
]
