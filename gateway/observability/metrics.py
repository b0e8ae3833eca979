"""The gateway's Prometheus metrics, on `prometheus_client`, with every label bounded.

* `GatewayMetrics` owns one `CollectorRegistry` per app (never the library's
  global `REGISTRY`, so the many apps a test process builds never clash), with
  the process, GC and platform collectors registered on it (`process_*`,
  `python_gc_*`, `python_info`).
* `_created` series are left out per registry: `render()` exposes a view of the
  registry that drops them. The library's switch, `disable_created_metrics()`,
  is process-wide: it would change the exposition of an application that embeds
  the gateway (`create_app`) and has metrics of its own.
* Every label's cardinality is bounded: operation names must look like GraphQL
  names and at most `max_operation_names` distinct ones are tracked (others fold
  into `__other__`, unnamed operations are `__anonymous__`; a name idle for an
  hour yields its slot to a new one and its series are removed); error codes
  outside the one list (`ErrorCode` plus what `know_error_codes` adds, which
  `create_app` does with `gateway.server.codes`) fold into `OTHER`; backend
  methods are those the backend protocols and `SqlPersistence` define (derived,
  see `backend_methods`), others `other`; routes, statuses and outcomes come
  from fixed sets. A client can never grow the exposition without bound.
* `metrics_extension(metrics)` is a Strawberry `SchemaExtension` *class* that
  counts and times the operations Strawberry itself runs (subscriptions, and a
  direct `schema.execute`), from the `on_operation` hook only (no per-field
  `resolve` hook, which would slow large lists down by an order of magnitude).
  The queries the pipeline runs on graphql-core directly are recorded by the
  pipeline (`record_operation`).
* `MetricsEndpoint` is the `/metrics` ASGI app (the library's `make_asgi_app`
  renders on the event loop and answers every method; ours renders
  `generate_latest` in a worker thread, answers GET/HEAD with `no-store` and
  405 otherwise). `HttpMetricsMiddleware` (pure ASGI) and `instrument_backend`
  (a transparent proxy counting persistence calls) complete the wiring; the
  library has neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gateway.core.errors import ErrorCode

from .backend_proxy import BackendProxy, inner_of, proxy_once

if TYPE_CHECKING:
    from strawberry.extensions import SchemaExtension

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
"""The media type of `GatewayMetrics.render()` (the Prometheus text format)."""

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

BACKEND_OUTCOMES: Final = ("ok", "error", "cancelled")


def coroutine_methods(cls: type) -> frozenset[str]:
    """The public coroutine methods `cls` defines or inherits (a protocol's included)."""
    names = set()
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if inspect.iscoroutinefunction(value):
            names.add(name)
    return frozenset(names)


@functools.cache
def backend_methods() -> frozenset[str]:
    """Backend methods counted under their own name; any other method is `other`.

    Derived, never listed by hand: every method of the core's backend protocols
    (`PersistenceBackend`, `CorpusReads`, `DerivedReads`) and every public
    coroutine method of `SqlPersistence` (its writes, imports, `ping`, ...), so
    a method added to either is labelled by its name. `gateway.persistence`
    loads SQLAlchemy, hence the import on first use rather than at import time.
    """
    from gateway.core.backend import CorpusReads, DerivedReads, PersistenceBackend
    from gateway.persistence import SqlPersistence

    protocols = (PersistenceBackend, CorpusReads, DerivedReads, SqlPersistence)
    return frozenset().union(*(coroutine_methods(p) for p in protocols))


class _WithoutCreated(Collector):
    """A registry's metric families minus their `_created` samples (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            created = family.name + "_created"
            kept = [s for s in family.samples if s.name != created]
            if len(kept) != len(family.samples):
                family = copy.copy(family)  # a collector may hand out the same family twice
                family.samples = kept
            yield family


class GatewayMetrics:
    """The gateway's metrics in a registry of their own, every label bounded (see the
    module docstring).

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
        self.backend_methods = backend_methods()
        self.operation_name_idle = operation_name_idle
        self._clock = clock
        self._names: OrderedDict[str, float] = OrderedDict()  # name -> last seen, oldest first
        self._names_lock = threading.Lock()
        buckets = tuple(buckets)

        self.registry = r = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=r)
        GCCollector(registry=r)
        PlatformCollector(registry=r)
        self._exposed = _WithoutCreated(r)
        self.operations = Counter(
            "graphql_operations_total",
            "GraphQL operations handled, by operation name (bounded) and type.",
            ("operation_name", "operation_type"),
            registry=r,
        )
        self.operation_duration = Histogram(
            "graphql_operation_duration_seconds",
            "Wall time of GraphQL operations (parse, validate, execute), in seconds.",
            ("operation_name", "operation_type"),
            registry=r,
            buckets=buckets,
        )
        self.errors = Counter(
            "graphql_errors_total",
            "Errors in GraphQL responses, by extensions.code (unknown codes as OTHER).",
            ("code",),
            registry=r,
        )
        self.backend_calls = Counter(
            "backend_calls_total",
            "Calls into the persistence backend, by method and outcome (ok, error, cancelled).",
            ("method", "outcome"),
            registry=r,
        )
        self.backend_duration = Histogram(
            "backend_call_duration_seconds",
            "Wall time of persistence backend calls, in seconds.",
            ("method",),
            registry=r,
            buckets=buckets,
        )
        self.http_requests = Counter(
            "http_requests_total",
            "HTTP requests answered, by route (fixed set, others as 'other') and status code.",
            ("route", "status"),
            registry=r,
        )
        self.http_duration = Histogram(
            "http_request_duration_seconds",
            "Wall time of HTTP requests until the app returned, in seconds.",
            ("route",),
            registry=r,
            buckets=buckets,
        )
        self.retried_observations = Counter(
            "graphql_retried_observations_total",
            "Queries run a second time, in a strict snapshot, because a commit landed between "
            "two of their reads (PostgreSQL reads outside a transaction).",
            registry=r,
        )
        self._operation_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        """The labelled children per (operation name, type) label, as `_http_children` below
        (`labels()` twice per operation was most of `record_operation`). A name that
        yields its slot drops its children here when its series are removed, so a name
        seen again later gets series of its own, exposed again."""
        self._http_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        """The labelled children per (route, status) as answered: `labels()` takes a lock
        and checks its arguments, about 5 us a call, twice per request. Never removed
        (unlike operation names' series), so a child once made stays the live one."""
        self._backend_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        """The same per (backend method, outcome) label: twice per backend call. Never
        removed."""

        self.subscriptions_active = Gauge(
            "graphql_subscriptions_active",
            "Subscriptions streaming now (WebSocket and SSE).",
            registry=r,
        )
        self.subscription_events = Counter(
            "graphql_subscription_events_total",
            "Events sent to subscribers.",
            registry=r,
        )
        self.subscription_lagged = Counter(
            "graphql_subscription_lagged_total",
            "Subscribers disconnected with SUBSCRIPTION_LAGGED (fell behind their buffer).",
            registry=r,
        )
        self.subscription_executions = Counter(
            "graphql_subscription_executions_total",
            "Subscription results executed: once per event for all subscribers sharing one "
            "execution (same session, document, variables and caller), plus a late joiner's "
            "own replay.",
            registry=r,
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
            self._operation_children.pop((name, kind), None)
            for metric in (self.operations, self.operation_duration):
                with contextlib.suppress(KeyError):  # never recorded (older clients raise)
                    metric.remove(name, kind)

    @staticmethod
    def operation_type_label(operation_type: object) -> str:
        """`query` / `mutation` / `subscription` (enum or string), else `unknown`."""
        value = getattr(operation_type, "value", operation_type)
        text = value.lower() if isinstance(value, str) else ""
        return text if text in OPERATION_TYPES else UNKNOWN_TYPE

    def know_routes(self, paths: Collection[str]) -> None:
        """Count these exact paths under their own `route` label too (the app's routes)."""
        self.routes = self.routes | frozenset(paths)

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

    def backend_method_label(self, method: str) -> str:
        return method if method in self.backend_methods else OTHER

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
        key = (name, self.operation_type_label(operation_type))
        children = self._operation_children.get(key)
        if children is None:  # bounded: the names' slots times the four types
            children = (self.operations.labels(*key), self.operation_duration.labels(*key))
            self._operation_children[key] = children
        children[0].inc()
        children[1].observe(max(0.0, duration_seconds))
        for code in error_codes:
            self.count_error(code)

    def record_retried_observation(self) -> None:
        """A query whose first observation moved under it, run again (`pipeline.execute`)."""
        self.retried_observations.inc()

    def count_error(self, code: object) -> None:
        """One error in a response (also for errors raised outside GraphQL execution)."""
        self.errors.labels(self.error_code_label(code)).inc()

    def record_backend_call(self, method: str, outcome: str, duration_seconds: float) -> None:
        key = (
            self.backend_method_label(method),
            outcome if outcome in BACKEND_OUTCOMES else "error",
        )
        children = self._backend_children.get(key)
        if children is None:  # bounded: the methods' labels times the three outcomes
            children = (self.backend_calls.labels(*key), self.backend_duration.labels(key[0]))
            self._backend_children[key] = children
        children[0].inc()
        children[1].observe(max(0.0, duration_seconds))

    def record_http_request(self, path: str, status: int, duration_seconds: float) -> None:
        route = self.route_label(path)
        key = (route, self.status_label(status))
        children = self._http_children.get(key)
        if children is None:  # bounded: routes and status labels are fixed sets
            children = (
                self.http_requests.labels(*key),
                self.http_duration.labels(route),
            )
            self._http_children[key] = children
        children[0].inc()
        children[1].observe(max(0.0, duration_seconds))

    # -- reading ----------------------------------------------------------------

    def render(self) -> bytes:
        """The exposition in the Prometheus text format (`CONTENT_TYPE`), no `_created`."""
        return generate_latest(self._exposed)

    def value(self, name: str, **labels: str) -> float:
        """One sample's current value by its exposed name (0 when it has none yet)."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found


# --------------------------------------------------------------------------- ASGI


class MetricsEndpoint:
    """The `/metrics` ASGI app: GET/HEAD answer the exposition, other methods 405.

    A class instance (not a function) so Starlette's `Route("/metrics", endpoint)`
    treats it as a raw ASGI app. The exposition is rendered in a worker thread:
    the process collector reads `/proc` (file I/O), and with every label slot
    in use the library takes tens of milliseconds of CPU to render
    (`benchmarks/bench_metrics.py`); neither belongs on the event loop.
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
        body = await asyncio.to_thread(self.metrics.render)
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


def metrics_extension(metrics: GatewayMetrics) -> type[SchemaExtension]:
    """A Strawberry `SchemaExtension` class recording each operation Strawberry runs
    into `metrics` (the pipeline records the queries it runs itself).

    Register the returned *class* (`strawberry.Schema(..., extensions=[cls])`) so
    Strawberry makes one instance per operation. It implements `on_operation`
    only: no `resolve` hook, so fields resolve at full speed. An operation cut
    short (a timeout cancelling it) is still counted and timed. Errors are not
    counted here: the operation pipeline counts every error of every response it
    sends (`graphql_errors_total`), refusals before execution included, with the
    server's one error classifier.
    """
    from strawberry.extensions import SchemaExtension

    class GatewayMetricsExtension(SchemaExtension):
        def on_operation(self) -> Iterator[None]:
            start = time.perf_counter()
            try:
                yield
            finally:
                metrics.record_operation(
                    _safe(lambda: self.execution_context.operation_name),
                    _safe(lambda: self.execution_context.operation_type),
                    time.perf_counter() - start,
                )

    return GatewayMetricsExtension


def _safe(get: Callable[[], object]) -> object:
    try:
        return get()
    except Exception:  # no document (parse failure), unknown operation name, ...
        return None


# ----------------------------------------------------------------------- backend


class InstrumentedBackend(BackendProxy):
    """A persistence backend seen through `instrument_backend`: same methods, counted.

    Each public coroutine call counts `backend_calls_total{method, outcome}` and
    observes `backend_call_duration_seconds{method}` (see `BackendProxy`).
    """

    label = "instrumented"

    def __init__(self, inner: object, metrics: GatewayMetrics) -> None:
        super().__init__(inner, functools.partial(_counted, metrics=metrics))


def _counted(inner: object, name: str, *, metrics: GatewayMetrics) -> Callable[..., Any]:
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

    return call


B = TypeVar("B")


def instrument_backend(backend: B, metrics: GatewayMetrics) -> B:
    """`backend` behind a proxy that counts its async calls into `metrics` (idempotent).

    Typed as the backend it wraps, since it offers the same methods; it is not an
    instance of the backend's class (`unwrap_backend` gives the backend back).
    """
    return proxy_once(backend, InstrumentedBackend, metrics)


def unwrap_backend(backend: object) -> object:
    """The backend inside `instrument_backend`'s proxy (the object itself otherwise)."""
    return inner_of(backend, InstrumentedBackend)


__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "KNOWN_ERROR_CODES",
    "GatewayMetrics",
    "HttpMetricsMiddleware",
    "InstrumentedBackend",
    "MetricsEndpoint",
    "backend_methods",
    "coroutine_methods",
    "instrument_backend",
    "metrics_extension",
    "unwrap_backend",
]
