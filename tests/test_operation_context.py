"""The operation runs in the task that asked for it (`asyncio.timeout`, not a task of its
own), so what it sets in that task must not outlive it: `current_context` is the
operation's while it runs and is reset (with its token) when it ends, answered,
failed or timed out; the timeout still cancels the operation's backend work.

httpx's ASGI transport runs the app in the test's own task: a context left set by the
pipeline would show here, after the request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway import SessionQuery, create_app
from gateway.core import SessionHeader
from gateway.server.config import GatewayConfig, Limits
from gateway.server.context import Context, current_context
from tests.test_graphql_helpers import codes, gql


class SeeingBackend:
    """A double that says which context its reads ran under, and whether it was
    cancelled (a hang until then, when `hang`)."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.seen: list[Context | None] = []
        self.cancelled = 0

    async def list(self) -> list[SessionHeader]:
        self.seen.append(current_context.get())
        if self.hang:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return []

    async def load(self, session_id: str) -> Any:
        raise KeyError(session_id)


async def test_the_operation_context_is_the_operations_and_reset_when_it_ends() -> None:
    backend = SeeingBackend()
    app = create_app(SessionQuery(persistence=backend))
    assert current_context.get() is None
    body = await gql(app, "{ sessions { totalCount } }")
    assert body["data"] == {"sessions": {"totalCount": 0}}
    assert len(backend.seen) == 1 and isinstance(backend.seen[0], Context)
    assert current_context.get() is None
    body = await gql(app, "{ nope }", status=None)  # refused before it runs
    assert codes(body) == ["GRAPHQL_VALIDATION_FAILED"]
    assert current_context.get() is None


async def test_a_timed_out_operation_is_cancelled_and_leaves_no_context_behind() -> None:
    backend = SeeingBackend(hang=True)
    app = create_app(
        SessionQuery(persistence=backend), GatewayConfig(limits=Limits(operation_timeout=0.2))
    )
    body = await gql(app, "{ sessions { totalCount } }", status=504)
    assert codes(body) == ["OPERATION_TIMEOUT"]
    assert current_context.get() is None
    await asyncio.sleep(0)  # the cancelled read's task unwinds
    assert backend.cancelled == 1
    # the task that asked is usable again: no cancellation left pending on it
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    body = await gql(app, "{ __typename }")
    assert body["data"] == {"__typename": "Query"}
