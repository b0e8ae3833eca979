"""Request limits: document depth, aliases and tokens, request body size, operation time.

Defaults (all settable through `create_app`):

| limit | default | when exceeded |
|---|---|---|
| query depth | 15 | validation error (GRAPHQL_VALIDATION_FAILED) |
| aliases per document | 30 | validation error |
| tokens per document | 5,000 | parse error (GRAPHQL_PARSE_FAILED) |
| request body | 1 MiB | HTTP 413 (PAYLOAD_TOO_LARGE) |
| operation time | 30 s | HTTP 504 (OPERATION_TIMEOUT) |

Introspection fields do not count towards depth, so GraphiQL's schema query is
never refused. The lineage tree (`descendants { descendants { ... } }`) is
recursive: a tree deeper than the depth limit allows is read through
`lineage { graph { nodes edges } }`, which is flat.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from graphql import DocumentNode, GraphQLError
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.extensions import SchemaExtension
from strawberry.extensions.max_aliases import create_validator as create_alias_validator
from strawberry.extensions.query_depth_limiter import (
    create_validator as create_depth_validator,
)

from .errors import PAYLOAD_TOO_LARGE, simple_error

DEFAULT_MAX_DEPTH = 15
DEFAULT_MAX_ALIASES = 30
DEFAULT_MAX_TOKENS = 5_000
DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_OPERATION_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Limits:
    max_depth: int = DEFAULT_MAX_DEPTH
    max_aliases: int = DEFAULT_MAX_ALIASES
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    operation_timeout: float = DEFAULT_OPERATION_TIMEOUT

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_aliases", "max_tokens", "max_body_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.operation_timeout, (int, float)) or self.operation_timeout <= 0:
            raise ValueError(f"operation_timeout must be positive, got {self.operation_timeout!r}")


DOCUMENT_CACHE_SIZE = 256


def limit_extensions(limits: Limits) -> list[type[SchemaExtension]]:
    """The extension class (instantiated per request by strawberry) enforcing `limits`.

    It also remembers, per app, the parsed and validated form of the last
    DOCUMENT_CACHE_SIZE query texts: validation is most of the cost of a small
    query, and its outcome depends only on the text (the schema and the rules are
    fixed for the app). Only documents are remembered, never data.
    """
    depth_rule = create_depth_validator(limits.max_depth, None, None)
    alias_rule = create_alias_validator(limits.max_aliases)
    documents: OrderedDict[str, tuple[DocumentNode, list[GraphQLError]]] = OrderedDict()

    class RequestLimits(SchemaExtension):
        def on_operation(self) -> Iterator[None]:
            ctx = self.execution_context
            ctx.parse_options["max_tokens"] = limits.max_tokens
            ctx.validation_rules = (*ctx.validation_rules, depth_rule, alias_rule)
            yield

        def on_parse(self) -> Iterator[None]:
            ctx = self.execution_context
            known = documents.get(ctx.query) if ctx.query is not None else None
            if known is not None:
                documents.move_to_end(ctx.query)  # type: ignore[arg-type]
                ctx.graphql_document = known[0]
            yield

        def on_validate(self) -> Iterator[None]:
            ctx = self.execution_context
            query = ctx.query
            known = documents.get(query) if query is not None else None
            if known is not None and known[0] is ctx.graphql_document:
                ctx.pre_execution_errors = list(known[1])
            yield
            if known is None and query is not None and ctx.graphql_document is not None:
                documents[query] = (ctx.graphql_document, list(ctx.pre_execution_errors or []))
                if len(documents) > DOCUMENT_CACHE_SIZE:
                    documents.popitem(last=False)

    return [RequestLimits]


class BodyTooLarge(Exception):
    """Raised from the wrapped `receive` when a streamed body passes the limit."""


class BodySizeLimit:
    """ASGI middleware: refuse request bodies over `max_bytes` with 413.

    A declared Content-Length over the limit is refused before anything is read;
    a body streamed without one (chunked) is counted as it arrives.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._refuse(send)
                    return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(
            {
                "errors": [
                    simple_error(
                        PAYLOAD_TOO_LARGE,
                        f"request body is larger than the limit of {self.max_bytes} bytes",
                    )
                ]
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
