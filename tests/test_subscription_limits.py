"""Issue 9's document and cost limits hold for subscriptions too (SSE shown; the
WebSocket transport runs the same schema extension): a costly or fanned-out
`sessionEvents` document is refused before it streams anything."""

from __future__ import annotations

import httpx
import pytest

from gateway import SessionQuery, SessionStore, create_app

COSTLY = (
    'subscription { sessionEvents(sessionId: "s") { session { events(first: 500) { nodes {'
    " session { events(first: 500) { nodes { seq } } } } } } } }"
)
FAN_OUT = (
    'subscription { sessionEvents(sessionId: "s") { ...F0 } } '
    + " ".join(f"fragment F{i} on Event {{ {' '.join([f'...F{i + 1}'] * 10)} }}" for i in range(6))
    + " fragment F6 on Event { seq }"
)


@pytest.mark.parametrize(
    ("document", "code"),
    [(COSTLY, "QUERY_TOO_COSTLY"), (FAN_OUT, "GRAPHQL_VALIDATION_FAILED")],
)
async def test_subscription_documents_are_held_to_the_request_limits(
    document: str, code: str
) -> None:
    store = SessionStore()
    session = store.create("s", created_at=1)
    session.append("turn/start", {})
    app = create_app(SessionQuery(live=[store]))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        r = await c.post(
            "/graphql", json={"query": document}, headers={"Accept": "text/event-stream"}
        )
    # Refused by the pipeline before any stream starts, as over every other transport.
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    assert [e["extensions"]["code"] for e in r.json()["errors"]] == [code]
    assert "data" not in r.json()
