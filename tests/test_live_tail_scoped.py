"""SPEC §10 + §11: a subscription with a real token sees the token's scoped corpus.

Real tokens (`TokenStore` on a SQLite file, the gateway's own authenticator), a real
uvicorn server, the npm `graphql-ws` client for graphql-transport-ws and httpx for SSE:
a visible live session streams; an invisible one fails exactly like an absent one; a
revoked token is refused on its next connection.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from gateway import SessionQuery, SessionStore, create_app
from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import TokenStore
from tests.support.node_tools import run_subscription
from tests.support.server import running_server
from tests.support.sqlite_backend import sqlite_url
from tests.support.tokens import KEY, bearer, issued_tokens_for_a_server

SUBSCRIPTION = """
subscription Tail($id: ID!) { sessionEvents(sessionId: $id) { seq type } }
"""


def corpus() -> SessionStore:
    store = SessionStore()
    mine = store.create("mine", created_at=1, cwd="/srv/app")
    theirs = store.create("theirs", created_at=2, cwd="/srv/other")
    for i in range(3):
        mine.append("turn/start", {"i": i})
        theirs.append("turn/start", {"i": i})
    return store


def first_error(out: dict[str, Any]) -> dict[str, Any]:
    error = out["error"]
    assert isinstance(error, list) and error, out
    return dict(error[0])


def test_sessionevents_over_graphql_ws_sees_only_the_tokens_scoped_corpus(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tokens.db"
    with issued_tokens_for_a_server(path, ("app", ["cwd:/srv/app"], False)) as (auth, secrets):
        app = create_app(SessionQuery(live=[corpus()]), authenticate=auth)
        with running_server(app) as base:
            url = base.replace("http://", "ws://") + "/graphql"
            params = {"authorization": f"Bearer {secrets['app']}"}

            def subscribe(session_id: str) -> dict[str, Any]:
                return run_subscription(
                    {
                        "url": url,
                        "query": SUBSCRIPTION,
                        "variables": {"id": session_id},
                        "connectionParams": params,
                        "stopAfter": 3,
                    }
                )

            seen = subscribe("mine")
            hidden = first_error(subscribe("theirs"))
            absent = first_error(subscribe("nobody"))

            async def revoke() -> None:
                db = SqlPersistence(sqlite_url(path))
                try:
                    await TokenStore(db, KEY).revoke("app")
                finally:
                    await db.close()

            asyncio.run(revoke())
            refused = subscribe("mine")
    assert [r["data"]["sessionEvents"]["seq"] for r in seen["results"]] == [0, 1, 2]
    assert (
        hidden["extensions"]["code"]
        == absent["extensions"]["code"]
        == ("SESSION_QUERY_SESSION_NOT_FOUND")
    )
    assert hidden["message"].replace("'theirs'", "X") == absent["message"].replace("'nobody'", "X")
    assert refused["error"]["code"] == 4403 and not refused["results"]


def test_sessionevents_over_sse_needs_a_token_and_applies_its_scope(tmp_path: Path) -> None:
    path = tmp_path / "tokens.db"
    with issued_tokens_for_a_server(path, ("app", ["cwd:/srv/app"], False)) as (auth, secrets):
        app = create_app(SessionQuery(live=[corpus()]), authenticate=auth)
        with running_server(app) as base:

            def stream(session_id: str, headers: dict[str, str]) -> tuple[int, list[Any]]:
                body = {"query": SUBSCRIPTION, "variables": {"id": session_id}}
                with httpx.stream(
                    "POST",
                    base + "/graphql",
                    json=body,
                    headers={"Accept": "text/event-stream", **headers},
                    timeout=10,
                ) as response:
                    if response.status_code != 200:
                        response.read()
                        return response.status_code, [response.json()]
                    datas = []
                    for line in response.iter_lines():
                        if line.startswith("data: {"):
                            datas.append(json.loads(line.removeprefix("data: ")))
                        if len(datas) == 3 or line == "event: complete":
                            break
                    return 200, datas

            no_token = stream("mine", {})
            hidden = stream("theirs", bearer(secrets["app"]))
            # a visible live session streams (the first three events, then we hang up)
            status, seen = stream("mine", bearer(secrets["app"]))
    assert no_token[0] == 401
    assert no_token[1][0]["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert hidden[0] == 200
    assert hidden[1][0]["errors"][0]["extensions"]["code"] == "SESSION_QUERY_SESSION_NOT_FOUND"
    assert status == 200 and [d["data"]["sessionEvents"]["seq"] for d in seen] == [0, 1, 2]
