"""Access in headless Chromium: a page on another origin calls the gateway with fetch()
(CORS allowed and refused, a readable 401 and 429), and GraphiQL asks for a token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from gateway import SessionQuery, SessionStore, create_app
from gateway.server.config import GatewayConfig
from tests.support.access_browser import fetch_from_page, graphiql_with_token
from tests.support.server import running_server
from tests.support.tokens import issued_tokens_for_a_server
from tests.test_graphql_helpers import simple_log

pytestmark = pytest.mark.browser

QUERY = "{ sessions(first: 5) { totalCount } }"


def _query() -> SessionQuery:
    store = SessionStore()
    store.create("a", created_at=1, seed=simple_log(3))
    store.create("b", created_at=2, parent_session="a")
    return SessionQuery(live=[store])


def _frontend() -> Starlette:
    """A second site: one page, on its own origin, that calls the gateway with fetch()."""

    async def index(request: Any) -> HTMLResponse:
        return HTMLResponse("<!doctype html><title>a frontend</title><p>frontend</p>")

    return Starlette(routes=[Route("/", index)])


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tokens = tmp_path_factory.mktemp("cors") / "tokens.db"
    with (
        running_server(_frontend()) as allowed,
        running_server(_frontend()) as refused,
        issued_tokens_for_a_server(tokens, ("frontend", ["all"], False)) as (auth, secret),
    ):
        app = create_app(
            _query(),
            GatewayConfig(cors_origins=[allowed], rate_limit="3/minute"),
            authenticate=auth,
        )
        with running_server(app) as gateway:
            yield {"allowed": allowed, "refused": refused, "gateway": gateway,
                   "secret": secret["frontend"]}  # fmt: skip


def _post(gateway: str, token: str | None, read: tuple[str, ...] = ()) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return {
        "url": f"{gateway}/graphql",
        "method": "POST",
        "headers": headers,
        "body": {"query": QUERY},
        "readHeaders": list(read),
    }


def test_a_page_on_a_listed_origin_calls_the_gateway_and_reads_401_and_429(
    sites: dict[str, str],
) -> None:
    gw, secret = sites["gateway"], sites["secret"]
    plan = [
        _post(gw, secret),  # preflighted (Authorization, JSON), then answered
        _post(gw, None, ("www-authenticate",)),  # no token: a 401 the page can read
        _post(gw, secret),
        _post(gw, secret),
        _post(gw, secret, ("retry-after",)),  # the token's 4th in a minute: 429
    ]
    report = fetch_from_page(sites["allowed"], plan)
    assert report["ok"], report
    ok, unauthenticated, _, _, limited = report["results"]
    assert ok["status"] == 200, report
    assert json.loads(ok["body"]) == {"data": {"sessions": {"totalCount": 2}}}
    assert unauthenticated["status"] == 401
    assert unauthenticated["headers"]["www-authenticate"].startswith("Bearer")
    assert json.loads(unauthenticated["body"])["errors"][0]["extensions"]["code"] == (
        "UNAUTHENTICATED"
    )
    assert limited["status"] == 429
    assert int(limited["headers"]["retry-after"]) >= 1
    assert json.loads(limited["body"])["errors"][0]["extensions"]["code"] == "RATE_LIMITED"


def test_a_page_on_an_unlisted_origin_cannot_read_the_gateway(sites: dict[str, str]) -> None:
    gw = sites["gateway"]
    simple_get = {
        "url": f"{gw}/graphql?query={QUERY}",
        "method": "GET",
        "headers": {},
        "readHeaders": [],
    }
    report = fetch_from_page(sites["refused"], [_post(gw, sites["secret"]), simple_get])
    assert report["ok"], report
    for result in report["results"]:
        assert result["status"] is None and "Failed to fetch" in result["error"], report
    assert any("CORS" in text for text in report["consoleErrors"]), report


def test_graphiql_asks_for_a_token_and_sends_it_as_a_bearer(tmp_path: Path) -> None:
    shot = tmp_path / "graphiql-token.png"
    with issued_tokens_for_a_server(tmp_path / "t.db", ("person", ["all"], False)) as (
        auth,
        secrets,
    ):
        secret = secrets["person"]
        app = create_app(_query(), GatewayConfig(default_query="{ __typename }"), authenticate=auth)
        with running_server(app) as url:
            report = graphiql_with_token(f"{url}/graphql", secret, QUERY, '"totalCount": 2', shot)
    assert report["ok"], report
    assert report["field"] == {"type": "password"}
    assert "UNAUTHENTICATED" in report["withoutToken"]
    assert '"totalCount": 2' in report["resultText"]
    assert f"Bearer {secret}" in report["authorizationHeaders"]
    # the schema is read again with the token once it is entered
    assert {"authorization": f"Bearer {secret}", "introspection": True} in report["posts"]
    assert secret in report["sessionStorage"].values()
    assert not any(secret in str(v) for v in report["localStorage"].values())
    assert shot.stat().st_size > 10_000
