"""gateway.observability.metrics: the exposition format, bounded labels, the Strawberry
extension, the ASGI pieces and the backend proxy."""

from __future__ import annotations

import asyncio
import inspect
import re
import threading

import httpx
import pytest
import strawberry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway.core import ErrorCode, SessionEvent, SessionHeader, SessionQuery, SessionQueryError
from gateway.core.backend import PersistenceBackend
from gateway.observability.metrics import (
    CONTENT_TYPE,
    Counter,
    GatewayMetrics,
    Histogram,
    HttpMetricsMiddleware,
    MetricsEndpoint,
    Registry,
    escape_label_value,
    format_value,
    graphql_error_code,
    instrument_backend,
    metrics_extension,
    unwrap_backend,
)
from gateway.server.codes import GATEWAY_CODES

# One sample line of the text format 0.0.4: name, optional labels, value.
SAMPLE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\\\|\\"|\\n)*",?)*\})? '
    r"(-?[0-9.e+-]+|\+Inf|-Inf|NaN)$"
)


def assert_valid_exposition(text: str) -> None:
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        assert SAMPLE.match(line), line


# -- the registry --------------------------------------------------------------


def test_counter_exposition_is_exact():
    registry = Registry()
    requests = registry.counter("requests_total", "Requests handled.", ("route", "status"))
    requests.inc(route="/b", status="200")
    requests.inc(route="/a", status="500")
    requests.inc(2.5, route="/b", status="200")
    plain = registry.counter("starts_total", "Starts.")
    assert registry.render() == (
        "# HELP requests_total Requests handled.\n"
        "# TYPE requests_total counter\n"
        'requests_total{route="/a",status="500"} 1.0\n'
        'requests_total{route="/b",status="200"} 3.5\n'
        "# HELP starts_total Starts.\n"
        "# TYPE starts_total counter\n"
        "starts_total 0.0\n"
    )
    plain.inc()
    assert plain.value() == 1.0
    assert requests.value(route="/b", status="200") == 3.5
    assert requests.value(route="/c", status="200") == 0.0


def test_histogram_exposition_is_exact():
    registry = Registry()
    latency = registry.histogram("latency_seconds", "Latency.", ("op",), buckets=(0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):  # 0.1 lands in le="0.1": bounds are inclusive
        latency.observe(value, op="q")
    assert registry.render() == (
        "# HELP latency_seconds Latency.\n"
        "# TYPE latency_seconds histogram\n"
        'latency_seconds_bucket{op="q",le="0.1"} 2.0\n'
        'latency_seconds_bucket{op="q",le="1.0"} 3.0\n'
        'latency_seconds_bucket{op="q",le="+Inf"} 4.0\n'
        'latency_seconds_sum{op="q"} 3.65\n'
        'latency_seconds_count{op="q"} 4.0\n'
    )
    assert latency.snapshot(op="q") == ([2.0, 3.0, 4.0], 3.65, 4.0)
    assert latency.snapshot(op="never") == ([0.0, 0.0, 0.0], 0.0, 0.0)


def test_unlabelled_histogram_starts_at_zero_and_inf_bucket_is_implicit():
    registry = Registry()
    registry.histogram("h", "H.", buckets=(1.0, float("inf")))
    assert registry.render().splitlines()[2:] == [
        'h_bucket{le="1.0"} 0.0',
        'h_bucket{le="+Inf"} 0.0',
        "h_sum 0.0",
        "h_count 0.0",
    ]


def test_label_values_and_help_are_escaped():
    registry = Registry()
    counter = registry.counter("c_total", 'Help with \\ and\nnewline and "quotes".', ("v",))
    counter.inc(v='a\\b"c\nd')
    lines = registry.render().splitlines()
    assert lines[0] == '# HELP c_total Help with \\\\ and\\nnewline and "quotes".'
    assert lines[2] == 'c_total{v="a\\\\b\\"c\\nd"} 1.0'
    assert escape_label_value("plain") == "plain"
    assert_valid_exposition(registry.render())


def test_values_are_formatted_like_prometheus():
    assert format_value(1) == "1.0"
    assert format_value(0.25) == "0.25"
    assert format_value(1e-7) == "1e-07"
    assert format_value(float("inf")) == "+Inf"
    assert format_value(float("-inf")) == "-Inf"
    assert format_value(float("nan")) == "NaN"


@pytest.mark.parametrize(
    "make",
    [
        lambda: Counter("bad name", "x"),
        lambda: Counter("ok", "x", ("bad-label",)),
        lambda: Counter("ok", "x", ("__reserved",)),
        lambda: Counter("ok", "x", ("a", "a")),
        lambda: Histogram("h", "x", ("le",)),
        lambda: Histogram("h", "x", buckets=(1.0, 0.5)),
        lambda: Histogram("h", "x", buckets=(1.0, 1.0)),
        lambda: Histogram("h", "x", buckets=()),
        lambda: Histogram("h", "x", buckets=(float("nan"),)),
    ],
)
def test_invalid_definitions_are_refused(make):
    with pytest.raises(ValueError):
        make()


def test_misuse_is_refused():
    registry = Registry()
    counter = registry.counter("c_total", "C.", ("a",))
    with pytest.raises(ValueError):
        counter.inc(b="x")
    with pytest.raises(ValueError):
        counter.inc(a="x", b="y")
    with pytest.raises(ValueError):
        counter.inc()
    with pytest.raises(ValueError):
        counter.inc(-1, a="x")
    with pytest.raises(ValueError):
        registry.counter("c_total", "again")
    histogram = registry.histogram("h", "H.")
    with pytest.raises(ValueError):
        histogram.observe(float("nan"))


def test_concurrent_updates_are_all_counted():
    registry = Registry()
    counter = registry.counter("c_total", "C.", ("worker",))
    histogram = registry.histogram("h_seconds", "H.", ("worker",), buckets=(0.5,))
    threads_n, per_thread = 8, 5000
    stop = threading.Event()
    renders: list[str] = []

    def work(i: int) -> None:
        for n in range(per_thread):
            counter.inc(worker=str(i % 2))
            histogram.observe(n % 2, worker=str(i % 2))

    def render_loop() -> None:
        while not stop.is_set():
            renders.append(registry.render())

    renderer = threading.Thread(target=render_loop)
    renderer.start()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    renderer.join()
    assert renders
    for text in renders[:: max(1, len(renders) // 50)]:
        assert_valid_exposition(text)
    total = threads_n * per_thread
    assert counter.value(worker="0") + counter.value(worker="1") == total
    buckets, total_sum, count = histogram.snapshot(worker="0")
    assert count == total / 2 and buckets == [total / 4, total / 2] and total_sum == total / 4


# -- bounded labels ----------------------------------------------------------------


def test_operation_names_are_bounded():
    metrics = GatewayMetrics(max_operation_names=3)
    assert [metrics.operation_name_label(n) for n in ("A", "B", "C", "D", "A")] == [
        "A",
        "B",
        "C",
        "__other__",
        "A",
    ]
    assert metrics.operation_name_label(None) == "__anonymous__"
    assert metrics.operation_name_label("") == "__anonymous__"
    # Names that are not GraphQL-like (or absurdly long) fold without using a slot.
    fresh = GatewayMetrics(max_operation_names=1)
    for bad in ("1abc", "a-b", "a b", "x" * 65, 'a"b', "é", 42):
        assert fresh.operation_name_label(bad) == "__other__"
    assert fresh.operation_name_label("x" * 64) == "x" * 64


def test_a_flood_of_operation_names_cannot_grow_the_exposition():
    metrics = GatewayMetrics(max_operation_names=100)
    for n in range(5000):
        metrics.record_operation(f"Op{n}", "query", 0.001, ["MADE_UP_CODE_" + str(n)])
        metrics.record_http_request(f"/random/{n}", 200 + n % 400, 0.001)
        metrics.record_backend_call(f"method_{n}", "weird", 0.001)
    names = {key[0] for key in metrics.operations.series()}
    assert len(names) == 101 and "__other__" in names
    assert set(metrics.errors.series()) == {("OTHER",)}
    assert {key[0] for key in metrics.http_requests.series()} == {"other"}
    assert len(metrics.http_requests.series()) <= 500
    assert set(metrics.backend_calls.series()) == {("other", "error")}
    assert_valid_exposition(metrics.render())


def test_other_labels_come_from_fixed_sets():
    metrics = GatewayMetrics(extra_error_codes=[*GATEWAY_CODES, "QUERY_TOO_DEEP"])
    for code in ErrorCode:
        assert metrics.error_code_label(code) == code.value
        assert metrics.error_code_label(code.value) == code.value
    for code in ("GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED", "BAD_USER_INPUT"):
        assert metrics.error_code_label(code) == code
    assert metrics.error_code_label("INTERNAL_ERROR") == "INTERNAL_ERROR"
    assert metrics.error_code_label("QUERY_TOO_DEEP") == "QUERY_TOO_DEEP"
    assert metrics.error_code_label("SESSION_QUERY_MADE_UP") == "OTHER"
    assert metrics.error_code_label(None) == "OTHER"
    assert [metrics.operation_type_label(t) for t in ("QUERY", "mutation", "x", None)] == [
        "query",
        "mutation",
        "unknown",
        "unknown",
    ]
    assert [metrics.route_label(p) for p in ("/graphql", "/graphql/", "/metrics", "/")] == [
        "/graphql",
        "/graphql",
        "/metrics",
        "/",
    ]
    assert metrics.route_label("/static/graphiql/graphiql.min.js") == "/static"
    assert metrics.route_label("/staticky") == "other"
    assert metrics.route_label("/etc/passwd") == "other"
    assert [metrics.status_label(s) for s in (200, 404, 99, 600)] == [
        "200",
        "404",
        "other",
        "other",
    ]


def test_gateway_metrics_names_and_types():
    metrics = GatewayMetrics()
    text = metrics.render()
    for name, kind in [
        ("graphql_operations_total", "counter"),
        ("graphql_operation_duration_seconds", "histogram"),
        ("graphql_errors_total", "counter"),
        ("backend_calls_total", "counter"),
        ("backend_call_duration_seconds", "histogram"),
        ("http_requests_total", "counter"),
        ("http_request_duration_seconds", "histogram"),
    ]:
        assert f"# TYPE {name} {kind}\n" in text
    assert metrics.operations.labelnames == ("operation_name", "operation_type")
    assert metrics.operation_duration.labelnames == ("operation_name", "operation_type")
    assert metrics.errors.labelnames == ("code",)
    assert metrics.backend_calls.labelnames == ("method", "outcome")
    assert metrics.http_requests.labelnames == ("route", "status")


# -- the Strawberry extension ---------------------------------------------------------


@strawberry.type
class Query:
    @strawberry.field
    def ok(self) -> int:
        return 1

    @strawberry.field
    def numbers(self) -> list[int]:
        return list(range(1000))

    @strawberry.field
    def missing(self) -> int | None:
        raise SessionQueryError(ErrorCode.SESSION_NOT_FOUND, "no session 'x'")

    @strawberry.field
    def bug(self) -> int | None:
        raise RuntimeError("a bug")

    @strawberry.field
    async def slow(self) -> int:
        await asyncio.sleep(5)
        return 1


def schema_with(metrics: GatewayMetrics, **options) -> strawberry.Schema:
    return strawberry.Schema(query=Query, extensions=[metrics_extension(metrics, **options)])


def test_extension_has_no_resolve_hook_and_is_a_class():
    extension = metrics_extension(GatewayMetrics())
    assert inspect.isclass(extension)
    assert not extension._implements_resolve()
    assert "resolve" not in vars(extension)
    assert "on_operation" in vars(extension)


async def test_extension_counts_operations_durations_and_errors():
    metrics = GatewayMetrics(extra_error_codes=GATEWAY_CODES)
    schema = schema_with(metrics)
    assert (await schema.execute("query Ok { ok }")).errors is None
    await schema.execute("query Ok { ok }")
    await schema.execute("{ missing bug }")
    await schema.execute("query Broken { nope }")
    await schema.execute("query Cut {")
    schema.execute_sync("query Sync { numbers }")
    ops = metrics.operations
    assert ops.value(operation_name="Ok", operation_type="query") == 2
    assert ops.value(operation_name="__anonymous__", operation_type="query") == 1
    assert ops.value(operation_name="Broken", operation_type="query") == 1
    assert ops.value(operation_name="__anonymous__", operation_type="unknown") == 1  # no document
    assert ops.value(operation_name="Sync", operation_type="query") == 1
    assert metrics.operation_duration.snapshot(operation_name="Ok", operation_type="query")[2] == 2
    errors = {key[0]: value for key, value in metrics.errors.series().items()}
    assert errors == {
        "SESSION_QUERY_SESSION_NOT_FOUND": 1,
        "INTERNAL_ERROR": 1,
        "GRAPHQL_VALIDATION_FAILED": 1,
        "GRAPHQL_PARSE_FAILED": 1,
    }


async def test_extension_times_an_operation_cut_short():
    metrics = GatewayMetrics(extra_error_codes=GATEWAY_CODES)
    schema = schema_with(metrics)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(schema.execute("query Slow { slow }"), 0.05)
    _, total, count = metrics.operation_duration.snapshot(
        operation_name="Slow", operation_type="query"
    )
    assert count == 1 and 0.04 < total < 2


async def test_extension_can_leave_error_counting_to_the_http_layer():
    metrics = GatewayMetrics(extra_error_codes=GATEWAY_CODES)
    schema = schema_with(metrics, count_errors=False)
    await schema.execute("{ missing }")
    assert metrics.errors.series() == {}
    custom = GatewayMetrics(extra_error_codes=GATEWAY_CODES)
    await schema_with(custom, error_code=lambda error: "BAD_REQUEST").execute("{ missing }")
    assert custom.errors.series() == {("BAD_REQUEST",): 1.0}


def test_default_error_code_classification():
    from graphql import GraphQLError

    assert graphql_error_code(GraphQLError("Syntax Error: Unexpected <EOF>.")) == (
        "GRAPHQL_PARSE_FAILED"
    )
    assert graphql_error_code(GraphQLError("Variable '$x' got invalid value")) == ("BAD_USER_INPUT")
    assert graphql_error_code(GraphQLError("Cannot query field")) == "GRAPHQL_VALIDATION_FAILED"
    wrapped = GraphQLError("x", path=["a"], original_error=ValueError("boom"))
    assert graphql_error_code(wrapped) == "INTERNAL_ERROR"
    contract = SessionQueryError(ErrorCode.INVALID_WINDOW, "too wide")
    assert graphql_error_code(GraphQLError("x", path=["a"], original_error=contract)) == (
        "SESSION_QUERY_INVALID_WINDOW"
    )
    tagged = GraphQLError("x", extensions={"code": "BAD_USER_INPUT"})
    assert graphql_error_code(tagged) == "BAD_USER_INPUT"


# -- ASGI: /metrics and the HTTP middleware ----------------------------------------------


def metrics_app(metrics: GatewayMetrics) -> Starlette:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hi")

    async def boom(request: Request) -> PlainTextResponse:
        raise RuntimeError("boom")

    return Starlette(
        routes=[
            Route("/graphql", hello, methods=["GET", "POST"]),
            Route("/boom", boom),
            Route("/metrics", MetricsEndpoint(metrics)),
        ],
        middleware=[Middleware(HttpMetricsMiddleware, metrics=metrics)],
    )


async def test_metrics_endpoint_and_http_middleware():
    metrics = GatewayMetrics()
    transport = httpx.ASGITransport(app=metrics_app(metrics), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/graphql")).status_code == 200
        assert (await client.post("/graphql")).status_code == 200
        assert (await client.get("/nowhere/123")).status_code == 404
        assert (await client.get("/boom")).status_code == 500
        posted = await client.post("/metrics")
        assert posted.status_code == 405 and posted.headers["allow"] == "GET, HEAD"
        head = await client.head("/metrics")
        assert head.status_code == 200 and head.content == b""
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    assert response.headers["cache-control"] == "no-store"
    text = response.text
    assert_valid_exposition(text)
    assert 'http_requests_total{route="/graphql",status="200"} 2.0' in text
    assert 'http_requests_total{route="other",status="404"} 1.0' in text
    assert 'http_requests_total{route="other",status="500"} 1.0' in text  # /boom
    assert 'http_requests_total{route="/metrics",status="405"} 1.0' in text
    assert 'http_request_duration_seconds_count{route="/graphql"} 2.0' in text


# -- the backend proxy ----------------------------------------------------------------

HEADER = SessionHeader.from_json({"version": 0, "id": "s1", "createdAt": 1})


class MinimalBackend:
    """Only what SPEC §6 requires, plus a plain attribute and a sync method."""

    url = "memory://"

    def __init__(self) -> None:
        self.fail = False

    async def list(self) -> list[SessionHeader]:
        if self.fail:
            raise OSError("database down")
        return [HEADER]

    async def load(self, session_id: str) -> tuple[SessionHeader, list[SessionEvent]]:
        return HEADER, []

    def describe(self) -> str:
        return "minimal"


class FastBackend(MinimalBackend):
    async def load_header(self, session_id: str) -> SessionHeader | None:
        return HEADER if session_id == "s1" else None

    async def load_window(self, session_id: str, start: int, end: int):
        return HEADER, []

    async def ping(self) -> None:
        await asyncio.sleep(10)

    async def vacuum(self) -> None:
        return None


class DynamicBackend:
    """Methods that exist only through __getattr__ (like tests/backends.Counting)."""

    def __getattr__(self, name: str):
        if name in ("list", "load"):

            async def method(*args):
                return [HEADER] if name == "list" else (HEADER, [])

            return method
        raise AttributeError(name)


def has_method(backend: object, name: str) -> bool:
    return callable(getattr(backend, name, None))


OPTIONAL = ("load_header", "load_headers", "load_window", "load_windows", "load_fold_log", "ping")


async def test_proxy_counts_calls_by_method_and_outcome():
    metrics = GatewayMetrics()
    inner = FastBackend()
    backend = instrument_backend(inner, metrics)
    assert await backend.list() == [HEADER]
    assert await backend.load_header("s1") == HEADER
    assert await backend.load_header("nope") is None
    inner.fail = True
    with pytest.raises(OSError, match="database down"):
        await backend.list()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(backend.ping(), 0.01)
    await backend.vacuum()
    calls = metrics.backend_calls
    assert calls.value(method="list", outcome="ok") == 1
    assert calls.value(method="list", outcome="error") == 1
    assert calls.value(method="load_header", outcome="ok") == 2
    assert calls.value(method="ping", outcome="cancelled") == 1
    assert calls.value(method="other", outcome="ok") == 1  # vacuum: not a known method name
    assert metrics.backend_duration.snapshot(method="list")[2] == 2
    # Sync methods and plain attributes pass through, uncounted.
    assert backend.describe() == "minimal" and backend.url == "memory://"
    assert len(metrics.backend_calls.series()) == 5


def test_proxy_exposes_exactly_the_inner_backends_methods():
    for inner in (MinimalBackend(), FastBackend(), DynamicBackend()):
        backend = instrument_backend(inner, GatewayMetrics())
        for name in ("list", "load", *OPTIONAL):
            assert has_method(backend, name) == has_method(inner, name), (inner, name)
            assert hasattr(backend, name) == hasattr(inner, name), (inner, name)
        assert isinstance(backend, PersistenceBackend)
        assert unwrap_backend(backend) is inner
    fast = instrument_backend(FastBackend(), GatewayMetrics())
    # Visible to static lookup too (runtime-checkable Protocols use it on Python 3.12+).
    assert inspect.getattr_static(fast, "load_window") is not None
    assert inspect.iscoroutinefunction(fast.load_window)
    with pytest.raises(AttributeError):
        _ = instrument_backend(MinimalBackend(), GatewayMetrics()).load_window
    metrics = GatewayMetrics()
    once = instrument_backend(FastBackend(), metrics)
    assert instrument_backend(once, metrics) is once
    assert unwrap_backend("not a proxy") == "not a proxy"
    assert "instrumented" in repr(once)


async def test_dynamic_methods_are_counted_too():
    metrics = GatewayMetrics()
    backend = instrument_backend(DynamicBackend(), metrics)
    await backend.list()
    await backend.load("s1")
    assert metrics.backend_calls.value(method="list", outcome="ok") == 1
    assert metrics.backend_calls.value(method="load", outcome="ok") == 1


async def test_the_core_works_through_the_proxy():
    metrics = GatewayMetrics()
    query = SessionQuery(persistence=instrument_backend(FastBackend(), metrics))
    records = await query.list_sessions()
    assert [r.header.id for r in records] == ["s1"]
    assert await query.list_events("s1") == []
    assert metrics.backend_calls.value(method="list", outcome="ok") >= 1
    assert sum(v for (m, o), v in metrics.backend_calls.series().items() if o == "ok") >= 2
