"""Logging for the gateway: plain text or JSON lines on stderr, each with the request id.

`configure_logging(json=..., level=...)` installs one stderr handler on the root logger
(replacing one it installed before, leaving others alone: pytest's, an embedding app's)
and routes uvicorn's loggers through it. `json=True` writes one JSON object per line:
`ts` (UTC, ISO 8601, milliseconds), `level`, `logger`, `msg`, then `request_id` during a
request (see `request_id`), `exc_info` (the formatted traceback, a string) when there is
one, and any `extra=` fields. Plain lines read `ts level logger [request-id] msg`.
`add_logging_arguments(parser)` adds `--log-format {plain,json}` and `--log-level`, with
defaults from SESSION_GATEWAY_LOG_FORMAT and SESSION_GATEWAY_LOG_LEVEL, so every command
configures logging the same way.

JSON comes from python-json-logger, not structlog: the gateway and all it runs on
(uvicorn, SQLAlchemy, Alembic) log through stdlib `logging`, and python-json-logger is a
stdlib Formatter, so one handler on the root formats every line; its field names are
mapped to ours with `rename_fields`. structlog would add a second logging API and still
need its stdlib bridge (ProcessorFormatter) for everyone else's lines.

Not `logging.config.dictConfig`: a non-incremental dictConfig closes every handler in the
process and empties the root's list, which breaks "leave other handlers alone"; the one
handler is a few lines by hand.

Cheap to import (no Starlette): `--help` loads this module for `add_logging_arguments`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Final, TextIO

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _LibraryJsonFormatter

LOG_FORMAT_ENV: Final = "SESSION_GATEWAY_LOG_FORMAT"
LOG_LEVEL_ENV: Final = "SESSION_GATEWAY_LOG_LEVEL"
LOG_FORMATS: Final = ("plain", "json")
DEFAULT_LOG_LEVEL: Final = "INFO"
HANDLER_NAME: Final = "session-gateway"
"""The name of the handler `configure_logging` installs (how a later call finds it)."""

UVICORN_LOGGERS: Final = ("uvicorn", "uvicorn.error", "uvicorn.access")


class _UtcMilliseconds(logging.Formatter):
    """`%(asctime)s` as `2025-01-01T12:00:00.123Z`: UTC, ISO 8601, milliseconds."""

    converter = staticmethod(time.gmtime)
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"


class JsonFormatter(_UtcMilliseconds, _LibraryJsonFormatter):
    """One JSON object per line (the fields are in the module docstring)."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={
                "asctime": "ts",
                "levelname": "level",
                "name": "logger",
                "message": "msg",
                "stack_info": "stack",
            },
            # uvicorn adds an ANSI-coloured duplicate of each message as an extra.
            reserved_attrs=[*RESERVED_ATTRS, "color_message"],
        )


class PlainFormatter(_UtcMilliseconds):
    """`2025-01-01T12:00:00.123Z INFO    gateway.server [request-id] message`."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)-7s %(name)s [%(request_id)s] %(message)s",
            defaults={"request_id": "-"},
        )


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
    from .request_id import RequestIdFilter  # imports Starlette: not at module level

    numeric = parse_level(level)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
        old.close()  # before the new one takes the name: close() unregisters the name
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if json else PlainFormatter())
    handler.addFilter(RequestIdFilter())
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
    "HANDLER_NAME",
    "LOG_FORMAT_ENV",
    "LOG_LEVEL_ENV",
    "JsonFormatter",
    "PlainFormatter",
    "add_logging_arguments",
    "configure_logging",
    "log_settings_from_env",
    "parse_level",
]
