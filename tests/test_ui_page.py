"""The viewer page (/ui) as served: a static shell that a strict CSP allows, its
assets on the gateway's own origin, dagre vendored with its licence, open to a
browser without a token while /graphql stays closed, and linked from GraphiQL
and the serve banner. (What the page draws is tested in a browser:
tests/test_ui_browser.py.)"""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from gateway import SessionQuery, SessionStore, create_app
from gateway.commands.serve import banner
from gateway.core.filters import MAX_TEXT_LENGTH
from gateway.server.config import GatewayConfig
from gateway.server.principal import Principal, Unauthenticated
from gateway.web.graphiql import STATIC_DIR
from gateway.web.ui import ui_html
from tests.test_graphql_helpers import client

UI_DIR = STATIC_DIR / "ui"
HTML = {"Accept": "text/html,application/xhtml+xml"}


class _Shell(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.styles = 0
        self.style_attrs: list[str] = []
        self.handlers: list[str] = []
        self.links: list[dict[str, str | None]] = []
        self.inline_script_text = ""
        self._in_script = False
        self.body: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.handlers += [name for name in found if name.startswith("on")]
        if "style" in found:
            self.style_attrs.append(tag)
        if tag == "script":
            self.scripts.append(found)
            self._in_script = True
        elif tag == "style":
            self.styles += 1
        elif tag == "link":
            self.links.append(found)
        elif tag == "body":
            self.body = found

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.inline_script_text += data.strip()


def _app(config: GatewayConfig | None = None, **collaborators: Any) -> object:
    return create_app(SessionQuery(live=[SessionStore()]), config, **collaborators)


async def test_ui_shell_has_no_inline_code_so_a_strict_csp_allows_it() -> None:
    async with client(_app()) as c:
        r = await c.get("/ui", headers=HTML)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    shell = _Shell()
    shell.feed(r.text)
    assert shell.scripts and all(s.get("src") for s in shell.scripts)
    assert shell.inline_script_text == ""
    assert shell.styles == 0 and shell.style_attrs == [] and shell.handlers == []
    assert shell.body["data-auth"] == "off" and shell.body["data-endpoint"] == "/graphql"


async def test_every_asset_the_shell_names_is_served_from_the_gateway() -> None:
    async with client(_app()) as c:
        shell = _Shell()
        shell.feed((await c.get("/ui", headers=HTML)).text)
        urls = [s["src"] for s in shell.scripts] + [link["href"] for link in shell.links]
        modules = sorted(p.name for p in UI_DIR.glob("*.js"))
        urls += [f"/static/ui/{name}" for name in modules]
        for url in urls:
            assert url and url.startswith("/static/ui/"), url
            r = await c.get(url)
            assert r.status_code == 200, url
            assert r.content == (STATIC_DIR / url.removeprefix("/static/")).read_bytes()


def test_page_scripts_import_only_their_own_modules() -> None:
    for path in UI_DIR.glob("*.js"):
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"^import .* from \"([^\"]+)\";", text, re.M):
            assert target.startswith("./") and (UI_DIR / target).exists(), (path.name, target)
        assert "eval(" not in text and "new Function" not in text, path.name
        urls = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert urls == set(), (path.name, urls)


def test_dagre_is_vendored_byte_for_byte_as_versions_txt_records() -> None:
    vendor = UI_DIR / "vendor"
    versions = (vendor / "VERSIONS.txt").read_text(encoding="utf-8")
    assert re.search(r"^@dagrejs/dagre \d+\.\d+\.\d+ sha512-", versions, re.M)
    listed = dict(
        (name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", versions, re.M)
    )
    files = {
        p.relative_to(vendor).as_posix()
        for p in vendor.rglob("*")
        if p.is_file() and p.name != "VERSIONS.txt"
    }
    assert set(listed) == files
    for name, digest in listed.items():
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
    assert "Permission is hereby granted" in (vendor / "licenses/dagre.LICENSE.txt").read_text()


async def test_with_auth_the_page_opens_without_a_token_but_graphql_does_not() -> None:
    async def authenticate(authorization: str | None) -> Principal:
        raise Unauthenticated("no token")

    async with client(_app(authenticate=authenticate)) as c:
        page = await c.get("/ui?session=demo-root&seq=3", headers=HTML)
        asset = await c.get("/static/ui/app.js")
        data = await c.post("/graphql", json={"query": "{ __typename }"})
        not_a_browser = await c.get("/ui")
    assert page.status_code == 200 and 'data-auth="on"' in page.text
    assert asset.status_code == 200
    assert data.status_code == 401 and not_a_browser.status_code == 401


async def test_graphiql_and_the_serve_banner_link_the_viewer() -> None:
    async with client(_app()) as c:
        graphiql = await c.get("/graphql", headers=HTML)
    assert 'href="/ui"' in graphiql.text
    assert "http://127.0.0.1:8000/ui" in banner("http://127.0.0.1:8000", demo=False)


async def test_without_graphiql_there_is_no_viewer_either() -> None:
    async with client(_app(GatewayConfig(graphiql=False))) as c:
        r = await c.get("/ui", headers=HTML)
    assert r.status_code == 404


def test_shell_file_list_is_what_the_wheel_ships() -> None:
    import tomllib

    config = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    packages = config["tool"]["setuptools"]["packages"]
    for folder in (UI_DIR, UI_DIR / "vendor", UI_DIR / "vendor" / "licenses"):
        dotted = "gateway." + folder.relative_to(STATIC_DIR.parent.parent).as_posix().replace(
            "/", "."
        )
        assert dotted in packages, dotted


class _Controls(HTMLParser):
    """The shell's inputs and what labels them (a `for` or an enclosing label)."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[dict[str, str | None]] = []
        self.label_for: set[str] = set()
        self.wrapped: set[str] = set()
        self._open_labels = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "label":
            self._open_labels += 1
            if found.get("for"):
                self.label_for.add(str(found["for"]))
        elif tag == "input":
            self.inputs.append(found)
            if self._open_labels and found.get("id"):
                self.wrapped.add(str(found["id"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self._open_labels -= 1


def test_every_search_and_filter_control_has_a_label_and_the_texts_bound() -> None:
    controls = _Controls()
    controls.feed(ui_html())
    ids = {str(i.get("id")) for i in controls.inputs}
    assert {
        "search-input",
        "filter-cwd",
        "filter-from",
        "filter-to",
        "filter-live",
        "filter-persisted",
        "event-search-input",
    } <= ids
    unlabelled = ids - controls.label_for - controls.wrapped
    assert unlabelled == set()
    for field in controls.inputs:
        if field.get("id") in ("search-input", "event-search-input"):
            assert field.get("maxlength") == str(MAX_TEXT_LENGTH)  # SPEC §13's query bound


def test_shell_preloads_every_module_and_names_the_export_route() -> None:
    shell = _Shell()
    shell.feed(ui_html())
    preloaded = {
        str(link["href"]).rsplit("/", 1)[-1]
        for link in shell.links
        if link.get("rel") == "modulepreload"
    }
    assert preloaded == {p.name for p in UI_DIR.glob("*.js")} - {"app.js"}
    assert shell.body["data-export"] == "/sessions"  # GET /sessions/{id}/export, SPEC §15
