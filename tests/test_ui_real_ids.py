"""The viewer (/ui) with real ids (issue 22, point 7), in headless Chromium on the 120 real
artifacts (`tests/data/dsh-jsonl/`) plus the demo corpus (for its four-level fork tree):
the session list's labels are distinct as rendered, titles show with their id beside them,
nothing is cut (ids, lineage labels, the counts lines), the lineage tree fits its pane after
"fit", an empty state says what to do, and the paging buttons disable at the ends.

What the page shows is compared with what the API answers on the same server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.demo import load_demo
from gateway.ingest import import_paths
from gateway.persistence import SqlPersistence
from tests.conftest import DATA_DIR
from tests.support.server import running_server
from tests.support.sqlite_backend import sqlite_url
from tests.test_ui_browser import Gateway, _drive

pytestmark = pytest.mark.browser

ARTIFACTS = DATA_DIR / "dsh-jsonl"

# Every row of the session list: its visible text, and whether any part of it is cut.
ROWS = """[...document.querySelectorAll("#sessions-list button.session")].map((b) => ({
  id: b.dataset.sessionId,
  text: b.querySelector(".label").innerText.replace(/\\s+/g, " ").trim(),
  sid: b.querySelector(".sid").innerText.trim(),
  title: b.querySelector(".title")?.innerText.trim() ?? null,
  cut: [...b.querySelectorAll(".label, .label *")].some(
    (e) => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1),
  copy: Boolean(b.parentElement.querySelector("button.copy-id")),
}))"""

# An element's rendered text and whether it is cut (scrolled, or ellipsised in CSS).
CUT = """((selector) => {
  const e = document.querySelector(selector);
  const style = getComputedStyle(e);
  return { text: e.innerText.trim(), cut: e.scrollWidth > e.clientWidth + 1
    || e.scrollHeight > e.clientHeight + 1, ellipsis: style.textOverflow === "ellipsis"
    && style.overflow !== "visible" && style.whiteSpace === "nowrap" };
})"""

LINEAGE_LABELS = """[...document.querySelectorAll("#lineage-view .node")].map((n) => ({
  id: n.dataset.sessionId,
  title: n.dataset.title ?? null,
  lines: [...n.querySelectorAll("text")].map((t) => t.textContent),
  fits: [...n.querySelectorAll("text")].every((t) => {
    const box = t.getBBox();
    const rect = n.querySelector("rect");
    return box.x >= 0 && box.x + box.width <= Number(rect.getAttribute("width")) + 0.5;
  }),
}))"""

FITS = """(() => {
  const view = document.getElementById("lineage-view");
  const outer = view.getBoundingClientRect();
  const svg = view.querySelector("svg").getBoundingClientRect();
  return { inside: svg.left >= outer.left - 0.5 && svg.top >= outer.top - 0.5
      && svg.right <= outer.right + 0.5 && svg.bottom <= outer.bottom + 0.5,
    scrolls: view.scrollWidth > view.clientWidth + 1 || view.scrollHeight > view.clientHeight + 1,
    nodes: view.querySelectorAll(".node").length,
    scale: Number(view.dataset.scale) };
})()"""

DISABLED = "[document.getElementById('sessions-prev').disabled, " \
    "document.getElementById('sessions-next').disabled]"  # fmt: skip


async def _load(path: Path) -> None:
    backend = SqlPersistence(sqlite_url(path))
    try:
        summary = await import_paths(backend, [ARTIFACTS])
        assert summary.ok and summary.count("imported") == 120, summary.refused
        await load_demo(backend, SessionStore())  # the persisted demo sessions: its forks
    finally:
        await backend.close()


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    path = tmp_path_factory.mktemp("ui-real") / "real.db"
    asyncio.run(_load(path))
    backend = SqlPersistence(sqlite_url(path))
    app = create_app(SessionQuery(live=[], persistence=backend))
    try:
        with running_server(app) as url:
            yield Gateway(url)
    finally:
        asyncio.run(backend.close())


def _pages(gateway: Gateway) -> list[list[dict[str, Any]]]:
    """Every page of 25 sessions as the API gives it (id and title)."""
    pages, after = [], None
    while True:
        conn = gateway.gql(
            """query($after: String) { sessions(first: 25, after: $after) {
                pageInfo { hasNextPage endCursor } nodes { id title { title } } } }""",
            after=after,
        )["sessions"]
        pages.append(conn["nodes"])
        if not conn["pageInfo"]["hasNextPage"]:
            return pages
        after = conn["pageInfo"]["endCursor"]


def test_session_list_labels_are_distinct_whole_and_titled_on_every_page(real: Gateway) -> None:
    pages = _pages(real)
    assert len(pages) >= 5  # 129 sessions
    steps: list[dict[str, Any]] = [{"goto": "/ui"}]
    for i in range(len(pages)):
        steps += [
            {"waitFor": f'#sessions-list[data-page="{i}"] button.session'},
            {"eval": ROWS, "as": f"rows{i}"},
            {"eval": DISABLED, "as": f"disabled{i}"},
            {"eval": f"({CUT})('#sessions-count')", "as": f"count{i}"},
        ]
        if i + 1 < len(pages):
            steps.append({"click": "#sessions-next"})
    got = _drive(real, steps)
    last = len(pages) - 1
    for i, page in enumerate(pages):
        rows = got[f"rows{i}"]
        assert [r["id"] for r in rows] == [s["id"] for s in page]
        texts = [r["text"] for r in rows]
        assert len(set(texts)) == len(texts), texts  # told apart by what is on screen
        for row, session in zip(rows, page, strict=True):
            assert row["sid"] == session["id"], row  # the whole id, as rendered
            title = (session["title"] or {}).get("title")
            assert row["title"] == title, row  # the title is the label, the id beside it
            assert not row["cut"], row
            assert row["copy"], row
        assert got[f"disabled{i}"] == [i == 0, i == last]
        assert not got[f"count{i}"]["cut"] and not got[f"count{i}"]["ellipsis"]
    assert any(s["title"] for page in pages for s in page)  # real titles were shown


def test_copy_button_copies_the_whole_id(real: Gateway) -> None:
    got = _drive(
        real,
        [
            {"goto": "/ui"},
            {"waitFor": "#sessions-list button.copy-id"},
            {
                "eval": "document.querySelector('#sessions-list li').querySelector("
                "'button.session').dataset.sessionId",
                "as": "id",
            },
            {"click": "#sessions-list button.copy-id"},
            {
                "waitForFunction": "document.querySelector('#sessions-list button.copy-id')"
                ".dataset.copied !== undefined"
            },
            {
                "eval": "document.querySelector('#sessions-list button.copy-id').dataset.copied",
                "as": "copied",
            },
            {"eval": "location.search", "as": "url"},
        ],
    )
    assert got["copied"] == got["id"] and got["url"] == ""  # copying opened nothing


def test_surface_counts_line_and_titles_are_never_cut(real: Gateway) -> None:
    longest = (
        "apps-web--goal-multi-turn-actions",  # the most events
        "examples-acp-agent--product-subagent-result-diagnostic",  # the longest id
    )
    events = {sid: real.events(sid) for sid in longest}
    steps: list[dict[str, Any]] = []
    for i, sid in enumerate(events):
        steps += [
            {"goto": f"/ui?session={sid}"},
            {"waitFor": '#timeline-view[data-state="complete"]'},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {"eval": f"({CUT})('#timeline-status')", "as": f"status{i}"},
            {"eval": f"({CUT})('#timeline-title')", "as": f"title{i}"},
            {"eval": f"({CUT})('#lineage-status')", "as": f"lineage{i}"},
            {"eval": LINEAGE_LABELS, "as": f"labels{i}"},
        ]
    got = _drive(real, steps)
    for i, (sid, evs) in enumerate(events.items()):
        counts = {
            lane: sum(e["surface"] == lane for e in evs)
            for lane in ("CURRENT", "SHADOWED", "LOG_ONLY")
        }
        status = got[f"status{i}"]
        assert status["text"] == (
            f"{len(evs)} events: {counts['CURRENT']} current, {counts['SHADOWED']} shadowed, "
            f"{counts['LOG_ONLY']} log-only"
        )  # fmt: skip
        for name in ("status", "title", "lineage"):
            assert not got[f"{name}{i}"]["cut"] and not got[f"{name}{i}"]["ellipsis"], got
        assert sid in got[f"title{i}"]["text"]
        (node,) = got[f"labels{i}"]
        assert node["id"] == sid and node["fits"], node
        assert sid in "".join(node["lines"]).replace(" ", "") or sid == "".join(node["lines"])


def test_lineage_labels_are_whole_and_a_four_level_tree_fits_after_fit(real: Gateway) -> None:
    trace = real.gql(
        """{ traceSession(sessionId: "demo-root") { graph { nodes { id title { title } }
            edges { parentId childId } } } }"""
    )["traceSession"]["graph"]
    parent = {e["childId"]: e["parentId"] for e in trace["edges"]}

    def depth(sid: str) -> int:
        return 1 + depth(parent[sid]) if sid in parent else 1

    assert max(depth(n["id"]) for n in trace["nodes"]) >= 4
    got = _drive(
        real,
        [
            {"goto": "/ui?session=demo-root"},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {"eval": LINEAGE_LABELS, "as": "labels"},
            {"click": "#lineage-zoom-in"},
            {"click": "#lineage-zoom-in"},
            {"click": "#lineage-zoom-in"},
            {"eval": FITS, "as": "zoomed"},
            {"click": "#lineage-fit"},
            {"eval": FITS, "as": "fitted"},
            {"click": "#lineage-zoom-out"},
            {"eval": FITS, "as": "out"},
        ],
    )
    titles = {n["id"]: (n["title"] or {}).get("title") for n in trace["nodes"]}
    assert sorted(n["id"] for n in got["labels"]) == sorted(titles)
    for node in got["labels"]:
        shown = "".join(node["lines"])
        assert "…" not in shown and node["fits"], node
        for whole in filter(None, (titles[node["id"]], node["id"])):
            assert whole.replace(" ", "") in shown.replace(" ", ""), (whole, node)
    assert got["zoomed"]["scrolls"] and not got["zoomed"]["inside"]  # zoomed in: it pans
    assert got["fitted"]["inside"] and not got["fitted"]["scrolls"], got["fitted"]
    assert got["fitted"]["nodes"] == len(trace["nodes"])
    assert got["out"]["scale"] < got["fitted"]["scale"] and got["out"]["inside"]


def test_with_nothing_selected_each_pane_says_what_to_do(real: Gateway) -> None:
    got = _drive(
        real,
        [
            {"goto": "/ui"},
            {"waitFor": "#sessions-list button.session"},
            {
                "eval": "['lineage-empty', 'timeline-empty', 'event-detail'].map((id) => {"
                " const e = document.getElementById(id);"
                " return [e.checkVisibility(), e.innerText.trim()]; })",
                "as": "empty",
            },
            {"click": "#sessions-list button.session"},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {
                "eval": "['lineage-empty', 'timeline-empty'].map((id) => "
                "document.getElementById(id).checkVisibility())",
                "as": "after",
            },
        ],
    )
    for visible, text in got["empty"]:
        assert visible and "Select a session" in text, got["empty"]
    assert got["after"] == [False, False]


def test_paging_buttons_are_disabled_on_an_empty_list(real: Gateway) -> None:
    got = _drive(
        real,
        [
            {"goto": "/ui"},
            {"eval": DISABLED, "as": "before"},  # nothing loaded yet: nothing to page to
            {"waitFor": '#sessions-list[data-page="0"] button.session'},
            {"click": "#session-filters summary"},
            {"fill": ["#filter-cwd", "/no/such/directory"]},
            {"click": "#filters-form button[type=submit]"},
            {
                "waitForFunction": "document.querySelectorAll('#sessions-list button.session')"
                ".length === 0 && document.getElementById('sessions-list').dataset.page === '0'"
            },
            {"eval": DISABLED, "as": "empty"},
            {"eval": "document.getElementById('sessions-empty').innerText", "as": "says"},
        ],
    )
    assert got["before"] == [True, True]
    assert got["empty"] == [True, True]
    assert "No session" in got["says"]
