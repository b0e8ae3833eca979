"""The `Subscription` root of SPEC §11 and the transport-neutral runner of streamed operations.

`sessionEvents(sessionId, afterSeq)` maps the core's live tail
(`gateway.core.tail.tail_session`) onto the existing `Event` type. The session
is resolved through the request's `Context` first, so SESSION_NOT_FOUND (and,
with a scoped context, invisibility) applies exactly as for `session(id)`.

"Surface and relations of a streamed event are as of its emission": before
each event is handed to the executor, the subscription's context is made
afresh through the same `make_context` the HTTP requests use
(`StreamRoot.renew_context`) and its fields are moved into the context object
the executor holds, so every resolver of that event sees one new observation
of the corpus (and whatever request scope `make_context` builds). The
observation the replay reads persisted pages through stays open until the
stream ends.

Subscriptions are run, for every transport, by the operation pipeline
(`gateway.server.pipeline.OperationPipeline.stream`), which also keeps the
subscription metrics and takes each one's place in `SubscriptionSlots`: at
most `max_subscriptions` run at once on the server, `max_subscriptions_per_token`
per token (per client address with auth off), on every transport; past either
cap the subscription gets TOO_MANY_SUBSCRIPTIONS naming it. (graphql-transport-ws
also caps one connection's operations, `gateway.server.websocket`.)

Replays never hold a pooled connection while the client is not reading: a
persisted replay reads each page through a fresh observation, at most
`REPLAY_READERS` pages at once per app, and hands the page on only after the
read is over (`gateway.core.tail`); a blocked write holds only that page.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import strawberry

from gateway.core.tail import DEFAULT_TAIL_BUFFER, ReplayGate, TailLagged, tail_session
from gateway.observability.metrics import GatewayMetrics

from .codes import GatewayCode
from .context import Context
from .errors import GatewayError, simple_error
from .operation import ErrorJSON, Refused
from .principal import Principal
from .types.events import Event

Info = strawberry.Info[Context, Any]

SUBSCRIPTION_LAGGED = GatewayCode.SUBSCRIPTION_LAGGED
TOO_MANY_SUBSCRIPTIONS = GatewayCode.TOO_MANY_SUBSCRIPTIONS

REPLAY_READERS = 4
"""Persisted replay pages read at once per app: the pool (5 + 10 connections) always
keeps most of its connections for queries and `/readyz`, whatever the subscribers do."""

CapName = Literal["server", "token", "address"]


@dataclass(frozen=True, slots=True)
class SlotKey:
    """Whose subscription it is: a token's name, or the client address with auth off."""

    kind: Literal["token", "address"]
    name: str

    @classmethod
    def of(cls, principal: Principal | None, address: str) -> SlotKey:
        return cls("token", principal.name) if principal is not None else cls("address", address)


class SubscriptionSlots:
    """The server-wide and per-caller caps on running subscriptions (one per app).

    Counted on the app's event loop only (`take`/`give_back` never await), so a slot
    is taken and checked in one step. `refusal` is the same check without taking a
    slot: the pipeline asks it at admission, so a streamed transport with statuses
    (SSE) can still answer 429/503 before its stream starts.
    """

    def __init__(self, total: int, per_caller: int) -> None:
        self.total = total
        self.per_caller = per_caller
        self.running = 0
        self._by_caller: dict[SlotKey, int] = {}

    def of(self, key: SlotKey) -> int:
        """How many subscriptions `key` runs now."""
        return self._by_caller.get(key, 0)

    def refusal(self, key: SlotKey) -> Refused | None:
        """Why `key` may not start one more subscription now (None: it may)."""
        if self.running >= self.total:
            return self._refused(
                "server",
                f"the server's subscription cap is reached: at most {self.total} "
                "subscriptions run at once on this server (max_subscriptions); retry later",
                self.total,
            )
        if self.of(key) >= self.per_caller:
            who = "one token" if key.kind == "token" else "one client address"
            return self._refused(
                key.kind,
                f"the subscription cap per {key.kind} is reached: at most {self.per_caller} "
                f"subscriptions run at once for {who} (max_subscriptions_per_token); "
                "complete one first",
                self.per_caller,
            )
        return None

    def take(self, key: SlotKey) -> Refused | None:
        """Take a slot for `key` (None), or why not (no slot taken)."""
        refused = self.refusal(key)
        if refused is None:
            self.running += 1
            self._by_caller[key] = self.of(key) + 1
        return refused

    def give_back(self, key: SlotKey) -> None:
        """Free the slot `take` gave `key`."""
        self.running -= 1
        left = self.of(key) - 1
        if left > 0:
            self._by_caller[key] = left
        else:
            self._by_caller.pop(key, None)

    @staticmethod
    def _refused(cap: CapName, message: str, limit: int) -> Refused:
        error: ErrorJSON = simple_error(TOO_MANY_SUBSCRIPTIONS, message)
        error["extensions"]["cap"] = cap
        error["extensions"]["limit"] = limit
        status = 503 if cap == "server" else 429
        return Refused(status, [error], headers={"Retry-After": "1"})


@dataclass(frozen=True, slots=True)
class StreamRoot:
    """The root value of a streamed operation: what a subscription needs besides its
    context (passed by the transport, so the schema holds no per-app state)."""

    renew_context: Callable[[], Context]
    buffer_size: int = DEFAULT_TAIL_BUFFER
    metrics: GatewayMetrics | None = None
    replay_gate: ReplayGate | None = None
    executing: Callable[[int], None] | None = None
    """Told each event's seq before its answer is executed (a shared execution's handover)."""
    stop_before: int | None = None
    """Stop before this seq: a late joiner's own replay, up to the shared execution's frames."""
    starting: Callable[[int], None] | None = None
    """Told the seq the stream starts after (`afterSeq`), once the session is found."""


def _renew(context: Context, renew: Callable[[], Context], keep: object) -> None:
    """Move a freshly made context's fields into `context` (the executor's object),
    closing the replaced observation unless it is the one the replay still reads."""
    fresh = renew()
    if context.obs is not keep:
        context.close()
    for field in dataclasses.fields(context):
        setattr(context, field.name, getattr(fresh, field.name))


F = TypeVar("F", bound=Callable[..., Any])


def _subscription(description: str) -> Callable[[F], F]:
    """`@strawberry.subscription(description=...)`, keeping the resolver's type for mypy."""

    def wrap(fn: F) -> F:
        return cast(F, strawberry.subscription(fn, description=description))

    return wrap


@strawberry.type(description="Live streams over graphql-transport-ws or GraphQL over SSE.")
class Subscription:
    @_subscription(
        description=(
            "Every event of a session with seq > `afterSeq` (default -1) exactly once, in seq "
            "order: first those already recorded, then each new append of a live session. "
            "Completes after the replay for a persisted-only session, and when a live session "
            "leaves its store. A subscriber more than its buffer behind gets "
            "SUBSCRIPTION_LAGGED with `extensions.lastSeq`: resume with `afterSeq: lastSeq`. "
            "`surface` and relations of each event are as of its emission."
        )
    )
    async def session_events(
        self,
        info: Info,
        session_id: strawberry.ID,
        after_seq: int | None = strawberry.UNSET,
    ) -> AsyncGenerator[Event, None]:
        context = info.context
        root = info.root_value if isinstance(info.root_value, StreamRoot) else None
        buffer_size = root.buffer_size if root is not None else DEFAULT_TAIL_BUFFER
        metrics = root.metrics if root is not None else None
        after = -1 if after_seq is None or after_seq is strawberry.UNSET else after_seq
        sid = str(session_id)
        gate = root.replay_gate if root is not None else None
        if gate is None or context.obs.live_session(sid) is not None:
            await context.session(sid)  # SESSION_NOT_FOUND / scope, as for `session(id)`
        else:  # a persisted one: its proof is a read, queued with the replays' pages
            async with gate.semaphore():
                await context.session(sid)
        replay_obs = context.obs
        renew = root.renew_context if root is not None else None
        executing = root.executing if root is not None else None
        stop = root.stop_before if root is not None else None
        if root is not None and root.starting is not None:
            root.starting(after)
        if stop is not None and after + 1 >= stop:
            replay_obs.close()
            return
        items = tail_session(
            replay_obs,
            sid,
            after,
            buffer_size=buffer_size,
            observe=(lambda: renew().obs) if renew is not None else None,
            gate=gate,
        )
        try:
            async with contextlib.aclosing(items):
                try:
                    async for item in items:
                        if root is not None:
                            _renew(context, root.renew_context, replay_obs)
                        seq = item.event.seq
                        if executing is not None:
                            executing(seq)
                        yield Event.wrap(sid, item.event, item.surface)
                        if stop is not None and seq + 1 >= stop:
                            return  # the shared frames take over from `stop`
                except TailLagged as exc:
                    if metrics is not None:
                        metrics.subscription_lagged.inc()
                    raise GatewayError(
                        SUBSCRIPTION_LAGGED, str(exc), lastSeq=exc.last_seq
                    ) from None
        finally:
            replay_obs.close()


__all__ = [
    "REPLAY_READERS",
    "SUBSCRIPTION_LAGGED",
    "TOO_MANY_SUBSCRIPTIONS",
    "SlotKey",
    "StreamRoot",
    "Subscription",
    "SubscriptionSlots",
]
