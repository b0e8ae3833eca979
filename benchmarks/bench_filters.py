"""Filter benchmarks (SPEC §12, issue 19): filtered pages cost what they return.

    .venv/bin/python -m benchmarks.bench_filters [--quick]

Prints `figure | measured | target | what exactly was timed`:

* sessions: `sessions(first: 50, filter: {cwd, createdAt})` first page and its
  `totalCount`, on 1k and 1M persisted sessions (SQLite; `benchmarks.scale_data`
  corpus: 97 cwds, so a cwd holds ~1 % of the corpus; the range keeps the newer
  half); growth 1k -> 1M (target <= 1.5x for the page);
* events: `events(first: 100, filter: {types})`, and `filter: {text}` (a word in
  1 of 1,000 events, and one in none) with and without `totalCount`, on a
  100k-event persisted session written by `SqlPersistence.import_log` (report).

Reads go through the real GraphQL app in process (`httpx.ASGITransport`): median
of several runs after one warm-up; every answer is checked once before it is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_scale import Figure, figure_table, growth_figure, measure, ms, within
from benchmarks.logs import generate_log
from benchmarks.scale_data import BASE_MS, corpus_rows, insert_sessions, migrated_sqlite
from gateway import SessionEvent, SessionHeader, SessionQuery, create_app
from gateway.persistence import SqlPersistence

PAGE = """query($f: SessionFilter) { sessions(first: 50, filter: $f) { nodes { id } } }"""
TOTAL = """query($f: SessionFilter) { sessions(first: 0, filter: $f) { totalCount } }"""
EVENTS = """query($sid: ID!, $f: EventFilter) {
  events(sessionId: $sid, first: 100, filter: $f) { nodes { seq } } }"""
EVENTS_TOTAL = """query($sid: ID!, $f: EventFilter) {
  events(sessionId: $sid, first: 100, filter: $f) { totalCount nodes { seq } } }"""


async def post(app: Any, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        r = await client.post("/graphql", json={"query": query, "variables": variables})
    body: dict[str, Any] = r.json()
    assert "errors" not in body, body
    return body


async def sessions_figures(sizes: list[int], runs: int) -> list[Figure]:
    figures: list[Figure] = []
    pages: dict[int, float] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "s.db"
            url = await migrated_sqlite(path)
            insert_sessions(path, corpus_rows(n))
            db = SqlPersistence(url)
            try:
                app = create_app(SessionQuery(persistence=db))
                f = {"cwd": ["/bench/7"], "createdAt": {"from": BASE_MS - n // 4}}
                page = await post(app, PAGE, {"f": f})
                expected = [
                    f"s{i:07d}" for i in range(n // 2 + 2) if i % 97 == 7 and i // 2 <= n // 4
                ][:50]
                assert [x["id"] for x in page["data"]["sessions"]["nodes"]] == expected
                timing = await measure(lambda a=app, f=f: post(a, PAGE, {"f": f}), runs, 10)
                pages[n] = timing.median
                figures.append(
                    Figure(
                        f"sessions filter page, {n:,} sessions",
                        str(timing),
                        "report",
                        "sessions(first:50, filter:{cwd, createdAt}) over GraphQL, SQLite",
                    )
                )
                total = await measure(lambda a=app, f=f: post(a, TOTAL, {"f": f}), runs, 10)
                figures.append(
                    Figure(
                        f"sessions filter totalCount, {n:,} sessions",
                        str(total),
                        "report",
                        "sessions(first:0, filter:{cwd, createdAt}) { totalCount }",
                    )
                )
            finally:
                await db.close()
    small, large = min(pages), max(pages)
    figures.append(
        growth_figure(
            f"sessions filter page growth {small:,} -> {large:,}",
            pages[small],
            pages[large],
            1.5,
            "median page time at the largest corpus over the smallest",
        )
    )
    return figures


def texted(n: int) -> list[SessionEvent]:
    """A generated log whose every 1,000th user message says `needle`."""
    out = []
    for e in generate_log(n):
        data = e.data
        if e.type == "user/message" and e.seq % 1000 < 10 and isinstance(data, dict):
            data = {**data, "content": [{"type": "text", "text": f"a NEEDLE {e.seq}"}]}
        out.append(SessionEvent(e.type, e.seq, e.time, data, e.surface_op, e.source_event_seqs))
    return out


async def events_figures(n: int, runs: int) -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = await migrated_sqlite(Path(tmp) / "e.db")
        db = SqlPersistence(url)
        try:
            log = texted(n)
            await db.import_log(SessionHeader("big", BASE_MS), log)
            app = create_app(SessionQuery(persistence=db))
            cases = [
                ("types", EVENTS, {"types": ["user/message"]}, "report"),
                ("text, 1 in 1,000", EVENTS, {"text": "needle"}, "report"),
                ("text + totalCount", EVENTS_TOTAL, {"text": "needle"}, "report"),
                ("text, no match", EVENTS, {"text": "no such words"}, "report"),
            ]
            for name, query, f, target in cases:
                body = await post(app, query, {"sid": "big", "f": f})
                assert body["data"]["events"]["nodes"] or f.get("text") == "no such words"
                timing = await measure(
                    lambda q=query, f=f: post(app, q, {"sid": "big", "f": f}), runs, 20
                )
                figures.append(
                    Figure(
                        f"events filter {name}, {n:,} events",
                        str(timing),
                        target,
                        f"events(first:100, filter:{f}) of one stored session, SQLite",
                    )
                )
        finally:
            await db.close()
    return figures


async def run(quick: bool) -> list[Figure]:
    sizes = [1_000, 20_000] if quick else [1_000, 1_000_000]
    runs = 3 if quick else 7
    figures = await sessions_figures(sizes, runs)
    figures += await events_figures(10_000 if quick else 100_000, runs)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (harness smoke)")
    args = parser.parse_args(argv)
    figures = asyncio.run(run(args.quick))
    print(figure_table(figures))
    return 1 if any(f.verdict == "MISSED" for f in figures) else 0


__all__ = ["main", "ms", "within"]

if __name__ == "__main__":
    sys.exit(main())
