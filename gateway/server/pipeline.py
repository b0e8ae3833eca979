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
seconds, so a revoked or expired token stops it with UNAUTHENTICATED. Subscribers
with the same document, variables, operation name and caller share one execution
per event (`gateway.server.fanout`); each keeps its own position, buffer,
credential checks and slot. Errors are
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

`execute` runs the prepared document on graphql-core itself (`graphql.execute`,
with Strawberry's executor class, so resolvers see what they see under
`Schema.execute`), not through Strawberry's `Schema.execute`: by then the document
is parsed, validated and within the limits, and Strawberry's per-operation
machinery (an execution context, the extension hooks around the operation, its
parse, validation and execution, handing the prepared document back, converting
the result) was about a third of the CPU of a small query and did nothing the
pipeline needs. What the extensions did is done here: the operation is counted and
timed (`GatewayMetrics.record_operation`, a cancelled one too) and, with tracing
on, runs inside its span (`on_operation`, `gateway.observability.tracing.
operation_spans`). The trade: an extension added to the schema does not see these
operations (none of the app's has a `resolve` hook; one that needs to goes here).
Subscriptions still run through Strawberry's `Schema.stream`, with the extensions.

A query observes through a retryable snapshot (`SessionQuery.hold_snapshot(
retryable=True)`; admission's, when the token is read in it): on PostgreSQL its
reads hold no transaction, each checked to see the state the first one saw
(`gateway.persistence.pg_readers`). When a commit landed between two of them the
observation is not one (`HeldSnapshot.moved`): the result is dropped unseen,
unformatted and unlogged, and the query runs again, once, in a fresh strict
snapshot, within the same timeout (`graphql_retried_observations_total`). The
principal stays admission's: its token was valid when the request came, and the
rerun's reads are one observation among themselves. A mutation would never run
twice: it observes strictly from the start.

The operation timeout is `asyncio.timeout` around the operation in the task that
asked for it, not `asyncio.wait_for`: on Python 3.11 that made a task per request (and
two more event-loop turns before the answer came back). At the timeout the running
operation is cancelled in place, counted and timed as cancelled, and answered 504 as
before; `current_context` is set for the operation and reset with its token when it
ends, so nothing of it stays in the caller's context.

A transport (`gateway.server.http`, `.sse`, `.websocket`) only turns its wire
format into an `OperationRequest` and the pipeline's answer back into its wire
format: a new transport gets every rule by calling `admit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextvars import Token
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from graphql import ExecutionResult as CoreResult
from graphql import FieldNode, GraphQLError
from graphql import execute as execute_document
from strawberry.execution import optimized_is_awaitable
from strawberry.types.execution import ExecutionResult, PreExecutionError
from strawberry.types.graphql import OperationType

from gateway.core import PersistenceBackend, SessionQuery
from gateway.core.query import HeldSnapshot
from gateway.core.tail import ReplayGate, TailLagged
from gateway.observability.metrics import GatewayMetrics

from .access import Access
from .budget import (
    RESPONSE_TOO_LARGE,
    RETRY_AFTER_SECONDS,
    SERVER_BUSY,
    AnswerBytes,
    ResponseBudget,
)
from .codes import GatewayCode
from .config import GatewayConfig
from .context import Context, current_context
from .cursors import CursorCodec
from .documents import document_text
from .errors import GatewayError, format_error, masked_error, simple_error
from .fanout import Member, SharedExecution, SharedExecutions, SharingKey
from .jsonwire import encode_answer
from .operation import ALL_OPERATION_TYPES, Answer, ErrorJSON, Frame, OperationRequest, Refused
from .preparation import Prepared
from .principal import Principal
from .schema import GatewaySchema
from .subscriptions import (
    REPLAY_READERS,
    SUBSCRIPTION_LAGGED,
    SlotKey,
    StreamRoot,
    SubscriptionSlots,
)
from .ticks import with_ticks

OPERATION_TIMEOUT = GatewayCode.OPERATION_TIMEOUT
Result = CoreResult | ExecutionResult
"""graphql-core's result (a query the pipeline ran) or Strawberry's (a subscription's)."""
BackendView = Callable[[PersistenceBackend], PersistenceBackend]
RefusalHook = Callable[[str | None, str | None, list[str]], None]
"""Told of every operation refused for its document (name, type, codes): tracing's span."""


class TracedOperation(Protocol):
    """One executed operation as a hook sees it (`gateway.observability.tracing.
    OperationSpan`): entered around its execution, in the task that runs it; given the
    result's `errors` before it is left; left with the exception when one stops it."""

    errors: Sequence[Any]

    def __enter__(self) -> TracedOperation: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


OperationHook = Callable[[str | None, str | None], TracedOperation]
"""Called with the name and type of every query or mutation the pipeline executes:
tracing's span (`gateway.observability.tracing.operation_spans`)."""


@dataclass(frozen=True, slots=True)
class Admitted:
    """An operation that passed every rule: who runs it and the document it runs."""

    request: OperationRequest
    principal: Principal | None
    prepared: Prepared
    snapshot: HeldSnapshot | None = None
    """The snapshot its credentials were read in, for its execution's reads (a query or
    mutation's: a subscription observes afresh per event, and holds none)."""

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
        on_operation: OperationHook | None = None,
    ) -> None:
        self.schema = schema
        self.query = query
        self.config = config
        self.access = access
        self.metrics = metrics
        self.cursors = CursorCodec(config.cursor_secret)
        self._backend_view = backend_view
        self._on_refused = on_refused
        self._on_operation = on_operation
        self._executor_class = schema.execution_context_class
        self.subscriptions = SubscriptionSlots(
            config.max_subscriptions, config.max_subscriptions_per_token
        )
        self.answer_bytes = AnswerBytes(config.limits.max_response_bytes_in_flight)
        """The bytes of the answers being built at once, across every transport."""
        self.replay_gate = ReplayGate(REPLAY_READERS)
        self.shared = SharedExecutions()

    # -- the rules ----------------------------------------------------------------------

    async def admit(self, request: OperationRequest) -> Admitted:
        """The operation, admitted by every rule in order; else Refused (counted).

        With an authenticator that can (`Access.reads_in_snapshot`), the credentials are
        read in the snapshot the operation's own reads then share (`Admitted.snapshot`):
        the request's first read, one transaction for the token and the data."""
        held = self.query.hold_snapshot(retryable=True) if self.access.reads_in_snapshot else None
        try:
            return await self._admit(request, held)
        except BaseException:
            if held is not None:
                held.close()
            raise

    async def _admit(self, request: OperationRequest, held: HeldSnapshot | None) -> Admitted:
        try:
            principal = await self.access.admit(
                request.caller, None if held is None else held.reads
            )
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
            if held is not None:
                held.close()  # each of its executions observes afresh
                held = None
        elif prepared.operation_type is not OperationType.QUERY and held is not None:
            held.close()  # a mutation is not made twice (`execute`): it observes strictly
            held = None
        return Admitted(request, principal, prepared, held)

    def _refused_operation(self, request: OperationRequest, refused: Refused) -> None:
        """An operation refused for its document is still an operation: counted and timed
        (at zero) like one that ran, and traced when tracing is on."""
        name = refused.operation_name or request.operation_name
        self.metrics.record_operation(name, refused.operation_type, 0.0)
        if self._on_refused is not None:
            self._on_refused(name, refused.operation_type, refused.codes)

    def context(
        self,
        principal: Principal | None,
        prepared: Prepared | None = None,
        snapshot: HeldSnapshot | None = None,
    ) -> Context:
        """A fresh context (one observation of the corpus) for `principal`, running the
        `prepared` document when given, its reads in `snapshot` when given."""
        limits = self.config.limits
        budget = ResponseBudget(
            limits.max_response_bytes, limits.max_cost, shared=self.answer_bytes
        )
        context = Context.for_request(
            self.query,
            self.cursors,
            principal,
            backend_view=self._backend_view,
            budget=budget,
            snapshot=snapshot,
        )
        context.prepared = prepared
        return context

    # -- one result ---------------------------------------------------------------------

    async def execute(self, admitted: Admitted) -> Answer:
        """Run a query (or mutation) within the operation timeout: its formatted result;
        a query whose retryable observation moved, twice (module docstring)."""
        timeout = self.config.limits.operation_timeout
        held = admitted.snapshot
        if held is None and admitted.prepared.operation_type is OperationType.QUERY:
            held = self.query.hold_snapshot(retryable=True)
        context = self.context(admitted.principal, admitted.prepared, held)
        token = current_context.set(context)
        try:
            async with asyncio.timeout(timeout):  # in this task: see the module docstring
                result = await self._executed(admitted, context)
                if held is not None and held.moved:
                    _drop_tracebacks(result)
                    _end(context, token)
                    context = self.context(admitted.principal, admitted.prepared)
                    token = current_context.set(context)
                    self.metrics.record_retried_observation()
                    result = await self._executed(admitted, context)
                return await self._encoded(self._answer(result, context.budget), context.budget)
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
            _end(context, token)

    async def _executed(self, admitted: Admitted, context: Context) -> Result:
        """The prepared document run by graphql-core as Strawberry's `Schema.execute`
        runs it once parsed and validated (the same executor class, awaitable check and
        `info.operation_extensions`; no middleware: no extension of the schema has a
        `resolve` hook; `GatewaySchema.process_errors` does nothing), counted and timed
        in the metrics like `metrics_extension` does, traced when tracing is on. An
        exception is, as Strawberry makes it, the one error of an operation that never
        ran."""
        request, prepared = admitted.request, admitted.prepared
        operation = prepared.operation
        name = operation.name.value if operation.name is not None else None
        start = time.perf_counter()
        try:
            if self._on_operation is None:
                return await self._run(prepared, request, context)
            with self._on_operation(name, prepared.operation_type.value) as traced:
                result = await self._run(prepared, request, context)
                traced.errors = result.errors or ()
                return result
        except Exception as exc:
            error = (
                exc if isinstance(exc, GraphQLError) else GraphQLError(str(exc), original_error=exc)
            )
            return PreExecutionError(data=None, errors=[error])
        finally:  # a cancelled operation (the timeout) is counted and timed too
            self.metrics.record_operation(
                name, prepared.operation_type, time.perf_counter() - start
            )

    async def _run(
        self, prepared: Prepared, request: OperationRequest, context: Context
    ) -> CoreResult:
        result = execute_document(
            self.schema._schema,
            prepared.document,
            context_value=context,
            variable_values=request.variables,
            operation_name=request.operation_name,
            executor_class=self._executor_class,
            is_awaitable=optimized_is_awaitable,  # type: ignore[arg-type]  # a bool, as Strawberry
            operation_extensions=request.extensions,
        )
        if not isinstance(result, CoreResult):
            result = await result
        return result

    def _answer(self, result: Result, budget: ResponseBudget) -> Answer:
        try:
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
        finally:
            _drop_tracebacks(result)

    async def _encoded(self, answer: Answer, budget: ResponseBudget) -> Answer:
        """`answer` with its body written within the budget, or the budget's error."""
        if budget.tripped is not None:
            return answer
        try:
            body = await encode_answer(answer.payload, budget)
        except GatewayError as exc:
            return self._over_budget(exc)
        # (not dataclasses.replace: its field walk cost more than writing a small answer)
        return Answer(answer.payload, answer.request_error, answer.status, body, answer.headers)

    def _over_budget(self, error: GatewayError) -> Answer:
        """The answer of an operation that passed its budget: that error alone."""
        errors = [simple_error(error.code, error.message)]
        self.count(errors)
        if error.code == RESPONSE_TOO_LARGE:
            return Answer({"errors": errors}, status=422)
        if error.code == SERVER_BUSY:
            return Answer(
                {"errors": errors}, status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
            )
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
        try:
            async with contextlib.aclosing(self._member(admitted)) as frames:
                async for frame in frames:
                    yield frame
                    if frame.kind == "error":
                        return
        finally:
            self.subscriptions.give_back(slot)

    async def _member(self, admitted: Admitted) -> AsyncGenerator[Frame, None]:
        """One subscriber's frames: its own replay when it joins a shared execution late,
        then the shared frames (`gateway.server.fanout`), with its credentials re-checked
        every `reauth_interval` and its buffer bounded."""
        request = admitted.request
        key = SharingKey.of(
            admitted.prepared.text,
            request.operation_name,
            request.variables,
            request.extensions,
            admitted.principal,
        )
        member = self.shared.join(
            key,
            self.config.subscription_buffer,
            lambda execution: self._execute_shared(admitted, execution),
        )
        metrics = self.metrics
        every = self.config.reauth_interval if self.access.checks_credentials else None
        given = _Given()
        metrics.subscriptions_active.inc()
        clock: _RecheckClock | None = None
        try:
            if member.handover is not None:  # late: its own replay up to the handover
                private = self._subscription(
                    admitted,
                    stop_before=member.handover,
                    executing=given.executing,
                    starting=given.starting,
                )
                ticking = with_ticks(private, every)
                try:
                    async for frame in ticking:
                        if frame is None:  # time to check the credentials again
                            refused = await self._recheck(request)
                            if refused is not None:
                                yield refused
                                return
                            continue
                        self._delivered(frame)
                        yield frame
                        if frame.kind == "error":
                            return
                        given.handed()
                        if member.lagged:
                            yield self._lagged(admitted, given.last, member)
                            return
                finally:
                    await ticking.aclose()
                    await private.aclose()
            if every is not None:
                clock = _RecheckClock(member, every)
            queue = member.queue
            while True:
                if clock is not None and clock.due:
                    refused = await self._recheck(request)
                    if refused is not None:
                        yield refused
                        return
                    clock.start()
                if member.lagged:
                    yield self._lagged(admitted, given.last, member)
                    return
                if not queue:
                    await member.wait()
                    continue
                item = member.take()
                if item is None:  # the shared stream is over
                    return
                frame = item.frame
                self._delivered(frame)
                if item.seq is not None:
                    given.last = item.seq
                yield frame
                if frame.kind == "error":
                    return
        finally:
            if clock is not None:
                clock.stop()
            member.leave()
            metrics.subscriptions_active.dec()

    async def _recheck(self, request: OperationRequest) -> Frame | None:
        """The `error` frame that ends a subscription whose credentials no longer hold."""
        try:
            await self.access.recheck(request.caller)
        except Refused as refused:
            self.count(refused.errors)
            return Frame("error", errors=refused.errors)
        return None

    def _delivered(self, frame: Frame) -> None:
        """Count what one subscriber is sent: its errors, and the event."""
        if frame.kind == "error":
            self.count(frame.errors)
            return
        payload = frame.payload
        errors = payload.get("errors")
        if errors:
            self.count(errors)
            if any(e.get("extensions", {}).get("code") == SUBSCRIPTION_LAGGED for e in errors):
                self.metrics.subscription_lagged.inc()
        if payload.get("data") is not None:
            self.metrics.subscription_events.inc()

    def _lagged(self, admitted: Admitted, last: int | None, member: Member) -> Frame:
        """SUBSCRIPTION_LAGGED for a member that fell more than its buffer behind."""
        last_seq = last if last is not None else -1
        self.metrics.subscription_lagged.inc()
        error = simple_error(SUBSCRIPTION_LAGGED, str(TailLagged(last_seq, member.limit)))
        error["path"] = [_root_key(admitted.prepared)]
        error["extensions"]["lastSeq"] = last_seq
        errors = [error]
        self.count(errors)
        return Frame(
            "next", {"data": None, "errors": errors}, body=_json({"data": None, "errors": errors})
        )

    async def _execute_shared(self, admitted: Admitted, execution: SharedExecution) -> None:
        """Run the operation once for every member of `execution`: each frame written
        once as JSON (`Frame.body`) and offered to them all."""
        frames = self._subscription(admitted, executing=execution.executing)
        try:
            async with contextlib.aclosing(frames):
                async for frame in frames:
                    if frame.kind == "next" and frame.body is None:
                        frame = dataclasses.replace(frame, body=_json(frame.payload))
                    execution.publish(frame)
                    if frame.kind == "error":
                        return
                    await execution.paced()  # no further ahead than its fastest member
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: never a traceback to the client
            errors = [masked_error(exc, "streaming a shared operation")]
            execution.publish(Frame("next", {"errors": errors}, body=_json({"errors": errors})))
        finally:
            execution.finish()

    async def _subscription(
        self,
        admitted: Admitted,
        *,
        executing: Callable[[int], None] | None = None,
        stop_before: int | None = None,
        starting: Callable[[int], None] | None = None,
    ) -> AsyncGenerator[Frame, None]:
        """The operation's frames, one execution (errors are counted by whoever
        delivers them, per subscriber)."""
        request = admitted.request
        context = self.context(admitted.principal, admitted.prepared)
        root = StreamRoot(
            lambda: self.context(admitted.principal),
            self.config.subscription_buffer,
            None,  # lagging is counted per subscriber it is sent to (`_delivered`)
            self.replay_gate,
            executing=executing,
            stop_before=stop_before,
            starting=starting,
        )
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
                    except GatewayError as exc:  # counted per subscriber it is sent to
                        yield Frame("error", errors=[simple_error(exc.code, exc.message)])
                        return
                    budget.reset()  # the next event has a budget of its own
                    self.metrics.subscription_executions.inc()
                    yield Frame("next", payload, body=body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: never a traceback to the client
            errors = [masked_error(exc, "streaming an operation")]
            yield Frame("next", {"errors": errors})
        finally:
            context.close()
            context.budget.release()

    # -- bookkeeping ----------------------------------------------------------------------

    def count(self, errors: list[ErrorJSON]) -> None:
        """Every error a client is sent, by code (`graphql_errors_total`)."""
        for error in errors:
            self.metrics.count_error(error.get("extensions", {}).get("code"))


def _end(context: Context, token: Token[Context | None]) -> None:
    """An operation's context done: unset (it is the operation's, not the task's), its
    backend work cancelled (a timed-out operation leaves none running), its budget's
    share of the answer bytes given back."""
    current_context.reset(token)
    context.close()
    context.budget.release()


def _drop_tracebacks(result: Result) -> None:
    """Forget the tracebacks of a formatted result's errors. Each holds the frames of the
    resolvers it passed through, whose locals hold the answer's data (a window of
    events), and the frames hold the error: a cycle that kept a refused answer's memory
    until a full collection (8 MB a request for 30 aliased windows)."""
    for error in result.errors or ():
        error.__traceback__ = None
        original = error.original_error
        if original is not None:
            original.__traceback__ = None


class _Given:
    """The last seq a subscriber was handed (`last`), as its private replay reports it."""

    __slots__ = ("_pending", "last")

    def __init__(self) -> None:
        self.last: int | None = None
        self._pending: int | None = None

    def starting(self, after: int) -> None:
        if self.last is None:
            self.last = after

    def executing(self, seq: int) -> None:
        self._pending = seq

    def handed(self) -> None:
        if self._pending is not None:
            self.last, self._pending = self._pending, None


class _RecheckClock:
    """Due every `every` seconds (one timer per interval, none per event): wakes the
    member so its credentials are checked even while no frame comes."""

    __slots__ = ("_handle", "due", "every", "member")

    def __init__(self, member: Member, every: float) -> None:
        self.member = member
        self.every = every
        self.due = False
        self._handle: asyncio.TimerHandle | None = None
        self.start()

    def start(self) -> None:
        self.due = False
        self._handle = asyncio.get_running_loop().call_later(self.every, self._fire)

    def _fire(self) -> None:
        self.due = True
        self.member.wake()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


def _json(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _root_key(prepared: Prepared) -> str:
    """The response key of the subscription's one root field (its alias or name)."""
    for selection in prepared.operation.selection_set.selections:
        if isinstance(selection, FieldNode):
            return (selection.alias or selection.name).value
    return "sessionEvents"


def _never_ran(result: Result) -> bool:
    """No `data` at all and no error with a path: the operation never ran (variables
    that do not coerce; parse and validation failures never reach execution)."""
    if isinstance(result, PreExecutionError):
        return True
    errors = result.errors or ()
    return result.data is None and bool(errors) and all(e.path is None for e in errors)


__all__ = ["Admitted", "OperationPipeline"]
