"""The operation pipeline: every GraphQL operation, whatever its transport, runs here.

    transport ──OperationRequest──▶ admit ──Admitted──▶ execute ──▶ Answer
     (http, sse,                    1. access          (one result)
      websocket:                    2. document         or stream ──▶ Frames
      wire framing                  3. preparation      (subscriptions,
      only)                                              re-checked)

`admit` applies the rules in one place and order: the caller's credentials,
checked afresh for this operation, and its rate limits (`gateway.server.access`);
the trusted documents the principal may run (`gateway.server.documents`); the
token, operation, shape, cost and validation checks of the document
(`gateway.server.preparation`, off the event loop when large). It answers an
`Admitted` operation or raises `Refused`. `execute` runs a query within the
operation timeout and formats its one result; `stream` runs any operation as
frames, and re-checks a subscription's credentials every `reauth_interval`
seconds, so a revoked or expired token stops it with UNAUTHENTICATED. Errors are
formatted (`gateway.server.errors.format_error`) and counted in the metrics
here, for answers and refusals alike.

Every operation's context carries a `ResponseBudget` (`gateway.server.budget`):
bytes (`max_response_bytes`) and the objects of unpaged lists (`max_cost`),
charged while the answer is built. The answer is written here too
(`gateway.server.jsonwire.encode_answer`, counting and yielding), inside the
operation timeout, so every transport sends bytes that fit the budget and a
serialization that runs past the timeout stops with 504 like execution. An
answer past its budget is that one error: 422 RESPONSE_TOO_LARGE, or
QUERY_TOO_COSTLY (a request error, as when the estimate refuses it). A
subscription's budget holds per event; an event past it ends the stream with
RESPONSE_TOO_LARGE.

A transport (`gateway.server.http`, `.sse`, `.websocket`) only turns its wire
format into an `OperationRequest` and the pipeline's answer back into its wire
format: a new transport gets every rule by calling `admit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from strawberry.types.execution import ExecutionResult, PreExecutionError
from strawberry.types.graphql import OperationType

from gateway.core import PersistenceBackend, SessionQuery
from gateway.core.tail import ReplayGate
from gateway.observability.metrics import GatewayMetrics

from .access import Access
from .budget import RESPONSE_TOO_LARGE, ResponseBudget
from .codes import GatewayCode
from .config import GatewayConfig
from .context import Context, current_context
from .cursors import CursorCodec
from .documents import document_text
from .errors import GatewayError, format_error, masked_error, simple_error
from .jsonwire import encode_answer
from .operation import ALL_OPERATION_TYPES, Answer, ErrorJSON, Frame, OperationRequest, Refused
from .preparation import Prepared
from .principal import Principal
from .schema import GatewaySchema
from .subscriptions import REPLAY_READERS, SlotKey, StreamRoot, SubscriptionSlots
from .ticks import with_ticks

OPERATION_TIMEOUT = GatewayCode.OPERATION_TIMEOUT
BackendView = Callable[[PersistenceBackend], PersistenceBackend]
RefusalHook = Callable[[str | None, str | None, list[str]], None]
"""Told of every operation refused for its document (name, type, codes): tracing's span."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """An operation that passed every rule: who runs it and the document it runs."""

    request: OperationRequest
    principal: Principal | None
    prepared: Prepared

    @property
    def is_subscription(self) -> bool:
        return self.prepared.operation_type is OperationType.SUBSCRIPTION


class OperationPipeline:
    """See the module docstring. One per app."""

    def __init__(
        self,
        *,
        schema: GatewaySchema,
        query: SessionQuery,
        config: GatewayConfig,
        access: Access,
        metrics: GatewayMetrics,
        backend_view: BackendView | None = None,
        on_refused: RefusalHook | None = None,
    ) -> None:
        self.schema = schema
        self.query = query
        self.config = config
        self.access = access
        self.metrics = metrics
        self.cursors = CursorCodec(config.cursor_secret)
        self._backend_view = backend_view
        self._on_refused = on_refused
        self.subscriptions = SubscriptionSlots(
            config.max_subscriptions, config.max_subscriptions_per_token
        )
        self.replay_gate = ReplayGate(REPLAY_READERS)

    # -- the rules ----------------------------------------------------------------------

    async def admit(self, request: OperationRequest) -> Admitted:
        """The operation, admitted by every rule in order; else Refused (counted)."""
        try:
            principal = await self.access.admit(request.caller)
        except Refused as refused:
            self.count(refused.errors)
            raise
        try:
            text = document_text(
                request.query, request.document_id, self.config.trusted_documents, principal
            )
            prepared = await self.schema.preparer.prepare(
                self.schema._schema,
                text,
                request.operation_name,
                request.variables,
                request.operation_types,
                request.transport.value,
            )
        except Refused as refused:
            self.count(refused.errors)
            self._refused_operation(request, refused)
            raise
        if prepared.operation_type is OperationType.SUBSCRIPTION:
            # checked here too so SSE can answer 429/503 before its stream; `stream` takes it
            full = self.subscriptions.refusal(SlotKey.of(principal, request.caller.address))
            if full is not None:
                self.count(full.errors)
                raise full
        return Admitted(request, principal, prepared)

    def _refused_operation(self, request: OperationRequest, refused: Refused) -> None:
        """An operation refused for its document is still an operation: counted and timed
        (at zero) like one that ran, and traced when tracing is on."""
        name = refused.operation_name or request.operation_name
        self.metrics.record_operation(name, refused.operation_type, 0.0)
        if self._on_refused is not None:
            self._on_refused(name, refused.operation_type, refused.codes)

    def context(self, principal: Principal | None, prepared: Prepared | None = None) -> Context:
        """A fresh context (one observation of the corpus) for `principal`, running the
        `prepared` document when given."""
        context = Context.for_request(
            self.query, self.cursors, principal, backend_view=self._backend_view
        )
        context.prepared = prepared
        limits = self.config.limits
        context.budget = ResponseBudget(limits.max_response_bytes, limits.max_cost)
        return context

    # -- one result ---------------------------------------------------------------------

    async def execute(self, admitted: Admitted) -> Answer:
        """Run a query (or mutation) within the operation timeout: its formatted result."""
        request = admitted.request
        timeout = self.config.limits.operation_timeout
        context = self.context(admitted.principal, admitted.prepared)

        async def run() -> Answer:
            current_context.set(context)  # this task's (wait_for runs it as one)
            result = await self.schema.execute(
                admitted.prepared.text,
                variable_values=request.variables,
                context_value=context,
                operation_name=request.operation_name,
                allowed_operation_types=ALL_OPERATION_TYPES,
                operation_extensions=request.extensions,
            )
            return await self._encoded(self._answer(result, context.budget), context.budget)

        try:
            return await asyncio.wait_for(run(), timeout=timeout)
        except TimeoutError:
            message = f"the operation did not finish within {timeout:g} s"
            errors = [simple_error(OPERATION_TIMEOUT, message)]
            self.count(errors)
            return Answer({"errors": errors}, status=504)
        except Exception as exc:  # a bug: never a traceback to the client
            errors = [masked_error(exc, "executing an operation")]
            self.count(errors)
            return Answer({"errors": errors}, status=500)
        finally:
            context.close()  # a timed-out operation leaves no backend work running

    def _answer(self, result: ExecutionResult, budget: ResponseBudget) -> Answer:
        if budget.tripped is not None:  # whatever partial result was assembled
            return self._over_budget(budget.tripped)
        payload: dict[str, Any] = {}
        request_error = _never_ran(result)
        if not request_error:
            payload["data"] = result.data
        if result.errors:
            payload["errors"] = [format_error(e) for e in result.errors]
            self.count(payload["errors"])
        return Answer(payload, request_error=request_error)

    async def _encoded(self, answer: Answer, budget: ResponseBudget) -> Answer:
        """`answer` with its body written within the budget, or the budget's error."""
        if budget.tripped is not None:
            return answer
        try:
            body = await encode_answer(answer.payload, budget)
        except GatewayError as exc:
            return self._over_budget(exc)
        return dataclasses.replace(answer, body=body)

    def _over_budget(self, error: GatewayError) -> Answer:
        """The answer of an operation that passed its budget: that error alone."""
        errors = [simple_error(error.code, error.message)]
        self.count(errors)
        if error.code == RESPONSE_TOO_LARGE:
            return Answer({"errors": errors}, status=422)
        return Answer({"errors": errors}, request_error=True)

    # -- streams ------------------------------------------------------------------------

    async def stream(self, admitted: Admitted) -> AsyncIterator[Frame]:
        """The operation's results as frames: one for a query, one per event for a
        subscription (whose credentials are re-checked while it runs, and which holds
        one of `subscriptions`' slots while it runs: past a cap, one `error` frame)."""
        if not admitted.is_subscription:
            answer = await self.execute(admitted)
            errors = answer.payload.get("errors", [])
            yield (
                Frame("error", errors=errors)
                if answer.request_error
                else Frame("next", answer.payload, body=answer.body)
            )
            return
        slot = SlotKey.of(admitted.principal, admitted.request.caller.address)
        full = self.subscriptions.take(slot)
        if full is not None:  # the caps: server-wide, per token / client address
            self.count(full.errors)
            yield Frame("error", errors=full.errors)
            return
        frames = self._subscription(admitted)
        every = self.config.reauth_interval if self.access.checks_credentials else None
        ticking = with_ticks(frames, every)
        try:
            async for frame in ticking:
                if frame is None:  # time to check the credentials again
                    try:
                        await self.access.recheck(admitted.request.caller)
                    except Refused as refused:
                        self.count(refused.errors)
                        yield Frame("error", errors=refused.errors)
                        return
                    continue
                yield frame
                if frame.kind == "error":
                    return
        finally:
            try:
                await ticking.aclose()
                await frames.aclose()
            finally:
                self.subscriptions.give_back(slot)

    async def _subscription(self, admitted: Admitted) -> AsyncGenerator[Frame, None]:
        request = admitted.request
        metrics = self.metrics
        context = self.context(admitted.principal, admitted.prepared)
        root = StreamRoot(
            lambda: self.context(admitted.principal),
            self.config.subscription_buffer,
            metrics,
            self.replay_gate,
        )
        metrics.subscriptions_active.inc()
        try:
            results = await self.schema.stream(
                admitted.prepared.text,
                variable_values=request.variables,
                context_value=context,
                root_value=root,
                operation_name=request.operation_name,
                operation_extensions=request.extensions,
                allowed_operation_types=ALL_OPERATION_TYPES,
            )
            async with contextlib.aclosing(results):
                first = True
                result: Any
                while True:
                    # Each step may run in a task of its own (`with_ticks`): the
                    # event's resolvers find the context in this one.
                    current_context.set(context)
                    try:
                        result = await anext(results)
                    except StopAsyncIteration:
                        break
                    errors = [format_error(e) for e in result.errors or ()]
                    self.count(errors)
                    if first and _never_ran(result):
                        yield Frame("error", errors=errors)
                        return
                    first = False
                    payload: dict[str, Any] = {"data": result.data}
                    if errors:
                        payload["errors"] = errors
                    budget = context.budget
                    try:
                        budget.check()
                        body = await encode_answer(payload, budget)
                    except GatewayError as exc:
                        refused = [simple_error(exc.code, exc.message)]
                        self.count(refused)
                        yield Frame("error", errors=refused)
                        return
                    budget.reset()  # the next event has a budget of its own
                    if result.data is not None:
                        metrics.subscription_events.inc()
                    yield Frame("next", payload, body=body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: never a traceback to the client
            errors = [masked_error(exc, "streaming an operation")]
            self.count(errors)
            yield Frame("next", {"errors": errors})
        finally:
            context.close()
            metrics.subscriptions_active.dec()

    # -- bookkeeping ----------------------------------------------------------------------

    def count(self, errors: list[ErrorJSON]) -> None:
        """Every error a client is sent, by code (`graphql_errors_total`)."""
        for error in errors:
            self.metrics.count_error(error.get("extensions", {}).get("code"))


def _never_ran(result: ExecutionResult) -> bool:
    """No `data` at all and no error with a path: the operation never ran (variables
    that do not coerce; parse and validation failures never reach execution)."""
    if isinstance(result, PreExecutionError):
        return True
    errors = result.errors or ()
    return result.data is None and bool(errors) and all(e.path is None for e in errors)


__all__ = ["Admitted", "OperationPipeline"]
