"""CORS (SPEC §10): listed origins may call /graphql from a browser; nothing by default.

Over httpx; the same in headless Chromium is tests/test_access_browser.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.server.config import GatewayConfig
from gateway.server.cors import check_origin
from tests.support.tokens import bearer, issued_tokens
from tests.test_graphql_helpers import client, simple_log

ALLOWED = "http://tools.example:5173"
REFUSED = "http://evil.example"
QUERY = "{ sessions(first: 5) { totalCount } }"


def _query() -> SessionQuery:
    store = SessionStore()
    store.create("a", created_at=1, seed=simple_log(3))
    return SessionQuery(live=[store])


def _preflight(origin: str, headers: str = "authorization, content-type") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": headers,
    }


async def test_preflight_from_a_listed_origin_allows_post_with_authorization() -> None:
    app = create_app(_query(), GatewayConfig(cors_origins=[ALLOWED]))
    async with client(app) as c:
        r = await c.options("/graphql", headers=_preflight(ALLOWED))
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == ALLOWED
    assert set(r.headers["access-control-allow-methods"].split(", ")) == {"GET", "POST"}
    allowed_headers = {
        h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")
    }
    assert {"authorization", "content-type"} <= allowed_headers
    assert "Origin" in r.headers["vary"]


async def test_preflight_from_an_unlisted_origin_is_refused() -> None:
    app = create_app(_query(), GatewayConfig(cors_origins=[ALLOWED]))
    async with client(app) as c:
        r = await c.options("/graphql", headers=_preflight(REFUSED))
        other_header = await c.options("/graphql", headers=_preflight(ALLOWED, "x-something-else"))
    assert r.status_code == 400
    assert "access-control-allow-origin" not in r.headers
    assert other_header.status_code == 400  # only Authorization and Content-Type


async def test_actual_request_carries_allow_origin_only_for_a_listed_origin() -> None:
    app = create_app(_query(), GatewayConfig(cors_origins=[ALLOWED]))
    async with client(app) as c:
        ok = await c.post("/graphql", json={"query": QUERY}, headers={"Origin": ALLOWED})
        refused = await c.post("/graphql", json={"query": QUERY}, headers={"Origin": REFUSED})
    assert ok.status_code == 200 and ok.json() == {"data": {"sessions": {"totalCount": 1}}}
    assert ok.headers["access-control-allow-origin"] == ALLOWED
    exposed = {h.strip().lower() for h in ok.headers["access-control-expose-headers"].split(",")}
    assert {"retry-after", "www-authenticate", "x-request-id"} <= exposed
    # the server answers (CORS is the browser's to enforce) but lets no other page read it
    assert "access-control-allow-origin" not in refused.headers


async def test_nothing_is_allowed_by_default() -> None:
    app = create_app(_query())
    async with client(app) as c:
        pre = await c.options("/graphql", headers=_preflight(ALLOWED))
        r = await c.post("/graphql", json={"query": QUERY}, headers={"Origin": ALLOWED})
    assert pre.status_code == 405
    assert "access-control-allow-origin" not in pre.headers
    assert "access-control-allow-origin" not in r.headers


async def test_wildcard_origin_lets_any_page_call_without_credentials() -> None:
    app = create_app(_query(), GatewayConfig(cors_origins=["*"]))
    async with client(app) as c:
        r = await c.post("/graphql", json={"query": QUERY}, headers={"Origin": REFUSED})
    assert r.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in r.headers


async def test_preflight_is_answered_before_auth_and_a_401_still_carries_cors_headers(
    tmp_path: Path,
) -> None:
    async with issued_tokens(tmp_path / "t.db", ("reader", ["all"], False)) as (auth, secret):
        app = create_app(_query(), GatewayConfig(cors_origins=[ALLOWED]), authenticate=auth)
        async with client(app) as c:
            pre = await c.options("/graphql", headers=_preflight(ALLOWED))
            denied = await c.post("/graphql", json={"query": QUERY}, headers={"Origin": ALLOWED})
            ok = await c.post(
                "/graphql",
                json={"query": QUERY},
                headers={"Origin": ALLOWED, **bearer(secret["reader"])},
            )
    assert pre.status_code == 200
    assert denied.status_code == 401
    assert denied.headers["access-control-allow-origin"] == ALLOWED
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == ALLOWED


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("https://Tools.Example.com", "https://tools.example.com"),
        ("https://tools.example.com:443", "https://tools.example.com"),
        ("http://127.0.0.1:5173", "http://127.0.0.1:5173"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        ("*", "*"),
    ],
)
def test_origins_are_taken_in_the_form_browsers_send(given: str, normal: str) -> None:
    assert check_origin(given) == normal


@pytest.mark.parametrize(
    "bad",
    [
        "https://tools.example.com/",
        "tools.example.com",
        "https://x.example/app",
        "null",
        "",
        "https://u@x.example",
    ],
)
def test_a_value_that_is_not_an_origin_is_refused_at_start(bad: str) -> None:
    with pytest.raises(ValueError, match="not an origin"):
        create_app(_query(), GatewayConfig(cors_origins=[bad]))
