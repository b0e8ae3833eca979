"""The token read rides the request's own snapshot (issue #21, build 4).

With `serve --auth tokens`, the pipeline opens the request's snapshot before
admission and reads the bearer token in it: the token's row and the data the
operation reads come from one transaction (on PostgreSQL one connection and one
renewal), on both engines. Every snapshot so opened is closed, whether the
operation runs, is refused or is a subscription; a token revoked since the last
request is refused by the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from gateway import SessionQuery, create_app
from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence
from gateway.persistence.base import SqlBase
from gateway.persistence.pg_readers import AsyncpgReadConn
from gateway.persistence.readers import SqliteReadConn
from gateway.persistence.tokens import _SELECT_TOKEN, TokenStore
from gateway.server.auth import token_authenticator
from tests.core_helpers import ev
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

KEY = b"k" * 40
SESSION = '{ session(id: "s0") { id header { cwd } } }'
SESSIONS = "{ sessions(first: 5) { nodes { id } } }"


@contextmanager
def transactions_of_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, Any]]]:
    """(statement, its transaction's memo) of every read statement, both engines: one
    memo dict per transaction (`ReadConn.memo`), so its identity names the transaction."""
    seen: list[tuple[Any, Any]] = []
    for conn_type in (SqliteReadConn, AsyncpgReadConn):
        rows = conn_type.rows

        def counting(self: Any, statement: Any, params: Any = None, _rows: Any = rows) -> Any:
            seen.append((statement, self.memo))
            return _rows(self, statement, params)

        monkeypatch.setattr(conn_type, "rows", counting)
    yield seen


@contextmanager
def snapshots_opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How many backend snapshots were opened and closed."""
    counts = {"opened": 0, "closed": 0}
    make = SqlBase.read_snapshot

    def counted(self: SqlBase, **kw: Any) -> Any:
        found = make(self, **kw)
        if found is None:
            return None
        counts["opened"] += 1
        close = found.close

        def closing() -> None:
            counts["closed"] += 1
            close()

        return type(found)(found.backend, closing, found.moved)

    monkeypatch.setattr(SqlBase, "read_snapshot", counted)
    yield counts


async def _app(db: SqlPersistence) -> tuple[Any, TokenStore, str]:
    await db.create(SessionHeader("s0", 1, cwd="/w"), [ev(0), ev(1)])
    tokens = TokenStore(db, KEY)
    _, secret = await tokens.create("reader", ["all"])
    app = create_app(SessionQuery(persistence=db), authenticate=token_authenticator(tokens))
    return app, tokens, secret


async def _post(app: Any, query: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return await client.post("/graphql", json={"query": query}, headers=headers)


def _distinct(memos: list[Any]) -> int:
    found: list[Any] = []
    for memo in memos:
        if not any(memo is f for f in found):
            found.append(memo)
    return len(found)


async def test_a_tokens_read_and_the_requests_reads_share_one_transaction(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token's SELECT and the operation's reads run in one transaction (one memo),
    the token's first, on both engines; and only one snapshot is opened."""
    app, _, secret = await _app(db)
    assert (await _post(app, SESSION, secret)).status_code == 200  # warm
    with transactions_of_reads(monkeypatch) as seen, snapshots_opened(monkeypatch) as counts:
        response = await _post(app, SESSION, secret)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["session"] == {"id": "s0", "header": {"cwd": "/w"}}
    statements = [statement for statement, _ in seen]
    assert statements[0] is _SELECT_TOKEN, "the token is the request's first read"
    assert len(statements) >= 2, statements
    assert _distinct([memo for _, memo in seen]) == 1, "the token was read in another transaction"
    assert counts == {"opened": 1, "closed": 1}


async def test_every_snapshot_opened_at_admission_is_closed(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused for its token, refused for its document, run as a query, as a GET, or
    streamed as a subscription over SSE: each request's snapshot is closed by its end."""
    app, _, secret = await _app(db)
    with snapshots_opened(monkeypatch) as counts:
        assert (await _post(app, SESSION, "sgw_000000000000_" + "A" * 43)).status_code == 401
        assert (await _post(app, SESSION, None)).status_code == 401
        invalid = await _post(app, "{ nope }", secret)
        assert "data" not in invalid.json() and invalid.json()["errors"], invalid.text
        assert (await _post(app, SESSIONS, secret)).status_code == 200
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            got = await client.get(
                "/graphql",
                params={"query": SESSION},
                headers={"Authorization": f"Bearer {secret}", "Accept": "application/json"},
            )
            assert got.status_code == 200, got.text
            streamed = await client.post(
                "/graphql",
                json={"query": 'subscription { sessionEvents(sessionId: "s0") { seq } }'},
                headers={
                    "Authorization": f"Bearer {secret}",
                    "Accept": "text/event-stream",
                },
            )
            assert streamed.status_code == 200, streamed.text
            assert streamed.text.count('"seq"') == 2, streamed.text  # replayed, then done
    assert counts["opened"] >= 5
    assert counts["closed"] == counts["opened"], counts


async def test_a_token_revoked_after_one_request_is_refused_by_the_next(
    db: SqlPersistence,
) -> None:
    """Read in the request's snapshot, a token is still read afresh by every request."""
    app, tokens, secret = await _app(db)
    assert (await _post(app, SESSION, secret)).status_code == 200
    await tokens.revoke("reader")
    refused = await _post(app, SESSION, secret)
    assert refused.status_code == 401
    assert "revoked" in refused.text


async def test_a_snapshot_of_another_database_is_not_where_a_token_is_read(
    db: SqlPersistence, tmp_path: Any
) -> None:
    """A token store reads in the request's snapshot only when it is its own database's:
    a query mounted on another database still finds its tokens in their own."""
    await db.create(SessionHeader("s0", 1, cwd="/w"), [ev(0)])
    tokens = TokenStore(db, KEY)
    _, secret = await tokens.create("reader", ["all"])
    other = SqlPersistence(f"sqlite:///{tmp_path / 'other.db'}")
    await other.ensure_schema()
    try:
        await other.create(SessionHeader("elsewhere", 1, cwd="/o"))
        app = create_app(SessionQuery(persistence=other), authenticate=token_authenticator(tokens))
        response = await _post(app, '{ session(id: "elsewhere") { id } }', secret)
        assert response.status_code == 200, response.text
        assert response.json()["data"]["session"] == {"id": "elsewhere"}
    finally:
        await other.close()
