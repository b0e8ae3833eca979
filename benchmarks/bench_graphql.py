"""GraphQL gateway benchmarks over HTTP (uvicorn on loopback). One command, prints figures:

    .venv/bin/python -m benchmarks.bench_graphql [--events 100000] [--seconds 10]

1. `events(sessionId, first: 100)` on a persisted 100k-event session (SQLite via
   SqlPersistence), against the direct core call on the same data
   (`SessionQuery.list_events`: the same fold and classification). Target: <= 4x.
2. A 50-session page with `parent` and `children` (persisted sessions in a fork forest).
3. Requests/s of a small query under a loopback load tool: `wrk` (Debian's,
   installed with apt-get when missing and possible), else a bounded Python
   load generator (httpx, fixed concurrency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from benchmarks.logs import generate_log
from gateway import SessionQuery, SessionStore, create_app
from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence
from tests.support.server import running_server
from tests.test_graphql_helpers import simple_log

EVENTS_QUERY = """query($id: ID!) { events(sessionId: $id, first: 100) {
  totalCount pageInfo { endCursor } nodes { seq type time surface data } } }"""
PAGE_QUERY = """{ sessions(first: 50) { totalCount nodes { id header { createdAt }
  parent { id } children { id } } } }"""
SMALL_QUERY = '{ session(id: "s001") { id live persisted header { createdAt } } }'
LIVE_QUERY = '{ session(id: "live") { id live header { createdAt } } }'


async def timed(fn: Callable[[], Awaitable[Any]], runs: int) -> tuple[float, float]:
    await fn()  # warm-up
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples), min(samples)


async def fill(db: SqlPersistence, n_events: int) -> None:
    await db.create(SessionHeader("big", 1_780_000_000_000, cwd="/bench"))
    log = generate_log(n_events)
    for i in range(0, len(log), 5_000):
        await db.append("big", log[i : i + 5_000])
    for i in range(60):
        parent = None if i % 4 == 0 else f"s{i - 1:03d}"
        await db.create(SessionHeader(f"s{i:03d}", 1_000 + i, parent_session=parent))
        await db.append(f"s{i:03d}", simple_log(20))


def ensure_wrk() -> str | None:
    found = shutil.which("wrk")
    if found:
        return found
    if shutil.which("apt-get"):
        print("installing wrk with apt-get ...", flush=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], capture_output=True, check=False)
    return shutil.which("wrk")


def run_wrk(wrk: str, url: str, seconds: int, query: str) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(
            'wrk.method = "POST"\n'
            f"wrk.body = {json.dumps(json.dumps({'query': query}))}\n"
            'wrk.headers["Content-Type"] = "application/json"\n'
        )
    out = subprocess.run(
        [wrk, "-t2", "-c32", f"-d{seconds}s", "-s", script.name, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines():
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    raise RuntimeError(out)


async def python_load(url: str, seconds: int, query: str, concurrency: int = 32) -> float:
    done = 0
    deadline = time.perf_counter() + seconds
    async with httpx.AsyncClient(timeout=10) as client:

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                r = await client.post(url, json={"query": query})
                r.raise_for_status()
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.perf_counter() - start)


async def main(n_events: int, seconds: int, runs: int) -> None:
    tmp = tempfile.TemporaryDirectory(prefix="bench-graphql-")
    db = SqlPersistence(f"sqlite+aiosqlite:///{Path(tmp.name) / 'bench.db'}")
    t = time.perf_counter()
    await fill(db, n_events)
    print(f"filled the database ({n_events} + 60x20 events) in {time.perf_counter() - t:.1f} s")
    query = SessionQuery(persistence=db)
    direct, direct_best = await timed(lambda: query.list_events("big"), runs)
    await db.close()

    # The server gets its own database connection, in its own event loop (thread).
    store = SessionStore()
    store.create("live", created_at=1, seed=simple_log(20))
    db_url = f"sqlite+aiosqlite:///{Path(tmp.name) / 'bench.db'}"
    served = SessionQuery(live=[store], persistence=SqlPersistence(db_url))
    app = create_app(served)
    with running_server(app) as base:
        url = f"{base}/graphql"
        async with httpx.AsyncClient(timeout=60) as client:

            async def post(q: str, variables: dict[str, Any] | None = None) -> None:
                r = await client.post(url, json={"query": q, "variables": variables})
                body = r.json()
                assert r.status_code == 200 and "errors" not in body, body

            over_http, over_http_best = await timed(lambda: post(EVENTS_QUERY, {"id": "big"}), runs)
            page, page_best = await timed(lambda: post(PAGE_QUERY), runs)
            small, _ = await timed(lambda: post(SMALL_QUERY), runs * 4)
        wrk = ensure_wrk()
        rps = {}
        for name, q in (("persisted", SMALL_QUERY), ("live", LIVE_QUERY)):
            if wrk:
                tool, rps[name] = "wrk -t2 -c32", run_wrk(wrk, url, seconds, q)
            else:
                tool, rps[name] = "python httpx, 32 concurrent", await python_load(url, seconds, q)
    tmp.cleanup()

    ratio = over_http / direct
    print()
    print(f"events(first: 100) on a persisted {n_events}-event session (median of {runs}):")
    print(f"  direct core list_events:   {direct * 1e3:8.1f} ms (best {direct_best * 1e3:.1f})")
    print(
        f"  GraphQL over HTTP:         {over_http * 1e3:8.1f} ms (best {over_http_best * 1e3:.1f})"
    )
    print(
        f"  ratio:                     {ratio:8.2f}x  (target <= 4x: "
        f"{'OK' if ratio <= 4 else 'MISSED'})"
    )
    print(
        f"50-session page with parent + children: {page * 1e3:.1f} ms (best {page_best * 1e3:.1f})"
    )
    print(f"small query, one at a time:            {small * 1e3:.2f} ms")
    for name, value in rps.items():
        print(
            f"small query on a {name} session under load ({tool}, {seconds} s): "
            f"{value:,.0f} requests/s"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.seconds, args.runs))
