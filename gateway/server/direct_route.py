"""`DirectRoute`: one exact HTTP route handed its request without Starlette's exception
layer and router.

Starlette runs every request through `ExceptionMiddleware` (a `Request` object and a
wrapped `send`, to turn an `HTTPException` into a plain-text answer) and its `Router`
(each route's regex until one matches), innermost, after the app's own middleware. For
`/graphql` over HTTP that was about 30k instructions a request, 5 % of a `{ __typename
}`: its endpoint raises no `HTTPException` (it answers every refusal itself) and it is
an exact path.

So the innermost middleware, after every rule of the stack (request id, metrics,
security headers, in-flight cap, host list, body size, access), asks the route itself
whether it matches (`Route.matches`: the same path rule, `root_path` included) and, on
a full match, does what the router does with it: `scope["router"]` (when unset),
`scope["route"]` (OpenTelemetry reads its path format), the route's `endpoint` and
`path_params`, then `Route.handle`. Anything else (a WebSocket, another path or
method, a partial match) goes on to Starlette's layers as before. What it trades: an
exception raised by that endpoint reaches `ServerErrorMiddleware` (a 500) without
passing the exception layer, which would only have re-raised it (the app registers no
exception handlers), and `scope["starlette.exception_handlers"]` is not set for it
(read only by Starlette's function endpoints; this one is an ASGI app).
"""

from __future__ import annotations

from starlette.routing import Match, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send


class DirectRoute:
    """ASGI middleware: HTTP requests that fully match `route` go straight to it."""

    def __init__(self, app: ASGIApp, route: Route, router: Router) -> None:
        self.app = app
        self.route = route
        self.router = router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            route = self.route
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                if "router" not in scope:
                    scope["router"] = self.router
                scope["route"] = route
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return
        await self.app(scope, receive, send)


__all__ = ["DirectRoute"]
