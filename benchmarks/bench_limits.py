"""Nothing a client does exhausts the server (issue 20): attacks against a real `serve`.

    .venv/bin/python -m benchmarks.bench_limits [--quick] [--only NAMES] [--gateway-src DIR]

A SQLite database (cached in /tmp, keyed by `DATA_VERSION`: a session `big` of 200,000
small events, a session `wide` of 120 events of 64 KB, 20 small ones) is served by
`session-gateway serve` in a child process with its default limits, started fresh for
each attack. A prober GETs `/healthz` every 50 ms (2 s timeout) on a keep-alive
connection while the attack runs, and a sampler reads the server's RSS every 100 ms.
The baseline RSS is the fresh server's after one ordinary query of each kind. Attacks,
each bounded to `--seconds` (default 15):

(a) 30 aliases of `session(id:"big"){surface{seq type data}}`, one request at a time;
(b) 8 parallel 30-alias `readEvent(before:50, after:50)` on the 64 KB events;
(c) 20 WebSocket clients with 10 subscriptions each to the 200,000-event replay, never
    reading, while ordinary queries run (their latency is printed);
(d) 1,000 slowloris connections (half the headers, then a header line every second);
(e) many idle TCP connections (21,000; `--quick` 3,000), held by helper processes;
(0) no attack, a control: what this machine's load alone does to the probes.

Printed per attack, each beside its target: `/healthz` p99 (<= 100 ms), probes timed
out or refused (0), peak RSS against the baseline (<= 2x), the attack's own outcome,
and the lines the server logged meanwhile. (a)-(c) depend on the byte budget and the
subscription caps of issue 20 (points 1 and 2); (d) and (e) on the connection limits
(`gateway.server.connections`). `--gateway-src DIR` serves another checkout's
`gateway` package (the code before the fix: `git archive COMMIT | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

DATA_VERSION = "v1"
"""Bump when the generated database changes (the cached file is keyed by it)."""
HEALTH_P99_TARGET = 0.100
RSS_RATIO_TARGET = 2.0
PROBE_INTERVAL = 0.05
PROBE_TIMEOUT = 2.0
BIG_EVENTS = 200_000
WIDE_EVENTS = 120
WIDE_BYTES = 64 * 1024
SMALL_SESSIONS = 20
ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the data


def database(path: Path) -> str:
    """The cached database's URL, generated (about a minute) when missing."""
    url = f"sqlite+aiosqlite:///{path}"
    if path.exists():
        return url
    print(f"# generating {path} (once; {BIG_EVENTS:,} + {WIDE_EVENTS} events)", flush=True)
    partial = path.with_suffix(".partial")
    for leftover in path.parent.glob(partial.name + "*"):
        leftover.unlink()
    asyncio.run(_fill(f"sqlite+aiosqlite:///{partial}"))
    partial.rename(path)
    return url


async def _fill(url: str) -> None:
    from gateway.core import SessionEvent, SessionHeader
    from gateway.persistence import SqlPersistence, migrate

    def log(n: int, data: Callable[[int], Any]) -> list[SessionEvent]:
        return [
            SessionEvent("user/message", i, 1_000 + i, data(i), surface_op="append")
            for i in range(n)
        ]

    await migrate(url)
    db = SqlPersistence(url)
    try:
        await db.create(SessionHeader("big", 1), log(BIG_EVENTS, lambda i: {"text": f"m{i}"}))
        filler = "x" * (WIDE_BYTES - 32)
        await db.create(SessionHeader("wide", 2), log(WIDE_EVENTS, lambda i: {"text": filler}))
        for i in range(SMALL_SESSIONS):
            await db.create(SessionHeader(f"s{i:03d}", 10 + i), log(5, lambda j: {"n": j}))
    finally:
        await db.close()


# ------------------------------------------------------------------ the server


class Server:
    """`session-gateway serve` in a child process (its log in a file)."""

    def __init__(self, url: str, src: str | None, log: Path) -> None:
        self.url, self.src, self.log = url, src, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = dict(os.environ)
        if self.src:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [self.src, env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "gateway", "serve", "--database", self.url,
                   "--port", str(self.port), "--log-level", "warning"]  # fmt: skip
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                command, cwd=self.src or ROOT, env=env, stdout=subprocess.DEVNULL, stderr=out
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"serve did not start; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)  # a stalled server ignores SIGTERM
            self.proc.wait()
            self.proc = None

    def rss_kib(self) -> int:
        assert self.proc is not None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def cpu_seconds(self) -> float:
        """User + system CPU the server has used so far."""
        assert self.proc is not None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_lines(self) -> int:
        with self.log.open("rb") as f:
            return sum(1 for _ in f)


ORDINARY = [
    "{ sessions(first: 20) { totalCount nodes { id header { createdAt } } } }",
    '{ events(sessionId: "big", first: 50) { totalCount nodes { seq type data } } }',
    '{ session(id: "s001") { surface { seq type data } } }',
    '{ readEvent(sessionId: "wide", seq: 60, before: 1, after: 1) { events { seq data } } }',
    '{ traceSession(sessionId: "s002") { root { id } ancestors { id } } }',
]


def ordinary_queries(server: Server) -> None:
    """One ordinary query of each kind (and one short SSE replay): the baseline's work."""
    with httpx.Client(base_url=server.base, timeout=60) as client:
        for query in ORDINARY:
            client.post("/graphql", json={"query": query})
        sub = 'subscription { sessionEvents(sessionId: "s003") { seq type } }'
        with client.stream(
            "POST", "/graphql", json={"query": sub}, headers={"Accept": "text/event-stream"}
        ) as stream:
            for _ in stream.iter_bytes():
                pass


# ------------------------------------------------------------------ watching


@dataclass
class Watch:
    health: list[float] = field(default_factory=list)
    at: list[float] = field(default_factory=list)
    """When each probe was sent, in seconds from the attack's start."""
    timed_out: int = 0
    refused: int = 0
    peak_kib: int = 0


def watching(server: Server, attack: Callable[[], str], seconds: float) -> tuple[str, Watch]:
    """Run `attack()` (bounded by itself to about `seconds`) while probing and sampling."""
    watch = Watch()
    done = threading.Event()
    began = time.perf_counter()

    def probe() -> None:
        with httpx.Client(base_url=server.base, timeout=PROBE_TIMEOUT) as client:
            while not done.is_set():
                started = time.perf_counter()
                watch.at.append(started - began)
                try:
                    status = client.get("/healthz").status_code
                    watch.health.append(time.perf_counter() - started)
                    if status != 200:
                        watch.refused += 1
                except httpx.TimeoutException:
                    watch.timed_out += 1
                    watch.health.append(PROBE_TIMEOUT)
                except httpx.HTTPError:
                    watch.refused += 1
                    watch.at.pop()
                done.wait(PROBE_INTERVAL)

    def sample() -> None:
        while not done.is_set():
            watch.peak_kib = max(watch.peak_kib, server.rss_kib())
            done.wait(0.1)

    threads = [threading.Thread(target=probe), threading.Thread(target=sample)]
    for thread in threads:
        thread.start()
    try:
        outcome = attack()
    finally:
        done.set()
        for thread in threads:
            thread.join()
    return outcome, watch


def p99(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def answer_of(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"{response.status_code}"
    errors = body.get("errors") if isinstance(body, dict) else None
    code = errors[0].get("extensions", {}).get("code") if errors else "data"
    return f"{response.status_code} {code}"


def tally(answers: list[tuple[str, float]]) -> str:
    kinds: dict[str, list[float]] = {}
    for answer, took in answers:
        kinds.setdefault(answer, []).append(took)
    return (
        ", ".join(f"{k} x{len(v)} (max {ms(max(v))})" for k, v in sorted(kinds.items()))
        or "no answer"
    )


# ------------------------------------------------------------------ attacks (a)-(c)


def repeated(server: Server, body: str, threads: int, seconds: float) -> str:
    """`threads` clients POST `body` again and again for `seconds` (one request each at
    a time; a request still running then is waited for, up to 60 s)."""
    answers: list[tuple[str, float]] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client_loop() -> None:
        with httpx.Client(base_url=server.base, timeout=60) as client:
            while time.monotonic() < stop:
                started = time.perf_counter()
                try:
                    answer = answer_of(
                        client.post(
                            "/graphql",
                            content=body,
                            headers={"Content-Type": "application/json"},
                        )
                    )
                except httpx.TimeoutException:
                    answer = "no answer in 60 s"
                except httpx.HTTPError as exc:
                    answer = type(exc).__name__
                with lock:
                    answers.append((answer, time.perf_counter() - started))

    workers = [threading.Thread(target=client_loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return tally(answers)


def aliases(field_text: str, n: int = 30) -> str:
    return json.dumps({"query": "{" + " ".join(f"a{i}:{field_text}" for i in range(n)) + "}"})


SURFACE_30 = aliases('session(id:"big"){surface{seq type data}}')
READ_EVENT_30 = aliases(
    'readEvent(sessionId:"wide",seq:60,before:50,after:50){events{seq type data}}'
)
REPLAY = 'subscription { sessionEvents(sessionId: "big", afterSeq: -1) { seq type data } }'


def ws_frame(text: str) -> bytes:
    """One masked text frame (a client's, RFC 6455)."""
    payload = text.encode()
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 65536:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_subscriber(port: int, subscriptions: int) -> socket.socket:
    """A graphql-transport-ws client that subscribes and then never reads (raw socket:
    a library would keep reading into its own buffer)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /graphql HTTP/1.1\r\nHost: localhost:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            raise RuntimeError("the WebSocket upgrade was refused")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(head.decode("latin-1").splitlines()[0])
    sock.sendall(ws_frame(json.dumps({"type": "connection_init", "payload": {}})))
    time.sleep(0.05)
    for i in range(subscriptions):
        message = {"id": str(i), "type": "subscribe", "payload": {"query": REPLAY}}
        sock.sendall(ws_frame(json.dumps(message)))
    return sock


def idle_subscribers(server: Server, seconds: float, clients: int = 20) -> str:
    sockets = []
    try:
        for _ in range(clients):
            sockets.append(ws_subscriber(server.port, 10))
        latencies: list[float] = []
        failures: dict[str, int] = {}
        stop = time.monotonic() + seconds
        with httpx.Client(base_url=server.base, timeout=60) as client:
            i = 0
            while time.monotonic() < stop:
                query = ORDINARY[i % 2]
                i += 1
                started = time.perf_counter()
                try:
                    answer = answer_of(client.post("/graphql", json={"query": query}))
                except httpx.HTTPError as exc:
                    answer = type(exc).__name__
                latencies.append(time.perf_counter() - started)
                if answer != "200 data":
                    failures[answer] = failures.get(answer, 0) + 1
                time.sleep(0.1)
            ready = answer_of(client.get("/readyz"))
    finally:
        for sock in sockets:
            sock.close()
    bad = ", ".join(f"{k} x{v}" for k, v in failures.items()) or "none failed"
    return (
        f"{clients}x10 subscribed; {len(latencies)} ordinary queries: median "
        f"{ms(statistics.median(latencies))}, p99 {ms(p99(latencies))}, max "
        f"{ms(max(latencies))} ({bad}); /readyz after: {ready.split()[0]}"
    )


# ------------------------------------------------------------------ attacks (d)-(e)


def slowloris(server: Server, seconds: float, n: int) -> str:
    """`n` connections send half their headers, then one header line a second."""
    watcher = selectors.DefaultSelector()
    opened: list[socket.socket] = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        sock.setblocking(False)
        watcher.register(sock, selectors.EVENT_READ)
        opened.append(sock)
    started = time.monotonic()
    closed_at: dict[socket.socket, float] = {}
    last_trickle = started

    def closed(sock: socket.socket) -> None:
        closed_at[sock] = time.monotonic() - started
        watcher.unregister(sock)

    while time.monotonic() - started < seconds and len(closed_at) < n:
        for key, _ in watcher.select(0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                closed(sock)
        if time.monotonic() - last_trickle >= 1.0:
            last_trickle = time.monotonic()
            for sock in opened:
                if sock not in closed_at:
                    try:
                        sock.send(b"X-Slow: 1\r\n")
                    except OSError:
                        closed(sock)
    watcher.close()
    for sock in opened:
        sock.close()
    times = sorted(closed_at.values())
    median = f", median {times[len(times) // 2]:.1f} s" if times else ""
    return f"{len(closed_at):,}/{n:,} closed by the server within {seconds:g} s{median}"


HOLD_PROCESSES = 4


def hold_main(port: int, n: int, seconds: float) -> None:
    """A helper process: open `n` idle connections, hold them, report as JSON."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held: list[socket.socket] = []
    failed = 0
    deadline = time.monotonic() + seconds
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=1))
        except OSError:
            failed += 1
    while time.monotonic() < deadline:
        time.sleep(0.2)
    refused = closed = 0
    for sock in held:
        sock.setblocking(False)
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            continue  # still open, nothing said
        except OSError:
            closed += 1
            continue
        if data.startswith(b"HTTP/1.1 503"):
            refused += 1
        else:
            closed += 1
    print(json.dumps({"connected": len(held), "failed": failed, "refused": refused,
                      "closed": closed}))  # fmt: skip
    for sock in held:
        sock.close()


def idle_flood(server: Server, seconds: float, n: int) -> str:
    share = -(-n // HOLD_PROCESSES)
    helpers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_limits",
                "--hold",
                str(server.port),
                str(share),
                str(seconds),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(HOLD_PROCESSES)
    ]
    totals = {"connected": 0, "failed": 0, "refused": 0, "closed": 0}
    for helper in helpers:
        out, _ = helper.communicate(timeout=seconds + 120)
        for key, value in json.loads(out.strip().splitlines()[-1]).items():
            totals[key] += value
    with httpx.Client(base_url=server.base, timeout=10) as client:
        after = answer_of(client.post("/graphql", json={"query": ORDINARY[0]}))
    return (
        f"{totals['connected']:,}/{n:,} connected ({totals['failed']:,} not), "
        f"{totals['refused']:,} answered 503, {totals['closed']:,} closed by the server "
        f"within {seconds:g} s; a query after: {after}"
    )


# ------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller numbers, shorter runs")
    parser.add_argument("--seconds", type=float, help="length of each attack (default 15; quick 8)")
    parser.add_argument("--idle", type=int, help="idle connections of (e) (21,000; quick 3,000)")
    parser.add_argument("--slowloris", type=int, help="connections of (d) (1,000; quick 300)")
    parser.add_argument(
        "--only", default="0abcde", help="attacks to run, e.g. 'de' (default all; 0: a control)"
    )
    parser.add_argument("--gateway-src", help="serve another checkout's gateway package")
    parser.add_argument("--data", default=f"/tmp/bench-limits-{DATA_VERSION}.db")
    parser.add_argument("--hold", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hold:
        hold_main(int(args.hold[0]), int(args.hold[1]), float(args.hold[2]))
        return 0
    seconds = args.seconds or (8.0 if args.quick else 15.0)
    idle = args.idle or (3_000 if args.quick else 21_000)
    loris = args.slowloris or (300 if args.quick else 1_000)
    loris_s = max(seconds, 15.0)  # past the default header timeout (10 s)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the clients' descriptors
    url = database(Path(args.data))
    log = Path(args.data).with_suffix(".serve.log")
    log.unlink(missing_ok=True)
    server = Server(url, args.gateway_src, log)

    def quiet() -> str:
        time.sleep(seconds)
        return "nothing sent"

    attacks: dict[str, tuple[str, Callable[[], str]]] = {
        "0": ("(0) no attack (this machine's own noise)", quiet),
        "a": ("(a) 30-alias surface", lambda: repeated(server, SURFACE_30, 1, seconds)),
        "b": ("(b) 8 x 30-alias readEvent", lambda: repeated(server, READ_EVENT_30, 8, seconds)),
        "c": ("(c) 20 x 10 idle subscribers", lambda: idle_subscribers(server, seconds)),
        "d": (f"(d) {loris:,} slowloris connections", lambda: slowloris(server, loris_s, loris)),
        "e": (f"(e) {idle:,} idle connections", lambda: idle_flood(server, seconds, idle)),
    }
    print(
        f"# bench_limits ({'quick' if args.quick else 'full'}), gateway from "
        f"{args.gateway_src or 'this checkout'}; {seconds:g} s per attack; server fd limit "
        f"{hard:,}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    failed = False
    for key in args.only:
        name, attack = attacks[key]
        server.start()
        try:
            ordinary_queries(server)
            baseline = server.rss_kib()
            lines_before = server.log_lines()
            cpu_before = server.cpu_seconds()
            outcome, watch = watching(server, attack, seconds)
            lines = server.log_lines() - lines_before
            cpu = server.cpu_seconds() - cpu_before
        finally:
            server.stop()
        health = p99(watch.health)
        ratio = watch.peak_kib / baseline if baseline else float("nan")
        ok = (
            health <= HEALTH_P99_TARGET
            and watch.timed_out == 0
            and watch.refused == 0
            and ratio <= RSS_RATIO_TARGET
        )
        failed |= not ok
        print(f"{name}: {outcome}", flush=True)
        slow = sorted(zip(watch.health, watch.at, strict=True), reverse=True)[:3]
        slowest = ", ".join(f"{ms(took)} at {at:.1f} s" for took, at in slow)
        print(
            f"    /healthz p99 {ms(health)} (target <= {ms(HEALTH_P99_TARGET)}), "
            f"{watch.timed_out} timed out + {watch.refused} refused of "
            f"{len(watch.health) + watch.refused} probes (target 0); "
            f"peak RSS {watch.peak_kib / 1024:,.0f} MiB = {ratio:.2f}x the "
            f"baseline {baseline / 1024:,.0f} MiB (target <= {RSS_RATIO_TARGET:g}x); "
            f"{lines:,} log lines; server CPU {cpu:.1f} s; slowest probes {slowest}; "
            f"{'ok' if ok else 'MISSED'}",
            flush=True,
        )
    print(f"# load average after: {os.getloadavg()[0]:.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
