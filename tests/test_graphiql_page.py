"""The offline GraphiQL page: its HTML, its vendored assets, and the browser harness's own check.

The gateway's real page is driven in headless Chromium by tests/test_graphiql_browser.py
and audited by tests/test_http_audit.py. Here: the page's markup (assets only from
the static prefix, no absolute URL, the configuration embedded safely), the vendored
files and their recorded versions, and that the browser harness catches a page that
loads from a CDN (Strawberry's stock GraphiQL view), so the "no request left the
machine" checks elsewhere can fail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser

import pytest
import strawberry
from starlette.applications import Starlette
from starlette.routing import Route
from strawberry.asgi import GraphQL

from gateway.web import STATIC_DIR, graphiql_html
from tests.support.node_tools import run_browser_check
from tests.support.server import running_server

HELLO = "Hello from the offline harness"
STATIC_PREFIX = "/static/graphiql"
VENDORED = ("graphiql.min.js", "graphiql.min.css", "react.production.min.js",
            "react-dom.production.min.js", "graphql-ws.min.js")  # fmt: skip


@strawberry.type
class Query:
    @strawberry.field
    def hello(self) -> str | None:
        return HELLO


def make_app() -> Starlette:
    """Strawberry's stock view, whose GraphiQL page loads from a CDN."""
    return Starlette(routes=[Route("/cdn-graphql", GraphQL(strawberry.Schema(query=Query)))])


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with running_server(make_app()) as url:
        yield url


class _AssetCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":  # a link to another page (the viewer) is navigation, not an asset
            return
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.urls.append(value)


def _asset_urls(page: str) -> list[str]:
    collector = _AssetCollector()
    collector.feed(page)
    return collector.urls


# --- the page itself ---------------------------------------------------------------


def test_page_loads_only_from_static_prefix() -> None:
    page = graphiql_html(static_prefix="/assets/gql/")
    urls = _asset_urls(page)
    assert {u.rsplit("/", 1)[-1] for u in urls if not u.startswith("data:")} == set(VENDORED)
    assert all(u.startswith("/assets/gql/") or u.startswith("data:") for u in urls), urls
    assert not re.search(r"https?://", page), "the page must not reference any absolute URL"


def test_page_embeds_endpoint_accept_and_default_query_safely() -> None:
    nasty = "{ hello } # </script><script>alert(1)</script> & \u2028"
    page = graphiql_html(endpoint="/api/graphql", title="<T&>", default_query=nasty)
    assert "<title>&lt;T&amp;&gt;</title>" in page
    assert "</script><script>alert(1)" not in page
    config = re.search(r'id="graphiql-config" type="application/json">(.*?)</script>', page)
    assert config is not None
    data = json.loads(config.group(1))
    assert data["endpoint"] == "/api/graphql"
    assert data["defaultQuery"] == nasty
    assert data["accept"] == "application/graphql-response+json, application/json"
    assert graphiql_html().count('"defaultQuery":null') == 1


def test_vendored_assets_exist_with_versions() -> None:
    root = STATIC_DIR / "graphiql"
    for name in VENDORED:
        assert (root / name).stat().st_size > 1000, name
    versions = (root / "VERSIONS.txt").read_text(encoding="utf-8")
    assert re.search(r"^graphiql 3\.\d+\.\d+ sha512-", versions, re.M)
    assert (root / "licenses" / "graphiql.LICENSE.txt").exists()
    assert re.search(r"^graphql-ws 6\.\d+\.\d+ sha512-", versions, re.M)
    assert (root / "licenses" / "graphql-ws.LICENSE.txt").exists()


# --- headless browser ----------------------------------------------------------------


@pytest.mark.browser
def test_browser_check_flags_requests_leaving_the_host(server_url: str) -> None:
    # Strawberry's built-in page loads GraphiQL from a CDN: the harness must block and
    # list those requests (nothing is sent) and report the page as not working.
    report = run_browser_check(f"{server_url}/cdn-graphql", "{ hello }", HELLO, step_timeout_s=1)
    assert not report["ok"]
    assert report["failedRequests"], report
    assert all("127.0.0.1" not in r["url"] for r in report["failedRequests"])
    assert report["error"]
