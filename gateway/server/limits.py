"""Request limits: document shape and cost, request body size, operation time.

Defaults (all settable through `GatewayConfig.limits`, `gateway.server.config`):

| limit | default | when exceeded |
|---|---|---|
| query depth | 15 | GRAPHQL_VALIDATION_FAILED |
| aliases per operation (fragments expanded) | 30 | GRAPHQL_VALIDATION_FAILED |
| fields per operation (fragments expanded) | 2,000 | GRAPHQL_VALIDATION_FAILED |
| selections written in the document | 1,000 | GRAPHQL_VALIDATION_FAILED |
| fields sharing one response name in a selection set | 20 | GRAPHQL_VALIDATION_FAILED |
| estimated objects returned (`gateway.server.cost`) | 50,000 | QUERY_TOO_COSTLY |
| objects of unpaged lists, counted as they are read | the same 50,000 | QUERY_TOO_COSTLY |
| tokens per document | 5,000 | parse error (GRAPHQL_PARSE_FAILED) |
| request body | 1 MiB | HTTP 413 (PAYLOAD_TOO_LARGE) |
| answer bytes, counted as built (`.budget`) | 64 MiB | HTTP 422 (RESPONSE_TOO_LARGE) |
| operation time | 30 s | HTTP 504 (OPERATION_TIMEOUT); the operation stops working |

The document checks run in the operation pipeline, the same for every
transport (`gateway.server.preparation`): the shape and cost checks
(`gateway.server.document_limits`) run on the parsed document before
graphql-core validates it, in time linear in the document, so that neither
fragment fan-out nor the quadratic overlapping-fields rule can hold the event
loop, and large documents are prepared off the loop. Introspection fields do
not count towards depth, so GraphiQL's schema query is never refused; they
count towards fields and cost.
The lineage tree (`descendants { descendants { ... } }`) is recursive: a tree
deeper than the depth limit allows is read through
`lineage { graph { nodes edges } }`, which is flat.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.extensions import SchemaExtension

from .config import (
    DEFAULT_MAX_ALIASES,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_FIELDS,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_SAME_NAME,
    DEFAULT_MAX_SELECTIONS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_OPERATION_TIMEOUT,
    Limits,
)
from .errors import PAYLOAD_TOO_LARGE, send_error, simple_error
from .preparation import DocumentPreparer, Prepared


def prepared_documents(preparer: DocumentPreparer) -> type[SchemaExtension]:
    """The extension class (instantiated per operation by Strawberry) that hands
    Strawberry the document the pipeline prepared, so nothing is parsed or validated
    twice. An operation the pipeline did not prepare (the schema executed directly,
    as a test or an embedding host may) goes through the same checks here."""

    class PreparedDocuments(SchemaExtension):
        async def on_parse(self) -> AsyncIterator[None]:
            ctx = self.execution_context
            prepared = getattr(ctx.context, "prepared", None)
            if isinstance(prepared, Prepared) and prepared.text == ctx.query:
                ctx.graphql_document = prepared.document
                ctx.pre_execution_errors = []  # validated by the pipeline
            elif ctx.query:
                named: str | None = ctx._provided_operation_name
                document, errors = await preparer.check(
                    ctx.schema._schema, ctx.query, named, ctx.variables
                )
                if document is None:
                    raise errors[0]
                ctx.graphql_document = document
                ctx.pre_execution_errors = errors  # strawberry does not validate again
            yield

    return PreparedDocuments


__all__ = [
    "DEFAULT_MAX_ALIASES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FIELDS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_SAME_NAME",
    "DEFAULT_MAX_SELECTIONS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_OPERATION_TIMEOUT",
    "BodySizeLimit",
    "Limits",
    "prepared_documents",
]


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
                    await self._refuse(scope, send)
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
                await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        message = f"request body is larger than the limit of {self.max_bytes} bytes"
        # `Connection: close`: the rest of the body is never read.
        await send_error(
            scope, send, 413, simple_error(PAYLOAD_TOO_LARGE, message), {"Connection": "close"}
        )
