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
subscription metrics.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import strawberry

from gateway.core.tail import DEFAULT_TAIL_BUFFER, TailLagged, tail_session
from gateway.observability.metrics import GatewayMetrics

from .codes import GatewayCode
from .context import Context
from .errors import GatewayError
from .types.events import Event

Info = strawberry.Info[Context, Any]

SUBSCRIPTION_LAGGED = GatewayCode.SUBSCRIPTION_LAGGED
TOO_MANY_SUBSCRIPTIONS = GatewayCode.TOO_MANY_SUBSCRIPTIONS


@dataclass(frozen=True, slots=True)
class StreamRoot:
    """The root value of a streamed operation: what a subscription needs besides its
    context (passed by the transport, so the schema holds no per-app state)."""

    renew_context: Callable[[], Context]
    buffer_size: int = DEFAULT_TAIL_BUFFER
    metrics: GatewayMetrics | None = None


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
        await context.session(sid)  # SESSION_NOT_FOUND / scope, as for `session(id)`
        replay_obs = context.obs
        items = tail_session(replay_obs, sid, after, buffer_size=buffer_size)
        try:
            async with contextlib.aclosing(items):
                try:
                    async for item in items:
                        if root is not None:
                            _renew(context, root.renew_context, replay_obs)
                        yield Event.wrap(sid, item.event, item.surface)
                except TailLagged as exc:
                    if metrics is not None:
                        metrics.subscription_lagged.inc()
                    raise GatewayError(
                        SUBSCRIPTION_LAGGED, str(exc), lastSeq=exc.last_seq
                    ) from None
        finally:
            replay_obs.close()


__all__ = [
    "SUBSCRIPTION_LAGGED",
    "TOO_MANY_SUBSCRIPTIONS",
    "StreamRoot",
    "Subscription",
]
