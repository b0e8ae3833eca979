"""OpenTelemetry tracing (issue 12): a SERVER span per request continuing the caller's W3C
`traceparent`, one span per GraphQL operation (named, typed, ERROR with the client's
error code on failure, none per field), a CLIENT span per backend call below it; no
tracing (and no OpenTelemetry import) without a tracer provider; `serve --otel` and the
standard OTEL_* environment, including the exporter really sending OTLP at shutdown.

Spans are collected by the SDK's in-memory exporter on a provider passed to the app
(never the global one), from real requests on real databases.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from websockets.asyncio.client import connect

from gateway import SessionQuery, SessionStore, create_app
from gateway.commands import serve as serve_command
from gateway.core import SessionHeader
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.tracing import TracedBackend, TraceIdFilter, trace_backend
from gateway.persistence import SqlPersistence
from gateway.server.config import GatewayConfig, Limits
from tests.support.server import running_server
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import client, simple_log
from tests.test_persistence_fixtures import (  # noqa: F401 - fixtures
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

ROOT = Path(__file__).resolve().parents[1]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
QUERY = {"operation_type": "query"}
LISTING = "query Listing { sessions { totalCount nodes { id } } }"
EVENTS = """query Page($first: Int) {
  events(sessionId: "p", first: $first) {
    totalCount nodes { seq type time surface data session { id } replacedBy { seq } }
  }
}"""


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def by_kind(finished: tuple[ReadableSpan, ...], kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in finished if s.kind is kind]


def only(finished: list[ReadableSpan]) -> ReadableSpan:
    assert len(finished) == 1, [s.name for s in finished]
    return finished[0]


def is_child(child: ReadableSpan, parent: ReadableSpan) -> bool:
    return (
        child.parent is not None
        and child.parent.span_id == parent.context.span_id
        and child.context.trace_id == parent.context.trace_id
    )


async def post(app: Any, query: str, variables: Any = None, **headers: str) -> httpx.Response:
    async with client(app) as c:
        return await c.post(
            "/graphql", json={"query": query, "variables": variables}, headers=headers
        )


# ------------------------------------------------------------------ span structure


async def test_operation_span_is_a_child_of_the_request_and_parent_of_each_backend_call(
    db: SqlPersistence, engine_name: str, spans: Any
) -> None:
    provider, exporter = spans
    await db.create(SessionHeader("p", 1), simple_log(6))
    app = create_app(SessionQuery(persistence=db), tracer_provider=provider)
    response = await post(app, LISTING)
    assert response.json()["data"]["sessions"]["totalCount"] == 1

    finished = exporter.get_finished_spans()
    server = only(by_kind(finished, SpanKind.SERVER))
    operation = only(by_kind(finished, SpanKind.INTERNAL))
    backend = by_kind(finished, SpanKind.CLIENT)
    assert server.name == "POST /graphql" and server.parent is None
    assert operation.name == "query Listing" and is_child(operation, server)
    assert operation.attributes is not None
    assert operation.attributes["graphql.operation.name"] == "Listing"
    assert operation.attributes["graphql.operation.type"] == "query"
    assert operation.status.status_code is StatusCode.UNSET
    assert backend, "no backend call was traced"
    for span in backend:
        assert is_child(span, operation), span.name
        assert span.attributes is not None
        method = span.attributes["db.operation.name"]
        assert span.name == f"persistence {method}"
        assert span.attributes["db.system.name"] == {"sqlite": "sqlite"}.get(
            engine_name, "postgresql"
        )
    methods = {(s.attributes or {}).get("db.operation.name") for s in backend}
    assert {"count_sessions", "headers_page"} <= methods


async def test_an_incoming_traceparent_is_the_request_span_s_parent(
    tmp_path: Path, spans: Any
) -> None:
    provider, exporter = spans
    async with sql_backend(tmp_path / "t.db") as db:
        await db.create(SessionHeader("p", 1), simple_log(6))
        app = create_app(SessionQuery(persistence=db), tracer_provider=provider)
        await post(app, LISTING, traceparent=TRACEPARENT)
    finished = exporter.get_finished_spans()
    assert len(finished) >= 3
    assert {f"{s.context.trace_id:032x}" for s in finished} == {TRACE_ID}
    server = only(by_kind(finished, SpanKind.SERVER))
    assert server.parent is not None and server.parent.is_remote
    assert f"{server.parent.span_id:016x}" == PARENT_ID


async def test_a_failed_operation_is_an_error_span_with_the_code_the_client_got(
    spans: Any,
) -> None:
    provider, exporter = spans
    store = SessionStore()
    store.create("a", created_at=1, seed=simple_log(3))
    app = create_app(SessionQuery(live=[store]), tracer_provider=provider)
    cases = {
        'query Missing { events(sessionId: "nope") { totalCount } }': "query Missing",
        "query Broken { sessions {": "graphql",  # not parsed: no operation type or name
        "query Wrong { sessions { nope } }": "query Wrong",
        'query Cursor { sessions(after: "zz") { totalCount } }': "query Cursor",
        "query Big { sessions(first: 100000) { totalCount } }": "query Big",
    }
    for document, name in cases.items():
        exporter.clear()
        body = (await post(app, document)).json()
        (error,) = body["errors"]
        operation = only(by_kind(exporter.get_finished_spans(), SpanKind.INTERNAL))
        assert operation.name == name
        assert operation.status.status_code is StatusCode.ERROR
        assert operation.attributes is not None
        assert operation.attributes["error.type"] == error["extensions"]["code"]
        assert operation.status.description == error["extensions"]["code"]


async def test_a_list_of_fifty_events_makes_as_many_spans_as_a_list_of_one(
    tmp_path: Path, spans: Any
) -> None:
    provider, exporter = spans
    async with sql_backend(tmp_path / "t.db") as db:
        await db.create(SessionHeader("p", 1), simple_log(60))
        app = create_app(SessionQuery(persistence=db), tracer_provider=provider)
        counts = {}
        for first in (1, 50):
            exporter.clear()
            body = (await post(app, EVENTS, {"first": first})).json()
            assert len(body["data"]["events"]["nodes"]) == first
            counts[first] = len(exporter.get_finished_spans())
    # 50 nodes x 8 fields would be 400 resolver spans with a per-field hook
    assert counts[50] == counts[1] and counts[1] <= 10, counts


async def test_probes_and_calls_outside_a_request_make_no_span(tmp_path: Path, spans: Any) -> None:
    provider, exporter = spans
    async with sql_backend(tmp_path / "t.db") as db:
        query = SessionQuery(persistence=db)
        app = create_app(query, tracer_provider=provider)
        async with client(app) as c:
            assert (await c.get("/healthz")).status_code == 200
            assert (await c.get("/readyz")).status_code == 200  # asks the backend
            assert (await c.get("/metrics")).status_code == 200
        assert await query.persistence.list() == []  # type: ignore[union-attr]
    assert exporter.get_finished_spans() == ()


async def test_create_app_does_not_change_the_caller_s_session_query(
    tmp_path: Path, spans: Any
) -> None:
    """Tracing reads the backend through a proxy for the app's requests only: the
    caller's query keeps its own backend (and another app on it stays untraced)."""
    provider, exporter = spans
    async with sql_backend(tmp_path / "t.db") as db:
        query = SessionQuery(persistence=db)
        traced_app = create_app(query, tracer_provider=provider)
        assert query.persistence is db
        async with client(create_app(query)) as c:
            await c.post("/graphql", json={"query": "{ sessions { totalCount } }"})
        assert exporter.get_finished_spans() == ()
        async with client(traced_app) as c:
            await c.post("/graphql", json={"query": "{ sessions { totalCount } }"})
        names = {span.name for span in exporter.get_finished_spans()}
        assert any(name.startswith("persistence ") for name in names), names
        assert query.persistence is db


async def test_trace_backend_is_idempotent_and_keeps_the_backend_s_capabilities(
    tmp_path: Path, spans: Any
) -> None:
    from gateway.core.backend import capabilities_of

    provider, _ = spans
    async with sql_backend(tmp_path / "t.db") as db:
        traced = trace_backend(db, provider)
        assert isinstance(traced, TracedBackend) and trace_backend(traced, provider) is traced
        plain, seen = capabilities_of(db), capabilities_of(traced)
        assert (plain.corpus is None, plain.derived is None) == (
            seen.corpus is None,
            seen.derived is None,
        )
        assert seen.corpus is not None
        query = SessionQuery(persistence=traced)
        create_app(query, tracer_provider=provider)  # an already traced backend stays
        assert query.persistence is traced


def test_trace_id_filter_puts_the_current_trace_on_log_records(spans: Any) -> None:
    import logging

    provider, _ = spans
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    assert TraceIdFilter().filter(record) and not hasattr(record, "trace_id")
    with provider.get_tracer("t").start_as_current_span("s") as span:
        TraceIdFilter().filter(record)
    assert record.trace_id == f"{span.get_span_context().trace_id:032x}"  # type: ignore[attr-defined]
    assert record.span_id == f"{span.get_span_context().span_id:016x}"  # type: ignore[attr-defined]


# ------------------------------------------------- operations the pipeline executes


async def test_an_admitted_query_runs_once_on_its_prepared_document_and_is_counted_and_traced(
    monkeypatch: pytest.MonkeyPatch, spans: Any
) -> None:
    """The pipeline hands graphql-core the document it prepared (never Strawberry's
    `Schema.execute`, which would parse or look it up again), once per request, and
    records the operation itself: counted and timed, inside its span."""
    from gateway.server import pipeline, preparation
    from gateway.server.schema import GatewaySchema

    provider, exporter = spans
    prepared: list[Any] = []
    executed: list[Any] = []
    parsed: list[str] = []
    real_prepare = preparation.DocumentPreparer.prepare
    real_execute = pipeline.execute_document
    real_parse = preparation.parse

    async def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        prepared.append(await real_prepare(self, *args, **kwargs))
        return prepared[-1]

    def execute(schema: Any, document: Any, *args: Any, **kwargs: Any) -> Any:
        executed.append(document)
        return real_execute(schema, document, *args, **kwargs)

    def parse(text: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(text)
        return real_parse(text, *args, **kwargs)

    async def no_strawberry(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a prepared query went through Strawberry's Schema.execute")

    monkeypatch.setattr(preparation.DocumentPreparer, "prepare", prepare)
    monkeypatch.setattr(pipeline, "execute_document", execute)
    monkeypatch.setattr(preparation, "parse", parse)
    monkeypatch.setattr(GatewaySchema, "execute", no_strawberry)
    store = SessionStore()
    store.create("a", created_at=1, seed=simple_log(3))
    metrics = GatewayMetrics()
    app = create_app(SessionQuery(live=[store]), metrics=metrics, tracer_provider=provider)
    missing = 'query Missing { events(sessionId: "nope") { totalCount } }'
    for document in (LISTING, LISTING, missing):
        await post(app, document)

    assert len(executed) == len(prepared) == 3
    assert all(d is p.document for d, p in zip(executed, prepared, strict=True))
    assert parsed == [LISTING, missing]  # the second listing reuses the first's parse
    listing = {"operation_name": "Listing", "operation_type": "query"}
    assert metrics.value("graphql_operations_total", **listing) == 2
    assert metrics.value("graphql_operation_duration_seconds_count", **listing) == 2
    assert metrics.value("graphql_operation_duration_seconds_sum", **listing) > 0
    assert metrics.value("graphql_operations_total", operation_name="Missing", **QUERY) == 1
    finished = exporter.get_finished_spans()
    servers = by_kind(finished, SpanKind.SERVER)
    operations = by_kind(finished, SpanKind.INTERNAL)
    assert [s.name for s in operations] == ["query Listing", "query Listing", "query Missing"]
    for operation, server in zip(operations, servers, strict=True):
        assert is_child(operation, server)
    ok, _, failed = operations
    assert ok.status.status_code is StatusCode.UNSET
    assert ok.attributes is not None and ok.attributes["graphql.operation.name"] == "Listing"
    assert ok.attributes["graphql.operation.type"] == "query"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None
    assert failed.attributes["error.type"] == "SESSION_QUERY_SESSION_NOT_FOUND"
    assert failed.attributes["gateway.error.codes"] == ("SESSION_QUERY_SESSION_NOT_FOUND",)


class _Hanging:
    """A failure double: a database whose listing hangs until cancelled."""

    async def list(self) -> list[SessionHeader]:
        await asyncio.sleep(30)
        return []

    async def load(self, session_id: str) -> Any:
        raise KeyError(session_id)


async def test_a_timed_out_query_is_counted_timed_and_a_cancelled_span(spans: Any) -> None:
    provider, exporter = spans
    metrics = GatewayMetrics()
    config = GatewayConfig(limits=Limits(operation_timeout=0.2))
    app = create_app(
        SessionQuery(persistence=_Hanging()), config, metrics=metrics, tracer_provider=provider
    )
    response = await post(app, "query Hangs { sessions { totalCount } }")
    assert response.status_code == 504
    hangs = {"operation_name": "Hangs", "operation_type": "query"}
    assert metrics.value("graphql_operations_total", **hangs) == 1
    assert 0.15 < metrics.value("graphql_operation_duration_seconds_sum", **hangs) < 5
    operation = only(by_kind(exporter.get_finished_spans(), SpanKind.INTERNAL))
    assert operation.name == "query Hangs"
    assert operation.status.status_code is StatusCode.ERROR
    assert operation.attributes is not None and operation.attributes["error.type"] == "cancelled"


async def test_an_executor_that_raises_is_one_internal_error_counted_and_traced(
    monkeypatch: pytest.MonkeyPatch, spans: Any
) -> None:
    """As Strawberry answered it: the operation never ran, its one error masked."""
    from gateway.server import pipeline

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("internal detail")

    monkeypatch.setattr(pipeline, "execute_document", broken)
    provider, exporter = spans
    metrics = GatewayMetrics()
    store = SessionStore()
    app = create_app(SessionQuery(live=[store]), metrics=metrics, tracer_provider=provider)
    response = await post(app, "query Q { sessions { totalCount } }")
    body = response.json()
    assert "data" not in body and "internal detail" not in response.text
    assert [e["extensions"]["code"] for e in body["errors"]] == ["INTERNAL_ERROR"]
    assert metrics.value("graphql_operations_total", operation_name="Q", **QUERY) == 1
    assert metrics.value("graphql_errors_total", code="INTERNAL_ERROR") == 1
    operation = only(by_kind(exporter.get_finished_spans(), SpanKind.INTERNAL))
    assert operation.name == "query Q"
    assert operation.attributes is not None
    assert operation.attributes["error.type"] == "INTERNAL_ERROR"


# ------------------------------------------------------------------ subscriptions

SUBSCRIPTION = 'subscription Tail { sessionEvents(sessionId: "s") { seq } }'


def test_a_subscription_gets_an_operation_span_over_sse_and_websocket(spans: Any) -> None:
    provider, exporter = spans
    store = SessionStore()
    session = store.create("s", created_at=1)
    for i in range(3):
        session.append("turn/start", {"i": i})

    async def end_when_subscribed() -> None:  # completes each subscription once it runs
        while True:
            await asyncio.sleep(0.01)
            if session.listener_count > 0:
                store.remove("s")
                return

    app = create_app(
        SessionQuery(live=[store]), tracer_provider=provider, background=[end_when_subscribed]
    )
    with running_server(app) as base:
        with httpx.stream(
            "POST",
            base + "/graphql",
            json={"query": SUBSCRIPTION},
            headers={"Accept": "text/event-stream", "traceparent": TRACEPARENT},
            timeout=30,
        ) as response:
            lines = list(response.iter_lines())
        assert "event: complete" in lines
        deadline = time.monotonic() + 10
        while len(by_kind(exporter.get_finished_spans(), SpanKind.SERVER)) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        finished = exporter.get_finished_spans()
        server = only(by_kind(finished, SpanKind.SERVER))
        operation = only(by_kind(finished, SpanKind.INTERNAL))
        assert operation.name == "subscription Tail" and is_child(operation, server)
        assert f"{operation.context.trace_id:032x}" == TRACE_ID

        exporter.clear()
        store.create("s", created_at=1).append("turn/start", {})

        async def over_websocket() -> list[str]:
            url = base.replace("http://", "ws://") + "/graphql"
            kinds = []
            async with connect(url, subprotocols=["graphql-transport-ws"]) as ws:
                await ws.send(json.dumps({"type": "connection_init"}))
                await ws.recv()
                payload = {"query": SUBSCRIPTION.replace("Tail", "WsTail")}
                await ws.send(json.dumps({"type": "subscribe", "id": "1", "payload": payload}))
                while "complete" not in kinds:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    kinds.append(message["type"])
                    if message["type"] == "next":
                        store.remove("s")  # the subscription completes when the session leaves
            return kinds

        assert asyncio.run(over_websocket())[-1] == "complete"
    finished = exporter.get_finished_spans()
    operation = only(by_kind(finished, SpanKind.INTERNAL))
    assert operation.name == "subscription WsTail"
    server = only(by_kind(finished, SpanKind.SERVER))  # the WebSocket connection's span
    assert is_child(operation, server)


# ------------------------------------------------------------------ off by default


def test_without_a_tracer_provider_the_gateway_runs_and_never_imports_opentelemetry(
    tmp_path: Path,
) -> None:
    """As when the extra is not installed: importing `opentelemetry` fails."""
    script = f"import asyncio, sys\nsys.path.insert(0, {str(ROOT)!r})\n" + BLOCK_OPENTELEMETRY
    script += textwrap.dedent(
        """
        from gateway import SessionQuery, SessionStore, create_app
        from gateway.commands import serve
        from tests.test_graphql_helpers import client

        async def main():
            store = SessionStore()
            store.create("a", created_at=1)
            async with client(create_app(SessionQuery(live=[store]))) as c:
                r = await c.post("/graphql", json={"query": "{ sessions { totalCount } }"})
            print(r.json()["data"]["sessions"]["totalCount"])
            print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

        asyncio.run(main())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["1", "[]"]


BLOCK_OPENTELEMETRY = (
    "import importlib.abc\n"
    "class _NoOtel(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] == 'opentelemetry':\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, _NoOtel())\n"
)
"""A meta-path finder making `opentelemetry` unimportable: the extra not installed."""


# ------------------------------------------------------------------ serve and the env


@pytest.mark.parametrize(
    ("flag", "env", "wanted"),
    [
        (False, {}, False),
        (True, {}, True),
        (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        (False, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        (False, {"OTEL_TRACES_EXPORTER": "console"}, True),
        (False, {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}, False),
        (False, {"OTEL_SERVICE_NAME": "gw"}, False),  # naming the service asks for nothing
        (True, {"OTEL_SDK_DISABLED": "true"}, False),
        (False, {"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}, False),
        (True, {"OTEL_SDK_DISABLED": "false"}, True),
    ],
)
def test_tracing_is_on_with_otel_or_an_exporter_in_the_env_and_sdk_disabled_wins(
    flag: bool, env: dict[str, str], wanted: bool
) -> None:
    assert serve_command.tracing_requested(flag, env) is wanted


def test_without_the_extra_otel_is_refused_and_the_env_alone_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gateway.observability.tracing", None)  # unimportable
    with pytest.raises(serve_command.TracingUnavailable) as refused:
        serve_command.tracer_provider(True, {})
    assert refused.value.fatal and "session-query-gateway[otel]" in str(refused.value)
    with pytest.raises(serve_command.TracingUnavailable) as warned:
        serve_command.tracer_provider(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not warned.value.fatal
    assert serve_command.tracer_provider(False, {}) == (None, None)


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "'grpc' is not available"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "'zipkin' is not available"),
    ],
)
def test_an_exporter_this_install_lacks_is_refused(env: dict[str, str], needle: str) -> None:
    with pytest.raises(serve_command.TracingUnavailable) as refused:
        serve_command.tracer_provider(True, env)
    assert refused.value.fatal and needle in str(refused.value)


def test_serve_otel_without_the_extra_is_one_clean_line_and_exit_2(tmp_path: Path) -> None:
    script = (
        "import sys, runpy\n"
        + BLOCK_OPENTELEMETRY
        + "sys.argv = ['session-gateway', 'serve', '--otel', '--port', '0']\n"
        + "runpy.run_module('gateway', run_name='__main__')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    env.pop("SESSION_GATEWAY_DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "pip install 'session-query-gateway[otel]'" in lines[0]
    assert "GraphiQL" not in result.stdout


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP sink: keeps the bodies POSTed to /v1/traces."""

    bodies: list[bytes] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/traces":
            type(self).bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


def test_serve_exports_its_spans_over_otlp_and_flushes_them_at_shutdown(tmp_path: Path) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    _Collector.bodies = []
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_port}",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",  # nothing leaves before shutdown flushes it
    }
    env.pop("SESSION_GATEWAY_DATABASE_URL", None)
    env.pop("OTEL_SDK_DISABLED", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port), "--log-format", "json"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                request = urllib.request.Request(
                    base + "/graphql",
                    data=json.dumps({"query": LISTING}).encode(),
                    headers={"Content-Type": "application/json", "traceparent": TRACEPARENT},
                )
                with urllib.request.urlopen(request, timeout=5) as r:
                    assert r.status == 200
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "serve did not start"
                time.sleep(0.1)
        assert _Collector.bodies == []  # still batched
    finally:
        proc.send_signal(signal.SIGTERM)  # what `docker stop` sends
        out, err = proc.communicate(timeout=30)
        collector.shutdown()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err, err
    assert f"Tracing:   OpenTelemetry, OTLP/HTTP to http://127.0.0.1:{collector.server_port}" in out
    exported = []
    for body in _Collector.bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            service = resource["service.name"]
            for scope_spans in resource_spans.scope_spans:
                exported += [(service, s.name, s.trace_id.hex()) for s in scope_spans.spans]
    assert ("session-query-gateway", "query Listing", TRACE_ID) in exported
    assert ("session-query-gateway", "POST /graphql", TRACE_ID) in exported
    assert any(name.startswith("persistence ") for _, name, _ in exported)
    # The JSON log lines written inside the traced request name its trace.
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    access = [r for r in records if r["logger"] == "uvicorn.access" and "/graphql" in r["msg"]]
    assert access and all(r.get("trace_id") == TRACE_ID for r in access), access
    assert all("trace_id" not in r for r in records if "request_id" not in r)
