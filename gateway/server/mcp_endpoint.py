"""`/mcp`: the agent tools over MCP streamable HTTP, under the caller rules of `/graphql`.

Every HTTP request to `/mcp` (each one carries one MCP message: `initialize`,
`tools/list`, `tools/call`, ...) goes through the app's one `Access`, as every
GraphQL operation does: the failed-auth limit, the bearer token checked afresh
(a token revoked since the last call is refused from the next one: 401
UNAUTHENTICATED with `WWW-Authenticate: Bearer`), the rate limit. The principal
it yields rides on the request, and the tool call reads its grants from there
(`scope_of`), so every call answers within the scope of the token that sent
it: an invisible session is not found, exactly as over GraphQL.

Host and Origin: the app's host allow-list (`gateway.server.host_check`) is in
front of every route, this one included; an `Origin` header (a browser) must be
the request's own origin or an allowed CORS origin, as for WebSockets
(`cors.origin_allowed`), else 403. So the SDK's own DNS-rebinding check, which
knows neither list, stays off.

The SDK's session manager runs stateless with JSON answers: no MCP session is
kept between requests (nothing is cached across requests, and a replica can
answer any request), and a read-only tool has nothing to stream. It needs a
task group for the app's lifetime; the app's lifespan enters `lifespan()`,
but the SDK is imported and its manager started only at the first `/mcp`
request, in a task of that lifespan (each lifespan makes a fresh manager: one
can run only once). Importing the SDK costs seconds of CPU (more than the rest
of the app), which `serve`'s start-up and every server that no agent calls
should not pay; the import runs in a worker thread so the loop keeps serving
while the first agent waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from gateway.agent_tools import AgentTools, ToolInputError
from gateway.core import Scope as GrantScope
from gateway.core import SessionQuery

from .access import Access, caller_of
from .codes import GatewayCode
from .cors import origin_allowed
from .errors import send_error, simple_error
from .operation import Refused
from .principal import attach_principal, principal_of

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

MCP_PATH = "/mcp"
_LOG = logging.getLogger(__name__)

# The SDK's transport logs "Terminating session: None" at INFO for every stateless
# request; the access log already has one line per request. A level set by the
# host's own logging configuration is left as it is.
_TRANSPORT_LOG = logging.getLogger("mcp.server.streamable_http")
if _TRANSPORT_LOG.level == logging.NOTSET:
    _TRANSPORT_LOG.setLevel(logging.WARNING)


class McpEndpoint:
    """The ASGI app at `/mcp` (see the module docstring)."""

    def __init__(self, query: SessionQuery, access: Access, cors_origins: Iterable[str]) -> None:
        self.access = access
        self.origins = tuple(cors_origins)
        self.tools = AgentTools(query)
        self._manager: StreamableHTTPSessionManager | None = None
        self._serving = False  # inside the app's lifespan
        self._started: asyncio.Future[StreamableHTTPSessionManager] | None = None
        self._stop: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Allow the SDK's session manager to run for as long as the app serves
        (started by the first `/mcp` request), and stop it with the app."""
        self._serving = True
        self._stop = asyncio.Event()
        try:
            yield
        finally:
            self._serving = False
            self._stop.set()
            if self._runner is not None:
                await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = self._started = self._manager = None

    async def _manager_for_request(self) -> StreamableHTTPSessionManager | None:
        """The running manager, started now if this is the first `/mcp` request."""
        if self._manager is not None:
            return self._manager
        if not self._serving:
            return None
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._runner = asyncio.create_task(self._run(self._started))
        try:
            return await asyncio.shield(self._started)
        except Exception:  # logged once by the runner's task; the caller answers 503
            return None

    async def _run(self, started: asyncio.Future[StreamableHTTPSessionManager]) -> None:
        """Import the SDK (off the loop), run its manager until the lifespan ends."""
        try:
            module = await asyncio.to_thread(
                importlib.import_module, "mcp.server.streamable_http_manager"
            )
            from gateway.mcp import build_server

            server = build_server(self.tools, self._scope_of)
            manager = module.StreamableHTTPSessionManager(
                app=server, stateless=True, json_response=True
            )
            async with manager.run():
                self._manager = manager
                started.set_result(manager)
                assert self._stop is not None
                await self._stop.wait()
        except Exception as exc:
            _LOG.exception("the MCP endpoint could not start")
            if not started.done():
                started.set_exception(exc)
                started.exception()  # retrieved: every waiter answers 503, not the loop's log
        finally:
            self._manager = None

    def _scope_of(self, ctx: ServerRequestContext[Any, Any]) -> GrantScope | None:
        """The scope of the request that carried this call: its principal's grants (None,
        the whole corpus, only when this app checks no credentials)."""
        request = ctx.request
        principal = principal_of(request.scope) if request is not None else None
        if principal is not None:
            return GrantScope.parse(principal.grants)
        if self.access.checks_credentials:  # never reached: __call__ admitted the request
            raise ToolInputError(GatewayCode.UNAUTHENTICATED, "this call carried no credentials")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        if not origin_allowed(headers.get("origin"), headers.get("host"), self.origins):
            message = (
                f"this gateway does not answer /mcp for pages on {headers.get('origin')!r}: "
                "only its own origin and the --cors-origin origins"
            )
            await send_error(scope, send, 403, simple_error(GatewayCode.FORBIDDEN, message))
            return
        if self.access.enabled:
            try:
                principal = await self.access.admit(caller_of(scope))
            except Refused as refused:
                await send_error(scope, send, refused.status, refused.errors[0], refused.headers)
                return
            if principal is not None:
                attach_principal(scope, principal)
        manager = await self._manager_for_request()
        if manager is None:
            message = (
                "/mcp is not running: the app is served without its lifespan, "
                "or the MCP SDK failed to start (the log says why)"
            )
            await send_error(scope, send, 503, simple_error(GatewayCode.INTERNAL_ERROR, message))
            return
        await manager.handle_request(scope, receive, send)


__all__ = ["MCP_PATH", "McpEndpoint"]
