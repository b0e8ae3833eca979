"""Hostile input against a real `serve`-like server: stalls, refusals, memory (issue 9).

    .venv/bin/python -m benchmarks.bench_hostile [--quick] [--gateway-src DIR]

A SQLite corpus (a 600-event session, 50 small ones, one event whose payload
holds a lone surrogate) is served by uvicorn in a child process on a
loopback port, by `create_app` with the loopback Host allow-list (when the
code has one). For each attack, attacker threads (two by default,
`--attackers N`) repeat the request for a few seconds while one prober thread
GETs `/healthz` every 10 ms; printed per attack: the status / error code of
the attack's answers, its slowest answer, and the worst and p99 `/healthz`
latency while it ran. A request that does not answer within the time limit
counts as a stall: the server is killed (SIGKILL: a stalled one ignores
SIGTERM) and started again for the next attack.

Then the server's RSS before and after 10,000 hostile requests (the attacks
round-robin; target growth <= 10 %), and in-process the worst time to answer
(parse, checks, validation, refusal or execution) over fragment fan-outs up to
the 5,000-token limit (target <= 100 ms for any accepted-size document).
Target for the attacks: `/healthz` p99 <= 100 ms during every attack.

`--gateway-src DIR` runs the server (and the validation sweep) on another
checkout's `gateway` package, e.g. the code before the fix:
`git archive f3b0d78 | tar -x -C /tmp/before` then `--gateway-src /tmp/before`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HEALTH_P99_TARGET = 0.100
VALIDATION_TARGET = 0.100
RSS_GROWTH_TARGET = 0.10

SMALL = 50
BIG = 600


# ------------------------------------------------------------------ the attacks


def fanout(k: int, depth: int) -> str:
    """Fragments that each spread the next `k` times, `depth` levels deep."""
    parts = [
        f"fragment F{i} on Session {{ id {' '.join([f'...F{i + 1}'] * k)} }}" for i in range(depth)
    ]
    parts.append(f"fragment F{depth} on Session {{ id }}")
    return '{ session(id: "big") { ...F0 } } ' + " ".join(parts)


COSTLY = (  # the 287-byte query, on this corpus's 600-event session
    '{a:session(id:"big"){events(first:500){nodes{session{events(first:500)'
    "{nodes{seq type surface}}}}}} "
    'b:session(id:"big"){events(first:500){nodes{session{events(first:500)'
    "{nodes{seq type surface}}}}}}}"
)
BY_ID = "query($id: ID!) { session(id: $id) { id } events(sessionId: $id) { totalCount } }"
DEEP_JSON = '{"query": "{ __typename }", "variables": {"x": ' + "[" * 1000 + "]" * 1000 + "}}"


@dataclass
class Attack:
    name: str
    body: str  # the raw JSON body
    headers: dict[str, str] = field(default_factory=dict)
    quick: bool = True  # part of --quick
    repeat: bool = True  # attacker threads repeat it (slow ones run once per thread)


def attacks(quick: bool) -> list[Attack]:
    def gql(query: str, **extra: Any) -> str:
        return json.dumps({"query": query, **extra})

    out = [
        Attack("fragment fan-out 10x6 (594 B)", gql(fanout(10, 6))),
        Attack("fragment fan-out 10x9 (861 B)", gql(fanout(10, 9)), quick=False),
        Attack("nested events(first:500) x2 (cost)", gql(COSTLY)),
        Attack(
            "1,249 x sessions{totalCount} (overlap rule)",
            gql("{" + " ".join("sessions{totalCount}" for _ in range(1249)) + "}"),
        ),
        Attack("read a lone-surrogate payload", gql('{session(id:"lone"){surface{data}}}')),
        Attack("variables nested 1,000 deep", DEEP_JSON),
        Attack("id with NUL", gql(BY_ID, variables={"id": "a\x00b"})),
        Attack("id with lone surrogate", gql(BY_ID, variables={"id": "a\ud800b"})),
        Attack("id of 100,000 characters", gql(BY_ID, variables={"id": "x" * 100_000})),
        Attack(
            "Host: attacker.example",
            gql("{sessions(first:1){nodes{id}}}"),
            headers={"Host": "attacker.example"},
        ),
        Attack(
            "two operations, no operationName",
            gql("query A {sessions{totalCount}} query B {sessions{totalCount}}"),
        ),
    ]
    return [a for a in out if a.quick or not quick]


# ------------------------------------------------------------------ the server


def serve_main(database: str, port: int) -> None:
    """The child process: serve `database` on 127.0.0.1:`port` until killed."""

    import uvicorn

    from gateway import SessionQuery
    from gateway.persistence import SqlPersistence
    from gateway.server.app import create_app
    from gateway.server.config import GatewayConfig

    config = GatewayConfig(allowed_hosts=("localhost", "127.0.0.1", "[::1]"))
    app = create_app(SessionQuery(persistence=SqlPersistence(database)), config)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="critical", access_log=False)


def fill(database: str) -> None:
    from gateway.core import SessionEvent, SessionHeader
    from gateway.persistence import SqlPersistence

    def log(n: int, data: Callable[[int], Any]) -> list[SessionEvent]:
        return [
            SessionEvent("user/message", i, 1_000 + i, data(i), surface_op="append")
            for i in range(n)
        ]

    async def run() -> None:
        db = SqlPersistence(database)
        await db.create(SessionHeader("big", 1), log(BIG, lambda i: {"text": f"m{i}"}))
        await db.create(SessionHeader("lone", 2), log(3, lambda i: {"text": "cut \ud83d"}))
        for i in range(SMALL):
            await db.create(SessionHeader(f"s{i:03d}", 10 + i), log(5, lambda i: i))
        await db.close()

    asyncio.run(run())


class Server:
    def __init__(self, database: str, src: str | None, log: Path) -> None:
        self.database, self.src, self.log = database, src, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        command = [sys.executable, __file__, "--serve", self.database, "--port", str(port)]
        if self.src:
            command += ["--gateway-src", self.src]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=out)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def rss_kib(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


# ------------------------------------------------------------------ measuring


def answer_of(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"{response.status_code} {response.headers.get('content-type', '?').split(';')[0]}"
    errors = body.get("errors") if isinstance(body, dict) else None
    code = errors[0].get("extensions", {}).get("code") if errors else "data"
    return f"{response.status_code} {code}"


@dataclass
class Outcome:
    answers: dict[str, int] = field(default_factory=dict)
    slowest: float = 0.0
    stalled: bool = False
    health: list[float] = field(default_factory=list)


def run_attack(
    server: Server, attack: Attack, seconds: float, limit: float, threads: int
) -> Outcome:
    outcome = Outcome()
    done = threading.Event()
    lock = threading.Lock()

    def attacker() -> None:
        with httpx.Client(base_url=server.base, timeout=limit) as client:
            started = time.monotonic()
            while True:
                t = time.perf_counter()
                try:
                    r = client.post(
                        "/graphql",
                        content=attack.body.encode("utf-8", "surrogatepass"),
                        headers={"Content-Type": "application/json", **attack.headers},
                    )
                    answer = answer_of(r)
                except httpx.TimeoutException:
                    answer, outcome.stalled = f"no answer in {limit:g} s", True
                except httpx.HTTPError as exc:  # the server dropped the connection
                    answer = type(exc).__name__
                elapsed = time.perf_counter() - t
                with lock:
                    outcome.answers[answer] = outcome.answers.get(answer, 0) + 1
                    outcome.slowest = max(outcome.slowest, elapsed)
                if outcome.stalled or time.monotonic() - started >= seconds or not attack.repeat:
                    return

    def prober() -> None:
        with httpx.Client(base_url=server.base, timeout=limit) as client:
            while not done.is_set():
                t = time.perf_counter()
                try:
                    client.get("/healthz")
                    outcome.health.append(time.perf_counter() - t)
                except httpx.TimeoutException:
                    outcome.health.append(limit)
                    return
                done.wait(0.01)

    probe = threading.Thread(target=prober)
    probe.start()
    workers = [threading.Thread(target=attacker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    probe.join()
    return outcome


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


# ------------------------------------------------------------------ validation sweep


def validation_sweep() -> tuple[float, str, int]:
    """Worst parse+validate (and refusal) time over fan-out documents within 5,000 tokens."""
    from gateway import SessionQuery, SessionStore
    from gateway.server.schema import build_schema

    store = SessionStore()
    store.create("big", created_at=1)
    schema = build_schema()
    docs: list[tuple[str, str]] = []

    def spreads(indices: range) -> str:
        return " ".join(f"...F{j}" for j in indices)

    for k in (2, 3, 5, 10, 20, 50, 100):
        for depth in (2, 4, 6, 9, 12, 20, 40, 80, 160):
            doc = fanout(k, depth)
            if len(doc.split()) * 2 < 5_000:  # roughly within the token limit
                docs.append((f"fan-out {k}x{depth}", doc))
    docs.append(
        (
            "dense DAG 60",
            " ".join(
                ['{ session(id: "big") { ...F59 } }']
                + [
                    f"fragment F{i} on Session {{ id {spreads(range(max(0, i - 8), i))} }}"
                    for i in range(60)
                ]
            ),
        )
    )
    fields = ["id", "live", "persisted", "header{id createdAt}", "events(first:1){totalCount}"]
    crowded = " ".join(f'session(id:"big"){{{f}}}' for f in fields for _ in range(20))
    docs.append(("20 x 5 same-named fields (accepted)", "{" + crowded + "}"))
    docs.append(
        (
            "introspection (GraphiQL's query)",
            __import__("graphql").get_introspection_query(descriptions=True),
        )
    )

    async def run() -> tuple[float, str, int]:
        from gateway.server.context import Context
        from gateway.server.cursors import CursorCodec

        worst, which, accepted = 0.0, "", 0
        for name, doc in docs:
            best = float("inf")
            for _ in range(3):
                ctx = Context.for_request(SessionQuery(live=[store]), CursorCodec(None))
                t = time.perf_counter()
                result = await schema.execute(doc, context_value=ctx)
                best = min(best, time.perf_counter() - t)
            if not result.errors:
                accepted += 1
            if best > worst:
                worst, which = best, name
        return worst, which, accepted

    return asyncio.run(run())


# ------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer attacks, shorter runs")
    parser.add_argument("--gateway-src", help="run another checkout's gateway package")
    parser.add_argument("--rss-requests", type=int, default=10_000)
    parser.add_argument("--skip-attacks", action="store_true", help="only the RSS figure")
    parser.add_argument(
        "--attackers", type=int, default=2, help="threads repeating each attack (default 2)"
    )
    parser.add_argument("--serve", metavar="DATABASE", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gateway_src:
        sys.path.insert(0, args.gateway_src)
    if args.serve:  # the child process
        serve_main(args.serve, args.port)
        return 0
    seconds = 2.0 if args.quick else 5.0
    limit = 30.0 if args.quick else 120.0
    tmp = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    database = f"sqlite+aiosqlite:///{tmp / 'corpus.db'}"
    fill(database)
    server = Server(database, args.gateway_src, tmp / "server.log")
    print(
        f"# bench_hostile ({'quick' if args.quick else 'full'}), gateway from "
        f"{args.gateway_src or 'this checkout'}; attack {seconds:g} s x {args.attackers} threads, "
        f"limit {limit:g} s"
    )
    print(f"{'attack':45} {'answers':44} {'slowest':>10} {'healthz worst':>14} {'p99':>9}")
    worst_p99 = 0.0
    server.start()
    try:
        for attack in [] if args.skip_attacks else attacks(args.quick):
            outcome = run_attack(server, attack, seconds, limit, threads=args.attackers)
            answers = ", ".join(f"{k} x{v}" for k, v in sorted(outcome.answers.items()))
            health_worst = max(outcome.health, default=float("nan"))
            health_p99 = p99(outcome.health)
            worst_p99 = max(worst_p99, health_p99)
            print(
                f"{attack.name:45} {answers[:44]:44} {ms(outcome.slowest):>10} "
                f"{ms(health_worst):>14} {ms(health_p99):>9}",
                flush=True,
            )
            if outcome.stalled:
                print("  (stalled: server killed and restarted)", flush=True)
                server.stop()
                server.start()
        print(
            f"worst /healthz p99 over attacks: {ms(worst_p99)} (target <= {ms(HEALTH_P99_TARGET)})"
        )
        load = os.getloadavg()[0]
        print(
            f"machine load average (1 min) after the attacks: {load:.2f} on {os.cpu_count()} CPUs"
        )

        # RSS before/after many hostile requests (the quick ones, round-robin)
        fast = (
            [
                a
                for a in attacks(True)
                if "fan-out" not in a.name and "cost" not in a.name and "overlap" not in a.name
            ]
            if args.gateway_src
            else attacks(True)
        )
        before = server.rss_kib()
        with httpx.Client(base_url=server.base, timeout=limit) as client:
            for i in range(args.rss_requests):
                a = fast[i % len(fast)]
                with contextlib.suppress(httpx.HTTPError):  # the old code drops some
                    client.post(
                        "/graphql",
                        content=a.body.encode("utf-8", "surrogatepass"),
                        headers={"Content-Type": "application/json", **a.headers},
                    )
        after = server.rss_kib()
        growth = (after - before) / before if before else float("nan")
        print(
            f"RSS before/after {args.rss_requests:,} hostile requests ({len(fast)} kinds): "
            f"{before / 1024:,.1f} / {after / 1024:,.1f} MiB, growth {growth:+.1%} "
            f"(target <= {RSS_GROWTH_TARGET:.0%})"
        )
    finally:
        server.stop()

    if args.gateway_src:
        print(
            "validation sweep: skipped for --gateway-src (fan-outs stall the old code; "
            "see the fan-out attacks above)"
        )
    else:
        worst, which, accepted = validation_sweep()
        print(
            f"validation sweep: worst parse+validate {ms(worst)} ({which}; {accepted} documents "
            f"accepted) (target <= {ms(VALIDATION_TARGET)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
