"""The request path against its floor (issue 21): the gateway beside minimal apps
that answer the same JSON from the same SELECT, on the same database, in one run.

    .venv/bin/python -m benchmarks.bench_floor [--quick] [--postgres URL | --no-postgres]

Data (built once, cached in /tmp keyed by `DATA_VERSION`; never timed): the 120
real artifacts of tests/data/dsh-jsonl (`session-gateway import`), one session
of 50,000 generated events (`SqlPersistence.import_log`) and 9,700 generated
sessions, 100 in each of 97 cwds, newer than the rest (so `sessions(first:50)`
has pages for every token below). On PostgreSQL the same, in a throwaway Debian
cluster on a free loopback port (`tests.support.postgres`), or `--postgres URL`.

Servers, each its own uvicorn child process with the same uvicorn settings
(uvicorn's defaults, log level warning, lifespan on):
* gateway: `session-gateway serve` (and `serve --workers 2`, and `serve --auth
  tokens` for the auth rows, tokens made by `session-gateway token create`);
* floor a: Starlette + the raw driver (one aiosqlite connection / an asyncpg
  pool), one route that reads the JSON body and runs the SELECT of the header,
  or, asked for `events(first:100)`, the SELECT of that page (the gateway's
  nodes, its `endCursor` the bare seq), timed one request at a time beside the
  gateway's: what one HTTP request of the page costs before any GraphQL;
* floor b: Strawberry with `ParserCache` and `ValidationCache`, one resolver, the
  same SELECT.
Every answer is checked (the same JSON from all three) before any clock starts.

Load: `wrk -t2 -c32 -d15s` (`--quick`: 3 s) with a Lua script POSTing the body;
rounds interleaved (gateway, floor a, floor b, workers 2, events, gateway, ...),
median of the rounds. Server CPU per request: the child's (and its workers')
utime+stime from /proc/PID/stat over the wrk run, divided by the requests wrk
counted. One-request figures: medians of sequential requests over one keep-alive
connection (the stdlib's `http.client`: `OneAtATime` says why not httpx), and the
raw SELECT timed in process (stdlib sqlite3 / asyncpg), in a loop. Each timed
request is sent twice in a row: the first, "cold", follows other requests (to
another server, or another query), so it may also time a server waking from idle
(on one 2-core VM, `events(first:100)` took 1.9 ms back to back and 3.9 ms with
20 ms sleeps between identical requests; on another, no difference); the second,
"primed", follows the same request, as each raw SELECT in its loop does, and is the
judged figure. Both are printed: the measurement, not the server, sets them
apart. The 50/100-subscriber
rows of issue 21 are `bench_tail`'s (and `bench_fanout`'s) figures, not measured
here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import strawberry

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "data" / "dsh-jsonl"
DATA_VERSION = "floor-1"
"""Bump when the generated data changes: the cached SQLite file is keyed by it."""
CACHE = Path(tempfile.gettempdir()) / f"bench-floor-{DATA_VERSION}"
LONG_ID = "floor-long-50k"
LONG_EVENTS = 50_000
GENERATED = 9_700
CWD_KINDS = 97
BASE_MS = 1_790_000_000_000
TOKEN_KEY = "bench-floor-token-key-" + "0" * 32
PROBE_ID = "apps-web--approval-composer"

SESSION_QUERY = "query($id: ID!) { session(id: $id) { id header { cwd } } }"
EVENTS_QUERY = (
    "query($id: ID!, $n: Int) { events(sessionId: $id, first: $n) "
    "{ nodes { seq type surface } pageInfo { hasNextPage endCursor } } }"
)
SESSIONS_QUERY = "{ sessions(first: 50) { nodes { id header { createdAt cwd } } } }"
HEADER_SQL = (
    "SELECT id, version, created_at, cwd, parent_session, seed_length, origin, "
    "delegation_depth, agent_preset FROM sessions WHERE id = {p}"
)
EVENTS_SQL = (
    "SELECT seq, type, surface, data FROM events WHERE session_id = {p} "
    "ORDER BY session_id, surface, seq LIMIT 101"
)
FLOOR_EVENTS_SQL = (
    "SELECT seq, type, surface, data FROM events WHERE session_id = {p} "
    "ORDER BY session_id, seq LIMIT {n}"
)
"""floor a's events page: the gateway's first page (in seq order), `data` fetched as the
raw SELECT fetches it, not decoded."""
SURFACES = {0: "LOG_ONLY", 1: "CURRENT", 2: "SHADOWED"}
"""The stored class codes (`gateway.persistence.derived`) by their GraphQL names."""
WRK = ("wrk", "-t2", "-c32", "--timeout", "10s")
WRK_LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = {body}
"""


# -- the floors (served in a child: `--serve floor-a|floor-b`) ---------------------------


def _sql(url: str, template: str) -> str:
    return template.format(p="$1" if url.startswith("postgresql") else "?")


def _events_json(rows: list[Any], n: int) -> dict[str, Any]:
    nodes = [{"seq": r[0], "type": r[1], "surface": SURFACES[r[2]]} for r in rows[:n]]
    end = str(nodes[-1]["seq"]) if nodes else None
    page = {"hasNextPage": len(rows) > n, "endCursor": end}
    return {"data": {"events": {"nodes": nodes, "pageInfo": page}}}


def _session_json(row: Any) -> dict[str, Any]:
    if row is None:
        return {"data": {"session": None}}
    return {"data": {"session": {"id": row[0], "header": {"cwd": row[3]}}}}


class Driver:
    """The raw driver of one database: one aiosqlite connection or an asyncpg pool."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sql = _sql(url, HEADER_SQL)
        pg = url.startswith("postgresql")
        self.events_sql = FLOOR_EVENTS_SQL.format(p="$1" if pg else "?", n="$2" if pg else "?")
        self.conn: Any = None

    async def open(self) -> None:
        if self.url.startswith("postgresql"):
            import asyncpg

            dsn = self.url.replace("postgresql+asyncpg://", "postgresql://")
            self.conn = await asyncpg.create_pool(dsn, min_size=2, max_size=10)
        else:
            import aiosqlite

            self.conn = await aiosqlite.connect(self.url.split("///", 1)[1])

    async def close(self) -> None:
        await self.conn.close()

    async def header(self, sid: str) -> Any:
        if self.url.startswith("postgresql"):
            return await self.conn.fetchrow(self.sql, sid)
        async with self.conn.execute(self.sql, (sid,)) as cursor:
            return await cursor.fetchone()

    async def events(self, sid: str, limit: int) -> list[Any]:
        if self.url.startswith("postgresql"):
            return list(await self.conn.fetch(self.events_sql, sid, limit))
        async with self.conn.execute(self.events_sql, (sid, limit)) as cursor:
            return list(await cursor.fetchall())


def floor_a(url: str) -> Any:
    """Starlette + the raw driver: read the body, run the SELECT, answer the JSON (the
    header of `session(id)`, or with `n` among the variables the first page of events)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    driver = Driver(url)

    async def graphql(request: Request) -> JSONResponse:
        variables = (await request.json())["variables"]
        if "n" in variables:
            n = int(variables["n"])
            return JSONResponse(_events_json(await driver.events(variables["id"], n + 1), n))
        return JSONResponse(_session_json(await driver.header(variables["id"])))

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        await driver.open()
        yield
        await driver.close()

    return Starlette(routes=[Route("/graphql", graphql, methods=["POST"])], lifespan=lifespan)


@strawberry.type
class FloorHeader:
    cwd: str | None


@strawberry.type
class FloorSession:
    id: strawberry.ID
    header: FloorHeader


FLOOR_B_DRIVER: list[Driver] = []
"""floor b's one driver (module scope: Strawberry resolves the types by name here)."""


@strawberry.type
class FloorQuery:
    @strawberry.field
    async def session(self, id: strawberry.ID) -> FloorSession | None:
        row = await FLOOR_B_DRIVER[0].header(str(id))
        return None if row is None else FloorSession(id=row[0], header=FloorHeader(cwd=row[3]))


def floor_b(url: str) -> Any:
    """Strawberry with parser and validation caches, one resolver, the same SELECT."""
    from starlette.applications import Starlette
    from starlette.routing import Route
    from strawberry.asgi import GraphQL
    from strawberry.extensions import ParserCache, ValidationCache

    driver = Driver(url)
    FLOOR_B_DRIVER[:] = [driver]
    schema = strawberry.Schema(
        FloorQuery, extensions=[ParserCache(maxsize=256), ValidationCache(maxsize=256)]
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        await driver.open()
        yield
        await driver.close()

    gql = GraphQL(schema, graphql_ide=None)
    return Starlette(routes=[Route("/graphql", gql, methods=["POST"])], lifespan=lifespan)


def serve_floor(kind: str, url: str, port: int) -> None:
    import uvicorn

    app = floor_a(url) if kind == "floor-a" else floor_b(url)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    uvicorn.Server(config).run()


# -- data --------------------------------------------------------------------------------


def gateway_cli(args: list[str], env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if result.returncode != 0:
        raise RuntimeError(f"session-gateway {args[0]}: {result.stderr[-800:]}")
    return result.stdout


def generated_rows() -> Iterator[tuple[Any, ...]]:
    """(id, created_at, cwd): 100 sessions in each of 97 cwds, newer than the artifacts."""
    for i in range(GENERATED):
        yield f"floor-{i:05d}", BASE_MS - i // 2, f"/home/dev/floor/{i % CWD_KINDS}"


async def build(url: str) -> None:
    """Everything the figures read, written into a migrated database at `url`."""
    from benchmarks.logs import generate_log
    from gateway.core import SessionHeader
    from gateway.persistence import SqlPersistence

    gateway_cli(["migrate", "--database", url])
    gateway_cli(["import", "--database", url, str(ARTIFACTS)])
    db = SqlPersistence(url)
    try:
        header = SessionHeader(LONG_ID, BASE_MS + 10, cwd="/home/dev/floor/long")
        await db.import_log(header, generate_log(LONG_EVENTS))
        items = [(SessionHeader(sid, at, cwd=cwd), ()) for sid, at, cwd in generated_rows()]
        for start in range(0, len(items), 1000):
            outcomes = await db.import_many(items[start : start + 1000])
            if bad := [o for o in outcomes if isinstance(o, Exception)]:
                raise RuntimeError(f"generated sessions not imported: {bad[0]}")
        if url.startswith("postgresql"):  # fresh bulk-loaded tables: plan from real stats
            await _pg_execute(url, "ANALYZE")
    finally:
        await db.close()


def sqlite_database() -> str:
    """The cached SQLite file (built on first use)."""
    path = CACHE / "sessions.db"
    done = CACHE / "done"
    if not done.exists():
        shutil.rmtree(CACHE, ignore_errors=True)
        CACHE.mkdir(parents=True)
        print(f"  building {path} (cached for later runs) ...", flush=True)
        asyncio.run(build(f"sqlite+aiosqlite:///{path}"))
        done.write_text(DATA_VERSION)
    return f"sqlite+aiosqlite:///{path}"


def make_tokens(url: str) -> dict[str, str]:
    """Tokens by kind: `all`, `cwd:` grants that see every session, one cwd of 97."""
    con = sqlite3.connect(url.split("///", 1)[1]) if not url.startswith("postgresql") else None
    if con is not None:
        cwds = [row[0] for row in con.execute("SELECT DISTINCT cwd FROM sessions")]
        con.close()
    else:
        cwds = asyncio.run(_pg_cwds(url))
    # A few real artifacts have no cwd: no cwd: grant sees those; every other session
    # (the whole first page among them) is seen.
    roots = sorted({"/" + c.strip("/").split("/")[0] for c in cwds if c is not None})
    grants = {
        "all": ["all"],
        "cwd-all": [f"cwd:{r}" for r in roots],
        "cwd-1in97": ["cwd:/home/dev/floor/0"],
    }
    env = {"SESSION_GATEWAY_TOKEN_KEY": TOKEN_KEY}
    tag = f"{os.getpid()}-{time.time_ns()}"
    return {
        kind: gateway_cli(
            ["token", "create", "--database", url, "--name", f"bench-{kind}-{tag}", "--grant", *g],
            env,
        ).strip()
        for kind, g in grants.items()
    }


async def _pg_execute(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _pg_cwds(url: str) -> list[str | None]:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        return [r[0] for r in await conn.fetch("SELECT DISTINCT cwd FROM sessions")]
    finally:
        await conn.close()


# -- servers -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    workers: int = 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/graphql"

    def start(self, tmp: Path) -> None:
        self.port = free_port()
        self.log = tmp / f"{self.name}.log"
        argv = [a.replace("{port}", str(self.port)) for a in self.argv]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                cwd=ROOT,
            )

    def wait(self) -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_tail()}")
            try:
                httpx.post(self.url, json={"query": "{__typename}"}, timeout=2)
                if self.workers_listening() >= self.workers:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not start: {self.log_tail()}")

    def workers_listening(self) -> int:
        """How many distinct workers answered /metrics on fresh connections (1 without
        --workers): the rounds start only once every worker listens."""
        if self.workers == 1:
            return 1
        seen = set()
        for _ in range(20 * self.workers):
            text = httpx.get(self.url.replace("/graphql", "/metrics"), timeout=2).text
            seen.update(re.findall(r'^gateway_worker\{pid="(\d+)"', text, re.M))
        return len(seen)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-800:] if self.log else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def cpu_seconds(self) -> float:
        """utime + stime of the child and of its own children (the workers)."""
        assert self.proc is not None
        pids = [self.proc.pid, *children(self.proc.pid)]
        ticks = 0
        for pid in pids:
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == pid:
                    found.append(int(entry.name))
    return found


def gateway_server(
    name: str, url: str, *extra: str, env: dict[str, str] | None = None, workers: int = 1
) -> Server:
    argv = ["-m", "gateway", "serve", "--database", url, "--port", "{port}"]
    return Server(name, [*argv, "--log-level", "WARNING", *extra], env or {}, workers=workers)


def floor_server(name: str, url: str) -> Server:
    argv = ["-m", "benchmarks.bench_floor", "--serve", name, "--database", url]
    return Server(name, [*argv, "--port", "{port}"])


# -- load --------------------------------------------------------------------------------


@dataclass
class Load:
    rps: float
    requests: int
    cpu_per_request: float


def wrk(server: Server, body: dict[str, Any], seconds: float, tmp: Path) -> Load:
    script = tmp / "post.lua"
    script.write_text(WRK_LUA.format(body=json.dumps(json.dumps(body))))
    cpu = server.cpu_seconds()
    result = subprocess.run(
        [*WRK, f"-d{seconds:g}s", "-s", str(script), server.url],
        capture_output=True,
        text=True,
    )
    cpu = server.cpu_seconds() - cpu
    out = result.stdout
    if result.returncode != 0 or "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk against {server.name}: {out}{result.stderr}")
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return Load(rps, requests, cpu / max(requests, 1))


def post(
    client: httpx.Client, server: Server, body: dict[str, Any], token: str | None = None
) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = client.post(server.url, json=body, headers=headers)
    response.raise_for_status()
    answer = response.json()
    if answer.get("errors"):
        raise RuntimeError(f"{server.name}: {answer['errors']}")
    return answer


class OneAtATime:
    """Sequential POSTs over one keep-alive connection per server, on the stdlib's
    `http.client`: the one-request figures time the server, not the client. httpx
    costs ~1.5 ms of client CPU per request on the 2-core machine (measured:
    `{__typename}` 1.9 ms with httpx, 0.5 ms over a raw socket, 0.67 ms with
    `http.client`), more than the gateway's own work for a small answer; the httpx
    figure of `events(first:100)` is printed beside the judged one."""

    def __init__(self) -> None:
        self._conns: dict[int, http.client.HTTPConnection] = {}

    def seconds(self, server: Server, body: dict[str, Any], token: str | None = None) -> float:
        conn = self._conns.get(server.port)
        if conn is None:
            conn = self._conns[server.port] = http.client.HTTPConnection("127.0.0.1", server.port)
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode()
        t = time.perf_counter()
        conn.request("POST", "/graphql", body=data, headers=headers)
        response = conn.getresponse()
        answer = json.loads(response.read())
        elapsed = time.perf_counter() - t
        if response.status != 200 or answer.get("errors"):
            raise RuntimeError(f"{server.name}: {response.status} {answer}")
        return elapsed

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()


def one_request(
    client: httpx.Client, server: Server, body: dict[str, Any], token: str | None = None
) -> float:
    t = time.perf_counter()
    post(client, server, body, token)
    return time.perf_counter() - t


def raw_select_seconds(url: str, template: str, arg: str, runs: int) -> float:
    """Median of the raw SELECT in process: stdlib sqlite3, or asyncpg (one connection)."""
    if url.startswith("postgresql"):
        return asyncio.run(_pg_select(url, _sql(url, template), arg, runs))
    con = sqlite3.connect(url.split("///", 1)[1])
    sql = _sql(url, template)
    try:
        samples = []
        for _ in range(runs):
            t = time.perf_counter()
            con.execute(sql, (arg,)).fetchall()
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)
    finally:
        con.close()


async def _pg_select(url: str, sql: str, arg: str, runs: int) -> float:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        samples = []
        for _ in range(runs):
            t = time.perf_counter()
            await conn.fetch(sql, arg)
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)
    finally:
        await conn.close()


# -- the table ---------------------------------------------------------------------------


@dataclass
class Row:
    figure: str
    measured: str
    target: str
    what: str
    verdict: str = ""


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def table(rows: list[Row]) -> str:
    lines = ["| figure | measured | target | | what exactly was timed |", "|---|---|---|---|---|"]
    lines += [f"| {r.figure} | {r.measured} | {r.target} | {r.verdict} | {r.what} |" for r in rows]
    return "\n".join(lines)


def measure(engine: str, url: str, quick: bool, tmp: Path) -> list[Row]:
    seconds = 3.0 if quick else 15.0
    rounds = 1 if quick else 3
    singles = 30 if quick else 200
    tokens = make_tokens(url)
    token_env = {"SESSION_GATEWAY_TOKEN_KEY": TOKEN_KEY}
    servers = {
        "gateway": gateway_server("gateway", url),
        "floor-a": floor_server("floor-a", url),
        "floor-b": floor_server("floor-b", url),
        "workers-2": gateway_server("workers-2", url, "--workers", "2", workers=2),
        "auth": gateway_server("auth", url, "--auth", "tokens", env=token_env),
    }
    session_body = {"query": SESSION_QUERY, "variables": {"id": PROBE_ID}}
    events20 = {"query": EVENTS_QUERY, "variables": {"id": LONG_ID, "n": 20}}
    events100 = {"query": EVENTS_QUERY, "variables": {"id": LONG_ID, "n": 100}}
    sessions_body = {"query": SESSIONS_QUERY}
    try:
        for server in servers.values():
            server.start(tmp)
        for server in servers.values():
            server.wait()
        with httpx.Client(timeout=30) as client:
            # Every answer checked before any clock starts.
            expected = post(client, servers["floor-a"], session_body)
            for name in ("gateway", "floor-b", "workers-2"):
                got = post(client, servers[name], session_body)
                if got != expected:
                    raise RuntimeError(f"{name} answered {got}, floor a {expected}")
            page = post(client, servers["gateway"], events20)["data"]["events"]
            if len(page["nodes"]) != 20 or not page["pageInfo"]["hasNextPage"]:
                raise RuntimeError(f"events(first:20) of {LONG_ID}: {page}")
            # floor a's page is the gateway's (its endCursor is the seq, not a signed cursor)
            ours = post(client, servers["gateway"], events100)["data"]["events"]
            floors = post(client, servers["floor-a"], events100)["data"]["events"]
            if (ours["nodes"], ours["pageInfo"]["hasNextPage"]) != (
                floors["nodes"],
                floors["pageInfo"]["hasNextPage"],
            ):
                raise RuntimeError(f"floor a's events(first:100) differs: {floors}")
            plain = post(client, servers["gateway"], sessions_body)
            for kind in ("all", "cwd-all"):
                if post(client, servers["auth"], sessions_body, tokens[kind]) != plain:
                    raise RuntimeError(f"sessions(first:50) with the {kind} token differs")
            narrow = post(client, servers["auth"], sessions_body, tokens["cwd-1in97"])
            if len(narrow["data"]["sessions"]["nodes"]) != 50:
                raise RuntimeError("the 1-in-97 token does not see a full page")

            print(f"  {engine}: warm-up (every worker, pool and cache) ...", flush=True)
            for name in ("gateway", "floor-a", "floor-b", "workers-2"):
                wrk(servers[name], session_body, 1 if quick else 3, tmp)
            wrk(servers["gateway"], events20, 1 if quick else 3, tmp)

            loads: dict[str, list[Load]] = {k: [] for k in ("gateway", "floor-a", "floor-b")}
            loads |= {"workers-2": [], "events20": []}
            for r in range(rounds):
                print(f"  {engine}: wrk round {r + 1} of {rounds} ...", flush=True)
                for name in ("gateway", "floor-a", "floor-b", "workers-2"):
                    loads[name].append(wrk(servers[name], session_body, seconds, tmp))
                loads["events20"].append(wrk(servers["gateway"], events20, seconds, tmp))

            print(f"  {engine}: one request at a time ...", flush=True)
            kinds = ("events100", "floor-a-events100", "none", "all", "cwd-all", "cwd-1in97")
            single: dict[str, list[float]] = {k: [] for k in kinds}
            single |= {f"{k}-cold": [] for k in kinds} | {"events100-httpx": []}
            lean = OneAtATime()

            def pair(key: str, server: Server, body: dict[str, Any], token: str | None) -> None:
                # The first request after another server's is "cold"; the same request
                # sent again at once is "primed", as the in-process raw SELECT is.
                single[f"{key}-cold"].append(lean.seconds(server, body, token))
                single[key].append(lean.seconds(server, body, token))

            try:
                for _ in range(3):  # warm-up
                    post(client, servers["gateway"], events100)
                    lean.seconds(servers["gateway"], events100)
                    lean.seconds(servers["floor-a"], events100)
                    for kind in ("all", "cwd-all", "cwd-1in97"):
                        lean.seconds(servers["auth"], sessions_body, tokens[kind])
                for _ in range(singles):  # interleaved
                    pair("events100", servers["gateway"], events100, None)
                    pair("floor-a-events100", servers["floor-a"], events100, None)
                    single["events100-httpx"].append(
                        one_request(client, servers["gateway"], events100)
                    )
                    pair("none", servers["gateway"], sessions_body, None)
                    for kind in ("all", "cwd-all", "cwd-1in97"):
                        pair(kind, servers["auth"], sessions_body, tokens[kind])
            finally:
                lean.close()
    finally:
        for server in servers.values():
            server.stop()
    raw100 = raw_select_seconds(url, EVENTS_SQL, LONG_ID, singles * 5)
    raw_header = raw_select_seconds(url, HEADER_SQL, PROBE_ID, singles * 5)
    return rows_of(engine, loads, single, raw100, raw_header, seconds, rounds)


def rows_of(
    engine: str,
    loads: dict[str, list[Load]],
    single: dict[str, list[float]],
    raw100: float,
    raw_header: float,
    seconds: float,
    rounds: int,
) -> list[Row]:
    def rps(name: str) -> float:
        return statistics.median(load.rps for load in loads[name])

    def cpu(name: str) -> float:
        return statistics.median(load.cpu_per_request for load in loads[name])

    def med(name: str) -> float:
        return statistics.median(single[name])

    load_what = f"wrk -t2 -c32 -d{seconds:g}s POST, median of {rounds} interleaved rounds"
    gw, fa, fb = rps("gateway"), rps("floor-a"), rps("floor-b")
    e = f"({engine})"
    none = med("none")
    rows = [
        Row(
            f"persisted `session(id){{id header{{cwd}}}}` req/s {e}: gateway / floor a / floor b",
            f"{gw:,.0f} / {fa:,.0f} / {fb:,.0f}",
            "",
            f"{load_what}; floor a Starlette + raw driver, floor b Strawberry + caches",
        ),
        Row(
            f"gateway / floor a (Starlette + raw driver) {e}",
            f"{gw / fa:.2f}x",
            ">= 0.4x",
            "ratio of the req/s above",
            verdict(gw / fa >= 0.4),
        ),
        Row(
            f"gateway / floor b (Strawberry + caches, one resolver) {e}",
            f"{gw / fb:.2f}x",
            ">= 1.0x",
            "ratio of the req/s above",
            verdict(gw / fb >= 1.0),
        ),
        Row(
            f"server CPU per `session(id)` request {e}: gateway / floor a / floor b",
            f"{cpu('gateway') * 1e6:,.0f} / {cpu('floor-a') * 1e6:,.0f} / "
            f"{cpu('floor-b') * 1e6:,.0f} µs",
            "<= 1,200 µs (gateway)",
            "utime+stime of the server process (/proc/PID/stat) over the wrk run / requests",
            verdict(cpu("gateway") <= 1.2e-3),
        ),
        Row(
            f"persisted `events(first:20)` on the 50k-event session, req/s {e}",
            f"{rps('events20'):,.0f} ({rps('events20') / fa:.3f}x floor a's session(id))",
            ">= 0.165x floor a",
            f"{load_what}; `nodes{{seq type surface}} pageInfo{{hasNextPage endCursor}}`",
            verdict(rps("events20") / fa >= 0.165),
        ),
        Row(
            f"`events(first:100)` one request / its raw SELECT {e}",
            f"{med('events100') * 1e3:.2f} ms / {raw100 * 1e3:.3f} ms = "
            f"{med('events100') / raw100:.1f}x (cold {med('events100-cold') / raw100:.1f}x)",
            "<= 10x",
            "median of primed sequential POSTs over one keep-alive connection (`http.client`, "
            f"send to parsed answer; cold {med('events100-cold') * 1e3:.2f} ms, with httpx "
            f"{med('events100-httpx') * 1e3:.2f} ms); raw: `{EVENTS_SQL.format(p='?')}` "
            "fetched in process, in a loop",
            verdict(med("events100") / raw100 <= 10),
        ),
        Row(
            f"the same page from floor a, one request / the raw SELECT {e}",
            f"{med('floor-a-events100') * 1e3:.2f} ms = "
            f"{med('floor-a-events100') / raw100:.1f}x (gateway / floor a "
            f"{med('events100') / med('floor-a-events100'):.2f}x)",
            "report",
            "as the row above, interleaved with it: Starlette + the raw driver answering the "
            f"same nodes (`{FLOOR_EVENTS_SQL.format(p='?', n='101')}`, rows to JSON): what one "
            "HTTP request of this page costs before any GraphQL",
        ),
        Row(
            f"`session(id)` raw SELECT in process {e}",
            f"{raw_header * 1e6:.0f} µs",
            "report",
            f"`{HEADER_SQL.format(p='?')}`, median",
        ),
        Row(
            f"`sessions(first:50)` one request, no auth {e}",
            f"{none * 1e3:.2f} ms (cold {med('none-cold') * 1e3:.2f} ms)",
            "",
            "median of primed sequential POSTs (`serve`, keep-alive, `http.client`), "
            "interleaved with the rows below",
        ),
    ]
    for kind, label, limit in (
        ("all", "an `all` token", 0.10),
        ("cwd-all", "`cwd:` grants that see every session with a cwd", 0.15),
        ("cwd-1in97", "a `cwd:` token that sees 1 session in 97", None),
    ):
        over = med(kind) / none - 1
        cold = med(f"{kind}-cold") / med("none-cold") - 1
        rows.append(
            Row(
                f"`sessions(first:50)` with {label}, over no auth {e}",
                f"{med(kind) * 1e3:.2f} ms ({over:+.0%}; cold {cold:+.0%})",
                "report" if limit is None else f"<= +{limit:.0%}",
                "median of primed sequential POSTs to `serve --auth tokens` (token from "
                "`token create`)",
                "" if limit is None else verdict(over <= limit),
            )
        )
    w2 = rps("workers-2")
    rows.append(
        Row(
            f"`serve --workers 2` / one worker on `session(id)` {e}",
            f"{w2:,.0f} / {gw:,.0f} req/s = {w2 / gw:.2f}x",
            ">= 1.7x",
            f"{load_what} (wrk shares the 2 cores with the servers)",
            verdict(w2 / gw >= 1.7),
        )
    )
    return rows


POINTER = (
    "50/100 subscribers on one live session at 50 events/s (issue 21): see "
    "`benchmarks.bench_tail` / `bench_fanout`; not measured here."
)


def environment() -> str:
    load = os.getloadavg()[0]
    return f"{os.cpu_count()} cores, load {load:.1f} at start, Python {sys.version.split()[0]}"


def run(args: argparse.Namespace) -> int:
    from benchmarks.logs import generate_log  # noqa: F401  (fail early if data code moved)

    rows: list[Row] = []
    print(f"bench_floor ({environment()})", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as name:
        tmp = Path(name)
        rows += measure("SQLite", sqlite_database(), args.quick, tmp)
        if not args.no_postgres:
            rows += postgres_rows(args, tmp)
    print()
    print(table(rows))
    print()
    print(POINTER)
    return 0


def postgres_rows(args: argparse.Namespace, tmp: Path) -> list[Row]:
    if args.postgres:
        url = args.postgres
        asyncio.run(build(url))
        return measure("PostgreSQL", url, args.quick, tmp)
    sys.path.insert(0, str(ROOT))
    try:
        from tests.support.postgres import PostgresServer
    except Exception as exc:  # no server binaries: say so, keep the SQLite table
        print(f"  PostgreSQL skipped: {exc}", flush=True)
        return []
    with PostgresServer() as pg:
        url = pg.url()
        print(f"  building the PostgreSQL data on {url} ...", flush=True)
        asyncio.run(build(url))
        return measure("PostgreSQL", url, args.quick, tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="3 s loads, one round")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--postgres", metavar="URL", help="an empty PostgreSQL database to fill")
    group.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--serve", choices=("floor-a", "floor-b"), help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve_floor(args.serve, args.database, args.port)
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
