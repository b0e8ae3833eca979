"""What auth and a scope cost a request (issue 10). One command, prints figures:

    .venv/bin/python -m benchmarks.bench_access [--sessions 100000] [--runs 200]

Corpus: `--sessions` persisted sessions in a SQLite file (cwd `/bench/0`..`/bench/96`,
every fifth forked from the one before), plus `big`, a persisted 10,000-event
session in `/bench/1`. The app is `create_app` over `SqlPersistence`, called
in-process through httpx's ASGI transport (no sockets), one request at a time.

Timed: the wall time of one whole request, `sessions(first: 50) { totalCount
nodes { id } }` and `events(sessionId: "big", first: 100) { nodes { seq type surface
data } }`, median over `--runs` requests per configuration; configurations are
interleaved round by round so drift hits them alike. Configurations:

* `no auth` — `create_app` without `authenticate` (the baseline);
* `token all` — a bearer token with the `all` grant: the token read (one indexed
  row, HMAC, compare) and nothing else;
* `token cwd:/bench` — every session visible through a cwd grant: the scope is
  applied (count and page carry the predicate to SQL);
* `token cwd:/bench/1` — about 1 session in 97 visible: the keyset page scans
  past invisible rows and the count scans the visible ones;
* `token tree:s0000000` — a fork tree: the page and count carry a recursive CTE.

Target (issue 10): auth + scope overhead <= 10 % against `no auth`.
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
from benchmarks.scale_data import corpus_rows, insert_sessions, migrated_sqlite
from gateway import SessionQuery, create_app
from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import TokenStore
from gateway.server.auth import token_authenticator

PAGE = "{ sessions(first: 50) { totalCount nodes { id } } }"
EVENTS = '{ events(sessionId: "big", first: 100) { nodes { seq type surface data } } }'
GRANTS = {
    "token all": ["all"],
    "token cwd:/bench": ["cwd:/bench"],
    "token cwd:/bench/1": ["cwd:/bench/1"],
    "token tree:s0000000": ["tree:s0000000"],
}


async def build(path: Path, n: int) -> str:
    url = await migrated_sqlite(path)
    insert_sessions(path, corpus_rows(n))
    db = SqlPersistence(url)
    try:
        await db.create(SessionHeader("big", 1, cwd="/bench/1", parent_session="s0000000"))
        log = generate_log(10_000)
        for i in range(0, len(log), 5_000):
            await db.append("big", log[i : i + 5_000])
    finally:
        await db.close()
    return url


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = await build(Path(tmp) / "access.db", args.sessions)
        db = SqlPersistence(url)
        tokens = TokenStore(db, b"bench-key-" * 4)
        query = SessionQuery(persistence=db)
        apps: dict[str, tuple[Any, dict[str, str]]] = {"no auth": (create_app(query), {})}
        authed = create_app(query, authenticate=token_authenticator(tokens))
        for name, grants in GRANTS.items():
            _, secret = await tokens.create(f"bench-{len(apps)}", grants)
            apps[name] = (authed, {"Authorization": f"Bearer {secret}"})
        for label, document in (("sessions(first: 50)", PAGE), ("events(first: 100)", EVENTS)):
            samples: dict[str, list[float]] = {name: [] for name in apps}
            clients = {
                name: httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://bench", headers=h
                )
                for name, (app, h) in apps.items()
            }
            try:
                for name, c in clients.items():  # warm-up, and check the answer is data
                    r = await c.post("/graphql", json={"query": document})
                    assert r.status_code == 200 and "errors" not in r.json(), (name, r.text)
                for _ in range(args.runs):
                    for name, c in clients.items():
                        t = time.perf_counter()
                        await c.post("/graphql", json={"query": document})
                        samples[name].append(time.perf_counter() - t)
            finally:
                for c in clients.values():
                    await c.aclose()
            base = statistics.median(samples["no auth"])
            print(f"\n{label}, {args.sessions:,} sessions, median of {args.runs}:")
            for name, got in samples.items():
                med = statistics.median(got)
                over = "" if name == "no auth" else f"  {100 * (med / base - 1):+6.1f} %"
                print(f"  {name:<22} {med * 1000:8.2f} ms{over}")
        await db.close()
    print("\ntarget: auth + scope overhead <= 10 % against `no auth`")


if __name__ == "__main__":
    asyncio.run(main())
