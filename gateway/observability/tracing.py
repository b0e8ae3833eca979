"""Optional OpenTelemetry tracing: a span per HTTP request, per GraphQL operation and per
backend call, continuing the caller's W3C `traceparent`.

Needs the `otel` extra (`pip install 'session-query-gateway[otel]'`); nothing else in
the gateway imports this module unless tracing is switched on, so without the extra
the gateway runs as before and pays nothing. Everything takes the `TracerProvider` to
use (no global provider is read or set), so several apps can live in one process.

* `server_span_middleware`: opentelemetry-instrumentation-asgi's `OpenTelemetryMiddleware`
  (one SERVER span per HTTP request or WebSocket connection, named `POST /graphql`,
  with the standard HTTP attributes; the incoming `traceparent` becomes its parent
  through the globally configured propagator, W3C trace context by default). Its
  per-message `send`/`receive` spans are switched off (a streamed subscription would
  otherwise make one span per event), its metrics go to a no-op meter (the gateway's
  metrics are Prometheus), and the probe, scrape and asset paths are not traced.
  It costs more than a hand-written span would (~170 us of CPU per request against
  ~40 us for a bare span on the 2-core development machine, `bench_tracing`): the
  price of the standard HTTP attributes, WebSocket scopes and an INTERNAL span when a
  host's own instrumentation already opened the SERVER one, all kept by upstream.
* `OperationSpan`: one span per operation, `query SessionsPage`, with
  `graphql.operation.name`/`.type` and, on failure, status ERROR and the gateway error
  code (`error.type`). Nothing makes a span per resolved field on purpose: that
  multiplies the cost of a large list (Strawberry's own `OpenTelemetryExtension` does
  it). The operation pipeline, which runs queries and mutations on graphql-core
  itself, opens it through `operation_spans`; `operation_tracing` is the Strawberry
  `SchemaExtension` class (no `resolve` hook) opening it around `on_operation` for what
  Strawberry runs: subscriptions, whose span lasts as long as the subscription, and
  the schema executed directly.
* `trace_backend`: a proxy over the persistence backend making one CLIENT span per
  backend call (`persistence load_window`), with the method and the database system,
  only when the call happens inside a traced request (readiness probes, the demo's
  simulated agent and other calls made outside a request leave no orphan spans).
* `TraceIdFilter`: a `logging.Filter` putting the current `trace_id`/`span_id` on each
  record, so the JSON log lines of a request can be found from its trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.http import ExcludeList
from starlette.middleware import Middleware
from strawberry.extensions import SchemaExtension

from .backend_proxy import BackendProxy, inner_of, proxy_once

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

INSTRUMENTATION_NAME = "gateway"
UNTRACED_PATHS = (r"/healthz$", r"/readyz$", r"/metrics$", r"/static/")
"""Regexes (searched in the request URL, which has no query string) of requests that get
no span: probes, scrapes and static assets, which would drown the traces that matter."""

ErrorCode = Callable[[Any], str]


def _tracer(provider: TracerProvider) -> trace.Tracer:
    return provider.get_tracer(INSTRUMENTATION_NAME)


# ------------------------------------------------------------------------ HTTP


def server_span_middleware(provider: TracerProvider) -> Middleware:
    """The Starlette middleware making one SERVER span per request (see the module doc)."""
    return Middleware(
        OpenTelemetryMiddleware,
        excluded_urls=ExcludeList(list(UNTRACED_PATHS)),
        tracer_provider=provider,
        meter_provider=NoOpMeterProvider(),
        exclude_spans=["receive", "send"],
    )


# --------------------------------------------------------------------- GraphQL


class OperationSpan:
    """One GraphQL operation's span (a context manager): started and made current on
    entry, so the backend calls made inside it are its children; on exit named after
    the operation (`name`, `kind`), and ERROR with the codes of its `errors` (set by
    whoever ran it before leaving), `cancelled` when cancelled (a timeout, a client
    gone), or INTERNAL_ERROR when the execution raised."""

    __slots__ = ("_error_code", "_span", "_token", "_tracer", "errors", "kind", "name")

    def __init__(
        self,
        tracer: trace.Tracer,
        error_code: ErrorCode,
        name: str | None = None,
        kind: str | None = None,
    ) -> None:
        self._tracer = tracer
        self._error_code = error_code
        self.name = name
        self.kind = kind
        self.errors: Sequence[Any] = ()

    def __enter__(self) -> OperationSpan:
        self._span = span = self._tracer.start_span("graphql operation", kind=SpanKind.INTERNAL)
        self._token = otel_context.attach(trace.set_span_in_context(span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        otel_context.detach(self._token)
        try:
            if exc_type is None:
                codes = _codes(self.errors, self._error_code)
                if codes:
                    span.set_status(Status(StatusCode.ERROR, codes[0]))
                    span.set_attribute("error.type", codes[0])
                    span.set_attribute("gateway.error.codes", codes)
            elif issubclass(exc_type, asyncio.CancelledError):
                span.set_status(Status(StatusCode.ERROR, "cancelled (timeout or client gone)"))
                span.set_attribute("error.type", "cancelled")
            elif issubclass(exc_type, Exception):  # the document was prepared: a bug
                span.set_status(Status(StatusCode.ERROR, "INTERNAL_ERROR"))
                span.set_attribute("error.type", "INTERNAL_ERROR")
        finally:
            _label_operation(span, self.kind, self.name)
            span.end()


def operation_spans(
    provider: TracerProvider, error_code: ErrorCode
) -> Callable[[str | None, str | None], OperationSpan]:
    """The operation pipeline's hook for the operations it executes itself (queries and
    mutations, straight on graphql-core): `hook(name, kind)` is the operation's
    `OperationSpan`, the same span `operation_tracing` makes for an operation run
    through Strawberry."""
    tracer = _tracer(provider)

    def hook(name: str | None, kind: str | None) -> OperationSpan:
        return OperationSpan(tracer, error_code, name, kind)

    return hook


def operation_tracing(provider: TracerProvider, error_code: ErrorCode) -> type[SchemaExtension]:
    """A `SchemaExtension` class (register the class: one instance per operation) making one
    span per GraphQL operation run through Strawberry (subscriptions, and the schema
    executed directly). `error_code(error)` gives a GraphQL error's contract code
    without side effects (`gateway.server.errors.error_code`)."""
    tracer = _tracer(provider)

    class OperationTracing(SchemaExtension):
        def on_operation(self) -> Iterator[None]:
            with OperationSpan(tracer, error_code) as span:
                try:
                    yield
                finally:  # named once the document is parsed, whatever happened
                    span.kind, span.name = _operation_of(self.execution_context)
                span.errors = _result_errors(self.execution_context)

    return OperationTracing


def refusal_tracing(
    provider: TracerProvider,
) -> Callable[[str | None, str | None, list[str]], None]:
    """The span of an operation refused before it ran (its document did not parse,
    validate or pass a limit): named like an operation's, ERROR with the codes the
    client got, inside the request's span."""
    tracer = _tracer(provider)

    def refused(name: str | None, kind: str | None, codes: list[str]) -> None:
        span = tracer.start_span("graphql operation", kind=SpanKind.INTERNAL)
        _label_operation(span, kind, name)
        if codes:
            span.set_status(Status(StatusCode.ERROR, codes[0]))
            span.set_attribute("error.type", codes[0])
            span.set_attribute("gateway.error.codes", codes)
        span.end()

    return refused


def _operation_of(context: Any) -> tuple[str | None, str | None]:
    """The operation's type and name, known only once the document is parsed."""
    kind = None
    with contextlib.suppress(Exception):  # no document (parse failure), unknown name, ...
        operation_type = context.operation_type
        kind = str(getattr(operation_type, "value", operation_type))
    name = getattr(context, "operation_name", None)
    return kind, name if isinstance(name, str) else None


def _label_operation(span: trace.Span, kind: str | None, name: str | None) -> None:
    if kind:
        span.set_attribute("graphql.operation.type", kind)
    if name:
        span.set_attribute("graphql.operation.name", name)
    span.update_name(" ".join(part for part in (kind or "graphql", name) if part))


def _result_errors(context: Any) -> list[Any]:
    """The errors of the operation Strawberry ran (its result's, else the ones that
    stopped it before execution)."""
    result = getattr(context, "result", None)
    errors = list(getattr(result, "errors", None) or ())
    if not errors:
        errors = list(getattr(context, "pre_execution_errors", None) or ())
    return errors


def _codes(errors: Iterable[Any], error_code: ErrorCode) -> list[str]:
    """The distinct codes of `errors`, in order of first appearance."""
    codes: dict[str, None] = {}
    for error in errors:
        try:
            codes[error_code(error)] = None
        except Exception:
            codes["INTERNAL_ERROR"] = None
    return list(codes)


# --------------------------------------------------------------------- backend

B = TypeVar("B")


class TracedBackend(BackendProxy):
    """A persistence backend seen through `trace_backend`: same methods, each call a
    CLIENT span inside a traced request (see `BackendProxy`)."""

    label = "traced"

    def __init__(self, inner: object, provider: TracerProvider) -> None:
        tracer, attributes = _tracer(provider), _db_attributes(inner)
        super().__init__(inner, lambda backend, name: _traced(backend, name, tracer, attributes))


def _db_attributes(backend: object) -> dict[str, str]:
    """`db.system.name` (and the older `db.system`) when the backend says its database URL."""
    url = getattr(backend, "url", None)
    get_name = getattr(url, "get_backend_name", None)
    if not callable(get_name):
        return {}
    with contextlib.suppress(Exception):
        name = str(get_name())
        return {"db.system.name": name, "db.system": name}
    return {}


def _traced(
    inner: object, name: str, tracer: trace.Tracer, attributes: dict[str, str]
) -> Callable[..., Any]:
    span_name = f"persistence {name}"
    span_attributes = {**attributes, "db.operation.name": name}

    async def call(*args: Any, **kwargs: Any) -> Any:
        method = getattr(inner, name)
        if not trace.get_current_span().get_span_context().is_valid:
            return await method(*args, **kwargs)  # outside any traced request
        with tracer.start_as_current_span(
            span_name, kind=SpanKind.CLIENT, attributes=span_attributes
        ) as span:
            try:
                return await method(*args, **kwargs)
            except asyncio.CancelledError:
                span.set_attribute("error.type", "cancelled")
                raise

    return call


def trace_backend(backend: B, provider: TracerProvider) -> B:
    """`backend` behind a proxy making a span per async call (idempotent: an already
    traced backend is returned as is). Typed as the backend it wraps."""
    return proxy_once(backend, TracedBackend, provider)


def untraced_backend(backend: object) -> object:
    """The backend inside `trace_backend`'s proxy (the object itself otherwise)."""
    return inner_of(backend, TracedBackend)


# -------------------------------------------------------------------- provider

DEFAULT_SERVICE_NAME = "session-query-gateway"


class TracingConfigError(ValueError):
    """The OTEL_* environment asks for something this install cannot do."""


def provider_from_env(environ: Mapping[str, str]) -> SdkTracerProvider:
    """An SDK `TracerProvider` exporting in batches, configured by the standard OTEL_* env.

    The SDK reads its own variables: the resource ($OTEL_SERVICE_NAME, default
    `session-query-gateway`; $OTEL_RESOURCE_ATTRIBUTES), the sampler
    ($OTEL_TRACES_SAMPLER), the batching ($OTEL_BSP_*) and the OTLP exporter's
    endpoint, headers, timeout and compression ($OTEL_EXPORTER_OTLP_[TRACES_]*).
    Only the choice of exporter is read here ($OTEL_TRACES_EXPORTER: `otlp`, the
    default, `console` or `none`), since the SDK's own selection is private API:
    the extra ships the HTTP/protobuf OTLP exporter, so an `otlp` asked over gRPC is
    a `TracingConfigError`, as is an exporter this install does not have.
    """
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = [_exporter(name, environ) for name in _exporter_names(environ)]
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = SdkProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    raw = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    names = [name.strip() for name in raw.split(",") if name.strip()]
    return [name for name in names if name != "none"]


def exporter_description(environ: Mapping[str, str]) -> str:
    """What the banner says about where spans go."""
    names = _exporter_names(environ)
    if not names:
        return "on, not exported (OTEL_TRACES_EXPORTER=none)"
    where = []
    for name in names:
        if name == "otlp":
            endpoint = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
                or "http://localhost:4318"
            )
            where.append(f"OTLP/HTTP to {endpoint}")
        else:
            where.append(name)
    return "OpenTelemetry, " + ", ".join(where)


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={name!r} is not available: use otlp, console or none"
        )
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
        or "http/protobuf"
    )
    if protocol != "http/protobuf":
        raise TracingConfigError(
            f"OTLP protocol {protocol!r} is not available: the otel extra ships the "
            "http/protobuf exporter (unset OTEL_EXPORTER_OTLP_PROTOCOL or set it to "
            "http/protobuf, port 4318)"
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


# --------------------------------------------------------------------- logging


class TraceIdFilter(logging.Filter):
    """Adds `trace_id` and `span_id` (hex, as trace viewers show them) to every record
    logged inside a span, so JSON lines can be joined with their trace; a record
    outside a span gets neither (no `null` fields)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = trace.format_trace_id(context.trace_id)
            record.span_id = trace.format_span_id(context.span_id)
        return True


__all__ = [
    "DEFAULT_SERVICE_NAME",
    "UNTRACED_PATHS",
    "OperationSpan",
    "TraceIdFilter",
    "TracedBackend",
    "TracingConfigError",
    "exporter_description",
    "operation_spans",
    "operation_tracing",
    "provider_from_env",
    "server_span_middleware",
    "trace_backend",
    "untraced_backend",
]
