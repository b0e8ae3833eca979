"""gateway.observability.metrics: bounded labels on prometheus_client, a registry per app,
the Strawberry extension, the ASGI pieces and the backend proxy. Expositions are read
with prometheus_client's own parser."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path

import httpx
import prometheus_client
import pytest
import strawberry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway import create_app
from gateway.core import ErrorCode, SessionEvent, SessionHeader, SessionQuery, SessionQueryError
from gateway.core.backend import CorpusReads, DerivedReads, PersistenceBackend
from gateway.observability.metrics import (
    CONTENT_TYPE,
    DEFAULT_BUCKETS,
    GatewayMetrics,
    HttpMetricsMiddleware,
    MetricsEndpoint,
    backend_methods,
    coroutine_methods,
    instrument_backend,
    metrics_extension,
    unwrap_backend,
)
from gateway.persistence import SqlPersistence
from gateway.server.codes import GATEWAY_CODES
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import simple_log


def families(text: str) -> dict[str, prometheus_client.Metric]:
    """The metric families of an exposition by family name (a counter's without `_total`)."""
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(metrics: GatewayMetrics, name: str) -> list[Sample]:
    """Every sample named `name` in what `/metrics` would answer now."""
    text = metrics.render().decode()
    return [s for family in families(text).values() for s in family.samples if s.name == name]


def label_values(metrics: GatewayMetrics, name: str, *labels: str) -> set[tuple[str, ...]]:
    return {tuple(s.labels[label] for label in labels) for s in samples(metrics, name)}


# -- the exposition ------------------------------------------------------------------

GATEWAY_FAMILIES = {
    "graphql_operations": ("counter", {"operation_name", "operation_type"}),
    "graphql_operation_duration_seconds": ("histogram", {"operation_name", "operation_type"}),
    "graphql_errors": ("counter", {"code"}),
    "backend_calls": ("counter", {"method", "outcome"}),
    "backend_call_duration_seconds": ("histogram", {"method"}),
    "http_requests": ("counter", {"route", "status"}),
    "http_request_duration_seconds": ("histogram", {"route"}),
    "graphql_subscriptions_active": ("gauge", set()),
    "graphql_subscription_events": ("counter", set()),
    "graphql_subscription_lagged": ("counter", set()),
    "graphql_retried_observations": ("counter", set()),
}
"""The documented metrics (README, Endpoints): names, types and label names are a contract."""


def test_metric_names_types_and_label_names_are_the_documented_ones():
    metrics = GatewayMetrics()
    metrics.record_operation("Op", "query", 0.01, ["INTERNAL_ERROR"])
    metrics.record_backend_call("list", "ok", 0.01)
    metrics.record_http_request("/graphql", 200, 0.01)
    text = metrics.render().decode()
    found = families(text)
    for name, (kind, labels) in GATEWAY_FAMILIES.items():
        assert found[name].type == kind, name
        own = {s.name: set(s.labels) - {"le"} for s in found[name].samples}
        assert own and all(names == labels for names in own.values()), (name, own)
    # The names Prometheus stores are the exposed ones, `_total` included.
    for name in ("graphql_operations_total", "backend_calls_total", "http_requests_total"):
        assert f"# TYPE {name} counter\n" in text


def test_histograms_keep_the_latency_buckets():
    metrics = GatewayMetrics()
    metrics.record_operation("Op", "query", 0.01)
    metrics.record_backend_call("list", "ok", 0.01)
    metrics.record_http_request("/graphql", 200, 0.01)
    expected = ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5"]
    expected += ["1.0", "2.5", "5.0", "10.0", "+Inf"]
    assert [float(b) for b in expected[:-1]] == list(DEFAULT_BUCKETS)
    for name in (
        "graphql_operation_duration_seconds",
        "backend_call_duration_seconds",
        "http_request_duration_seconds",
    ):
        assert [s.labels["le"] for s in samples(metrics, name + "_bucket")] == expected, name


def test_process_gc_and_platform_series_are_exposed():
    found = families(GatewayMetrics().render().decode())
    for name in (
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "python_gc_objects_collected",
        "python_gc_collections",
        "python_info",
    ):
        assert name in found and found[name].samples, name
    assert found["process_resident_memory_bytes"].samples[0].value > 0


def test_no_created_series_are_exposed():
    metrics = GatewayMetrics()
    metrics.record_operation("Op", "query", 0.01, ["INTERNAL_ERROR"])
    metrics.record_backend_call("list", "ok", 0.01)
    metrics.record_http_request("/graphql", 200, 0.01)
    metrics.subscription_events.inc()
    text = metrics.render().decode()
    assert "_created" not in text
    # ... and only in this registry's exposition: the library's own switch is untouched.
    assert any(s.name.endswith("_created") for f in metrics.registry.collect() for s in f.samples)


async def test_each_app_has_a_registry_of_its_own():
    one, two = GatewayMetrics(), GatewayMetrics()
    first = create_app(SessionQuery(), metrics=one)
    create_app(SessionQuery(), metrics=two)
    assert one.registry is not two.registry
    assert one.registry is not prometheus_client.REGISTRY
    transport = httpx.ASGITransport(app=first)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for _ in range(3):
            await client.post("/graphql", json={"query": "query Twice { __typename }"})
    labels = {"operation_name": "Twice", "operation_type": "query"}
    assert one.value("graphql_operations_total", **labels) == 3
    assert two.value("graphql_operations_total", **labels) == 0
    assert prometheus_client.REGISTRY.get_sample_value("graphql_operations_total", labels) is None
    # Both registries have the process collectors (no "Duplicated timeseries").
    assert one.value("process_open_fds") > 0 and two.value("process_open_fds") > 0


def test_concurrent_recording_is_all_counted_and_renders_stay_valid():
    metrics = GatewayMetrics(max_operation_names=4)
    threads_n, per_thread = 8, 1000
    stop = threading.Event()
    renders: list[str] = []

    def work(i: int) -> None:
        for n in range(per_thread):
            metrics.record_operation(f"Op{i % 2}", "query", n % 2)
            metrics.record_backend_call("list", "ok", 0.001)

    def render_loop() -> None:
        while not stop.is_set():
            renders.append(metrics.render().decode())

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
    for text in renders[:: max(1, len(renders) // 20)]:
        assert families(text)  # parses
    total = threads_n * per_thread
    ops = sum(s.value for s in samples(metrics, "graphql_operations_total"))
    assert ops == total
    assert metrics.value("backend_calls_total", method="list", outcome="ok") == total
    labels = {"operation_name": "Op0", "operation_type": "query"}
    assert metrics.value("graphql_operation_duration_seconds_count", **labels) == total / 2
    assert metrics.value("graphql_operation_duration_seconds_sum", **labels) == total / 4


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
    names = label_values(metrics, "graphql_operations_total", "operation_name")
    assert len(names) == 101 and ("__other__",) in names
    assert label_values(metrics, "graphql_errors_total", "code") == {("OTHER",)}
    routes = label_values(metrics, "http_requests_total", "route", "status")
    assert {route for route, _ in routes} == {"other"} and len(routes) <= 500
    calls = label_values(metrics, "backend_calls_total", "method", "outcome")
    assert calls == {("other", "error")}


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


def test_error_codes_outside_the_one_list_fold_until_the_app_knows_them():
    metrics = GatewayMetrics()
    assert metrics.error_code_label("RATE_LIMITED") == "OTHER"
    metrics.know_error_codes(GATEWAY_CODES)
    for code in GATEWAY_CODES:
        metrics.count_error(code)
    counted = label_values(metrics, "graphql_errors_total", "code")
    assert counted == {(code,) for code in GATEWAY_CODES}


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


def schema_with(metrics: GatewayMetrics) -> strawberry.Schema:
    return strawberry.Schema(query=Query, extensions=[metrics_extension(metrics)])


def test_extension_has_no_resolve_hook_and_is_a_class():
    extension = metrics_extension(GatewayMetrics())
    assert inspect.isclass(extension)
    assert not extension._implements_resolve()
    assert "resolve" not in vars(extension)
    assert "on_operation" in vars(extension)


async def test_extension_counts_operations_and_durations_and_leaves_errors_to_the_pipeline():
    metrics = GatewayMetrics(extra_error_codes=GATEWAY_CODES)
    schema = schema_with(metrics)
    assert (await schema.execute("query Ok { ok }")).errors is None
    await schema.execute("query Ok { ok }")
    await schema.execute("{ missing bug }")
    await schema.execute("query Broken { nope }")
    await schema.execute("query Cut {")
    schema.execute_sync("query Sync { numbers }")
    ops = {
        (s.labels["operation_name"], s.labels["operation_type"]): s.value
        for s in samples(metrics, "graphql_operations_total")
    }
    assert ops == {
        ("Ok", "query"): 2,
        ("__anonymous__", "query"): 1,
        ("Broken", "query"): 1,
        ("__anonymous__", "unknown"): 1,  # no document
        ("Sync", "query"): 1,
    }
    ok = {"operation_name": "Ok", "operation_type": "query"}
    assert metrics.value("graphql_operation_duration_seconds_count", **ok) == 2
    # Errors are counted where responses are made (the operation pipeline), once.
    assert samples(metrics, "graphql_errors_total") == []


async def test_extension_times_an_operation_cut_short():
    metrics = GatewayMetrics(extra_error_codes=GATEWAY_CODES)
    schema = schema_with(metrics)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(schema.execute("query Slow { slow }"), 0.05)
    slow = {"operation_name": "Slow", "operation_type": "query"}
    count = metrics.value("graphql_operation_duration_seconds_count", **slow)
    total = metrics.value("graphql_operation_duration_seconds_sum", **slow)
    assert count == 1 and 0.04 < total < 2


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
    found = families(response.text)
    requests = {
        (s.labels["route"], s.labels["status"]): s.value for s in found["http_requests"].samples
    }
    assert requests == {
        ("/graphql", "200"): 2,
        ("other", "404"): 1,
        ("other", "500"): 1,  # /boom
        ("/metrics", "405"): 1,
        ("/metrics", "200"): 1,  # the HEAD
    }
    counts = {
        s.labels["route"]: s.value
        for s in found["http_request_duration_seconds"].samples
        if s.name.endswith("_count")
    }
    assert counts["/graphql"] == 2


async def test_the_exposition_is_rendered_off_the_event_loop():
    metrics = GatewayMetrics()
    threads: list[int] = []
    render = metrics.render

    def watched() -> bytes:
        threads.append(threading.get_ident())
        return render()

    metrics.render = watched  # type: ignore[method-assign]
    transport = httpx.ASGITransport(app=metrics_app(metrics))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        assert (await client.get("/metrics")).status_code == 200
    assert threads and threading.get_ident() not in threads


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
    calls = {
        (s.labels["method"], s.labels["outcome"]): s.value
        for s in samples(metrics, "backend_calls_total")
    }
    # Sync methods and plain attributes pass through, uncounted.
    assert backend.describe() == "minimal" and backend.url == "memory://"
    assert calls == {
        ("list", "ok"): 1,
        ("list", "error"): 1,
        ("load_header", "ok"): 2,
        ("ping", "cancelled"): 1,
        ("other", "ok"): 1,  # vacuum: in no backend protocol
    }
    assert metrics.value("backend_call_duration_seconds_count", method="list") == 2


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
    assert metrics.value("backend_calls_total", method="list", outcome="ok") == 1
    assert metrics.value("backend_calls_total", method="load", outcome="ok") == 1


async def test_the_core_works_through_the_proxy():
    metrics = GatewayMetrics()
    query = SessionQuery(persistence=instrument_backend(FastBackend(), metrics))
    records = await query.list_sessions()
    assert [r.header.id for r in records] == ["s1"]
    assert await query.list_events("s1") == []
    assert metrics.value("backend_calls_total", method="list", outcome="ok") >= 1
    calls = samples(metrics, "backend_calls_total")
    assert sum(s.value for s in calls if s.labels["outcome"] == "ok") >= 2


# -- every backend capability under its own name ---------------------------------------

PROTOCOLS = (PersistenceBackend, CorpusReads, DerivedReads)


def declared_methods(cls: type) -> set[str]:
    """Public coroutine functions `cls` or its bases declare (read from the class dicts)."""
    return {
        name
        for klass in cls.__mro__
        for name, value in vars(klass).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    }


def test_every_backend_protocol_method_is_labelled_by_its_name():
    metrics = GatewayMetrics()
    methods = set().union(*(declared_methods(p) for p in PROTOCOLS))
    methods |= declared_methods(SqlPersistence)
    assert {"list", "load", "count_sessions", "read_traces", "import_log", "delete"} <= methods
    assert {"count", "load_header", "load_window", "ping", "create", "append"} <= methods
    for name in sorted(methods):
        assert metrics.backend_method_label(name) == name
        metrics.record_backend_call(name, "ok", 0.001)
    labelled = {m for (m,) in label_values(metrics, "backend_calls_total", "method")}
    assert labelled == methods  # each its own label, none folded into `other`
    assert metrics.backend_method_label("vacuum") == "other"
    assert metrics.backend_method_label("_private") == "other"


def test_a_method_added_to_a_protocol_is_labelled_without_a_list_to_update():
    class Extended(CorpusReads):
        async def load_something_new(self) -> None: ...

    assert "load_something_new" in coroutine_methods(Extended)
    assert coroutine_methods(CorpusReads) <= coroutine_methods(Extended)
    assert coroutine_methods(CorpusReads) <= backend_methods()


async def test_writes_imports_and_counts_of_the_real_backend_are_counted_by_name(
    tmp_path: Path,
):
    metrics = GatewayMetrics()
    async with sql_backend(tmp_path / "m.db") as db:
        backend = instrument_backend(db, metrics)
        header = SessionHeader("s", 1)
        await backend.ensure_schema()
        assert await backend.import_log(header, simple_log(4)) == "created"
        assert await backend.count("s") == 4
        assert list(await backend.load_headers(["s"])) == ["s"]
        assert await backend.delete("s") is True
    methods = {m for (m, _) in label_values(metrics, "backend_calls_total", "method", "outcome")}
    assert {"ensure_schema", "import_log", "count", "load_headers", "delete"} <= methods
    assert "other" not in methods
