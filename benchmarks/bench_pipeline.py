"""Issue 18's figures: one 28 KB document refused over every transport, /healthz meanwhile.

    .venv/bin/python -m benchmarks.bench_pipeline [--quick] [--runs N]

A small corpus (20 persisted sessions of 20 events in SQLite, one live session)
is served by `create_app` on uvicorn on loopback (`tests.support.server`, a
thread of this process). The document of issue 18,
`query { sessions(first: 1) { nodes { id } } ... }` with the selection written
780 times (28 KB, over 9,000 tokens: past the 5,000-token limit), is sent over
each transport, one request at a time after one untimed warm-up, `--runs`
times (25) and for at least 5 s (so the prober samples every phase; at most
90 s):

* POST JSON: `POST /graphql`, `application/json` body;
* GET JSON: `GET /graphql?query=...`;
* POST SSE: the POST with `Accept: text/event-stream` (`gateway.server.sse`);
* WebSocket: graphql-transport-ws `subscribe` on one open connection (the
  `websockets` library's sync client), a fresh id per operation.

Timed per request: from sending it (the request already encoded) until its
answer is complete (HTTP: the whole response body; WebSocket: the operation's
`error` or `complete` message), and the CPU time per request of the server's
event-loop thread. Printed: each transport's median and p90, its median over
the POST JSON median (target for every transport: <= 3x), and what it
answered (status and `extensions.code`; the target is the JSON path's refusal).

Meanwhile a prober in a child process (another client, outside this process's
GIL) GETs `/healthz` every 20 ms on a keep-alive connection: p50 / p99 / max and
failures (no 200 within 4 s, the image's HEALTHCHECK timeout) per phase, target
p99 <= 100 ms; and a task on the server's own event loop (a `create_app`
background task) sleeps 5 ms at a time and records how late it wakes: the
longest stall of the loop per phase, i.e. how long the loop waited on
something (validation, when a transport validates on it).

Then an ordinary small query, `{ sessions(first: 1) { nodes { id } } }`, over
each transport (median; its ratio to POST JSON): the fixed cost of each
transport's path through the pipeline.

Everything is on loopback and stops by itself: a request has 60 s to answer
(a stall is reported and ends its phase), a phase at most 90 s. `--quick` runs
the same harness with 2 requests per transport and 0.5 s phases (15-25 s
on today's code, whose SSE path takes 2-3 s per 28 KB request).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
from graphql.language import Lexer, Source, TokenKind

from benchmarks.bench_scale import Figure, figure_table
from gateway import SessionQuery, SessionStore, create_app
from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence
from tests.support.server import running_server
from tests.test_graphql_helpers import simple_log

REPEATS = 780
BIG_DOC = "query { " + "sessions(first: 1) { nodes { id } } " * REPEATS + "}"
SMALL_DOC = "{ sessions(first: 1) { nodes { id } } }"

RATIO_TARGET = 3.0
HEALTH_P99_TARGET = 0.100
PROBE_INTERVAL = 0.020
PROBE_TIMEOUT = 4.0  # docker/Dockerfile's HEALTHCHECK: urlopen(url, timeout=4)
LAG_INTERVAL = 0.005

GRAPHQL_RESPONSE = "application/graphql-response+json"
EVENT_STREAM = "text/event-stream"
TRANSPORTS = ("POST JSON", "GET JSON", "POST SSE", "WebSocket")
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Sizes:
    runs: int  # timed 28 KB requests per transport, at least
    small_runs: int  # timed small queries per transport, at least
    least: float  # seconds each phase lasts at least (more requests), so the prober samples it
    budget: float  # seconds of timed requests per transport and document, at most
    timeout: float  # one request's time limit
    idle: float  # seconds of probing before any traffic
    most: int = 5_000  # requests per phase, at most


FULL = Sizes(runs=25, small_runs=200, least=5.0, budget=90.0, timeout=60.0, idle=5.0)
QUICK = Sizes(runs=2, small_runs=10, least=0.5, budget=10.0, timeout=20.0, idle=0.5)


def token_count(text: str) -> int:
    """Tokens as graphql-core's parser counts them against `max_tokens` (comments skipped)."""
    lexer = Lexer(Source(text))
    count = 0
    while lexer.advance().kind is not TokenKind.EOF:
        count += 1
    return count


# -- the corpus and the server ------------------------------------------------------------


async def fill(url: str) -> None:
    db = SqlPersistence(url)
    for i in range(20):
        await db.create(SessionHeader(f"p{i:02d}", 1_000 + i, cwd="/bench"))
        await db.append(f"p{i:02d}", simple_log(20))
    await db.close()


class LoopLag:
    """A background task of the app: how late the server's event loop wakes from a sleep."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (monotonic at sleep start, lateness)
        self.clock: int | None = None  # the loop thread's CPU-time clock

    async def run(self) -> None:
        self.clock = time.pthread_getcpuclockid(threading.get_ident())
        while True:
            started = time.monotonic()
            await asyncio.sleep(LAG_INTERVAL)
            self.samples.append((started, time.monotonic() - started - LAG_INTERVAL))

    def worst(self, start: float, end: float) -> float:
        """The latest wake-up of the sleeps that overlap [start, end)."""
        return max(
            (lag for t, lag in self.samples if t < end and t + LAG_INTERVAL + lag > start),
            default=math.nan,
        )

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the server's loop thread, and of this whole process."""
        loop = time.clock_gettime(self.clock) if self.clock is not None else math.nan
        return loop, time.process_time()


class ServerLog(logging.Handler):
    """Counts the gateway's error records (by time) instead of printing their tracebacks."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.times: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.times.append(time.monotonic())

    def count(self, start: float, end: float) -> int:
        return sum(start <= t < end for t in self.times)


@contextlib.contextmanager
def quiet_gateway_log() -> Iterator[ServerLog]:
    logger = logging.getLogger("gateway")
    handler = ServerLog()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


# -- the prober (a child process) -----------------------------------------------------------


def probe_main(base: str, interval: float, timeout: float) -> None:
    """GET /healthz every `interval` s until stdin closes; then print the samples as JSON:
    [monotonic start, latency, or null when it failed: no 200 within `timeout`]."""
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    samples: list[tuple[float, float | None]] = []
    with httpx.Client(base_url=base, timeout=timeout, trust_env=False) as client:
        client.get("/healthz").raise_for_status()
        print("ready", flush=True)
        tick = time.monotonic()
        while not stop.is_set():
            started = time.monotonic()
            try:
                client.get("/healthz").raise_for_status()
                samples.append((started, time.monotonic() - started))
            except httpx.HTTPError:  # timed out, refused, dropped: failed
                samples.append((started, None))
            tick = max(tick + interval, time.monotonic())
            stop.wait(max(0.0, tick - time.monotonic()))
    print(json.dumps(samples), flush=True)


class Prober:
    def __init__(self, base: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_pipeline", "--probe", base],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise RuntimeError("the /healthz prober did not start")
        self.samples: list[tuple[float, float | None]] = []

    def finish(self) -> None:
        out, _ = self.proc.communicate(input="", timeout=PROBE_TIMEOUT + 30)
        self.samples = [(t, lat) for t, lat in json.loads(out.strip().splitlines()[-1])]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def during(self, start: float, end: float) -> tuple[list[float], int]:
        """Latencies of the probes in flight during [start, end) (a failed one counts as
        PROBE_TIMEOUT) and how many failed."""
        latencies = [PROBE_TIMEOUT if lat is None else lat for _, lat in self.samples]
        inside = [
            lat
            for (t, _), lat in zip(self.samples, latencies, strict=True)
            if t < end and t + lat > start
        ]
        failed = sum(
            lat is None and t < end and t + PROBE_TIMEOUT > start for t, lat in self.samples
        )
        return inside, failed


# -- the transports ---------------------------------------------------------------------------


def answer_of(response: httpx.Response) -> str:
    """`status code`, the first error's code (or `data`): what the client was told."""
    kind = response.headers.get("content-type", "").split(";")[0]
    if kind == EVENT_STREAM:
        codes = []
        for block in response.text.split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if lines.get("event") == "next":
                codes.append(payload_code(json.loads(lines.get("data") or "{}")))
        return f"{response.status_code} stream {'/'.join(codes) or 'empty'}"
    try:
        return f"{response.status_code} {payload_code(response.json())}"
    except ValueError:
        return f"{response.status_code} {kind or '?'}"


def payload_code(payload: Any) -> str:
    errors = payload.get("errors") if isinstance(payload, dict) else None
    if errors:
        return str(errors[0].get("extensions", {}).get("code"))
    return "data" if isinstance(payload, dict) and payload.get("data") else "empty"


class Transports:
    """One request of `document` over a transport: (seconds until the answer is complete,
    what it answered). HTTP on one keep-alive connection; WebSocket on one connection."""

    def __init__(self, base: str, timeout: float) -> None:
        self.base = base
        self.timeout = timeout
        self.http = httpx.Client(base_url=base, timeout=timeout, trust_env=False)
        self.connections = contextlib.ExitStack()
        self.ws: Any = None
        self.next_id = 0

    def close(self) -> None:
        self.http.close()
        self.connections.close()

    def request(self, transport: str, document: str) -> tuple[float, str]:
        if transport == "WebSocket":
            return self._subscribe(document)
        body = json.dumps({"query": document}).encode()
        json_headers = {"Content-Type": "application/json", "Accept": GRAPHQL_RESPONSE}
        # Built before the clock starts: the client's encoding (a 28 KB query string) is
        # not the server's cost.
        if transport == "POST JSON":
            request = self.http.build_request(
                "POST", "/graphql", content=body, headers=json_headers
            )
        elif transport == "GET JSON":
            request = self.http.build_request(
                "GET", "/graphql", params={"query": document}, headers={"Accept": GRAPHQL_RESPONSE}
            )
        elif transport == "POST SSE":
            headers = {**json_headers, "Accept": EVENT_STREAM}
            request = self.http.build_request("POST", "/graphql", content=body, headers=headers)
        else:
            raise ValueError(transport)
        started = time.perf_counter()
        response = self.http.send(request)  # reads the whole body (the stream, for SSE)
        elapsed = time.perf_counter() - started
        return elapsed, answer_of(response)

    def _connect(self) -> Any:
        from websockets.sync.client import connect
        from websockets.typing import Subprotocol

        url = "ws" + self.base.removeprefix("http") + "/graphql"
        ws = self.connections.enter_context(
            connect(
                url,
                subprotocols=[Subprotocol("graphql-transport-ws")],
                max_size=None,
                open_timeout=10,
                proxy=None,  # loopback, whatever the environment says
            )
        )
        ws.send(json.dumps({"type": "connection_init"}))
        ack = json.loads(ws.recv(timeout=10))
        if ack.get("type") != "connection_ack":
            raise RuntimeError(f"no connection_ack: {ack}")
        return ws

    def _subscribe(self, document: str) -> tuple[float, str]:
        if self.ws is None:
            self.ws = self._connect()
        self.next_id += 1
        op = str(self.next_id)
        message = json.dumps({"type": "subscribe", "id": op, "payload": {"query": document}})
        answer = ""
        started = time.perf_counter()
        self.ws.send(message)
        try:
            while True:
                remaining = self.timeout - (time.perf_counter() - started)
                reply = json.loads(self.ws.recv(timeout=max(remaining, 0.001)))
                if reply.get("id") != op:
                    continue
                kind = reply.get("type")
                if kind == "next" and not answer:
                    answer = f"next {payload_code(reply.get('payload'))}"
                elif kind == "error":
                    errors = reply.get("payload") or [{}]
                    answer = f"error {errors[0].get('extensions', {}).get('code')}"
                if kind in ("error", "complete"):
                    return time.perf_counter() - started, answer or "complete only"
        except TimeoutError:
            self.ws.close()
            self.ws = None  # the next operation gets a fresh connection
            raise


# -- measuring ----------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    start: float = 0.0
    end: float = 0.0
    times: list[float] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)
    stalled: bool = False
    loop_cpu: float = math.nan  # CPU seconds of the server's loop thread, per request
    process_cpu: float = math.nan  # of this process: server and client threads (not the prober)

    def answered(self) -> str:
        return ", ".join(f"{k} x{v}" for k, v in sorted(self.answers.items()))


def run_phase(
    name: str,
    transports: Transports,
    transport: str,
    document: str,
    runs: int,
    sizes: Sizes,
    cpu: Callable[[], tuple[float, float]],
) -> Phase:
    phase = Phase(name)
    with contextlib.suppress(httpx.TimeoutException, TimeoutError):
        transports.request(transport, document)  # warm-up, untimed, outside the phase
    time.sleep(0.1)  # probes in flight settle
    loop_cpu, process_cpu = cpu()
    phase.start = time.monotonic()
    deadline = phase.start + sizes.budget
    while len(phase.times) < sizes.most:
        try:
            elapsed, answer = transports.request(transport, document)
        except (httpx.TimeoutException, TimeoutError):
            elapsed, answer = sizes.timeout, f"no answer in {sizes.timeout:g} s"
            phase.stalled = True
        phase.times.append(elapsed)
        phase.answers[answer] = phase.answers.get(answer, 0) + 1
        now = time.monotonic()
        if phase.stalled or now >= deadline:
            break
        if len(phase.times) >= runs and now >= phase.start + sizes.least:
            break
    phase.end = time.monotonic()
    loop_after, process_after = cpu()
    phase.loop_cpu = (loop_after - loop_cpu) / len(phase.times)
    phase.process_cpu = (process_after - process_cpu) / len(phase.times)
    time.sleep(0.1)
    return phase


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (q=0.5: the median's upper neighbour for an even count)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def environment() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = "?"
    return (
        f"{os.cpu_count()} CPUs, load average {load}; Python {platform.python_version()}, "
        f"graphql-core {version('graphql-core')}, strawberry {version('strawberry-graphql')}, "
        f"uvicorn {version('uvicorn')}, websockets {version('websockets')}; commit {commit or '?'}"
    )


def health_figure(name: str, prober: Prober, lag: LoopLag, phase: Phase) -> Figure:
    latencies, failed = prober.during(phase.start, phase.end)
    p99 = quantile(latencies, 0.99)
    stall = lag.worst(phase.start, phase.end)
    measured = (
        f"{ms(quantile(latencies, 0.5))} / {ms(p99)} / {ms(max(latencies, default=math.nan))}, "
        f"{failed} of {len(latencies)} failed; loop stall {ms(stall)}"
    )
    verdict = "ok" if p99 <= HEALTH_P99_TARGET and not failed else "MISSED"
    return Figure(
        f"/healthz {name}: p50 / p99 / max",
        measured,
        f"p99 <= {ms(HEALTH_P99_TARGET)}",
        f"GET /healthz every {PROBE_INTERVAL * 1e3:g} ms from a child process (failed: no "
        f"200 in {PROBE_TIMEOUT:g} s); loop stall: the latest a {LAG_INTERVAL * 1e3:g} ms sleep on "
        "the server's loop woke",
        verdict if latencies else "",
    )


def run(sizes: Sizes, label: str) -> list[Figure]:
    figures: list[Figure] = []
    size, tokens = len(BIG_DOC.encode()), token_count(BIG_DOC)
    get_target = len(httpx.URL("/graphql", params={"query": BIG_DOC}).raw_path)
    print(f"# bench_pipeline ({label}); {environment()}", flush=True)
    figures.append(
        Figure(
            "the document: bytes / tokens; GET request target",
            f"{size:,} B / {tokens:,} tokens; {get_target:,} B",
            "-",
            f"`query {{ sessions(first: 1) {{ nodes {{ id }} }} ... }}`, the selection "
            f"{REPEATS} times (limit: 5,000 tokens)",
        )
    )
    started = time.perf_counter()
    lag = LoopLag()
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp, quiet_gateway_log() as log:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'corpus.db'}"
        asyncio.run(fill(url))
        store = SessionStore()
        store.create("live", created_at=5_000, seed=simple_log(20))
        query = SessionQuery(live=[store], persistence=SqlPersistence(url))
        app = create_app(query, background=[lag.run])
        with running_server(app) as base:
            prober = Prober(base)
            transports = Transports(base, sizes.timeout)
            phases: dict[tuple[str, str], Phase] = {}
            try:
                idle = Phase("idle")
                idle.start = time.monotonic()
                time.sleep(sizes.idle)
                idle.end = time.monotonic()
                for which, document, runs in (
                    ("28 KB", BIG_DOC, sizes.runs),
                    ("small", SMALL_DOC, sizes.small_runs),
                ):
                    for transport in TRANSPORTS:
                        name = f"{which} over {transport}"
                        phase = run_phase(
                            name, transports, transport, document, runs, sizes, lag.cpu
                        )
                        phases[which, transport] = phase
                        print(
                            f"[{time.perf_counter() - started:6.1f} s] {name}: "
                            f"median {ms(statistics.median(phase.times))} of "
                            f"{len(phase.times)}; {phase.answered()}",
                            flush=True,
                        )
            finally:
                transports.close()
                try:
                    prober.finish()
                except Exception:
                    prober.kill()
                    raise

    json_big = statistics.median(phases["28 KB", "POST JSON"].times)
    json_answer = set(phases["28 KB", "POST JSON"].answers)
    figures.append(health_figure("idle (no other traffic)", prober, lag, idle))
    for transport in TRANSPORTS:
        phase = phases["28 KB", transport]
        median = statistics.median(phase.times)
        figures.append(
            Figure(
                f"28 KB refusal over {transport}: median / p90; CPU loop / process",
                f"{ms(median)} / {ms(quantile(phase.times, 0.9))}; "
                f"{ms(phase.loop_cpu)} / {ms(phase.process_cpu)}"
                + (" (stalled)" if phase.stalled else ""),
                "report",
                f"{len(phase.times)} requests one at a time, send -> answer complete; CPU per "
                "request of the server's loop thread / this process (server + client)",
            )
        )
        codes = {a.split(" ", 1)[1] for a in phase.answers}
        json_codes = {a.split(" ", 1)[1] for a in json_answer}
        errors = log.count(phase.start, phase.end)
        figures.append(
            Figure(
                f"28 KB answers over {transport}",
                phase.answered() + (f"; {errors} server errors logged" if errors else ""),
                "the JSON path's refusal",
                "status (WebSocket: message type) and extensions.code of each answer",
                "" if transport == "POST JSON" else ("ok" if codes == json_codes else "DIFFERS"),
            )
        )
        if transport != "POST JSON":
            ratio = median / json_big
            figures.append(
                Figure(
                    f"28 KB over {transport} / POST JSON",
                    f"{ratio:,.2f}x ({ms(median)} vs {ms(json_big)})",
                    f"<= {RATIO_TARGET:g}x",
                    "the two medians above",
                    "ok" if ratio <= RATIO_TARGET else "MISSED",
                )
            )
        figures.append(health_figure(f"during 28 KB over {transport}", prober, lag, phase))
    json_small = statistics.median(phases["small", "POST JSON"].times)
    for transport in TRANSPORTS:
        phase = phases["small", transport]
        median = statistics.median(phase.times)
        bad = {a: n for a, n in phase.answers.items() if not a.endswith("data")}
        figures.append(
            Figure(
                f"small query over {transport}: median; loop CPU per request",
                f"{ms(median)} ({median / json_small:.2f}x POST JSON); {ms(phase.loop_cpu)}"
                + (f"; not data: {bad}" if bad else ""),
                "report",
                f"`{SMALL_DOC}`, {len(phase.times)} one at a time after a warm-up, "
                "send -> answer complete; CPU of the server's loop thread",
            )
        )
        figures.append(health_figure(f"during small over {transport}", prober, lag, phase))
    print(
        f"[{time.perf_counter() - started:6.1f} s] done; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="2 requests per transport, 0.5 s phases"
    )
    parser.add_argument("--runs", type=int, help="timed 28 KB requests per transport, at least")
    parser.add_argument(
        "--small-runs", type=int, help="timed small queries per transport, at least"
    )
    parser.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:  # the child process
        probe_main(args.probe, PROBE_INTERVAL, PROBE_TIMEOUT)
        return 0
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = Sizes(**{**sizes.__dict__, "runs": args.runs})
    if args.small_runs:
        sizes = Sizes(**{**sizes.__dict__, "small_runs": args.small_runs})
    figures = run(sizes, "quick" if args.quick else "full")
    print()
    print(figure_table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
