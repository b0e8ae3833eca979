"""gateway.observability.logging: JSON and plain log lines, the request id, the middleware."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import re
import socket
import sys

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway import SessionQuery, create_app
from gateway.observability.logging import (
    HANDLER_NAME,
    JsonFormatter,
    PlainFormatter,
    add_logging_arguments,
    configure_logging,
    log_settings_from_env,
    parse_level,
)
from gateway.observability.request_id import (
    RequestIdFilter,
    RequestIdMiddleware,
    current_request_id,
    is_sane_request_id,
    new_request_id,
    request_id_scope,
)
from tests.support.sqlite_backend import sql_backend

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def make_record(msg="hello %s", args=("world",), exc_info=None, **extra) -> logging.LogRecord:
    record = logging.getLogger("gateway.test").makeRecord(
        "gateway.test", logging.WARNING, __file__, 10, msg, args, exc_info, extra=extra or None
    )
    record.created = 1_700_000_000.123456
    record.msecs = 123.456  # what LogRecord derives from `created`
    return record


@pytest.fixture
def restore_logging():
    """configure_logging changes global state: put the root and uvicorn loggers back."""
    names = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "alembic")
    saved = {
        n: (
            list(logging.getLogger(n).handlers),
            logging.getLogger(n).level,
            logging.getLogger(n).propagate,
        )
        for n in names
    }
    yield
    for name, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if handler not in handlers:
                logger.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in logger.handlers:
                logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


# -- request ids ---------------------------------------------------------------------


def test_request_ids_are_fresh_and_scoped():
    assert HEX32.match(new_request_id()) and new_request_id() != new_request_id()
    assert current_request_id() is None
    with request_id_scope("outer") as rid:
        assert rid == current_request_id() == "outer"
        with request_id_scope() as inner:
            assert HEX32.match(inner) and current_request_id() == inner
        assert current_request_id() == "outer"
    assert current_request_id() is None


async def test_request_ids_follow_tasks_not_threads_of_control():
    async def handle(rid: str) -> str | None:
        with request_id_scope(rid):
            await asyncio.sleep(0.01)
            child = asyncio.create_task(asyncio.sleep(0, result=current_request_id()))
            return await child

    assert await asyncio.gather(handle("a"), handle("b")) == ["a", "b"]
    assert current_request_id() is None


@pytest.mark.parametrize(
    ("value", "sane"),
    [
        ("abc-123_x.y", True),
        ("A" * 128, True),
        ("A" * 129, False),
        ("", False),
        ("has space", False),
        ("semi;colon", False),
        ("new\nline", False),
        ("ünïcode", False),
        ("trailing-newline\n", False),
    ],
)
def test_sane_request_ids(value, sane):
    assert is_sane_request_id(value) is sane


# -- formatters ---------------------------------------------------------------------------


def test_json_line_is_one_object_with_the_documented_fields():
    line = JsonFormatter().format(make_record())
    assert "\n" not in line
    assert json.loads(line) == {
        "ts": "2023-11-14T22:13:20.123Z",
        "level": "WARNING",
        "logger": "gateway.test",
        "msg": "hello world",
    }


def test_json_line_carries_request_id_exception_string_and_extras():
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        exc_info = sys.exc_info()
    with request_id_scope("req-1"):
        record = make_record("multi\nline", (), exc_info, session="s1", color_message="\x1b[1m")
        assert RequestIdFilter().filter(record)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out["request_id"] == "req-1"
    assert out["msg"] == "multi\nline"
    assert isinstance(out["exc_info"], str)
    assert out["exc_info"].startswith("Traceback") and "ValueError: bad" in out["exc_info"]
    assert out["session"] == "s1"
    assert "color_message" not in out
    # Values JSON cannot hold are written as strings, never crash the handler.
    odd = json.loads(JsonFormatter().format(make_record(extra_obj=object(), when={1, 2})))
    assert odd["extra_obj"].startswith("<object") and isinstance(odd["when"], str)


def test_request_id_filter_stamps_only_inside_a_request():
    outside = make_record()
    RequestIdFilter().filter(outside)
    assert "request_id" not in json.loads(JsonFormatter().format(outside))
    with request_id_scope("ctx-id"):
        inside = make_record()
        RequestIdFilter().filter(inside)
    assert json.loads(JsonFormatter().format(inside))["request_id"] == "ctx-id"


def test_plain_formatter():
    formatter = PlainFormatter()
    record = make_record()
    assert formatter.format(record) == (
        "2023-11-14T22:13:20.123Z WARNING gateway.test [-] hello world"
    )
    assert "request_id" not in record.__dict__  # the formatter leaves the record as it was
    with request_id_scope("r9"):
        stamped = make_record()
        RequestIdFilter().filter(stamped)
    assert "[r9] hello world" in formatter.format(stamped)


# -- configure_logging ----------------------------------------------------------------------


def test_configure_logging_twice_leaves_one_handler_and_keeps_others(restore_logging):
    root = logging.getLogger()
    theirs = logging.StreamHandler(io.StringIO())
    root.addHandler(theirs)
    first_stream, stream = io.StringIO(), io.StringIO()
    first = configure_logging(json=True, level="debug", stream=first_stream)
    second = configure_logging(json=True, level="DEBUG", stream=stream)
    ours = [h for h in root.handlers if h.get_name() == HANDLER_NAME]
    assert ours == [second] and first not in root.handlers
    assert theirs in root.handlers
    assert root.level == logging.DEBUG
    logging.getLogger("gateway.server").debug("details")
    assert first_stream.getvalue() == ""
    (line,) = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert (line["logger"], line["level"], line["msg"]) == ("gateway.server", "DEBUG", "details")
    assert "request_id" not in line


def test_configure_logging_routes_uvicorn_loggers_through_its_handler(restore_logging):
    for name in ("uvicorn", "uvicorn.access"):  # what uvicorn's own log config leaves behind
        logging.getLogger(name).addHandler(logging.StreamHandler(io.StringIO()))
        logging.getLogger(name).propagate = False
    stream = io.StringIO()
    configure_logging(json=True, level="info", stream=stream)
    with request_id_scope("abc"):
        logging.getLogger("uvicorn.access").info('127.0.0.1 - "GET / HTTP/1.1" 200')
    logging.getLogger("uvicorn.error").info("Started server process")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["logger"], x.get("request_id")) for x in lines] == [
        ("uvicorn.access", "abc"),
        ("uvicorn.error", None),
    ]
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        assert logging.getLogger(name).propagate and not logging.getLogger(name).handlers


def test_configure_logging_plain_and_levels(restore_logging):
    stream = io.StringIO()
    configure_logging(json=False, level="warning", stream=stream)
    logging.getLogger("gateway.x").info("hidden")
    logging.getLogger("gateway.x").warning("shown")
    assert stream.getvalue().endswith("WARNING gateway.x [-] shown\n")
    assert "hidden" not in stream.getvalue()
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging(level="loud")
    assert parse_level("10") == 10 and parse_level(logging.ERROR) == logging.ERROR


def test_logging_arguments_and_environment():
    def parse(argv, env):
        parser = argparse.ArgumentParser()
        add_logging_arguments(parser, environ=env)
        return parser.parse_args(argv)

    args = parse([], {})
    assert (args.log_format, args.log_level) == ("plain", "INFO")
    args = parse([], {"SESSION_GATEWAY_LOG_FORMAT": "JSON", "SESSION_GATEWAY_LOG_LEVEL": "debug"})
    assert (args.log_format, args.log_level) == ("json", "DEBUG")
    args = parse(
        ["--log-format", "plain", "--log-level", "error"], {"SESSION_GATEWAY_LOG_FORMAT": "json"}
    )
    assert (args.log_format, args.log_level) == ("plain", "ERROR")
    for argv, env in (
        (["--log-format", "xml"], {}),
        (["--log-level", "loud"], {}),
        ([], {"SESSION_GATEWAY_LOG_FORMAT": "xml"}),
        ([], {"SESSION_GATEWAY_LOG_LEVEL": "loud"}),
    ):
        with pytest.raises(SystemExit):
            parse(argv, env)
    assert log_settings_from_env({}) == ("plain", "INFO")
    assert log_settings_from_env({"SESSION_GATEWAY_LOG_FORMAT": "json"}) == ("json", "INFO")
    with pytest.raises(ValueError):
        log_settings_from_env({"SESSION_GATEWAY_LOG_FORMAT": "yaml"})


# -- the middleware ---------------------------------------------------------------------------


class Refuse413:
    """An inner middleware that answers on its own, as the body limit, auth or rate limit do."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/refused":
            await Response("too large", status_code=413)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def make_app(seen: list[str | None]) -> Starlette:
    log = logging.getLogger("gateway.test.app")

    async def echo(request: Request) -> Response:
        seen.append(current_request_id())
        log.warning("handling")
        return JSONResponse({"rid": current_request_id()})

    async def boom(request: Request) -> Response:
        raise RuntimeError("boom")

    return Starlette(
        routes=[Route("/echo", echo), Route("/boom", boom)],
        middleware=[Middleware(RequestIdMiddleware), Middleware(Refuse413)],
    )


async def test_middleware_generates_reuses_and_returns_request_ids(caplog):
    seen: list[str | None] = []
    transport = httpx.ASGITransport(app=make_app(seen), raise_app_exceptions=False)
    caplog.handler.addFilter(RequestIdFilter())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        fresh = await client.get("/echo")
        kept = await client.get("/echo", headers={"X-Request-Id": "client-id.42"})
        replaced = await client.get("/echo", headers={"X-Request-Id": "bad id; drop"})
        too_long = await client.get("/echo", headers={"X-Request-Id": "a" * 129})
        refused = await client.get("/refused", headers={"X-Request-Id": "refused-1"})
        failed = await client.get("/boom", headers={"X-Request-Id": "failing-1"})
    rid = fresh.headers["x-request-id"]
    assert HEX32.match(rid)
    assert fresh.json() == {"rid": rid}
    assert fresh.headers.get_list("x-request-id") == [rid]
    assert kept.headers["x-request-id"] == "client-id.42" == kept.json()["rid"]
    for response in (replaced, too_long):
        assert HEX32.match(response.headers["x-request-id"])
        assert response.json()["rid"] == response.headers["x-request-id"]
    # A response an inner middleware sends by itself carries the header too.
    assert (refused.status_code, refused.headers["x-request-id"]) == (413, "refused-1")
    # An exception escaping the app is answered by Starlette's outermost error
    # middleware, outside this one: a 500 without the header (the GraphQL endpoint
    # masks its errors itself, inside, so its 500s carry it).
    assert failed.status_code == 500
    assert seen[1] == "client-id.42"
    handled = [r for r in caplog.records if r.name == "gateway.test.app"]
    assert [r.request_id for r in handled] == [rid, "client-id.42", seen[2], seen[3]]
    # A refused client id is named in one warning line, with the id used instead.
    refusals = [r.getMessage() for r in caplog.records if r.name == "asgi_correlation_id"]
    assert len(refusals) == 2 and seen[2] in refusals[0] and seen[3] in refusals[1]
    # The id belongs to the request: the caller's context does not keep it.
    assert current_request_id() is None


async def test_middleware_passes_other_scopes_through():
    calls: list[str] = []

    async def app(scope, receive, send):
        calls.append(scope["type"])
        assert current_request_id() is None

    await RequestIdMiddleware(app)({"type": "lifespan"}, None, None)
    assert calls == ["lifespan"]


# -- the served gateway ---------------------------------------------------------------------


async def serve_once(app, path: str, headers: dict[str, str]) -> httpx.Response:
    """One GET to `app` served by a real uvicorn as `serve` runs it (`log_config=None`)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        assert server.started, "uvicorn did not start"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            return await client.get(path, headers=headers)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


@pytest.fixture
async def unreadable_database(tmp_path):
    """A real SQLite backend on a file that is not a database: /readyz fails in the driver."""
    path = tmp_path / "not-a.db"
    path.write_bytes(b"this is not an SQLite file\n" * 200)
    async with sql_backend(path) as db:
        yield SessionQuery(persistence=db)


async def test_served_request_lines_carry_its_request_id_access_line_included(
    restore_logging, unreadable_database
):
    stream = io.StringIO()
    configure_logging(json=True, level="info", stream=stream)
    response = await serve_once(
        create_app(unreadable_database), "/readyz", {"X-Request-Id": "served-1"}
    )
    assert (response.status_code, response.headers["x-request-id"]) == (503, "served-1")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    by_logger = {x["logger"]: x for x in lines if x.get("request_id") == "served-1"}
    assert set(by_logger) == {"gateway.server", "uvicorn.access"}
    assert '"GET /readyz HTTP/1.1" 503' in by_logger["uvicorn.access"]["msg"]
    for line in lines:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])


async def test_readiness_failure_is_one_warning_line_and_its_traceback_only_at_debug(
    restore_logging, unreadable_database
):
    app = create_app(unreadable_database)
    for level in ("info", "debug"):
        stream = io.StringIO()
        configure_logging(json=True, level=level, stream=stream)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            assert (await client.get("/readyz")).status_code == 503
        lines = [json.loads(x) for x in stream.getvalue().splitlines()]
        ours = [x for x in lines if x["logger"] == "gateway.server"]
        (warning,) = [x for x in ours if x["level"] == "WARNING"]
        assert "readiness check failed" in warning["msg"]
        assert "DatabaseError" in warning["msg"] and "file is not a database" in warning["msg"]
        assert "\n" not in warning["msg"] and "exc_info" not in warning
        tracebacks = [x for x in ours if "exc_info" in x]
        if level == "info":
            assert tracebacks == []
        else:
            (debug,) = tracebacks
            assert debug["level"] == "DEBUG" and debug["request_id"] == warning["request_id"]
            assert debug["exc_info"].startswith("Traceback")
