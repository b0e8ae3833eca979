"""Turning a document's text into a runnable operation, once, within the limits.

`DocumentPreparer.prepare` is step 4 of the operation pipeline: the token
limit, parsing, the operation the request names and whether its transport
can deliver it, the shape and cost limits (`gateway.server.document_limits`),
and graphql-core's validation, in that order; it answers a `Prepared`
operation or raises `Refused` with the first failure. Documents of
`OFF_LOOP_FROM` characters or more are prepared in this app's one worker
thread, so the event loop never waits on graphql-core's pure-Python parser
or validator whichever transport the document came by.

The preparer remembers, per app, the parsed form and the validation errors of
the last `DOCUMENT_CACHE_SIZE` texts: validation is most of the cost of a
small query, and its outcome depends only on the text (the schema and the
rules are fixed for the app). The shape and cost checks depend on the
operation name and the variables as well, but only on the few variables the
walk reads (page sizes, window bounds, a filter's `text`): each text keeps a
`LimitsMemo` of their outcomes by operation name and the values of exactly the
variables read (recorded while the walk ran), so the limits stay exact (the same
relevant inputs, the same answer) while a persisted query asked with a new id
costs a lookup instead of the walk (about 55 us of its 60 us of preparation). A
variable that cannot be a key (a list, an object such as a filter, a long
string) makes the walk run afresh. A text refused before it parsed (the
token limit, a syntax error) is remembered with its errors: that refusal depends
on the text alone. Only documents are remembered, never data.

Every error made here carries its code (`errors.tagged`), so no one has to
guess it from a message later.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from graphql import (
    DocumentNode,
    GraphQLError,
    GraphQLSchema,
    OperationDefinitionNode,
    parse,
    specified_rules,
)
from strawberry.schema.schema import validate_document
from strawberry.types.graphql import OperationType

from .codes import GatewayCode
from .config import Limits
from .cost import CostModel
from .document_limits import DocumentLimits, LimitsMemo, Refusal, lexical_refusal
from .errors import format_error, tagged
from .operation import Refused

T = TypeVar("T")

DOCUMENT_CACHE_SIZE = 256
OFF_LOOP_FROM = 2_000
"""Documents of this many characters or more are prepared in a worker thread."""

PARSE_FAILED = GatewayCode.PARSE_FAILED
VALIDATION_FAILED = GatewayCode.VALIDATION_FAILED
METHOD_NOT_ALLOWED = GatewayCode.METHOD_NOT_ALLOWED
_RULES = tuple(specified_rules)


@dataclass(frozen=True, slots=True)
class Prepared:
    """An operation that passed every document check: run it as is."""

    text: str
    document: DocumentNode
    operation_type: OperationType
    operation_name: str | None
    """The name the request asked for (None when it named none)."""
    operation: OperationDefinitionNode
    """The operation of `document` that runs (the one named, or the only one)."""


@dataclass(slots=True)
class _Known:
    """What the preparer remembers of one text: its parse, its validation errors once
    validated, and its limit checks (by operation name and the variables they read)."""

    document: DocumentNode
    validation: list[GraphQLError] | None = None
    limits: LimitsMemo = field(default_factory=LimitsMemo)


@dataclass(slots=True)
class _Outcome:
    document: DocumentNode | None = None
    operation: OperationDefinitionNode | None = None
    operation_type: OperationType | None = None
    operation_name: str | None = None  # the document's name of the operation it runs
    errors: list[GraphQLError] | None = None
    status: int = 400
    known: _Known | None = None  # what to remember of the text (None: it did not parse)


class DocumentPreparer:
    """The document checks of one app (see the module docstring)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._shape = DocumentLimits(
            max_depth=limits.max_depth,
            max_aliases=limits.max_aliases,
            max_fields=limits.max_fields,
            max_selections=limits.max_selections,
            max_same_name=limits.max_same_name,
            max_cost=limits.max_cost,
        )
        self._cache: OrderedDict[str, _Known] = OrderedDict()
        self._unparsed: OrderedDict[str, list[GraphQLError]] = OrderedDict()
        """Texts refused by the token limit or the parser, with their errors."""
        self._cost: CostModel | None = None  # the schema's list bounds, read once
        self._executor: ThreadPoolExecutor | None = None

    async def prepare(
        self,
        schema: GraphQLSchema,
        text: str,
        operation_name: str | None,
        variables: Mapping[str, Any] | None,
        allowed: Collection[OperationType],
        transport: str,
    ) -> Prepared:
        """The operation `text` names, or Refused (a request error, or 405 for an
        operation type `transport` cannot deliver)."""
        outcome = await self._check(schema, text, operation_name, variables, allowed, transport)
        if outcome.errors:
            errors = [format_error(e) for e in outcome.errors]
            kind = outcome.operation_type.value if outcome.operation_type else None
            raise Refused(
                outcome.status,
                errors,
                request_error=outcome.status == 400,
                operation_type=kind,
                operation_name=outcome.operation_name or operation_name,
            )
        document, operation_type = outcome.document, outcome.operation_type
        assert document is not None and operation_type is not None
        assert outcome.operation is not None
        return Prepared(text, document, operation_type, operation_name, outcome.operation)

    async def check(
        self,
        schema: GraphQLSchema,
        text: str,
        operation_name: str | None,
        variables: Mapping[str, Any] | None,
    ) -> tuple[DocumentNode | None, list[GraphQLError]]:
        """The same checks for a caller of the schema itself (no transport: every
        operation type passes): the document, and the errors that refuse it."""
        outcome = await self._check(schema, text, operation_name, variables, (), "")
        return outcome.document, outcome.errors or []

    async def _check(
        self,
        schema: GraphQLSchema,
        text: str,
        operation_name: str | None,
        variables: Mapping[str, Any] | None,
        allowed: Collection[OperationType],
        transport: str,
    ) -> _Outcome:
        if self._cost is None:
            self._cost = CostModel(schema)
        unparsed = self._unparsed.get(text)
        if unparsed is not None:  # refused before it parsed: a function of the text alone
            self._unparsed.move_to_end(text)
            return _Outcome(errors=list(unparsed))
        known = self._cache.get(text)
        if known is not None:
            self._cache.move_to_end(text)
        run = partial(self._run, schema, text, known, operation_name, variables, allowed, transport)
        outcome = await self._off_loop(len(text), run)
        if known is None and outcome.known is not None:
            self._cache[text] = outcome.known
            if len(self._cache) > DOCUMENT_CACHE_SIZE:
                self._cache.popitem(last=False)
        elif outcome.known is None and outcome.errors:
            self._unparsed[text] = list(outcome.errors)
            if len(self._unparsed) > DOCUMENT_CACHE_SIZE:
                self._unparsed.popitem(last=False)
        return outcome

    def _run(
        self,
        schema: GraphQLSchema,
        text: str,
        known: _Known | None,
        operation_name: str | None,
        variables: Mapping[str, Any] | None,
        allowed: Collection[OperationType],
        transport: str,
    ) -> _Outcome:
        """Every check, synchronously (inline for small documents, else in the worker)."""
        if known is None:
            early = lexical_refusal(text, self.limits.max_tokens, self.limits.max_selections)
            if early is not None:  # refused before graphql-core's slow parser runs
                return _Outcome(
                    errors=[GraphQLError(early.message, extensions={"code": early.code})]
                )
            try:
                document = parse(text, max_tokens=self.limits.max_tokens)
            except GraphQLError as exc:
                return _Outcome(errors=[tagged(exc, PARSE_FAILED)])
            except RecursionError:
                message = "Syntax Error: the document nests selections too deeply to parse"
                return _Outcome(errors=[GraphQLError(message, extensions={"code": PARSE_FAILED})])
            known = _Known(document)
        document = known.document
        out = _Outcome(document=document, known=known)
        operation, refusal = _operation(document, operation_name)
        if operation is None:
            out.errors = [GraphQLError(refusal, extensions={"code": VALIDATION_FAILED})]
            return out
        out.operation = operation
        out.operation_type = OperationType(operation.operation.value)
        out.operation_name = operation.name.value if operation.name else None
        if allowed and out.operation_type not in allowed:
            out.errors = [_not_deliverable(out.operation_type, transport)]
            out.status = 405
            return out
        limit = self._limits(schema, known, operation_name, variables)
        if limit is not None:  # graphql-core's rules never see the document
            out.errors = [GraphQLError(limit.message, extensions={"code": limit.code})]
            return out
        if known.validation is None:
            found = validate_document(schema, document, _RULES)
            known.validation = [tagged(e, VALIDATION_FAILED) for e in found]
        out.errors = list(known.validation)
        return out

    def _limits(
        self,
        schema: GraphQLSchema,
        known: _Known,
        operation_name: str | None,
        variables: Mapping[str, Any] | None,
    ) -> Refusal | None:
        """The shape and cost checks, remembered per text by operation name and the
        values of the variables they read (`LimitsMemo`: the same inputs, the same
        answer)."""
        assert self._cost is not None
        return known.limits.check(
            schema, known.document, self._shape, self._cost, variables, operation_name
        )

    async def _off_loop(self, size: int, fn: Callable[[], T]) -> T:
        """`fn()` inline for small documents, else in this app's one worker thread.

        graphql-core parses and validates in pure Python (a 5,000-token document
        takes about 0.1 s to parse). In a thread, the interpreter hands the event
        loop the GIL every few milliseconds, so other requests keep being served;
        one thread, not a pool, so that a flood of large documents queues behind
        itself instead of crowding the loop out of the GIL.
        """
        if size < OFF_LOOP_FROM:
            return fn()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="gateway-documents")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)


def _operation(
    document: DocumentNode, name: str | None
) -> tuple[OperationDefinitionNode | None, str]:
    """The operation a request runs (the GraphQL spec's GetOperation), or why none."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if name is None:
        if len(operations) == 1:
            return operations[0], ""
        if not operations:
            return None, "the document has no operation to run"
        return None, (
            f"the document has {len(operations)} operations: choose one with `operationName`"
        )
    for operation in operations:
        if operation.name is not None and operation.name.value == name:
            return operation, ""
    return None, f"the document has no operation named {name!r}"


def _not_deliverable(kind: OperationType, transport: str) -> GraphQLError:
    message = f"{kind.value} operations are not allowed over {transport}"
    if kind is OperationType.SUBSCRIPTION:
        message += (
            ": subscribe over graphql-transport-ws (WebSocket) or with "
            "Accept: text/event-stream (SSE)"
        )
    return GraphQLError(message, extensions={"code": METHOD_NOT_ALLOWED})


__all__ = ["DOCUMENT_CACHE_SIZE", "OFF_LOOP_FROM", "DocumentPreparer", "Prepared"]
