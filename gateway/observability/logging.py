"""Logging for the gateway: plain or JSON lines, and a request id that follows a request.

* `configure_logging(json=..., level=...)` installs one stderr handler on the
  root logger (replacing one it installed before, leaving others alone) and
  routes uvicorn's loggers through it. `json=True` writes one JSON object per
  line: `ts` (UTC, ISO 8601, milliseconds), `level`, `logger`, `msg`, then
  `request_id` when a request is in progress, `exc_info` (the formatted
  traceback, a string) when there is one, and any `extra=` fields.
* The request id lives in a contextvar: `current_request_id()` reads it,
  `new_request_id()` makes a fresh one, `request_id_scope()` sets one for a
  block of non-HTTP work.
* `RequestIdMiddleware` (pure ASGI) takes a sane `X-Request-Id` from the
  request (1-128 chars of `[A-Za-z0-9._-]`) or generates one, sets the
  contextvar for the whole request (so log lines and masked errors carry it) and
  returns it in the `X-Request-Id` response header.
* `add_logging_arguments(parser)` adds `--log-format {plain,json}` and
  `--log-level` with defaults from `SESSION_GATEWAY_LOG_FORMAT` and
  `SESSION_GATEWAY_LOG_LEVEL`, so every command configures logging the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import datetime as _dt
import json as _json
import logging
import os
import re
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from typing import Any, Final, TextIO

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOG_FORMAT_ENV: Final = "SESSION_GATEWAY_LOG_FORMAT"
LOG_LEVEL_ENV: Final = "SESSION_GATEWAY_LOG_LEVEL"
LOG_FORMATS: Final = ("plain", "json")
DEFAULT_LOG_LEVEL: Final = "INFO"

REQUEST_ID_HEADER: Final = "x-request-id"
_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gateway_request_id", default=None
)

UVICORN_LOGGERS: Final = ("uvicorn", "uvicorn.error", "uvicorn.access")


# ---------------------------------------------------------------------- request id


def new_request_id() -> str:
    """A fresh request id (32 lowercase hex digits)."""
    return uuid.uuid4().hex


def current_request_id() -> str | None:
    """The id of the request being handled in this context, or None outside one."""
    return _request_id.get()


def is_sane_request_id(value: str) -> bool:
    """Whether a client-supplied id may be reused: 1-128 chars of `[A-Za-z0-9._-]`."""
    return bool(_SANE_REQUEST_ID.match(value))


def set_request_id(value: str | None) -> contextvars.Token[str | None]:
    """Set the current request id; give the token to `reset_request_id` afterwards."""
    return _request_id.set(value)


def reset_request_id(token: contextvars.Token[str | None]) -> None:
    _request_id.reset(token)


@contextlib.contextmanager
def request_id_scope(value: str | None = None) -> Iterator[str]:
    """Run a block under request id `value` (a new one when None); yields the id."""
    rid = value or new_request_id()
    token = _request_id.set(rid)
    try:
        yield rid
    finally:
        _request_id.reset(token)


class RequestIdMiddleware:
    """Pure ASGI middleware giving every HTTP request an id (see the module docstring).

    The id is also put in `scope["state"]["request_id"]` (Starlette's
    `request.state.request_id`). Every response the wrapped app sends carries
    the header; an exception escaping the app is answered by whatever is outside
    (Starlette's ServerErrorMiddleware), without it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        rid = _incoming_request_id(scope) or new_request_id()
        state = scope.setdefault("state", {})
        if isinstance(state, dict):
            state["request_id"] = rid
        header = (REQUEST_ID_HEADER.encode("latin-1"), rid.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", ())
                    if name.lower() != header[0]
                ]
                headers.append(header)
                message = {**message, "headers": headers}
            await send(message)

        token = _request_id.set(rid)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _request_id.reset(token)


def _incoming_request_id(scope: Scope) -> str | None:
    wanted = REQUEST_ID_HEADER.encode("latin-1")
    for name, value in scope.get("headers", ()):
        if name.lower() == wanted:
            try:
                text = bytes(value).decode("ascii")
            except UnicodeDecodeError:
                return None
            return text if is_sane_request_id(text) else None
    return None


# ---------------------------------------------------------------------- formatters

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRS: Final = frozenset(
    {
        *logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None).__dict__,
        "message",
        "asctime",
        "request_id",
        "taskName",
        "color_message",  # uvicorn's ANSI-coloured duplicate of the message
    }
)
_RESERVED: Final = frozenset({"ts", "level", "logger", "msg", "request_id", "exc_info", "stack"})


class RequestIdFilter(logging.Filter):
    """Stamps `record.request_id` (the current request id, or None) on every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.__dict__["request_id"] = current_request_id()
        return True


def _timestamp(created: float) -> str:
    moment = _dt.datetime.fromtimestamp(created, tz=_dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring for the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or current_request_id()
        if rid:
            out["request_id"] = rid
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc_info"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        return _json.dumps(out, default=str, ensure_ascii=True, separators=(",", ":"))


_MISSING: Final = object()


class PlainFormatter(logging.Formatter):
    """`2025-01-01T12:00:00.123Z INFO    gateway.server [request-id] message`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s [%(request_id)s] %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _timestamp(record.created)

    def format(self, record: logging.LogRecord) -> str:
        rid = getattr(record, "request_id", None) or current_request_id()
        saved = record.__dict__.get("request_id", _MISSING)
        record.__dict__["request_id"] = rid or "-"
        try:
            return super().format(record)
        finally:
            if saved is _MISSING:
                del record.__dict__["request_id"]
            else:
                record.__dict__["request_id"] = saved


# ---------------------------------------------------------------------- configuration


def parse_level(level: str | int) -> int:
    """A logging level from a name (`debug`, `INFO`, ...) or a number; ValueError otherwise."""
    if isinstance(level, int):
        return level
    text = level.strip().upper()
    if text.isdigit():
        return int(text)
    value = logging.getLevelNamesMapping().get(text)
    if value is None:
        raise ValueError(
            f"unknown log level {level!r}; use one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
        )
    return value


def configure_logging(
    json: bool = False, level: str | int = DEFAULT_LOG_LEVEL, stream: TextIO | None = None
) -> logging.Handler:
    """Log to `stream` (stderr) in JSON lines or plain text at `level`; returns the handler.

    Idempotent: a handler installed by an earlier call is replaced; handlers
    installed by others (e.g. pytest's) are kept. uvicorn's loggers lose their
    own handlers and propagate to the root, so access and error logs share the
    format (run uvicorn with `log_config=None` so it does not reconfigure them).
    """
    numeric = parse_level(level)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json else PlainFormatter())
    handler.addFilter(RequestIdFilter())
    handler.set_name("session-gateway")
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_session_gateway", False):
            root.removeHandler(old)
            old.close()
    handler._session_gateway = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    # Alembic narrates every schema check at INFO; at INFO that drowns the
    # gateway's own start-up lines, so it speaks only from WARNING (or at DEBUG).
    logging.getLogger("alembic").setLevel(
        max(numeric, logging.WARNING) if numeric > logging.DEBUG else numeric
    )
    return handler


def log_settings_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(`plain`|`json`, level name) from SESSION_GATEWAY_LOG_FORMAT / _LOG_LEVEL.

    Raises ValueError for a value that is neither.
    """
    env = os.environ if environ is None else environ
    fmt = (env.get(LOG_FORMAT_ENV) or "plain").strip().lower()
    if fmt not in LOG_FORMATS:
        raise ValueError(f"{LOG_FORMAT_ENV}={fmt!r}: use 'plain' or 'json'")
    level = (env.get(LOG_LEVEL_ENV) or DEFAULT_LOG_LEVEL).strip().upper()
    parse_level(level)
    return fmt, level


def add_logging_arguments(
    parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None
) -> None:
    """Add `--log-format` and `--log-level` (defaults from the environment) to a command.

    After parsing: `configure_logging(json=args.log_format == "json", level=args.log_level)`.
    """
    env = os.environ if environ is None else environ
    fmt = (env.get(LOG_FORMAT_ENV) or "plain").strip().lower()
    level = (env.get(LOG_LEVEL_ENV) or DEFAULT_LOG_LEVEL).strip().upper()
    parser.add_argument(
        "--log-format",
        type=_format_argument,
        choices=LOG_FORMATS,
        default=fmt,
        help=f"log lines as plain text or one JSON object per line (env {LOG_FORMAT_ENV}; "
        "default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        type=_level_argument,
        default=level,
        metavar="LEVEL",
        help=f"DEBUG, INFO, WARNING, ERROR or CRITICAL (env {LOG_LEVEL_ENV}; default: %(default)s)",
    )


def _format_argument(value: str) -> str:
    text = value.strip().lower()
    if text not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"{value!r}: use 'plain' or 'json'")
    return text


def _level_argument(value: str) -> str:
    try:
        parse_level(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value.strip().upper()


__all__ = [
    "LOG_FORMAT_ENV",
    "LOG_LEVEL_ENV",
    "REQUEST_ID_HEADER",
    "JsonFormatter",
    "PlainFormatter",
    "RequestIdFilter",
    "RequestIdMiddleware",
    "add_logging_arguments",
    "configure_logging",
    "current_request_id",
    "is_sane_request_id",
    "log_settings_from_env",
    "new_request_id",
    "parse_level",
    "request_id_scope",
    "reset_request_id",
    "set_request_id",
]
