"""Request limits: document shape and cost, request body size, operation time.

Defaults (all settable through `create_app`):

| limit | default | when exceeded |
|---|---|---|
| query depth | 15 | GRAPHQL_VALIDATION_FAILED |
| aliases per operation (fragments expanded) | 30 | GRAPHQL_VALIDATION_FAILED |
| fields per operation (fragments expanded) | 2,000 | GRAPHQL_VALIDATION_FAILED |
| selections written in the document | 1,000 | GRAPHQL_VALIDATION_FAILED |
| fields sharing one response name in a selection set | 20 | GRAPHQL_VALIDATION_FAILED |
| estimated objects returned (`gateway.server.cost`) | 50,000 | QUERY_TOO_COSTLY |
| tokens per document | 5,000 | parse error (GRAPHQL_PARSE_FAILED) |
| request body | 1 MiB | HTTP 413 (PAYLOAD_TOO_LARGE) |
| operation time | 30 s | HTTP 504 (OPERATION_TIMEOUT); the operation stops working |

The shape and cost checks (`gateway.server.document_limits`) run on the parsed
document before graphql-core validates it, in time linear in the document,
so that neither fragment fan-out nor the quadratic overlapping-fields rule can
hold the event loop. Introspection fields do not count towards depth, so
GraphiQL's schema query is never refused; they count towards fields and cost.
The lineage tree (`descendants { descendants { ... } }`) is recursive: a tree
deeper than the depth limit allows is read through
`lineage { graph { nodes edges } }`, which is flat.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from graphql import DocumentNode, GraphQLError, GraphQLSchema, OperationDefinitionNode, parse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema import validate_document
from strawberry.types.execution import ExecutionContext

from .cost import DEFAULT_MAX_COST, CostModel
from .document_limits import DocumentLimits, Refusal, check_document, lexical_refusal
from .errors import PAYLOAD_TOO_LARGE, VALIDATION_FAILED, send_error, simple_error

T = TypeVar("T")

DEFAULT_MAX_DEPTH = 15
DEFAULT_MAX_ALIASES = 30
DEFAULT_MAX_TOKENS = 5_000
DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_OPERATION_TIMEOUT = 30.0
DEFAULT_MAX_FIELDS = 2_000
DEFAULT_MAX_SELECTIONS = 1_000
DEFAULT_MAX_SAME_NAME = 20


@dataclass(frozen=True, slots=True)
class Limits:
    max_depth: int = DEFAULT_MAX_DEPTH
    max_aliases: int = DEFAULT_MAX_ALIASES
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    operation_timeout: float = DEFAULT_OPERATION_TIMEOUT
    max_cost: int = DEFAULT_MAX_COST
    max_fields: int = DEFAULT_MAX_FIELDS
    max_selections: int = DEFAULT_MAX_SELECTIONS
    max_same_name: int = DEFAULT_MAX_SAME_NAME

    def __post_init__(self) -> None:
        for name in (
            "max_depth",
            "max_aliases",
            "max_tokens",
            "max_body_bytes",
            "max_cost",
            "max_fields",
            "max_selections",
            "max_same_name",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.operation_timeout, (int, float)) or self.operation_timeout <= 0:
            raise ValueError(f"operation_timeout must be positive, got {self.operation_timeout!r}")


DOCUMENT_CACHE_SIZE = 256
OFF_LOOP_FROM = 2_000
"""Documents of this many characters or more are parsed and validated in a worker thread."""


def limit_extensions(limits: Limits) -> list[type[SchemaExtension]]:
    """The extension class (instantiated per request by strawberry) enforcing `limits`.

    It also remembers, per app, the parsed and validated form of the last
    DOCUMENT_CACHE_SIZE query texts: validation is most of the cost of a small
    query, and its outcome depends only on the text (the schema and the rules are
    fixed for the app). Only documents are remembered, never data.
    """
    documents: OrderedDict[str, tuple[DocumentNode, list[GraphQLError]]] = OrderedDict()
    shape = DocumentLimits(
        max_depth=limits.max_depth,
        max_aliases=limits.max_aliases,
        max_fields=limits.max_fields,
        max_selections=limits.max_selections,
        max_same_name=limits.max_same_name,
        max_cost=limits.max_cost,
    )
    models: list[CostModel] = []  # the schema's list bounds, read once per app
    off_loop = _OffLoop()

    def model(schema: GraphQLSchema) -> CostModel:
        if not models:
            models.append(CostModel(schema))
        return models[0]

    def parse_document(query: str) -> DocumentNode | None:
        try:
            return parse(query, max_tokens=limits.max_tokens)
        except RecursionError:
            raise GraphQLError(
                "Syntax Error: the document nests selections too deeply to parse"
            ) from None
        except GraphQLError:
            return None  # strawberry parses again and reports it as a parse error

    def check(
        ctx: ExecutionContext, document: DocumentNode, cached: list[GraphQLError] | None
    ) -> tuple[list[GraphQLError], bool]:
        """The document's errors, and whether they are graphql-core's (to remember)."""
        schema = ctx.schema._schema
        named: str | None = ctx._provided_operation_name  # what the request said
        refusal = _several_operations(document, named) or check_document(
            schema, document, shape, model(schema), ctx.variables, named
        )
        if refusal is not None:  # graphql-core's rules never see the document
            return [GraphQLError(refusal.message, extensions={"code": refusal.code})], False
        if cached is not None:
            return list(cached), False
        return validate_document(schema, document, ctx.validation_rules), True

    class RequestLimits(SchemaExtension):
        def on_operation(self) -> Iterator[None]:
            ctx = self.execution_context
            ctx.parse_options["max_tokens"] = limits.max_tokens
            yield

        async def on_parse(self) -> AsyncIterator[None]:
            ctx = self.execution_context
            known = documents.get(ctx.query) if ctx.query is not None else None
            if known is not None:
                documents.move_to_end(ctx.query)  # type: ignore[arg-type]
                ctx.graphql_document = known[0]
            elif ctx.query:
                early = lexical_refusal(ctx.query, limits.max_tokens, limits.max_selections)
                if early is not None:  # refused before graphql-core's slow parser runs
                    raise GraphQLError(early.message, extensions={"code": early.code})
                ctx.graphql_document = await off_loop(len(ctx.query), parse_document, ctx.query)
            yield

        async def on_validate(self) -> AsyncIterator[None]:
            ctx = self.execution_context
            query = ctx.query
            document = ctx.graphql_document
            if document is None:
                yield
                return
            known = documents.get(query) if query is not None else None
            cached = known[1] if known is not None and known[0] is document else None
            size = len(query or "")
            errors, fresh = await off_loop(size, check, ctx, document, cached)
            ctx.pre_execution_errors = errors  # strawberry does not validate again
            yield
            if fresh and known is None and query is not None:
                documents[query] = (document, list(errors))
                if len(documents) > DOCUMENT_CACHE_SIZE:
                    documents.popitem(last=False)

    return [RequestLimits]


class _OffLoop:
    """Runs `fn(*args)` in this app's one worker thread for documents of `OFF_LOOP_FROM`
    characters or more, inline for smaller ones.

    graphql-core parses and validates in pure Python (a 5,000-token document
    takes about 0.1 s to parse). In a thread, the interpreter hands the event
    loop the GIL every few milliseconds, so other requests keep being served;
    one thread, not a pool, so that a flood of large documents queues behind
    itself instead of crowding the loop out of the GIL.
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None

    async def __call__(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        if size < OFF_LOOP_FROM:
            return fn(*args)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="gateway-documents")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(fn, *args))


def _several_operations(document: DocumentNode, operation_name: str | None) -> Refusal | None:
    """A refusal when the document has several operations and the request names none
    (the GraphQL spec's GetOperation: graphql-core would otherwise run the first)."""
    if operation_name is not None:
        return None
    operations = sum(isinstance(d, OperationDefinitionNode) for d in document.definitions)
    if operations < 2:
        return None
    return Refusal(
        VALIDATION_FAILED,
        f"the document has {operations} operations: choose one with `operationName`",
    )


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
