"""`DirectRoute`: `/graphql`, over HTTP and over WebSocket, handed its request without
Starlette's exception layer and router.

Starlette runs every request through `ExceptionMiddleware` (a `Request` object and a
wrapped `send`, to turn an `HTTPException` into a plain-text answer) and its `Router`
(each route's regex until one matches), innermost, after the app's own middleware. For
`/graphql` over HTTP that was about 30k instructions a request, 5 % of a `{ __typename
}`: its endpoint raises no `HTTPException` (it answers every refusal itself) and it is
an exact path. Over WebSocket the wrapped `send` is a call on every frame for the
connection's life, each subscriber's share of a shared event included; the endpoint
raises no `WebSocketException` (it closes with its own codes).

So the innermost middleware, after every rule of the stack (request id, metrics,
security headers, in-flight cap, host list, body size, access), asks the route itself
whether it matches (`Route.matches` / `WebSocketRoute.matches`: the same path rule,
`root_path` included) and, on a full match, does what the router does with it:
`scope["router"]` (when unset), `scope["route"]` (OpenTelemetry reads its path
format), the route's `endpoint` and `path_params`, then the route's `handle`. Anything
else (another path or method, a partial match) goes on to Starlette's layers as
before. What it trades: an exception raised by those endpoints reaches
`ServerErrorMiddleware` without passing the exception layer, which would only have
re-raised it (the app registers no exception handlers), and
`scope["starlette.exception_handlers"]` is not set for them (read only by Starlette's
function endpoints; these are ASGI apps).
"""

from __future__ import annotations

from starlette.routing import Match, Route, Router, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send


class DirectRoute:
    """ASGI middleware: HTTP requests that fully match `route`, and WebSockets that match
    `socket`, go straight to it."""

    def __init__(
        self, app: ASGIApp, route: Route, router: Router, socket: WebSocketRoute | None = None
    ) -> None:
        self.app = app
        self.router = router
        self.routes: dict[str, Route | WebSocketRoute | None] = {
            "http": route,
            "websocket": socket,
        }
        """The route of each scope type it hands on directly."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["type"])
        if route is not None:
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
