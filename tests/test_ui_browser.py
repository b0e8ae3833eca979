"""The viewer (/ui) in headless Chromium against a real server with the demo corpus.

What the page shows is checked against what the API answers (`traceSession`,
`events`, `event`) on the same server, never against hard-coded lists. Every
scenario also checks that the page logged no console error and sent no request
off the gateway's origin (the harness records every request URL). Screenshots go
to the test's tmp dir; with SESSION_GATEWAY_UI_SCREENSHOTS=DIR the screenshot
test also writes the README's PNGs there (docs/img), shrunk by `pngquant` when it
is installed:

    SESSION_GATEWAY_UI_SCREENSHOTS=docs/img .venv/bin/python -m pytest \
        tests/test_ui_browser.py -k screenshots
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.demo import T0, SimulatedAgent, load_demo
from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import TokenStore
from gateway.server.auth import token_authenticator
from tests.support.node_tools import run_ui_check
from tests.support.server import running_server
from tests.support.sqlite_backend import sqlite_url

pytestmark = pytest.mark.browser

EXTRA_SESSIONS = 30  # with the demo's 9, the list needs two pages of 25
TOKEN_KEY = b"v" * 40
SCREENSHOTS_ENV = "SESSION_GATEWAY_UI_SCREENSHOTS"

# Walk the virtual timeline top to bottom; collect each row's lane and every arrow.
COLLECT_TIMELINE = """(async () => {
  const view = document.getElementById("timeline-view");
  const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const lanes = {};
  const runs = [];
  const arrows = new Set();
  view.scrollTop = 0;
  for (;;) {
    await frame();
    for (const row of view.querySelectorAll(".row")) {
      if (row.dataset.seqFrom !== undefined) {
        runs.push([Number(row.dataset.seqFrom), Number(row.dataset.seqTo)]);
        for (let s = Number(row.dataset.seqFrom); s <= Number(row.dataset.seqTo); s++) {
          lanes[s] = row.dataset.lane;
        }
      } else lanes[row.dataset.seq] = row.dataset.lane;
    }
    for (const a of view.querySelectorAll(".replace-arrow")) {
      arrows.add(`${a.dataset.from}>${a.dataset.to}`);
    }
    if (view.scrollTop + view.clientHeight >= view.scrollHeight - 1) break;
    view.scrollTop += view.clientHeight;
  }
  view.scrollTop = 0;
  return { lanes, runs, arrows: [...arrows] };
})()"""

LINEAGE = """(() => ({
  nodes: [...document.querySelectorAll("#lineage-view .node")].map((n) => ({
    id: n.dataset.sessionId, ghost: n.dataset.ghost === "true",
    target: n.classList.contains("target"), focusable: n.getAttribute("tabindex") === "0" })),
  edges: [...document.querySelectorAll("#lineage-view .edge")].map(
    (e) => [e.dataset.parent, e.dataset.child]),
}))()"""

SESSION_IDS = """[...document.querySelectorAll("#sessions-list button.session")]
  .map((b) => b.dataset.sessionId)"""


async def _load(
    backend: SqlPersistence, store: SessionStore, tokens: dict[str, str]
) -> SimulatedAgent:
    try:
        demo = await load_demo(backend, store)
        for i in range(EXTRA_SESSIONS):
            store.create(f"extra-{i:02d}", created_at=T0 - 86_400_000 - i, cwd="/work/extra")
        token_store = TokenStore(backend, TOKEN_KEY)
        _, tokens["fork-a-sub"] = await token_store.create("fork-a-sub", ["id:demo-fork-a-sub*"])
        return demo.agent
    finally:
        # the server runs on another event loop (its own thread): keep no pooled
        # connection from this one
        await backend.close()


class Gateway:
    """A served demo corpus, and its API answers for ground truth."""

    def __init__(
        self, url: str, token: str | None = None, agent: SimulatedAgent | None = None
    ) -> None:
        self.url = url
        self.token = token
        self.agent = agent

    def gql(self, query: str, **variables: Any) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        r = httpx.post(
            f"{self.url}/graphql",
            json={"query": query, "variables": variables},
            headers=headers,
            timeout=30,
        )
        body = r.json()
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data

    def trace(self, session_id: str) -> dict[str, Any]:
        data = self.gql(
            """query($id: ID!) { traceSession(sessionId: $id) { complete unresolvedParentId
                graph { nodes { id } edges { parentId childId } } } }""",
            id=session_id,
        )
        trace: dict[str, Any] = data["traceSession"]
        return trace

    def events(self, session_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        after = None
        while True:
            page = self.gql(
                """query($id: ID!, $after: String) { events(sessionId: $id, first: 500,
                    after: $after) { pageInfo { hasNextPage endCursor }
                    nodes { seq type surface replacedBy { seq } } } }""",
                id=session_id,
                after=after,
            )["events"]
            out += page["nodes"]
            if not page["pageInfo"]["hasNextPage"]:
                return out
            after = page["pageInfo"]["endCursor"]


# A policy as strict as a page of scripts and styles from its own origin allows.
STRICT_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)


def _with_csp(app: Any) -> Any:
    """`app` with a Content-Security-Policy header on every HTTP response."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        async def send_with_policy(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    *message.get("headers", []),
                    (b"content-security-policy", STRICT_CSP.encode()),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_with_policy)

    return wrapped


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Gateway, Gateway, Gateway]]:
    """The demo corpus served three times from one database: open, with bearer
    tokens, and open under a strict Content-Security-Policy."""
    backend = SqlPersistence(sqlite_url(tmp_path_factory.mktemp("ui") / "x.db"))
    store = SessionStore()
    tokens: dict[str, str] = {}
    agent = asyncio.run(_load(backend, store, tokens))
    query = SessionQuery(live=[store], persistence=backend)
    open_app = create_app(query)
    auth_app = create_app(query, authenticate=token_authenticator(TokenStore(backend, TOKEN_KEY)))
    try:
        with (
            running_server(open_app) as url,
            running_server(auth_app) as auth_url,
            running_server(_with_csp(open_app)) as csp_url,
        ):
            yield (
                Gateway(url, agent=agent),
                Gateway(auth_url, tokens["fork-a-sub"]),
                Gateway(csp_url),
            )
    finally:
        asyncio.run(backend.close())


@pytest.fixture
def gateway(served: tuple[Gateway, Gateway, Gateway]) -> Gateway:
    return served[0]


def _drive(gateway: Gateway, steps: list[dict[str, Any]], refused: int = 0) -> dict[str, Any]:
    """Run the steps; `refused` is how many 401 answers the scenario provokes on purpose
    (Chromium logs each failed response as a console error)."""
    report = run_ui_check(gateway.url, steps)
    assert report["error"] is None, (report["error"], report["step"], report["consoleErrors"])
    unauthorized = [e for e in report["consoleErrors"] if "status of 401" in e]
    assert len(unauthorized) == refused, report["consoleErrors"]
    assert [e for e in report["consoleErrors"] if e not in unauthorized] == []
    refusals = [e for e in report["httpErrors"] if e.get("status") == 401]
    assert len(refusals) == refused and all(e["url"] == f"{gateway.url}/graphql" for e in refusals)
    report["httpErrors"] = [e for e in report["httpErrors"] if e not in refusals]
    assert report["offOrigin"] == [], "the viewer tried to load something from elsewhere"
    origin = gateway.url
    assert report["requests"] and all(
        r["url"].startswith(origin + "/") or r["url"].startswith("data:")
        for r in report["requests"]
    ), report["requests"]
    assert report["httpErrors"] == [], report["httpErrors"]
    results: dict[str, Any] = report["results"]
    return results


def test_session_list_pages_newest_first_with_cursors(gateway: Gateway) -> None:
    everything = [
        s["id"]
        for s in gateway.gql("{ sessions(first: 500) { nodes { id } } }")["sessions"]["nodes"]
    ]
    assert len(everything) > 25
    got = _drive(
        gateway,
        [
            {"goto": "/ui"},
            {"waitFor": '#sessions-list[data-page="0"] button.session'},
            {"eval": SESSION_IDS, "as": "page0"},
            {"eval": "document.getElementById('sessions-next').disabled", "as": "more0"},
            {"click": "#sessions-next"},
            {"waitFor": '#sessions-list[data-page="1"] button.session'},
            {"eval": SESSION_IDS, "as": "page1"},
            {"eval": "document.getElementById('sessions-next').disabled", "as": "last1"},
            {"click": "#sessions-prev"},
            {"waitFor": '#sessions-list[data-page="0"] button.session'},
            {"eval": SESSION_IDS, "as": "back0"},
            {"fill": ["#filter-input", "fork-a"]},
            {
                "eval": SESSION_IDS.replace("button.session", "li:not([hidden]) button.session"),
                "as": "filtered",
            },
        ],
    )
    assert got["page0"] + got["page1"] == everything
    assert len(got["page0"]) == 25 and got["more0"] is False and got["last1"] is True
    assert got["back0"] == got["page0"]
    assert got["filtered"] == [i for i in got["page0"] if "fork-a" in i]


def test_lineage_of_demo_root_draws_every_fork_and_its_edge(
    gateway: Gateway, tmp_path: Path
) -> None:
    trace = gateway.trace("demo-root")
    shot = tmp_path / "lineage.png"
    got = _drive(
        gateway,
        [
            {"goto": "/ui?session=demo-root"},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {"eval": LINEAGE, "as": "lineage"},
            {"screenshot": str(shot), "selector": "#lineage"},
        ],
    )
    drawn = got["lineage"]
    assert sorted(n["id"] for n in drawn["nodes"]) == sorted(
        n["id"] for n in trace["graph"]["nodes"]
    )
    assert sorted(map(tuple, drawn["edges"])) == sorted(
        (e["parentId"], e["childId"]) for e in trace["graph"]["edges"]
    )
    assert len(trace["graph"]["edges"]) >= 4  # the demo's forks
    assert [n["id"] for n in drawn["nodes"] if n["target"]] == ["demo-root"]
    assert not any(n["ghost"] for n in drawn["nodes"]) and trace["complete"]
    assert shot.stat().st_size > 5_000


def test_orphan_child_shows_its_unresolved_parent_as_a_ghost_node(gateway: Gateway) -> None:
    trace = gateway.trace("demo-orphan-child")
    assert trace["complete"] is False
    missing = trace["unresolvedParentId"]
    got = _drive(
        gateway,
        [
            {"goto": "/ui?session=demo-orphan-child"},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {"eval": LINEAGE, "as": "lineage"},
            {"eval": "document.getElementById('lineage-status').textContent", "as": "status"},
        ],
    )
    ghosts = [n for n in got["lineage"]["nodes"] if n["ghost"]]
    assert [g["id"] for g in ghosts] == [missing]
    assert not ghosts[0]["focusable"]  # nothing to open
    drawn_ids = {n["id"] for n in got["lineage"]["nodes"] if not n["ghost"]}
    assert drawn_ids == {n["id"] for n in trace["graph"]["nodes"]}
    top = [
        n["id"]
        for n in trace["graph"]["nodes"]
        if n["id"] not in {e["childId"] for e in trace["graph"]["edges"]}
    ]
    assert [missing, top[0]] in got["lineage"]["edges"]
    assert missing in got["status"]


def test_surface_lanes_of_demo_root_match_events_by_class(gateway: Gateway) -> None:
    events = gateway.events("demo-root")
    got = _drive(
        gateway,
        [
            {"goto": "/ui?session=demo-root"},
            {"waitFor": '#timeline-view[data-state="complete"]'},
            {"eval": COLLECT_TIMELINE, "as": "timeline"},
            {"eval": "document.querySelectorAll('#surface-list button').length", "as": "surface"},
        ],
    )
    lanes = {int(seq): lane for seq, lane in got["timeline"]["lanes"].items()}
    assert lanes == {e["seq"]: e["surface"] for e in events}
    for start, end in got["timeline"]["runs"]:  # collapsed runs hold stream chunks only
        assert end > start
        assert {events[s]["type"] for s in range(start, end + 1)} == {"assistant/chunk"}
    assert got["timeline"]["runs"], "the demo's chunk runs are collapsed"
    arrows = {f"{e['replacedBy']['seq']}>{e['seq']}" for e in events if e["replacedBy"] is not None}
    assert arrows and set(got["timeline"]["arrows"]) == arrows
    assert got["surface"] == sum(e["surface"] == "CURRENT" for e in events)


def test_clicking_an_event_shows_its_data_trace_and_window_and_back_works(
    gateway: Gateway,
) -> None:
    events = gateway.events("demo-root")
    shadowed = next(e for e in events if e["replacedBy"] is not None)
    seq = shadowed["seq"]
    truth = gateway.gql(
        """query($seq: Int!) { event(sessionId: "demo-root", seq: $seq) { data
            trace { replacedBy sourceEventSeqs } } }""",
        seq=seq,
    )["event"]
    got = _drive(
        gateway,
        [
            {"goto": "/ui?session=demo-root"},
            {"waitFor": '#timeline-view[data-state="complete"]'},
            {"click": f'#timeline-view .row[data-seq="{seq}"]'},
            {"waitFor": f'#event-detail[data-seq="{seq}"]'},
            {"eval": "document.querySelector('#event-detail pre.json').textContent", "as": "data"},
            {
                "eval": "[...document.querySelectorAll('#event-detail dt')].map((dt) => "
                "[dt.textContent, dt.nextElementSibling.textContent])",
                "as": "trace",
            },
            {
                "eval": "document.querySelector('#event-detail .window li.here button')"
                "?.textContent",
                "as": "here",
            },
            {"eval": "location.search", "as": "url"},
            {"back": True},
            {"eval": "location.search", "as": "backUrl"},
            {"eval": "document.querySelector('#event-detail pre.json') === null", "as": "cleared"},
        ],
    )
    assert json.loads(got["data"]) == truth["data"]
    trace = dict(got["trace"])
    assert trace["replaced by"] == str(truth["trace"]["replacedBy"])
    assert trace["sources"] == ("".join(map(str, truth["trace"]["sourceEventSeqs"])) or "—")
    assert got["here"].startswith(f"{seq} ")
    assert got["url"] == f"?session=demo-root&seq={seq}"
    assert got["backUrl"] == "?session=demo-root" and got["cleared"] is True


def test_keyboard_alone_opens_an_event_and_a_forked_session(gateway: Gateway) -> None:
    first = gateway.events("demo-fork-a")[1]
    got = _drive(
        gateway,
        [
            {"goto": "/ui?session=demo-root"},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {"focus": '#lineage-view .node[data-session-id="demo-fork-a"]'},
            {"press": "Enter"},
            {"waitForFunction": "location.search === '?session=demo-fork-a'"},
            {"waitFor": '#timeline-view[data-state="complete"]'},
            {"focus": "#timeline-view"},
            {"press": "ArrowDown"},
            {"press": "ArrowDown"},
            {"press": "Enter"},
            {"waitFor": "#event-detail[data-seq]"},
            {"eval": "document.getElementById('event-detail').dataset.seq", "as": "seq"},
            {"focus": "#sessions-list button.session"},
            {"press": "ArrowDown"},
            {"press": "Enter"},
            {"eval": "document.activeElement.dataset.sessionId", "as": "focusedSession"},
            {
                "waitForFunction": "new URLSearchParams(location.search).get('session') === "
                "document.activeElement.dataset.sessionId"
            },
        ],
    )
    assert int(got["seq"]) == first["seq"]
    assert got["focusedSession"]


@contextlib.contextmanager
def appending(gateway: Gateway, every: float, times: int | None = None) -> Iterator[None]:
    """The demo's simulated agent appending to `demo-agent-live` every `every` seconds
    (`times` appends, or until the block ends) in a thread beside the browser."""
    assert gateway.agent is not None
    agent = gateway.agent
    stop = threading.Event()

    def run() -> None:
        done = 0
        while (times is None or done < times) and not stop.wait(every):
            agent.step()
            done += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        if times is None:
            stop.set()
        thread.join(timeout=60)


def test_refresh_grows_a_live_sessions_timeline(gateway: Gateway) -> None:
    count = "Number(document.getElementById('timeline-view').dataset.count)"
    with appending(gateway, every=0.2):  # the demo's agent, appending while the page is open
        got = _drive(
            gateway,
            [
                {"goto": "/ui?session=demo-agent-live"},
                {"waitFor": '#timeline-view[data-state="complete"]'},
                {"eval": f"window.before = {count}", "as": "before"},
                {"waitForFunction": "new Promise((r) => setTimeout(() => r(true), 1000))"},
                {"click": "#timeline-refresh"},
                {
                    "waitForFunction": f"{count} > window.before && document.getElementById("
                    "'timeline-view').dataset.state === 'complete'"
                },
                {"eval": count, "as": "after"},
            ],
        )
    total = gateway.gql('{ events(sessionId: "demo-agent-live") { totalCount } }')
    assert got["before"] < got["after"] <= total["events"]["totalCount"]


def test_live_session_timeline_grows_by_itself_over_the_subscription(gateway: Gateway) -> None:
    appends = 60
    total = len(gateway.events("demo-agent-live")) + appends
    count = "Number(document.getElementById('timeline-view').dataset.count)"
    with appending(gateway, every=0.15, times=appends):  # a fixed number, over ~9 s
        got = _drive(
            gateway,
            [
                {"goto": "/ui?session=demo-agent-live"},
                {"waitFor": '#timeline-view[data-live="on"]'},
                {"eval": count, "as": "before"},
                {"waitForFunction": f"{count} === {total}"},
                {"eval": COLLECT_TIMELINE, "as": "timeline"},
            ],
        )
    assert got["before"] < total  # the rest arrived over the tail: nothing was clicked
    events = gateway.events("demo-agent-live")
    assert len(events) == total
    lanes = {int(seq): lane for seq, lane in got["timeline"]["lanes"].items()}
    assert lanes == {e["seq"]: e["surface"] for e in events}
    assert set(got["timeline"]["arrows"]) == {
        f"{e['replacedBy']['seq']}>{e['seq']}" for e in events if e["replacedBy"] is not None
    }


def test_every_view_runs_under_a_strict_content_security_policy(
    served: tuple[Gateway, Gateway, Gateway],
) -> None:
    gateway = served[2]
    policies = httpx.get(f"{gateway.url}/ui", headers={"Accept": "text/html"}).headers
    # the gateway's own policy (gateway.server.security_headers) and this test's stricter
    # one (no inline styles either): a browser enforces both
    own, strict = policies.get_list("content-security-policy")
    assert own.startswith("default-src 'none'") and strict == STRICT_CSP
    got = _drive(  # a violation would be a console error, which _drive refuses
        gateway,
        [
            {"goto": "/ui?session=demo-root&seq=1"},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {"waitFor": '#timeline-view[data-state="complete"]'},
            {"waitFor": '#event-detail[data-seq="1"]'},
            {"click": "#timeline-view .row.run"},
            {
                "click": '#lineage-view .node[data-session-id="demo-orphan"], '
                '#sessions-list button[data-session-id="demo-orphan-child"]'
            },
            {"waitFor": '#lineage-view .node[data-ghost="true"]'},
            {"eval": "document.querySelectorAll('#lineage-view .node').length", "as": "nodes"},
        ],
    )
    assert got["nodes"] == 3


def test_with_auth_the_token_field_unlocks_the_scoped_corpus(
    served: tuple[Gateway, Gateway, Gateway],
) -> None:
    gateway = served[1]
    visible = [
        s["id"]
        for s in gateway.gql("{ sessions(first: 500) { nodes { id } } }")["sessions"]["nodes"]
    ]
    trace = gateway.trace("demo-fork-a-sub-check")
    assert trace["complete"] is False  # the parent chain leaves the token's scope
    got = _drive(
        gateway,
        [
            {"goto": "/ui?session=demo-fork-a-sub-check"},
            {"waitFor": "#token-form:not([hidden])"},
            {"eval": "document.getElementById('token-status').textContent", "as": "asked"},
            {"eval": SESSION_IDS, "as": "before"},
            {"fill": ["#token-input", "sgw_wrong_token"]},
            {"press": "Enter"},
            {
                "waitForFunction": "document.getElementById('token-status').textContent"
                ".startsWith('Token refused')"
            },
            {"fill": ["#token-input", gateway.token]},
            {"press": "Enter"},
            {"waitFor": "#sessions-list button.session"},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {"eval": SESSION_IDS, "as": "after"},
            {"eval": LINEAGE, "as": "lineage"},
            {"eval": "[sessionStorage.length, localStorage.length, document.cookie]", "as": "kept"},
            {"eval": "document.getElementById('token-input').type", "as": "fieldType"},
            {"eval": "document.querySelector('label[for=token-input]').textContent", "as": "label"},
        ],
        refused=1,
    )
    assert "needs a bearer token" in got["asked"] and got["before"] == []
    assert got["after"] == visible and "demo-root" not in visible
    ghosts = [n["id"] for n in got["lineage"]["nodes"] if n["ghost"]]
    assert ghosts == [trace["unresolvedParentId"]]
    assert got["kept"] == [1, 0, ""]
    assert got["fieldType"] == "password" and got["label"]


def test_screenshots_of_each_view(gateway: Gateway, tmp_path: Path) -> None:
    """The README's pictures: the session list with demo-root's lineage, its surface
    with an event open, an incomplete lineage, and (when the gateway searches) the
    search box's results with a hit open and found again within its session. Written
    to SESSION_GATEWAY_UI_SCREENSHOTS too when set."""
    events = gateway.events("demo-root")
    seq = next(e["seq"] for e in events if e["replacedBy"] is not None)
    names = ["overview", "surface", "orphan"]
    fields = gateway.gql("{ __schema { queryType { fields { name } } } }")["__schema"]
    searches = {"searchSessions", "searchEvents"} <= {
        f["name"] for f in fields["queryType"]["fields"]
    }
    if searches:
        names.append("search")
    shots = {name: tmp_path / f"ui-{name}.png" for name in names}
    steps: list[dict[str, Any]] = [
        {"goto": f"/ui?session=demo-root&seq={seq}"},
        {"waitFor": '#timeline-view[data-state="complete"]'},
        {"waitFor": f'#event-detail[data-seq="{seq}"]'},
        {"fill": ["#filter-input", "demo-"]},
        {"screenshot": str(shots["overview"])},
        {"screenshot": str(shots["surface"]), "selector": "#timeline"},
        {"goto": "/ui?session=demo-orphan-child"},
        {"waitFor": '#lineage-view[data-state="complete"]'},
        {"waitFor": '#timeline-view[data-state="complete"]'},
        {"screenshot": str(shots["orphan"]), "selector": "#lineage"},
    ]
    if searches:
        # the demo's connection errors; an older demo says only this about quotes
        found = gateway.gql(
            '{ searchSessions(query: "ECONNREFUSED") { nodes { bestMatch { snippet } } } }'
        )
        word = "ECONNREFUSED" if found["searchSessions"]["nodes"] else "escaped quote"
        steps += [
            {"goto": "/ui"},
            {"waitFor": "#search-form:not([hidden])"},
            {"fill": ["#search-input", word]},
            {"press": "Enter"},
            {"waitFor": '#search-results[data-page="0"] button.hit'},
            {"click": "#search-results button.hit"},
            {"waitFor": "#event-detail[data-seq]"},
            {"waitFor": "#event-search-form:not([hidden])"},
            {"fill": ["#event-search-input", word]},
            {"press": "Enter"},
            {"waitFor": '#event-search-results[data-state="complete"]'},
            {"screenshot": str(shots["search"])},
        ]
    _drive(gateway, steps)
    for path in shots.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5_000
    target = os.environ.get(SCREENSHOTS_ENV)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        pngquant = shutil.which("pngquant")
        for path in shots.values():
            out = Path(target) / path.name
            if pngquant:
                subprocess.run(
                    [pngquant, "--quality=70-95", "--strip", "--force", "--output", out, path],
                    check=True,
                    timeout=60,
                )
            else:
                shutil.copyfile(path, out)
