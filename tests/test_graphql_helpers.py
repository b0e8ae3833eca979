"""Shared helpers for the GraphQL/app tests (no tests here).

`gql(app, query, variables)` posts one operation through httpx's ASGI transport;
`simple_log` and `header` build sessions. Counting backend calls is
`tests.backends.Counting`; serving an app over real HTTP is
`tests.support.server.running_server`; the real persisted source is
`tests.support.sqlite_backend.sql_backend`.
"""

from __future__ import annotations

from typing import Any

import httpx

from gateway.core import SessionEvent, SessionHeader

ACCEPT_BOTH = "application/graphql-response+json, application/json"


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


async def gql(
    app: Any,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    accept: str = "application/json",
    status: int | None = 200,
) -> dict[str, Any]:
    async with client(app) as c:
        r = await c.post(
            "/graphql",
            json={"query": query, "variables": variables},
            headers={"Accept": accept},
        )
    if status is not None:
        assert r.status_code == status, (r.status_code, r.text)
    body: dict[str, Any] = r.json()
    return body


def codes(body: dict[str, Any]) -> list[str]:
    return [e["extensions"]["code"] for e in body.get("errors", [])]


def msg(role: str, text: str) -> dict[str, Any]:
    return {"message": {"role": role, "content": [{"type": "text", "text": text}]}}


def simple_log(n: int, t0: int = 1_000) -> list[SessionEvent]:
    """n events alternating user/assistant messages and turn/start bookkeeping."""
    out = []
    for seq in range(n):
        if seq % 3 == 0:
            out.append(SessionEvent("turn/start", seq, t0 + seq, {"turn": seq}))
        else:
            role = "user" if seq % 3 == 1 else "assistant"
            out.append(
                SessionEvent(f"{role}/message", seq, t0 + seq, msg(role, f"m{seq}"), "append")
            )
    return out


def header(sid: str, created_at: int, parent: str | None = None) -> SessionHeader:
    return SessionHeader(sid, created_at, cwd="/w", parent_session=parent)
