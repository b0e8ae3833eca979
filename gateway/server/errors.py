"""GraphQL error formatting: contract codes kept, request errors readable, the rest masked.

* A `SessionQueryError` from the core keeps its message; `extensions.code` is
  its code (SPEC §5).
* A `GatewayError` (bad cursor, page size out of range, ...) keeps its message
  and code.
* Parse, validation and variable-coercion errors (errors about the client's
  document, which have no response path) stay as graphql-core wrote them, with
  a `GRAPHQL_PARSE_FAILED` / `GRAPHQL_VALIDATION_FAILED` / `BAD_USER_INPUT` code
  (`classify` says how each is told apart, without reading messages).
* Anything else is a bug: the client gets "Internal error (correlation id X)"
  with `extensions.code = "INTERNAL_ERROR"` and `extensions.correlationId = X`,
  and the full traceback is logged server-side with the same id. No stack trace
  or exception text reaches a client.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from graphql import GraphQLError

from gateway.core import SessionQueryError
from gateway.observability.request_id import current_request_id

from .codes import GatewayCode
from .media import negotiate

logger = logging.getLogger("gateway.server")

INTERNAL_ERROR = GatewayCode.INTERNAL_ERROR
BAD_USER_INPUT = GatewayCode.BAD_USER_INPUT
BAD_REQUEST = GatewayCode.BAD_REQUEST
PARSE_FAILED = GatewayCode.PARSE_FAILED
VALIDATION_FAILED = GatewayCode.VALIDATION_FAILED
OPERATION_TIMEOUT = GatewayCode.OPERATION_TIMEOUT
PAYLOAD_TOO_LARGE = GatewayCode.PAYLOAD_TOO_LARGE
METHOD_NOT_ALLOWED = GatewayCode.METHOD_NOT_ALLOWED
UNSUPPORTED_MEDIA_TYPE = GatewayCode.UNSUPPORTED_MEDIA_TYPE


class GatewayError(Exception):
    """A client mistake the GraphQL layer itself detects (not a core contract error)."""

    def __init__(self, code: str, message: str, **extensions: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extensions = extensions


def bad_input(message: str, argument: str | None = None) -> GatewayError:
    extra = {"argument": argument} if argument else {}
    return GatewayError(BAD_USER_INPUT, message, **extra)


def new_correlation_id() -> str:
    return secrets.token_hex(8)


def masked_error(exc: BaseException | None, where: str) -> dict[str, Any]:
    """Log `exc` with a fresh correlation id; return the client-safe error object."""
    cid = new_correlation_id()
    logger.error(
        "internal error %s (%s)",
        cid,
        where,
        exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None,
    )
    extensions: dict[str, Any] = {"code": INTERNAL_ERROR, "correlationId": cid}
    request_id = current_request_id()
    if request_id is not None:
        extensions["requestId"] = request_id
    return {"message": f"Internal error (correlation id {cid})", "extensions": extensions}


def simple_error(code: str, message: str) -> dict[str, Any]:
    return {"message": message, "extensions": {"code": code}}


async def send_error(
    scope: MutableMapping[str, Any],
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    status: int,
    error: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer an HTTP request from ASGI middleware with one GraphQL error (`simple_error`):
    in the media type the GraphQL view would choose for the request's Accept header,
    never cached, plus `headers` (WWW-Authenticate, Retry-After, ...). The host check,
    the body limit, auth and the rate limit refuse before the view runs; this keeps
    their answers the same shape as the view's."""
    body = json.dumps({"errors": [error]}, separators=(",", ":")).encode()
    accept = next((v for k, v in scope.get("headers", ()) if k == b"accept"), b"")
    media = negotiate(accept.decode("latin-1"))
    raw = [
        (b"content-type", f"{media}; charset=utf-8".encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _original(error: GraphQLError) -> BaseException | None:
    original = error.original_error
    # graphql-core may wrap a located error around another GraphQLError.
    while isinstance(original, GraphQLError) and original.original_error is not None:
        original = original.original_error
    return original


@dataclass(frozen=True, slots=True)
class Classified:
    """What one GraphQL error is to the client: its code, message and extensions, or
    `internal` (a bug: the client gets a masked error, the log the traceback)."""

    code: str
    message: str
    extensions: dict[str, Any]
    internal: BaseException | None = None


def classify(error: GraphQLError) -> Classified:
    """The one classifier of GraphQL errors (responses, metrics and tracing use it).

    No message is parsed: the pipeline tags the errors it makes with their code
    where it makes them (parse and validation failures, limits: see
    `gateway.server.preparation`), contract errors carry their code, and what is
    left is told apart by where graphql-core raised it. An error without a path
    that graphql-core located in the document (variable coercion) is the client's
    input; one with a path and no exception behind it is graphql-core's own
    check of a field's value; anything else with an exception behind it is a bug.
    """
    original = _original(error)
    if isinstance(original, SessionQueryError):
        extensions: dict[str, Any] = {"code": original.code.value}
        if original.correlation_id is not None:  # the log line that holds the backend's text
            extensions["correlationId"] = original.correlation_id
            request_id = current_request_id()
            if request_id is not None:
                extensions["requestId"] = request_id
        return Classified(original.code.value, original.message, extensions)
    if isinstance(original, GatewayError):
        code = str(original.code)
        return Classified(code, original.message, {"code": code, **original.extensions})
    tagged = (error.extensions or {}).get("code")
    located = error.path is None and bool(error.nodes)
    if isinstance(tagged, str) or original is None or located:
        default = BAD_USER_INPUT if error.path is None else VALIDATION_FAILED
        code = tagged if isinstance(tagged, str) else str(default)
        return Classified(code, error.message, {**(error.extensions or {}), "code": code})
    return Classified(str(INTERNAL_ERROR), "", {}, internal=original)


def error_code(error: GraphQLError) -> str:
    """The `extensions.code` `format_error` gives `error`, without its side effects (no
    log line, no correlation id): for tracing, which sees errors before they are sent."""
    return classify(error).code


def format_error(error: GraphQLError) -> dict[str, Any]:
    """The client-facing JSON of one GraphQL error (see the module docstring)."""
    found = classify(error)
    if found.internal is None:
        out: dict[str, Any] = {"message": found.message}
        if error.locations:
            out["locations"] = [loc.formatted for loc in error.locations]
        if error.path is not None:
            out["path"] = list(error.path)
        out["extensions"] = found.extensions
        return out
    where = f"path {'.'.join(map(str, error.path))}" if error.path else "operation"
    masked = masked_error(found.internal, where)
    if error.path is not None:
        masked["path"] = list(error.path)
    if error.locations:
        masked["locations"] = [loc.formatted for loc in error.locations]
    return masked


def tagged(error: GraphQLError, code: str) -> GraphQLError:
    """`error` carrying `code` as its `extensions.code` (where the pipeline makes it)."""
    error.extensions = {**(error.extensions or {}), "code": code}
    return error
