"""The GraphiQL page shows a token field exactly when auth is on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway import SessionQuery, SessionStore, create_app
from tests.support.tokens import issued_tokens
from tests.test_graphql_helpers import client


async def _page(**collaborators: Any) -> str:
    app = create_app(SessionQuery(live=[SessionStore()]), **collaborators)
    async with client(app) as c:
        r = await c.get("/graphql", headers={"Accept": "text/html"})
    assert r.status_code == 200
    return r.text


async def test_the_page_asks_for_a_token_only_when_auth_is_on(tmp_path: Path) -> None:
    off = await _page()
    async with issued_tokens(tmp_path / "t.db") as (auth, _):
        on = await _page(authenticate=auth)
    assert 'id="gateway-token-input"' not in off
    assert '<label for="gateway-token-input">Bearer token</label>' in on
    assert 'type="password"' in on
    assert "window.sessionStorage.setItem" in on and "localStorage.setItem" not in on
