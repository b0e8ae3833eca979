"""Time to first render of the viewer (/ui) in headless Chromium (issue 13).

    .venv/bin/python -m benchmarks.bench_ui [--runs 5] [--quick]

Corpus (SQLite file, served by `create_app` over `SqlPersistence` with uvicorn on
a loopback port): a 1,000-session fork tree (fan-out 10, `tree000000` and its 999
descendants), a 1,000-deep fork chain (`chain000999` is its leaf), and `big`, one
persisted session of 10,000 generated events (`benchmarks.logs.generate_log`:
chunk runs, tool calls, about 1 % replacements).

Timed, in the page, with `performance.mark` against the navigation's time origin
(`performance.now()` is 0 when navigation starts), for a fresh navigation each run
(same browser, so the static files may come from its cache after the first):

* lineage: `/ui?session=tree000000` (then `chain000999`) — from navigation start to
  the moment the laid-out SVG (every node and edge) is in the DOM (`ui:lineage-drawn`);
  also shown: when the `traceSession` answer arrived (`ui:lineage-answer`), so the
  rest is dagre's layout and building the SVG;
* timeline: `/ui?session=big` — from navigation start to the first timeline rows in the
  DOM (`ui:timeline-rows`, after the first page of 500 events), and to all 10,000
  loaded with their replacement arrows (`ui:timeline-complete`, 20 pages + the
  SHADOWED pages; not a target).

Figures: median and worst over `--runs` navigations per view, and the first (cold)
one. Also the `traceSession` request alone over HTTP (httpx, median), for scale.
Target (issue 13): <= 1 s to first render for each view.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.logs import generate_log
from benchmarks.scale_data import insert_sessions, migrated_sqlite
from gateway import SessionQuery, create_app
from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence
from tests.support.node_tools import run_ui_check
from tests.support.server import running_server

TARGET_MS = 1000.0
TREE_ROOT = "tree000000"
CHAIN_LEAF = "chain000999"
BIG = "big"
BASE_MS = 1_780_000_000_000

TRACE = """query($id: ID!) { traceSession(sessionId: $id) { complete unresolvedParentId
  graph { nodes { id live persisted header { createdAt cwd origin parentSessionId } }
  edges { parentId childId } } } }"""


def marks(*names: str) -> str:
    picks = ", ".join(
        f'"{n}": performance.getEntriesByName("ui:{n}")[0]?.startTime ?? null' for n in names
    )
    return f"({{ {picks} }})"


async def build(path: Path, nodes: int, events: int) -> str:
    url = await migrated_sqlite(path)
    rows = [
        (f"tree{j:06d}", BASE_MS + j, "/tree", f"tree{(j - 1) // 10:06d}" if j else None)
        for j in range(nodes)
    ]
    rows += [
        (f"chain{i:06d}", BASE_MS - 10_000 + i, "/chain", f"chain{i - 1:06d}" if i else None)
        for i in range(nodes)
    ]
    insert_sessions(path, rows)
    db = SqlPersistence(url)
    try:
        await db.create(SessionHeader(BIG, BASE_MS + 50_000, cwd="/big"))
        log = generate_log(events)
        for i in range(0, len(log), 5_000):
            await db.append(BIG, log[i : i + 5_000])
    finally:
        await db.close()
    return url


def drive(url: str, session: str, wait: str, names: tuple[str, ...], runs: int) -> list[dict]:
    steps: list[dict[str, Any]] = []
    for i in range(runs):
        steps += [
            {"goto": f"/ui?session={session}"},
            {"waitFor": wait},
            {"eval": marks(*names), "as": f"run{i}"},
        ]
    report = run_ui_check(url, steps, timeout=120 + 60 * runs, step_timeout_s=60)
    if report["error"] or report["consoleErrors"] or report["offOrigin"]:
        raise SystemExit(f"the page failed: {report}")
    return [report["results"][f"run{i}"] for i in range(runs)]


def show(label: str, runs: list[dict], key: str) -> float:
    values = [r[key] for r in runs]
    med = statistics.median(values)
    print(
        f"  {label:<44} median {med:7.0f} ms   worst {max(values):7.0f} ms   "
        f"first {values[0]:7.0f} ms"
    )
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 runs per view")
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    with tempfile.TemporaryDirectory() as tmp:
        url = asyncio.run(build(Path(tmp) / "ui.db", 1_000, 10_000))
        db = SqlPersistence(url)
        app = create_app(SessionQuery(persistence=db))
        try:
            with running_server(app) as base:
                api: list[float] = []
                for _ in range(max(3, runs)):
                    t = time.perf_counter()
                    r = httpx.post(
                        f"{base}/graphql",
                        json={"query": TRACE, "variables": {"id": TREE_ROOT}},
                        timeout=60,
                    )
                    api.append((time.perf_counter() - t) * 1000)
                    nodes = r.json()["data"]["traceSession"]["graph"]["nodes"]
                    assert len(nodes) == 1_000, len(nodes)
                lineage_done = '#lineage-view[data-state="complete"]'
                tree = drive(
                    base,
                    TREE_ROOT,
                    lineage_done,
                    ("script-start", "lineage-answer", "lineage-laid-out", "lineage-drawn"),
                    runs,
                )
                chain = drive(
                    base,
                    CHAIN_LEAF,
                    lineage_done,
                    ("script-start", "lineage-answer", "lineage-laid-out", "lineage-drawn"),
                    runs,
                )
                big = drive(
                    base,
                    BIG,
                    '#timeline-view[data-state="complete"]',
                    ("script-start", "timeline-rows", "timeline-complete"),
                    runs,
                )
        finally:
            asyncio.run(db.close())
    print(f"\nviewer in headless Chromium, {runs} navigations per view (ms from navigation start):")
    results = {
        "lineage, 1,000-session tree (fan-out 10)": show(
            "1,000-session tree: SVG drawn", tree, "lineage-drawn"
        ),
    }
    show("  page script started", tree, "script-start")
    show("  traceSession answer arrived", tree, "lineage-answer")
    show("  dagre layout done", tree, "lineage-laid-out")
    results["lineage, 1,000-deep chain"] = show(
        "1,000-deep chain: SVG drawn", chain, "lineage-drawn"
    )
    show("  traceSession answer arrived", chain, "lineage-answer")
    show("  dagre layout done", chain, "lineage-laid-out")
    results["timeline, 10,000 events"] = show(
        "10,000-event timeline: first rows", big, "timeline-rows"
    )
    show("10,000-event timeline: all loaded (no target)", big, "timeline-complete")
    print(f"  traceSession of the tree over HTTP alone, median {statistics.median(api):7.0f} ms")
    print(f"\ntarget: <= {TARGET_MS:.0f} ms to first render for each view")
    for name, med in results.items():
        print(f"  {name:<44} {'ok' if med <= TARGET_MS else 'OVER'} ({med:.0f} ms)")


if __name__ == "__main__":
    main()
