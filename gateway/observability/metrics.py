"""Prometheus metrics without a client library: a tiny registry and the gateway's metrics.

* `Counter` and `Histogram` have fixed label names, are thread-safe, and a
  `Registry` renders them in the Prometheus text exposition format 0.0.4
  (`CONTENT_TYPE`): `# HELP` / `# TYPE` lines, escaped label values, and for a
  histogram cumulative `_bucket{le="..."}` series ending in `le="+Inf"`, then
  `_sum` and `_count`.
* `GatewayMetrics` holds what the gateway exports and keeps every label's
  cardinality bounded: operation names must look like GraphQL names and at most
  `max_operation_names` distinct ones are tracked (others fold into
  `__other__`, unnamed operations are `__anonymous__`; a name idle for an hour
  yields its slot to a new one); error codes outside the
  known set fold into `OTHER`; routes, backend methods, statuses and outcomes
  come from fixed sets. A client can never grow the exposition without bound.
* `metrics_extension(metrics)` is a Strawberry `SchemaExtension` *class* that
  counts and times operations from the `on_operation` hook only (no per-field
  `resolve` hook, which would slow large lists down by an order of magnitude).
* `MetricsEndpoint` (the `/metrics` ASGI app), `HttpMetricsMiddleware` (pure
  ASGI) and `instrument_backend` (a transparent proxy counting persistence calls)
  complete the wiring.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
import math
import re
import threading
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from gateway.core.errors import ErrorCode

if TYPE_CHECKING:
    from strawberry.extensions import SchemaExtension

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of `Registry.render()` (Prometheus text exposition format 0.0.4)."""

DEFAULT_BUCKETS: Final[tuple[float, ...]] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Histogram upper bounds in seconds (the usual latency buckets); `+Inf` is implicit."""

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


# --------------------------------------------------------------------- formatting


def format_value(value: float) -> str:
    """A sample value as Prometheus writes it: `+Inf`, `-Inf`, `NaN` or a Python float repr."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def escape_label_value(value: str) -> str:
    """Escape backslash, double quote and line feed, as the text format requires."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """Escape backslash and line feed in a `# HELP` docstring."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels_text(names: Iterable[str], values: Iterable[str]) -> str:
    pairs = [f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True)]
    return "{" + ",".join(pairs) + "}" if pairs else ""


# ------------------------------------------------------------------------ metrics


class _Metric:
    """A named metric with fixed label names; series are keyed by label values."""

    kind: str = "untyped"

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = ()) -> None:
        if not _METRIC_NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        names = tuple(labelnames)
        for label in names:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for metric {name!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate label names for metric {name!r}: {names}")
        self.name = name
        self.documentation = documentation
        self.labelnames = names
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if len(labels) != len(self.labelnames) or set(labels) != set(self.labelnames):
            raise ValueError(
                f"metric {self.name!r} takes labels {list(self.labelnames)}, got {sorted(labels)}"
            )
        return tuple(str(labels[name]) for name in self.labelnames)

    def _header(self) -> list[str]:
        return [
            f"# HELP {self.name} {escape_help(self.documentation)}",
            f"# TYPE {self.name} {self.kind}",
        ]

    def render_lines(self) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError


class Counter(_Metric):
    """A monotonically increasing count per label combination."""

    kind = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = ()) -> None:
        super().__init__(name, documentation, labelnames)
        self._values: dict[tuple[str, ...], float] = {}
        if not self.labelnames:
            self._values[()] = 0.0

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        """Add `amount` (>= 0) to the series named by `labels` (every label name, exactly)."""
        if not amount >= 0:
            raise ValueError(f"counter {self.name!r} can only increase (got {amount!r})")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        """The current value of one series (0 if never incremented)."""
        key = self._key(labels)
        with self._lock:
            return self._values.get(key, 0.0)

    def remove(self, **labels: str) -> None:
        """Drop one series (a label value that is no longer tracked)."""
        key = self._key(labels)
        with self._lock:
            self._values.pop(key, None)

    def series(self) -> dict[tuple[str, ...], float]:
        """A snapshot of every series, keyed by label values in `labelnames` order."""
        with self._lock:
            return dict(self._values)

    def render_lines(self) -> list[str]:
        lines = self._header()
        for key, value in sorted(self.series().items()):
            lines.append(f"{self.name}{_labels_text(self.labelnames, key)} {format_value(value)}")
        return lines


class Gauge(Counter):
    """A value that goes up and down (e.g. subscriptions open now)."""

    kind = "gauge"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self.inc(-amount, **labels)


class Histogram(_Metric):
    """Observations counted into fixed cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        buckets: Iterable[float] = DEFAULT_BUCKETS,
    ) -> None:
        super().__init__(name, documentation, labelnames)
        if "le" in self.labelnames:
            raise ValueError(f"histogram {name!r} cannot have a label named 'le'")
        bounds = [float(b) for b in buckets]
        if bounds and math.isinf(bounds[-1]) and bounds[-1] > 0:
            bounds.pop()  # +Inf is always the last bucket
        if not bounds or any(math.isnan(b) or math.isinf(b) for b in bounds):
            raise ValueError(f"histogram {name!r} needs finite bucket bounds, got {bounds}")
        if any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ValueError(f"histogram {name!r} buckets must be strictly increasing: {bounds}")
        self.buckets: tuple[float, ...] = tuple(bounds)
        # key -> [per-bucket counts (non-cumulative, +Inf last)..., sum, count]
        self._series: dict[tuple[str, ...], list[float]] = {}
        if not self.labelnames:
            self._series[()] = self._empty()

    def _empty(self) -> list[float]:
        return [0.0] * (len(self.buckets) + 3)

    def observe(self, value: float, **labels: str) -> None:
        """Record one observation (not NaN) in the series named by `labels`."""
        if math.isnan(value):
            raise ValueError(f"histogram {self.name!r} cannot observe NaN")
        key = self._key(labels)
        index = bisect_left(self.buckets, value)  # first bound >= value (`le` is inclusive)
        with self._lock:
            state = self._series.get(key)
            if state is None:
                state = self._series[key] = self._empty()
            state[index] += 1
            state[-2] += value
            state[-1] += 1

    def remove(self, **labels: str) -> None:
        """Drop one series (a label value that is no longer tracked)."""
        key = self._key(labels)
        with self._lock:
            self._series.pop(key, None)

    def snapshot(self, **labels: str) -> tuple[list[float], float, float]:
        """(cumulative bucket counts including +Inf, sum, count) of one series."""
        key = self._key(labels)
        with self._lock:
            state = list(self._series.get(key) or self._empty())
        return _cumulative(state[:-2]), state[-2], state[-1]

    def render_lines(self) -> list[str]:
        lines = self._header()
        with self._lock:
            series = {key: list(state) for key, state in self._series.items()}
        bounds = [*(format_value(b) for b in self.buckets), "+Inf"]
        for key, state in sorted(series.items()):
            cumulative = _cumulative(state[:-2])
            for bound, count in zip(bounds, cumulative, strict=True):
                labels = _labels_text((*self.labelnames, "le"), (*key, bound))
                lines.append(f"{self.name}_bucket{labels} {format_value(count)}")
            labels = _labels_text(self.labelnames, key)
            lines.append(f"{self.name}_sum{labels} {format_value(state[-2])}")
            lines.append(f"{self.name}_count{labels} {format_value(state[-1])}")
        return lines


def _cumulative(counts: list[float]) -> list[float]:
    total = 0.0
    out: list[float] = []
    for count in counts:
        total += count
        out.append(total)
    return out


class Registry:
    """Metrics rendered together, in registration order."""

    def __init__(self) -> None:
        self._metrics: list[_Metric] = []
        self._lock = threading.Lock()

    def register(self, metric: _Metric) -> None:
        with self._lock:
            if any(m.name == metric.name for m in self._metrics):
                raise ValueError(f"metric {metric.name!r} is already registered")
            self._metrics.append(metric)

    def counter(self, name: str, documentation: str, labelnames: Iterable[str] = ()) -> Counter:
        metric = Counter(name, documentation, labelnames)
        self.register(metric)
        return metric

    def gauge(self, name: str, documentation: str, labelnames: Iterable[str] = ()) -> Gauge:
        metric = Gauge(name, documentation, labelnames)
        self.register(metric)
        return metric

    def histogram(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        buckets: Iterable[float] = DEFAULT_BUCKETS,
    ) -> Histogram:
        metric = Histogram(name, documentation, labelnames, buckets)
        self.register(metric)
        return metric

    def render(self) -> str:
        """Every metric in the text exposition format 0.0.4 (ends with a newline)."""
        with self._lock:
            metrics = list(self._metrics)
        lines: list[str] = []
        for metric in metrics:
            lines.extend(metric.render_lines())
        return "\n".join(lines) + "\n" if lines else ""


# ---------------------------------------------------------------- gateway metrics

OPERATION_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
ANONYMOUS: Final = "__anonymous__"
OTHER_NAME: Final = "__other__"
OTHER_CODE: Final = "OTHER"
OTHER: Final = "other"
DEFAULT_MAX_OPERATION_NAMES: Final = 100
DEFAULT_OPERATION_NAME_IDLE: Final = 3600.0
"""Seconds a tracked operation name must go unseen before a new name may take its slot."""

OPERATION_TYPES: Final = frozenset({"query", "mutation", "subscription"})
UNKNOWN_TYPE: Final = "unknown"

KNOWN_ERROR_CODES: Final = frozenset({c.value for c in ErrorCode})
"""The core's contract codes; the app adds the codes its own layer answers with
(`GatewayMetrics.know_error_codes`, called by `create_app` with the server's one list)."""

DEFAULT_ROUTES: Final = ("/", "/graphql", "/healthz", "/readyz", "/metrics")
"""Exact paths counted under their own `route` label."""

DEFAULT_ROUTE_PREFIXES: Final = ("/static",)
"""Path prefixes counted as one route each (`/static/...` -> `/static`)."""

BACKEND_METHODS: Final = frozenset(
    {
        "list",
        "load",
        "load_header",
        "load_headers",
        "load_window",
        "count",
        # CorpusReads
        "count_sessions",
        "headers_page",
        "load_children",
        "load_ancestry",
        "load_descendancy",
        # DerivedReads
        "load_sessions",
        "read_events",
        "read_events_at",
        "read_surfaces",
        "read_traces",
        "ping",
        "create",
        "append",
        "import_log",
        "delete",
        "close",
    }
)
"""Backend methods counted under their own name; any other method is `other`."""

BACKEND_OUTCOMES: Final = ("ok", "error", "cancelled")


class GatewayMetrics:
    """The gateway's metrics, one registry, every label bounded (see the module docstring).

    Thread-safe; one instance per app (each app instance exposes its own `/metrics`).
    """

    def __init__(
        self,
        *,
        max_operation_names: int = DEFAULT_MAX_OPERATION_NAMES,
        operation_name_idle: float = DEFAULT_OPERATION_NAME_IDLE,
        clock: Callable[[], float] = time.monotonic,
        extra_error_codes: Collection[str] = (),
        routes: Collection[str] = DEFAULT_ROUTES,
        route_prefixes: Collection[str] = DEFAULT_ROUTE_PREFIXES,
        buckets: Iterable[float] = DEFAULT_BUCKETS,
    ) -> None:
        if max_operation_names < 0:
            raise ValueError("max_operation_names must be >= 0")
        self.max_operation_names = max_operation_names
        self.error_codes: frozenset[str] = KNOWN_ERROR_CODES | frozenset(extra_error_codes)
        self.routes = frozenset(routes)
        self.route_prefixes = tuple(p.rstrip("/") for p in route_prefixes)
        self.operation_name_idle = operation_name_idle
        self._clock = clock
        self._names: OrderedDict[str, float] = OrderedDict()  # name -> last seen, oldest first
        self._names_lock = threading.Lock()
        buckets = tuple(buckets)

        self.registry = Registry()
        r = self.registry
        self.operations = r.counter(
            "graphql_operations_total",
            "GraphQL operations handled, by operation name (bounded) and type.",
            ("operation_name", "operation_type"),
        )
        self.operation_duration = r.histogram(
            "graphql_operation_duration_seconds",
            "Wall time of GraphQL operations (parse, validate, execute), in seconds.",
            ("operation_name", "operation_type"),
            buckets,
        )
        self.errors = r.counter(
            "graphql_errors_total",
            "Errors in GraphQL responses, by extensions.code (unknown codes as OTHER).",
            ("code",),
        )
        self.backend_calls = r.counter(
            "backend_calls_total",
            "Calls into the persistence backend, by method and outcome (ok, error, cancelled).",
            ("method", "outcome"),
        )
        self.backend_duration = r.histogram(
            "backend_call_duration_seconds",
            "Wall time of persistence backend calls, in seconds.",
            ("method",),
            buckets,
        )
        self.http_requests = r.counter(
            "http_requests_total",
            "HTTP requests answered, by route (fixed set, others as 'other') and status code.",
            ("route", "status"),
        )
        self.http_duration = r.histogram(
            "http_request_duration_seconds",
            "Wall time of HTTP requests until the app returned, in seconds.",
            ("route",),
            buckets,
        )

        self.subscriptions_active = r.gauge(
            "graphql_subscriptions_active",
            "Subscriptions streaming now (WebSocket and SSE).",
        )
        self.subscription_events = r.counter(
            "graphql_subscription_events_total",
            "Events sent to subscribers.",
        )
        self.subscription_lagged = r.counter(
            "graphql_subscription_lagged_total",
            "Subscribers disconnected with SUBSCRIPTION_LAGGED (fell behind their buffer).",
        )

    # -- label bounding ---------------------------------------------------------

    def operation_name_label(self, name: object) -> str:
        """`name` if it is a GraphQL-like name holding one of the N slots, else a fold value.

        Slots go to names as they come; when all are taken, the slot of the name
        seen longest ago is handed to a new name once that one has been idle for
        `operation_name_idle` seconds (its series are dropped), so names seen
        first (a flood, say) cannot keep later ones out for good.
        """
        if name is None or name == "":
            return ANONYMOUS
        if not isinstance(name, str) or not OPERATION_NAME.match(name):
            return OTHER_NAME
        now = self._clock()
        with self._names_lock:
            names = self._names
            if name in names:
                names[name] = now
                names.move_to_end(name)
                return name
            if len(names) >= self.max_operation_names:
                oldest = next(iter(names), None)
                if oldest is None or now - names[oldest] < self.operation_name_idle:
                    return OTHER_NAME
                del names[oldest]
                self._forget_name(oldest)
            names[name] = now
            return name

    def _forget_name(self, name: str) -> None:
        for kind in OPERATION_TYPES | {UNKNOWN_TYPE}:
            self.operations.remove(operation_name=name, operation_type=kind)
            self.operation_duration.remove(operation_name=name, operation_type=kind)

    @staticmethod
    def operation_type_label(operation_type: object) -> str:
        """`query` / `mutation` / `subscription` (enum or string), else `unknown`."""
        value = getattr(operation_type, "value", operation_type)
        text = value.lower() if isinstance(value, str) else ""
        return text if text in OPERATION_TYPES else UNKNOWN_TYPE

    def know_error_codes(self, codes: Collection[str]) -> None:
        """Count these codes under their own label too (the app's own codes)."""
        self.error_codes = self.error_codes | frozenset(codes)

    def error_code_label(self, code: object) -> str:
        value = getattr(code, "value", code)
        return value if isinstance(value, str) and value in self.error_codes else OTHER_CODE

    def route_label(self, path: str) -> str:
        if path in self.routes:
            return path
        trimmed = path.rstrip("/")
        if trimmed in self.routes and trimmed:
            return trimmed
        for prefix in self.route_prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                return prefix
        return OTHER

    @staticmethod
    def status_label(status: int) -> str:
        return str(status) if isinstance(status, int) and 100 <= status <= 599 else OTHER

    @staticmethod
    def backend_method_label(method: str) -> str:
        return method if method in BACKEND_METHODS else OTHER

    # -- recording --------------------------------------------------------------

    def record_operation(
        self,
        operation_name: object,
        operation_type: object,
        duration_seconds: float,
        error_codes: Iterable[object] = (),
    ) -> None:
        """One GraphQL operation: counted, timed, and each of its errors counted by code."""
        name = self.operation_name_label(operation_name)
        kind = self.operation_type_label(operation_type)
        self.operations.inc(operation_name=name, operation_type=kind)
        self.operation_duration.observe(
            max(0.0, duration_seconds), operation_name=name, operation_type=kind
        )
        for code in error_codes:
            self.count_error(code)

    def count_error(self, code: object) -> None:
        """One error in a response (also for errors raised outside GraphQL execution)."""
        self.errors.inc(code=self.error_code_label(code))

    def record_backend_call(self, method: str, outcome: str, duration_seconds: float) -> None:
        label = self.backend_method_label(method)
        outcome = outcome if outcome in BACKEND_OUTCOMES else "error"
        self.backend_calls.inc(method=label, outcome=outcome)
        self.backend_duration.observe(max(0.0, duration_seconds), method=label)

    def record_http_request(self, path: str, status: int, duration_seconds: float) -> None:
        route = self.route_label(path)
        self.http_requests.inc(route=route, status=self.status_label(status))
        self.http_duration.observe(max(0.0, duration_seconds), route=route)

    def render(self) -> str:
        return self.registry.render()


# --------------------------------------------------------------------------- ASGI


class MetricsEndpoint:
    """The `/metrics` ASGI app: GET/HEAD answer the exposition, other methods 405.

    A class instance (not a function) so Starlette's `Route("/metrics", endpoint)`
    treats it as a raw ASGI app.
    """

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # pragma: no cover - only mounted on HTTP routes
            return
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            body = b"method not allowed\n"
            headers = [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"allow", b"GET, HEAD"),
                (b"content-length", str(len(body)).encode()),
            ]
            await send({"type": "http.response.start", "status": 405, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        body = self.metrics.render().encode("utf-8")
        headers = [
            (b"content-type", CONTENT_TYPE.encode()),
            (b"cache-control", b"no-store"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})


class HttpMetricsMiddleware:
    """Pure ASGI middleware counting `http_requests_total{route,status}` and timing requests.

    A request whose app raised before starting a response counts as status 500.
    """

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.record_http_request(
                str(scope.get("path", "")), status, time.perf_counter() - start
            )


# ---------------------------------------------------------------------- GraphQL


def graphql_error_code(error: Any) -> str:
    """The `extensions.code` a GraphQL error will carry, best effort and side-effect free.

    The server's own formatter is authoritative; pass its pure code function to
    `metrics_extension` when it has one. This default looks at the original
    exception's `code`, then the error's `extensions`, then classifies errors
    without a path (document errors) like the server does.
    """
    original = getattr(error, "original_error", None)
    seen = 0
    while original is not None and seen < 16:
        code = getattr(original, "code", None)
        value = getattr(code, "value", code)
        if isinstance(value, str):
            return value
        original = getattr(original, "original_error", None)
        seen += 1
    extensions = getattr(error, "extensions", None)
    if isinstance(extensions, dict) and isinstance(extensions.get("code"), str):
        return str(extensions["code"])
    if getattr(error, "original_error", None) is None:
        message = str(getattr(error, "message", ""))
        if getattr(error, "path", None) is None:
            if message.startswith("Syntax Error") or message.startswith("Document contains"):
                return "GRAPHQL_PARSE_FAILED"
            if message.startswith("Variable '$"):
                return "BAD_USER_INPUT"
        return "GRAPHQL_VALIDATION_FAILED"
    return "INTERNAL_ERROR"


def metrics_extension(
    metrics: GatewayMetrics,
    *,
    error_code: Callable[[Any], str] = graphql_error_code,
    count_errors: bool = True,
) -> type[SchemaExtension]:
    """A Strawberry `SchemaExtension` class recording each operation into `metrics`.

    Register the returned *class* (`strawberry.Schema(..., extensions=[cls])`) so
    Strawberry makes one instance per operation. It implements `on_operation`
    only: no `resolve` hook, so fields resolve at full speed. An operation cut
    short (a timeout cancelling it) is still counted and timed.

    `count_errors=False` leaves `graphql_errors_total` to the HTTP layer (which
    sees the final response, including errors raised outside execution);
    otherwise each error of the result is counted under `error_code(error)`.
    """
    from strawberry.extensions import SchemaExtension

    class GatewayMetricsExtension(SchemaExtension):
        def on_operation(self) -> Iterator[None]:
            start = time.perf_counter()
            try:
                yield
            finally:
                codes = _error_codes(self, error_code) if count_errors else []
                metrics.record_operation(
                    _safe(lambda: self.execution_context.operation_name),
                    _safe(lambda: self.execution_context.operation_type),
                    time.perf_counter() - start,
                    codes,
                )

    return GatewayMetricsExtension


def _safe(get: Callable[[], object]) -> object:
    try:
        return get()
    except Exception:  # no document (parse failure), unknown operation name, ...
        return None


def _error_codes(extension: Any, error_code: Callable[[Any], str]) -> list[str]:
    context = extension.execution_context
    errors: list[Any] = []
    result = getattr(context, "result", None)
    if result is not None and getattr(result, "errors", None):
        errors = list(result.errors)
    elif getattr(context, "pre_execution_errors", None):
        errors = list(context.pre_execution_errors)
    codes: list[str] = []
    for error in errors:
        try:
            codes.append(error_code(error))
        except Exception:
            codes.append(OTHER_CODE)
    return codes


# ----------------------------------------------------------------------- backend

_INNER = "_instrumented_inner"
_METRICS = "_instrumented_metrics"


def _is_async_callable(value: object) -> bool:
    return inspect.iscoroutinefunction(value)


class InstrumentedBackend:
    """A persistence backend seen through `instrument_backend`: same methods, counted.

    Only attributes the inner backend has exist here (so
    `callable(getattr(proxy, "load_window", None))` answers as for the inner
    backend). Public coroutine methods are wrapped: each call counts
    `backend_calls_total{method, outcome}` and observes
    `backend_call_duration_seconds{method}`. Everything else passes through.
    """

    def __init__(self, inner: object, metrics: GatewayMetrics) -> None:
        object.__setattr__(self, _INNER, inner)
        object.__setattr__(self, _METRICS, metrics)
        # Wrappers as instance attributes, so static lookups (runtime-checkable
        # Protocols on Python 3.12+ use inspect.getattr_static) see them too.
        for name in dir(inner):
            if name.startswith("_"):
                continue
            try:
                static = inspect.getattr_static(inner, name)
            except AttributeError:  # pragma: no cover - dir() listed a dynamic name
                continue
            if isinstance(static, staticmethod | classmethod):
                static = static.__func__
            if _is_async_callable(static):
                object.__setattr__(self, name, _counted(inner, metrics, name))

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not set in __init__: dynamic or non-coroutine attributes.
        inner = object.__getattribute__(self, _INNER)
        value = getattr(inner, name)
        if not name.startswith("_") and _is_async_callable(value):
            return _counted(inner, object.__getattribute__(self, _METRICS), name)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, _INNER), name, value)

    def __repr__(self) -> str:
        return f"<instrumented {object.__getattribute__(self, _INNER)!r}>"


def _counted(inner: object, metrics: GatewayMetrics, name: str) -> Callable[..., Any]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        outcome = "error"
        try:
            result = await getattr(inner, name)(*args, **kwargs)
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        else:
            outcome = "ok"
            return result
        finally:
            metrics.record_backend_call(name, outcome, time.perf_counter() - start)

    with contextlib.suppress(AttributeError):  # a callable without __name__ etc.
        functools.update_wrapper(call, getattr(inner, name), updated=())
    return call


B = TypeVar("B")


def instrument_backend(backend: B, metrics: GatewayMetrics) -> B:
    """`backend` behind a proxy that counts its async calls into `metrics` (idempotent).

    Typed as the backend it wraps, since it offers the same methods; it is not an
    instance of the backend's class (`unwrap_backend` gives the backend back).
    """
    if isinstance(backend, InstrumentedBackend):
        return backend
    proxy: Any = InstrumentedBackend(backend, metrics)
    return cast(B, proxy)


def unwrap_backend(backend: object) -> object:
    """The backend inside `instrument_backend`'s proxy (the object itself otherwise)."""
    if isinstance(backend, InstrumentedBackend):
        inner: object = object.__getattribute__(backend, _INNER)
        return inner
    return backend


__all__ = [
    "BACKEND_METHODS",
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "KNOWN_ERROR_CODES",
    "Counter",
    "GatewayMetrics",
    "Gauge",
    "Histogram",
    "HttpMetricsMiddleware",
    "InstrumentedBackend",
    "MetricsEndpoint",
    "Registry",
    "graphql_error_code",
    "instrument_backend",
    "metrics_extension",
    "unwrap_backend",
]
