"""Shared subscription executions (issue 21.5) over real WebSockets. One command:

    .venv/bin/python -m benchmarks.bench_fanout [--rate 50] [--seconds 10] [--quick]

A uvicorn server in a child process serves `create_app` over a `SessionStore` whose
live session an agent task appends to at `--rate` events/s for `--seconds` (exactly
`rate * seconds` events, on an absolute schedule) once told to start. The parent
opens N graphql-transport-ws connections (the `websockets` client, spread over
`--client-processes` processes, default 4), each subscribed
with one document and variables (`sessionEvents(sessionId: $id) { seq type data }`),
and waits until every one has every event. Rounds: N = 1, 50, 100. WebSocket
compression is off, as `serve` has it by default (`--ws-compression` measures it on:
the clients offer permessage-deflate, as browsers do).

Reported per round: events delivered to each subscriber in order (seqs 0..n-1, no
gap, no duplicate), the server process's CPU time (utime + stime from
/proc/PID/stat) from the start of the appends until the last delivery, and the
append-to-receipt latency (the client's `time.time_ns()` at receipt minus the one
the agent stored in the event; one machine, one clock) p50/p99/max.

Figures beside targets: server CPU per extra subscriber-delivery, (cpu(50) - cpu(1))
/ (deliveries(50) - deliveries(1)), target <= 40 µs; 100 subscribers all delivered
with p99 <= 100 ms. The clients share the machine's cores with the server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from gateway import SessionQuery, SessionStore

DOCUMENT = "subscription Tail($id: ID!) { sessionEvents(sessionId: $id) { seq type data } }"
BUCKET_NS = 100_000  # 0.1 ms
BUCKETS = 600_000  # up to 60 s
ROUNDS_MAX = 10  # sessions r0..r9, one per round


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (its threads included), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(hist: list[int], q: float) -> float:
    total = sum(hist)
    if not total:
        return float("nan")
    rank = q * total
    seen = 0
    for i, count in enumerate(hist):
        seen += count
        if seen >= rank:
            return (i + 1) * BUCKET_NS / 1e6
    return BUCKETS * BUCKET_NS / 1e6


def serve_child(port: int, rate: int, total: int, compression: bool) -> None:
    """The server: `create_app` with an agent appending `total` events at `rate`/s, once
    per session id read on stdin (each round on a fresh session `r<k>`); WebSocket
    compression as `serve` has it (off unless `--ws-compression`)."""
    import uvicorn

    from gateway import create_app

    store = SessionStore()
    for k in range(ROUNDS_MAX):
        store.create(f"r{k}", created_at=1)

    async def agent() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().strip():
            session = store.get(line)
            assert session is not None
            start = time.perf_counter()
            for i in range(total):
                delay = start + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                session.append("assistant/chunk", {"i": i, "t": time.time_ns()})

    app = create_app(SessionQuery(live=[store]), background=[agent])
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws_per_message_deflate=compression,
    )
    uvicorn.Server(config).run()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def clients(url: str, sid: str, n: int, total: int, ready: Any) -> dict[str, Any]:
    """`n` subscribers in this process until each has `total` events; `ready()` once all
    are subscribed."""
    from websockets.asyncio.client import connect

    hist: dict[int, int] = {}
    seqs: list[list[int]] = [[] for _ in range(n)]
    opened = 0

    async def client(k: int) -> None:
        nonlocal opened
        async with connect(url, subprotocols=["graphql-transport-ws"], max_size=None) as ws:  # type: ignore[list-item]
            await ws.send(json.dumps({"type": "connection_init"}))
            await ws.recv()
            payload = {"query": DOCUMENT, "variables": {"id": sid}}
            await ws.send(json.dumps({"type": "subscribe", "id": "1", "payload": payload}))
            opened += 1
            if opened == n:
                ready()
            mine = seqs[k]
            while len(mine) < total:
                raw = await asyncio.wait_for(ws.recv(), 60)
                now = time.time_ns()
                message = json.loads(raw)
                if message["type"] != "next" or not message["payload"].get("data"):
                    raise AssertionError(f"subscriber {k}: {message}")
                event = message["payload"]["data"]["sessionEvents"]
                mine.append(event["seq"])
                lat = min((now - event["data"]["t"]) // BUCKET_NS, BUCKETS - 1)
                hist[lat] = hist.get(lat, 0) + 1

    cpu0 = time.process_time()
    results = await asyncio.gather(*(client(k) for k in range(n)), return_exceptions=True)
    return {
        "deliveries": sum(len(s) for s in seqs),
        "in_order": sum(1 for s in seqs if s == list(range(total))),
        "failures": [repr(r) for r in results if isinstance(r, BaseException)][:3],
        "hist": hist,
        "client_cpu_s": time.process_time() - cpu0,
    }


def client_process(url: str, sid: str, n: int, total: int, out: Any) -> None:
    out.put(asyncio.run(clients(url, sid, n, total, lambda: out.put("ready"))))


def one_round(
    url: str, child: subprocess.Popen[str], sid: str, n: int, total: int, processes: int
) -> dict[str, Any]:
    """`n` subscribers spread over `processes` client processes (the clients' own CPU
    must not be what delays them)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    out = context.Queue()
    shares = [n // processes + (1 if i < n % processes else 0) for i in range(processes)]
    procs = [
        context.Process(target=client_process, args=(url, sid, k, total, out)) for k in shares if k
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        assert out.get(timeout=120) == "ready"
    time.sleep(0.5)  # every subscription started on the server
    assert child.stdin is not None
    cpu0 = cpu_seconds(child.pid)
    t0 = time.perf_counter()
    child.stdin.write(sid + "\n")
    child.stdin.flush()
    parts = [out.get(timeout=total / 10 + 120) for _ in procs]
    cpu = cpu_seconds(child.pid) - cpu0
    elapsed = time.perf_counter() - t0
    for proc in procs:
        proc.join(10)
    hist = [0] * BUCKETS
    for part in parts:
        for i, count in part["hist"].items():
            hist[i] += count
    return {
        "n": n,
        "deliveries": sum(p["deliveries"] for p in parts),
        "in_order": sum(p["in_order"] for p in parts),
        "failures": [f for p in parts for f in p["failures"]][:3],
        "client_cpu_s": sum(p["client_cpu_s"] for p in parts),
        "cpu_s": cpu,
        "elapsed_s": elapsed,
        "p50_ms": percentile(hist, 0.5),
        "p99_ms": percentile(hist, 0.99),
        "max_ms": percentile(hist, 1.0),
    }


def run(
    rate: int, seconds: float, rounds: list[int], processes: int, compression: bool
) -> list[dict[str, Any]]:
    total = int(rate * seconds)
    port = free_port()
    args = ["--rate", str(rate), "--seconds", str(seconds)]
    if compression:
        args.append("--ws-compression")
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_fanout", "--serve-child", str(port), *args],
        stdin=subprocess.PIPE,
        text=True,
    )
    out = []
    try:
        deadline = time.monotonic() + 120  # a loaded machine imports slowly
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            time.sleep(0.1)
        url = f"ws://127.0.0.1:{port}/graphql"
        for k, n in enumerate(rounds):
            # each round on its own session, made by the child at its start
            out.append(one_round(url, child, f"r{k}", n, total, processes))
    finally:
        if child.stdin:
            with contextlib.suppress(OSError):
                child.stdin.close()
        child.terminate()
        child.wait(10)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--rate", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", default="1,50,100")
    parser.add_argument("--quick", action="store_true", help="3 s rounds")
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument(
        "--ws-compression",
        action="store_true",
        help="serve with permessage-deflate, as `serve --ws-compression` (default off, as serve)",
    )
    parser.add_argument("--serve-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.seconds = 3.0
    rounds = [int(x) for x in args.rounds.split(",")]
    if args.serve_child is not None:
        serve_child(args.serve_child, args.rate, int(args.rate * args.seconds), args.ws_compression)
        return
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (1/5/15 min) at the start")
    total = int(args.rate * args.seconds)
    print(f"WebSocket compression: {'on' if args.ws_compression else 'off (as serve by default)'}")
    results = run(args.rate, args.seconds, rounds, args.client_processes, args.ws_compression)
    for r in results:
        print(
            f"[{r['n']:>3} subscribers] {total} events at {args.rate}/s: "
            f"{r['in_order']}/{r['n']} got all in order, {r['deliveries']:,} deliveries, "
            f"server CPU {r['cpu_s']:.2f} s ({r['cpu_s'] / max(r['deliveries'], 1) * 1e6:.0f} "
            f"µs/delivery), latency p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
            f"max {r['max_ms']:.1f} ms; clients' CPU {r['client_cpu_s']:.2f} s"
            + (f", failures: {r['failures']}" if r["failures"] else "")
        )
    by_n = {r["n"]: r for r in results}
    if 1 in by_n and 50 in by_n:
        one, fifty = by_n[1], by_n[50]
        extra = (fifty["cpu_s"] - one["cpu_s"]) / max(fifty["deliveries"] - one["deliveries"], 1)
        print(f"server CPU per extra subscriber-delivery (50 vs 1): {extra * 1e6:.1f} µs", end="")
        print(" (target <= 40)")
    if 100 in by_n:
        r = by_n[100]
        ok = r["in_order"] == 100
        print(
            f"100 subscribers: {'all delivered in order' if ok else 'NOT all delivered'}, "
            f"p99 {r['p99_ms']:.1f} ms (target <= 100)"
        )


if __name__ == "__main__":
    main()
