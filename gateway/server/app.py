"""`create_app(query, ...)`: the Starlette application around one `SessionQuery`.

Routes:

* `/graphql` — GraphQL over HTTP (GET for queries, POST), and the offline
  GraphiQL page for browsers (`gateway.server.http`); subscriptions over
  graphql-transport-ws (`gateway.server.websocket`) and over SSE
  (`Accept: text/event-stream`, `gateway.server.sse`);
* `/healthz` — 200 while the process serves requests;
* `/sessions/{id}/export` — a session as a dsh JSONL artifact, or a zip with its
  descendants (`gateway.server.export`), under the same caller rules as `/graphql`;
* `/mcp` — the read-only agent tools over MCP streamable HTTP
  (`gateway.server.mcp_endpoint`), under the same caller rules and scope as `/graphql`;
* `/readyz` — 200 when no persistence is mounted or the mounted backend answers
  a cheap call (`ping()` when it has one, else `list()`) within
  `config.readiness_timeout`; else 503 with the reason;
  the backend's integrity probe (`probe_integrity()`, see
  `SqlPersistence.probe_integrity`), when it has one, is that call and must pass;
* `/ui` — the viewer page (`gateway.web.ui`): sessions, lineage, surface;
* `/static/...` — GraphiQL's and the viewer's vendored scripts and styles (no CDN).

Everything the app uses is passed in (`GatewayConfig` and the collaborators):
no module-level state, nothing handed around through `app.state`, so several
apps (tests, embedding hosts) can live in one process. Every operation, on
every transport, goes through one `OperationPipeline` (`gateway.server.pipeline`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from gateway.core import PersistenceBackend, SessionQuery
from gateway.observability import (
    GatewayMetrics,
    HttpMetricsMiddleware,
    MetricsEndpoint,
)
from gateway.observability.request_id import RequestIdMiddleware
from gateway.web.graphiql import STATIC_DIR, graphiql_html
from gateway.web.ui import UI_PATH, ui_page

from .access import Access, AccessMiddleware
from .codes import GATEWAY_CODES
from .config import GatewayConfig
from .cors import cors_middleware
from .direct_route import DirectRoute
from .errors import error_code, new_correlation_id
from .export import EXPORT_PATH, ExportEndpoint
from .host_check import HostAllowList
from .http import GraphQLHTTP
from .inflight import InFlightLimit
from .limits import BodySizeLimit
from .mcp_endpoint import MCP_PATH, McpEndpoint
from .pipeline import OperationPipeline
from .principal import Authenticate
from .schema import build_schema
from .security_headers import SecurityHeaders
from .websocket import GraphQLWebSocket

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

logger = logging.getLogger("gateway.server")

GRAPHQL_PATH = "/graphql"
STATIC_PREFIX = "/static/graphiql"

BackgroundTask = Callable[[], Coroutine[Any, Any, Any]]


async def check_ready(query: SessionQuery, limit_s: float) -> tuple[bool, str]:
    """Whether the mounted persistence (if any) answers a cheap call in time and passes its
    integrity probe (`probe_integrity()`, which then is that call), and why not."""
    backend = query.persistence
    if backend is None:
        return True, "no persistence mounted"
    ping = getattr(backend, "ping", None)
    probe = getattr(backend, "probe_integrity", None)
    call = ping if callable(ping) else backend.list
    problem: object = None
    try:
        if callable(probe):  # it reads the database: it is the reachability check too
            problem = await asyncio.wait_for(probe(), limit_s)
        else:
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
    if problem is not None:  # what failed names sessions and seqs: the log's, not the answer's
        cid = new_correlation_id()
        logger.warning("integrity probe failed (correlation id %s): %s", cid, problem)
        return False, f"persistence failed its integrity probe (correlation id {cid})"
    return True, "persistence reachable"


def create_app(
    query: SessionQuery,
    config: GatewayConfig | None = None,
    *,
    authenticate: Authenticate | None = None,
    metrics: GatewayMetrics | None = None,
    tracer_provider: TracerProvider | None = None,
    background: Sequence[BackgroundTask] = (),
) -> Starlette:
    """A Starlette app serving `query` over GraphQL, as `config` says (the defaults
    when None; see `gateway.server.config.GatewayConfig`).

    The collaborators are arguments of their own: `authenticate` turns auth on
    (see `gateway.server.principal`; None serves everyone the whole corpus);
    `metrics` collects the app's Prometheus metrics (a fresh `GatewayMetrics`
    when None), served at `/metrics` unless `config.expose_metrics` is off, backend
    calls counted when the mounted backend is `instrument_backend(backend,
    metrics)`; `tracer_provider` (an OpenTelemetry SDK provider; needs the `otel`
    extra) turns on tracing: a span per request, per operation and per backend
    call (the app reads the mounted backend through `trace_backend`; `query`
    itself is left as it is). `background` coroutines (e.g. the demo's simulated
    agent) run for the app's lifespan and are cancelled at shutdown.
    """
    if not isinstance(query, SessionQuery):
        raise TypeError(f"create_app needs a SessionQuery, got {type(query).__name__}")
    config = config if config is not None else GatewayConfig()
    if not isinstance(config, GatewayConfig):
        raise TypeError(f"create_app's config must be a GatewayConfig, got {type(config).__name__}")
    limits = config.limits
    metrics = metrics if metrics is not None else GatewayMetrics()
    metrics.know_error_codes(GATEWAY_CODES)
    tracing: list[Middleware] = []
    operation_span = None
    backend_view = None
    refusal_span = None
    executed_span = None
    if tracer_provider is not None:
        from gateway.observability import tracing as otel  # the `otel` extra

        tracing.append(otel.server_span_middleware(tracer_provider))
        operation_span = otel.operation_tracing(tracer_provider, error_code)
        refusal_span = otel.refusal_tracing(tracer_provider)
        executed_span = otel.operation_spans(tracer_provider, error_code)
        backend_view = _traced_backends(otel.trace_backend, tracer_provider)
    schema = build_schema(limits, metrics=metrics, tracing=operation_span)
    access = Access(authenticate, config.rate)
    pipeline = OperationPipeline(
        schema=schema,
        query=query,
        config=config,
        access=access,
        metrics=metrics,
        backend_view=backend_view,
        on_refused=refusal_span,
        on_operation=executed_span,
    )
    default_query = config.default_query

    def page(request: Request) -> str:
        return graphiql_html(
            endpoint=request.url.path,
            static_prefix=STATIC_PREFIX,
            title="Session-query gateway · GraphiQL",
            default_query=default_query,
            token_field=authenticate is not None,
        )

    endpoint = GraphQLHTTP(pipeline, graphiql_page=page if config.graphiql else None)
    websocket = GraphQLWebSocket(pipeline)
    mcp = McpEndpoint(query, access, config.cors_origins)
    readiness_timeout = config.readiness_timeout

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
            async with mcp.lifespan():  # the MCP SDK's session manager runs for the app's life
                yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    graphql_route = Route(GRAPHQL_PATH, endpoint)
    graphql_socket = WebSocketRoute(GRAPHQL_PATH, websocket)
    routes: list[Route | WebSocketRoute | Mount] = [
        graphql_route,
        graphql_socket,
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        # the same caller rules as /graphql: the endpoint asks the pipeline's `access`
        Route(EXPORT_PATH, ExportEndpoint(pipeline), methods=["GET"]),
        Route(MCP_PATH, mcp),  # asks `access` itself, per HTTP request (as the pipeline does)
    ]
    if config.expose_metrics:
        routes.append(Route("/metrics", MetricsEndpoint(metrics)))
    if config.graphiql:
        routes.append(Route("/", root, methods=["GET"]))
        routes.append(Route(UI_PATH, ui_page(auth=authenticate is not None), methods=["GET"]))
        routes.append(Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"))
    # Every exact path the app serves is a `route` label of its own (the viewer too).
    metrics.know_routes([r.path for r in routes if isinstance(r, Route) and "{" not in r.path])
    guarded = ["/metrics", UI_PATH] if config.expose_metrics else [UI_PATH]
    hosts = config.allowed_hosts
    app = Starlette(
        debug=config.debug,
        routes=routes,
        middleware=[
            *tracing,  # outermost: its span covers every response, refusals included
            # CORS is the OUTERMOST middleware after tracing: a preflight is answered
            # before anything else runs (no auth, no rate limit), and every response
            # from further in (401, 429, 413) passes back through it and carries the
            # CORS headers, so a page on another origin can read why it was refused.
            *cors_middleware(config.cors_origins),
            Middleware(RequestIdMiddleware),
            Middleware(HttpMetricsMiddleware, metrics=metrics),
            Middleware(SecurityHeaders),
            # past the in-flight cap a 503 before any other work (/healthz never refused)
            Middleware(InFlightLimit, max_in_flight=config.max_requests_in_flight),
            *([] if hosts is None else [Middleware(HostAllowList, allowed=hosts)]),
            Middleware(BodySizeLimit, max_bytes=limits.max_body_bytes),
            # /graphql is not behind this: the pipeline applies `access` per operation.
            *(
                [Middleware(AccessMiddleware, access=access, paths=guarded)]
                if access.enabled
                else []
            ),
        ],
        lifespan=lifespan,
    )
    # innermost, after every rule above: /graphql over HTTP and WebSocket skips Starlette's
    # exception layer and router (`gateway.server.direct_route` says why and what it keeps)
    app.user_middleware.append(
        Middleware(DirectRoute, route=graphql_route, router=app.router, socket=graphql_socket)
    )
    return app


def _traced_backends(
    trace: Callable[[PersistenceBackend, TracerProvider], PersistenceBackend],
    provider: TracerProvider,
) -> Callable[[PersistenceBackend], PersistenceBackend]:
    """The mounted backend seen through its tracing proxy: one proxy per backend object
    (remade only when the query's backend is replaced; it holds no data)."""
    made: list[tuple[PersistenceBackend, PersistenceBackend]] = []

    def view(backend: PersistenceBackend) -> PersistenceBackend:
        if made and made[0][0] is backend:
            return made[0][1]
        proxy = trace(backend, provider)
        made[:] = [(backend, proxy)]
        return proxy

    return view
