"""End-to-end checks of the web test harness and the offline GraphiQL page.

A tiny Starlette app (throwaway strawberry schema with ``hello: String``) serves the
vendored GraphiQL page at ``/graphql`` and the assets under ``/static``; it runs
under uvicorn on a free loopback port in a background thread. Against it we run the
graphql-http audit (tests/js/audit.mjs) and a headless-Chromium check
(tests/js/browser_check.mjs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
import strawberry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from strawberry.asgi import GraphQL

from gateway.web import STATIC_DIR, graphiql_html
from tests.support.node_tools import run_audit, run_browser_check
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


class OfflineGraphiQL(GraphQL):
    """Strawberry's ASGI view with the CDN-free GraphiQL page (the hook under test)."""

    async def render_graphql_ide(self, request: Request) -> Response:
        return HTMLResponse(
            graphiql_html(
                endpoint=request.url.path, static_prefix=STATIC_PREFIX, default_query="{ hello }"
            )
        )


def make_app() -> Starlette:
    schema = strawberry.Schema(query=Query)
    return Starlette(
        routes=[
            Route("/graphql", OfflineGraphiQL(schema)),
            # Strawberry's stock view (CDN-hosted GraphiQL): proves the browser
            # harness notices requests that leave the machine.
            Route("/cdn-graphql", GraphQL(schema)),
            Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
        ]
    )


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


def test_gateway_serves_page_and_assets(server_url: str) -> None:
    with httpx.Client(base_url=server_url, timeout=10) as client:
        page = client.get("/graphql", headers={"Accept": "text/html"})
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "graphiql-config" in page.text
        for url in _asset_urls(page.text):
            if url.startswith("data:"):
                continue
            asset = client.get(url)
            assert asset.status_code == 200, url
            assert len(asset.content) > 1000, url
        result = client.post(
            "/graphql",
            json={"query": "{ hello }"},
            headers={"Accept": "application/graphql-response+json, application/json"},
        )
        assert result.status_code == 200
        assert result.json() == {"data": {"hello": HELLO}}


# --- graphql-http audit --------------------------------------------------------------


def test_graphql_http_audit_harness(server_url: str) -> None:
    report: dict[str, Any] = run_audit(f"{server_url}/graphql")
    assert isinstance(report["ok"], int)
    for key in ("warn", "error", "notice"):
        assert isinstance(report[key], list)
        for entry in report[key]:
            assert {"id", "name", "reason"} <= entry.keys()
    assert report["total"] == report["ok"] + sum(
        len(report[k]) for k in ("warn", "error", "notice")
    )
    assert report["ok"] > 0, report
    print(
        f"\ngraphql-http audit of strawberry's default view: ok={report['ok']} "
        f"warn={len(report['warn'])} error={len(report['error'])} notice={len(report['notice'])}"
    )
    for key in ("error", "warn", "notice"):
        for entry in report[key]:
            print(f"  {key}: {entry['id']} {entry['name']}: {entry['reason']}")


# --- headless browser ----------------------------------------------------------------


@pytest.mark.browser
def test_graphiql_runs_query_in_headless_browser(server_url: str, tmp_path: Path) -> None:
    screenshot = tmp_path / "graphiql.png"
    report = run_browser_check(f"{server_url}/graphql", "{ hello }", HELLO, screenshot)
    assert report["failedRequests"] == [], "requests left the gateway's host"
    assert report["ok"], report
    assert HELLO in report["resultText"]
    assert report["consoleErrors"] == [], report["consoleErrors"]
    assert report["httpErrors"] == [], report["httpErrors"]
    assert screenshot.stat().st_size > 10_000


@pytest.mark.browser
def test_browser_check_replaces_the_default_query(server_url: str) -> None:
    report = run_browser_check(f"{server_url}/graphql", "query Q { greeting: hello }", '"greeting"')
    assert report["ok"], report
    assert '"greeting": "' + HELLO in report["resultText"]
    assert report["failedRequests"] == []


@pytest.mark.browser
def test_browser_check_flags_requests_leaving_the_host(server_url: str) -> None:
    # Strawberry's built-in page loads GraphiQL from a CDN: the harness must block and
    # list those requests (nothing is sent) and report the page as not working.
    report = run_browser_check(f"{server_url}/cdn-graphql", "{ hello }", HELLO, step_timeout_s=3)
    assert not report["ok"]
    assert report["failedRequests"], report
    assert all("127.0.0.1" not in r["url"] for r in report["failedRequests"])
    assert report["error"]
