"""`create_app(query, ...)`: the Starlette application around one `SessionQuery`.

Routes:

* `/graphql` — GraphQL over HTTP (GET for queries, POST), and the offline
  GraphiQL page for browsers (`gateway.server.http`); subscriptions over
  graphql-transport-ws (`gateway.server.websocket`) and over SSE
  (`Accept: text/event-stream`, `gateway.server.sse`);
* `/healthz` — 200 while the process serves requests;
* `/readyz` — 200 when no persistence is mounted or the mounted backend answers
  a cheap call (`ping()` when it has one, else `list()`) within
  `readiness_timeout`; else 503 with the reason;
* `/ui` — the viewer page (`gateway.web.ui`): sessions, lineage, surface;
* `/static/...` — GraphiQL's and the viewer's vendored scripts and styles (no CDN).

Everything the app uses is passed in: no module-level state, so several apps
(tests, embedding hosts) can live in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from gateway.core import SessionQuery
from gateway.core.tail import DEFAULT_TAIL_BUFFER
from gateway.observability import (
    GatewayMetrics,
    HttpMetricsMiddleware,
    MetricsEndpoint,
)
from gateway.observability.request_id import RequestIdMiddleware
from gateway.web.graphiql import STATIC_DIR, graphiql_html
from gateway.web.ui import UI_PATH, ui_page

from .auth import AuthMiddleware
from .codes import GATEWAY_CODES
from .context import Context
from .cors import check_origins, cors_middleware
from .cost import DEFAULT_MAX_COST
from .cursors import CursorCodec
from .documents import check_manifest
from .errors import error_code, new_correlation_id
from .host_check import HostAllowList
from .http import GraphQLHTTP
from .limits import (
    DEFAULT_MAX_ALIASES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_TOKENS,
    DEFAULT_OPERATION_TIMEOUT,
    BodySizeLimit,
    Limits,
)
from .principal import Authenticate, principal_of
from .ratelimit import FailedAuthLimit, RateLimit, parse_rate
from .schema import build_schema
from .security_headers import SecurityHeaders
from .sse import EventStream
from .websocket import DEFAULT_INIT_TIMEOUT, DEFAULT_MAX_SUBSCRIPTIONS, GraphQLWebSocket

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

logger = logging.getLogger("gateway.server")

GRAPHQL_PATH = "/graphql"
STATIC_PREFIX = "/static/graphiql"
DEFAULT_READINESS_TIMEOUT = 5.0

DEFAULT_QUERY = """\
# Welcome to the session-query gateway. Run this with the ▶ button (Ctrl-Enter).
query Sessions {
  sessions(first: 20) {
    totalCount
    nodes {
      id
      live
      persisted
      header { createdAt parentSessionId origin }
      events(first: 1) { totalCount }
    }
  }
}
"""

BackgroundTask = Callable[[], Coroutine[Any, Any, Any]]


async def check_ready(query: SessionQuery, limit_s: float) -> tuple[bool, str]:
    """Whether the mounted persistence (if any) answers a cheap call in time, and why not."""
    backend = query.persistence
    if backend is None:
        return True, "no persistence mounted"
    ping = getattr(backend, "ping", None)
    call = ping if callable(ping) else backend.list  # type: ignore[attr-defined]
    try:
        await asyncio.wait_for(call(), limit_s)
    except TimeoutError:
        return False, f"persistence did not answer within {limit_s:g} s"
    except Exception as exc:  # the driver's text (host:port, SQL) goes to the log only
        cid = new_correlation_id()
        # A load balancer polls this: one line per failure, the traceback only at DEBUG.
        first_line = next(iter(str(exc).splitlines()), "")
        logger.warning(
            "readiness check failed (correlation id %s): %s%s",
            cid,
            type(exc).__name__,
            f": {first_line}" if first_line else "",
        )
        logger.debug("readiness check failure %s, traceback", cid, exc_info=exc)
        return False, f"persistence unreachable ({type(exc).__name__}; correlation id {cid})"
    return True, "persistence reachable"


def create_app(
    query: SessionQuery,
    *,
    graphiql: bool = True,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_aliases: int = DEFAULT_MAX_ALIASES,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
    readiness_timeout: float = DEFAULT_READINESS_TIMEOUT,
    cursor_secret: bytes | str | None = None,
    default_query: str | None = DEFAULT_QUERY,
    background: Sequence[BackgroundTask] = (),
    debug: bool = False,
    metrics: GatewayMetrics | None = None,
    expose_metrics: bool = True,
    authenticate: Authenticate | None = None,
    cors_origins: Sequence[str] = (),
    trusted_documents: Mapping[str, str] | None = None,
    rate_limit: str | None = None,
    subscription_buffer: int = DEFAULT_TAIL_BUFFER,
    connection_init_timeout: float = DEFAULT_INIT_TIMEOUT,
    max_subscriptions_per_connection: int = DEFAULT_MAX_SUBSCRIPTIONS,
    max_cost: int = DEFAULT_MAX_COST,
    allowed_hosts: Sequence[str] | None = None,
    tracer_provider: TracerProvider | None = None,
) -> Starlette:
    """A Starlette app serving `query` over GraphQL.

    `background` coroutines (e.g. the demo's simulated agent) run for the app's
    lifespan and are cancelled at shutdown. `cursor_secret` keys the cursors'
    HMAC (random per process when None; see `gateway.server.cursors`).
    `metrics` collects the app's Prometheus metrics (a fresh `GatewayMetrics` when
    None), served at `/metrics` unless `expose_metrics=False`; backend calls are
    counted when the mounted backend is `instrument_backend(backend, metrics)`.
    `authenticate` turns auth on (see `gateway.server.principal`); None serves
    everyone the whole corpus. `cors_origins` are the browser origins allowed
    to call `/graphql` from another origin (none by default; see
    `gateway.server.cors`), also checked on WebSocket handshakes.
    `trusted_documents` is the manifest requests may name by `documentId`
    (checked here: ValueError for a bad entry; see `gateway.server.documents`).
    `rate_limit` ("100/second") limits each token, or client address, on
    `/graphql` and `/metrics` (see `gateway.server.ratelimit`).
    `subscription_buffer` is how many events a subscriber may fall behind by
    before SUBSCRIPTION_LAGGED; `connection_init_timeout` and
    `max_subscriptions_per_connection` bound graphql-transport-ws connections.
    `tracer_provider` (an OpenTelemetry SDK provider; needs the `otel` extra) turns on
    tracing: a span per request, per operation and per backend call, the mounted
    backend being replaced on `query` by its `trace_backend` proxy (see
    `gateway.observability.tracing`). None: nothing is traced and nothing imported.
    """
    if not isinstance(query, SessionQuery):
        raise TypeError(f"create_app needs a SessionQuery, got {type(query).__name__}")
    limits = Limits(
        max_depth, max_aliases, max_tokens, max_body_bytes, operation_timeout, max_cost=max_cost
    )
    origins = check_origins(cors_origins)
    documents = (
        check_manifest(trusted_documents, max_tokens=max_tokens)
        if trusted_documents is not None
        else None
    )
    if rate_limit is not None:
        parse_rate(rate_limit)
    metrics = metrics if metrics is not None else GatewayMetrics()
    metrics.know_error_codes(GATEWAY_CODES)
    tracing: list[Middleware] = []
    operation_span = None
    if tracer_provider is not None:
        from gateway.observability import tracing as otel  # the `otel` extra

        tracing.append(otel.server_span_middleware(tracer_provider))
        operation_span = otel.operation_tracing(tracer_provider, error_code)
        if query.persistence is not None:
            query.mount_persistence(otel.trace_backend(query.persistence, tracer_provider))
    schema = build_schema(limits, metrics=metrics, tracing=operation_span)
    cursors = CursorCodec(cursor_secret)

    def make_context(request: HTTPConnection) -> Context:
        return Context.for_request(query, cursors, principal_of(request))

    def page(request: Request) -> str:
        return graphiql_html(
            endpoint=request.url.path,
            static_prefix=STATIC_PREFIX,
            title="Session-query gateway · GraphiQL",
            default_query=default_query,
            token_field=getattr(request.app.state, "authenticate", None) is not None,
        )

    endpoint = GraphQLHTTP(
        schema,
        make_context,
        operation_timeout=operation_timeout,
        graphiql_page=page if graphiql else None,
        metrics=metrics,
        documents=documents,
        event_stream=EventStream(
            schema, make_context, metrics=metrics, buffer_size=subscription_buffer
        ),
    )
    websocket = GraphQLWebSocket(
        schema,
        make_context,
        metrics=metrics,
        buffer_size=subscription_buffer,
        init_timeout=connection_init_timeout,
        max_subscriptions=max_subscriptions_per_connection,
    )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"}, headers={"Cache-Control": "no-store"})

    async def readyz(request: Request) -> Response:
        ok, reason = await check_ready(query, readiness_timeout)
        return JSONResponse(
            {"status": "ready" if ok else "unavailable", "reason": reason},
            status_code=200 if ok else 503,
            headers={"Cache-Control": "no-store"},
        )

    async def root(request: Request) -> Response:
        return RedirectResponse(GRAPHQL_PATH)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(job(), name=f"gateway-background-{i}")
            for i, job in enumerate(background)
        ]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    routes: list[Route | WebSocketRoute | Mount] = [
        Route(GRAPHQL_PATH, endpoint),
        WebSocketRoute(GRAPHQL_PATH, websocket),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
    if expose_metrics:
        routes.append(Route("/metrics", MetricsEndpoint(metrics)))
    if graphiql:
        routes.append(Route("/", root, methods=["GET"]))
        routes.append(Route(UI_PATH, ui_page, methods=["GET"]))
        routes.append(Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"))
    # Every exact path the app serves is a `route` label of its own (the viewer too).
    metrics.know_routes([r.path for r in routes if isinstance(r, Route)])
    limited_paths = [GRAPHQL_PATH, "/metrics"] if expose_metrics else [GRAPHQL_PATH]
    app = Starlette(
        debug=debug,
        routes=routes,
        middleware=[
            *tracing,  # outermost: its span covers every response, refusals included
            # CORS is the OUTERMOST middleware after tracing: a preflight is answered
            # before anything else runs (no auth, no rate limit), and every response
            # from further in (401 from auth, 429, 413) passes back through it and
            # carries the CORS headers, so a page on another origin can read why it
            # was refused.
            *cors_middleware(origins),
            Middleware(RequestIdMiddleware),
            Middleware(HttpMetricsMiddleware, metrics=metrics),
            Middleware(SecurityHeaders),
            *([] if allowed_hosts is None else [Middleware(HostAllowList, allowed=allowed_hosts)]),
            # Auth is outside the rate limit, which keys on the principal auth attaches.
            # Failed authentications count per address before auth runs (ratelimit).
            *(
                [Middleware(FailedAuthLimit, rate=rate_limit, paths=limited_paths)]
                if authenticate and rate_limit
                else []
            ),
            *([Middleware(AuthMiddleware, authenticate=authenticate)] if authenticate else []),
            Middleware(BodySizeLimit, max_bytes=max_body_bytes),
            *(
                [Middleware(RateLimit, rate=rate_limit, paths=limited_paths)]
                if rate_limit is not None
                else []
            ),
        ],
        lifespan=lifespan,
    )
    app.state.query = query
    app.state.schema = schema
    app.state.limits = limits
    app.state.metrics = metrics
    app.state.authenticate = authenticate
    app.state.cors_origins = origins
    app.state.trusted_documents = documents
    return app
