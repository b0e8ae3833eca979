"""gateway.observability.logging: JSON and plain log lines, the request id, the middleware."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import re
import sys

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.observability.logging import (
    JsonFormatter,
    PlainFormatter,
    RequestIdFilter,
    RequestIdMiddleware,
    add_logging_arguments,
    configure_logging,
    current_request_id,
    is_sane_request_id,
    log_settings_from_env,
    new_request_id,
    parse_level,
    request_id_scope,
)

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def make_record(msg="hello %s", args=("world",), exc_info=None, **extra) -> logging.LogRecord:
    record = logging.getLogger("gateway.test").makeRecord(
        "gateway.test", logging.WARNING, __file__, 10, msg, args, exc_info, extra=extra or None
    )
    record.created = 1_700_000_000.123456
    return record


@pytest.fixture
def restore_logging():
    """configure_logging changes global state: put the root and uvicorn loggers back."""
    names = ("", "uvicorn", "uvicorn.error", "uvicorn.access")
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
    ],
)
def test_sane_request_ids(value, sane):
    assert is_sane_request_id(value) is sane


# -- formatters ---------------------------------------------------------------------------


def test_json_formatter_writes_one_object_per_line():
    line = JsonFormatter().format(make_record())
    assert "\n" not in line
    assert json.loads(line) == {
        "ts": "2023-11-14T22:13:20.123Z",
        "level": "WARNING",
        "logger": "gateway.test",
        "msg": "hello world",
    }


def test_json_formatter_adds_request_id_exception_and_extras():
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        exc_info = sys.exc_info()
    with request_id_scope("req-1"):
        record = make_record("multi\nline", (), exc_info, session="s1", color_message="\x1b[1m")
        RequestIdFilter().filter(record)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out["request_id"] == "req-1"
    assert out["msg"] == "multi\nline"
    assert out["exc_info"].startswith("Traceback") and "ValueError: bad" in out["exc_info"]
    assert out["session"] == "s1"
    assert "color_message" not in out
    # Values JSON cannot hold are written as strings, never crash the handler.
    odd = json.loads(JsonFormatter().format(make_record(extra_obj=object(), when={1, 2})))
    assert odd["extra_obj"].startswith("<object") and isinstance(odd["when"], str)


def test_json_formatter_reads_the_contextvar_without_the_filter():
    with request_id_scope("ctx-id"):
        assert json.loads(JsonFormatter().format(make_record()))["request_id"] == "ctx-id"
    assert "request_id" not in json.loads(JsonFormatter().format(make_record()))


def test_plain_formatter():
    formatter = PlainFormatter()
    record = make_record()
    assert formatter.format(record) == (
        "2023-11-14T22:13:20.123Z WARNING gateway.test [-] hello world"
    )
    assert "request_id" not in record.__dict__  # the formatter leaves the record as it was
    with request_id_scope("r9"):
        assert "[r9] hello world" in formatter.format(make_record())


# -- configure_logging ----------------------------------------------------------------------


def test_configure_logging_json(restore_logging):
    stream = io.StringIO()
    handler = configure_logging(json=True, level="debug", stream=stream)
    configure_logging(json=True, level="DEBUG", stream=stream)  # replaces, never stacks
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "_session_gateway", False)]
    assert len(ours) == 1 and ours[0] is not handler
    assert root.level == logging.DEBUG
    with request_id_scope("abc"):
        logging.getLogger("uvicorn.access").info('127.0.0.1 - "GET / HTTP/1.1" 200')
    logging.getLogger("gateway.server").debug("details")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["logger"], x.get("request_id")) for x in lines] == [
        ("uvicorn.access", "abc"),
        ("gateway.server", None),
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


def make_app(seen: list[str | None]) -> Starlette:
    log = logging.getLogger("gateway.test.app")

    async def echo(request: Request) -> Response:
        seen.append(current_request_id())
        log.warning("handling")
        return JSONResponse(
            {"rid": current_request_id(), "state": request.state.request_id},
            headers={"X-Request-Id": "app-chosen"},  # replaced: one id per response
        )

    async def boom(request: Request) -> Response:
        raise RuntimeError("boom")

    return Starlette(
        routes=[Route("/echo", echo), Route("/boom", boom)],
        middleware=[Middleware(RequestIdMiddleware)],
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
        failed = await client.get("/boom", headers={"X-Request-Id": "failing-1"})
    rid = fresh.headers["x-request-id"]
    assert HEX32.match(rid)
    assert fresh.json() == {"rid": rid, "state": rid}
    assert fresh.headers.get_list("x-request-id") == [rid]
    assert kept.headers["x-request-id"] == "client-id.42" == kept.json()["rid"]
    assert HEX32.match(replaced.headers["x-request-id"])
    assert HEX32.match(too_long.headers["x-request-id"])
    # An exception escaping the app is answered by Starlette's outermost error
    # middleware, outside this one: a 500 without the header (the GraphQL endpoint
    # masks its errors itself, inside, so its 500s carry it).
    assert failed.status_code == 500
    assert seen[1] == "client-id.42"
    handled = [r for r in caplog.records if r.name == "gateway.test.app"]
    assert [r.request_id for r in handled] == [rid, "client-id.42", seen[2], seen[3]]
    assert current_request_id() is None


async def test_middleware_passes_other_scopes_through():
    calls: list[str] = []

    async def app(scope, receive, send):
        calls.append(scope["type"])
        assert current_request_id() is None

    await RequestIdMiddleware(app)({"type": "lifespan"}, None, None)
    assert calls == ["lifespan"]
