"""Live tail (SPEC §11) under load. One command, prints figures:

    .venv/bin/python -m benchmarks.bench_tail [--quick] [--subscribers 1000] [--rate 1000]
        [--seconds 10] [--ws-subscribers 10] [--ws-rate 100] [--only core|ws]

1. In process, through the core: `--subscribers` tasks each iterate
   `gateway.core.tail.tail_batches` on one live session while an agent task on the
   same event loop appends `--rate` events/s for `--seconds` (paced on an absolute
   schedule, like the demo's agent). Each subscriber takes its batches and counts
   the events (the floor of what a consumer costs); every 10th also times each of
   its deliveries (each event carries `perf_counter_ns()` at its append; counted
   into a 0.1 ms histogram) for the append-to-delivery latency p50/p99/max.
   Reported besides: delivered events/s, lagged subscribers, RSS before and
   with the subscribers (and per subscriber), and the cost of one `append` with 0
   and with all subscribers listening (mean wall time of the append call itself).
2. Over real WebSockets: a uvicorn server in a child process (its own interpreter and
   core) serving `create_app`, whose agent appends at `--rate` events/s; the parent
   opens `--ws-subscribers` graphql-transport-ws connections (the `websockets`
   client) each subscribed to `sessionEvents { seq data }`, while the agent appends
   `--ws-rate` events/s. Every delivery runs GraphQL execution for its subscriber
   (~160 µs per event per subscriber on the dev machine), so a process serves a few
   thousand deliveries/s over GraphQL: the WebSocket part is sized to that. Latency is the client's
   `time.time_ns()` at receipt minus the `time.time_ns()` the agent stored in the
   event (one machine, one clock). RSS is the server process's.

Targets (issue 11): p99 append-to-delivery <= 50 ms; memory bounded per subscriber.
`--quick` runs 2 s with 200 in-process and 5 WebSocket subscribers.
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
from gateway.core.tail import TailLagged, tail_batches

BUCKET_NS = 100_000  # 0.1 ms
BUCKETS = 20_000  # up to 2 s
SAMPLE = 10  # in process, every 10th subscriber times each of its deliveries


def rss_kib(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(hist: list[int], q: float) -> float:
    """The q-quantile (ms) of a 0.1 ms histogram."""
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


async def paced(rate: int, seconds: float, step: Any) -> int:
    """Call `step(i)` `rate` times a second for `seconds` on an absolute schedule, yielding
    the loop before every call (an agent that fell behind catches up one event per loop
    turn, as a real one would, instead of bursting)."""
    n = int(rate * seconds)
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        await asyncio.sleep(max(due - time.perf_counter(), 0))
        step(i)
    return n


def append_cost_idle(n: int = 20_000) -> float:
    """Mean µs per append with nobody listening."""
    store = SessionStore()
    session = store.create("idle", created_at=1)
    t = time.perf_counter()
    for i in range(n):
        session.append("assistant/chunk", {"i": i, "t": 0})
    return (time.perf_counter() - t) / n * 1e6


async def in_process(subscribers: int, rate: int, seconds: float) -> dict[str, Any]:
    store = SessionStore()
    session = store.create("live", created_at=1)
    query = SessionQuery(live=[store])
    hist = [0] * BUCKETS
    delivered = 0
    lagged = 0
    ready = asyncio.Event()
    registered = 0

    async def subscriber(measured: bool) -> None:
        nonlocal delivered, lagged, registered
        tail = tail_batches(query.observe(), "live")
        clock = time.perf_counter_ns
        top = BUCKETS - 1
        started = False
        try:
            async for batch in tail:
                events = batch.events
                if not started:  # the marker appended before the run
                    started = True
                    events = events[1:]
                    registered += 1
                    if registered == subscribers:
                        ready.set()
                delivered += len(events)
                if measured:
                    now = clock()  # every event of a batch is delivered now
                    for event in events:
                        lat = (now - event.data["t"]) // BUCKET_NS  # type: ignore[index,call-overload]
                        hist[lat if lat < top else top] += 1
        except TailLagged:
            lagged += 1

    session.append("turn/start", {"t": 0})  # each subscriber's first item: it is running
    rss_before = rss_kib()
    tasks = [asyncio.create_task(subscriber(i % SAMPLE == 0)) for i in range(subscribers)]
    await asyncio.wait_for(ready.wait(), 60)
    rss_with = rss_kib()
    append_s = 0.0

    def step(i: int) -> None:
        nonlocal append_s
        t = time.perf_counter()
        session.append("assistant/chunk", {"i": i, "t": time.perf_counter_ns()})
        append_s += time.perf_counter() - t

    t0 = time.perf_counter()
    n = await paced(rate, seconds, step)
    appended_in = time.perf_counter() - t0
    store.remove("live")  # completes every tail after its last event
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    return {
        "subscribers": subscribers,
        "appended": n,
        "append_rate": n / appended_in,
        "delivered": delivered,
        "delivered_per_s": delivered / elapsed,
        "expected": n * subscribers,
        "lagged": lagged,
        "p50_ms": percentile(hist, 0.50),
        "p99_ms": percentile(hist, 0.99),
        "max_ms": percentile(hist, 1.0),
        "rss_before_mib": rss_before / 1024,
        "rss_with_mib": rss_with / 1024,
        "rss_end_mib": rss_kib() / 1024,
        "per_subscriber_kib": (rss_with - rss_before) / subscribers,
        "append_us_listening": append_s / n * 1e6,
    }


# -- over WebSockets ------------------------------------------------------------------


def serve_child(port: int, rate: int) -> None:
    """The server process: `create_app` with an agent appending `rate` events/s once
    told to start (a line on stdin), until stdin closes."""
    import uvicorn

    from gateway import create_app

    store = SessionStore()
    session = store.create("live", created_at=1)
    go = asyncio.Event()

    async def agent() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await reader.readline()
        go.set()
        i = 0
        start = time.perf_counter()
        while not reader.at_eof():
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            session.append("assistant/chunk", {"i": i, "t": time.time_ns()})
            i += 1

    app = create_app(SessionQuery(live=[store]), background=[agent])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    uvicorn.Server(config).run()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def over_websockets(subscribers: int, rate: int, seconds: float) -> dict[str, Any]:
    from websockets.asyncio.client import connect

    port = free_port()
    child = subprocess.Popen(  # noqa: ASYNC220 - started once, before the clients
        [
            sys.executable,
            "-m",
            "benchmarks.bench_tail",
            "--serve-child",
            str(port),
            "--rate",
            str(rate),
        ],
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"ws://127.0.0.1:{port}/graphql"
        for _ in range(200):
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            await asyncio.sleep(0.05)
        hist = [0] * BUCKETS
        received = 0
        stop = asyncio.Event()
        query = 'subscription { sessionEvents(sessionId: "live") { seq data } }'
        opened = 0
        all_open = asyncio.Event()

        lagged_clients = 0

        async def client() -> None:
            nonlocal received, opened, lagged_clients
            async with connect(url, subprotocols=["graphql-transport-ws"], max_size=None) as ws:  # type: ignore[list-item]
                await ws.send(json.dumps({"type": "connection_init"}))
                await ws.recv()
                payload = {"query": query}
                await ws.send(json.dumps({"type": "subscribe", "id": "1", "payload": payload}))
                opened += 1
                if opened == subscribers:
                    all_open.set()
                while not stop.is_set():
                    try:
                        raw = await asyncio.wait_for(ws.recv(), 0.5)
                    except TimeoutError:
                        continue
                    now = time.time_ns()
                    message = json.loads(raw)
                    if message["type"] != "next" or not message["payload"].get("data"):
                        lagged_clients += 1  # SUBSCRIPTION_LAGGED (or closed)
                        break
                    sent = message["payload"]["data"]["sessionEvents"]["data"]["t"]
                    lat = (now - sent) // BUCKET_NS
                    hist[lat if lat < BUCKETS else BUCKETS - 1] += 1
                    received += 1

        rss_idle = rss_kib(child.pid)
        tasks = [asyncio.create_task(client()) for _ in range(subscribers)]
        await asyncio.wait_for(all_open.wait(), 60)
        await asyncio.sleep(0.5)
        rss_with = rss_kib(child.pid)
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)
        stop.set()
        elapsed = time.perf_counter() - t0
        rss_end = rss_kib(child.pid)
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "subscribers": subscribers,
            "received": received,
            "lagged": lagged_clients,
            "delivered_per_s": received / elapsed,
            "expected_per_s": rate * subscribers,
            "p50_ms": percentile(hist, 0.50),
            "p99_ms": percentile(hist, 0.99),
            "max_ms": percentile(hist, 1.0),
            "server_rss_idle_mib": rss_idle / 1024,
            "server_rss_with_mib": rss_with / 1024,
            "server_rss_end_mib": rss_end / 1024,
            "per_subscriber_kib": (rss_with - rss_idle) / subscribers,
        }
    finally:
        if child.stdin:
            with contextlib.suppress(OSError):
                child.stdin.close()
        child.terminate()
        child.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--ws-subscribers", type=int, default=10)
    parser.add_argument("--ws-rate", type=int, default=100)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", choices=("core", "ws"), default=None)
    parser.add_argument("--serve-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_child is not None:
        serve_child(args.serve_child, args.rate)
        return
    if args.quick:
        args.subscribers, args.ws_subscribers, args.seconds = 200, 5, 2.0

    if args.only != "ws":
        run_core(args)
    if args.only != "core":
        run_ws(args)


def run_core(args: argparse.Namespace) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (1/5/15 min) at the start")
    print(f"append with nobody listening: {append_cost_idle():.2f} µs/append")
    core = asyncio.run(in_process(args.subscribers, args.rate, args.seconds))
    print(
        f"\n[in process, core listeners] {core['subscribers']} subscribers, "
        f"{core['appended']} appends at {core['append_rate']:.0f}/s"
    )
    print(
        f"  delivered {core['delivered']:,} of {core['expected']:,} "
        f"({core['delivered_per_s']:,.0f} events/s), lagged subscribers: {core['lagged']}"
    )
    print(
        f"  append->delivery latency p50 {core['p50_ms']:.1f} ms, p99 {core['p99_ms']:.1f} ms "
        f"(target <= 50), max {core['max_ms']:.1f} ms"
    )
    print(
        f"  RSS {core['rss_before_mib']:.1f} MiB -> {core['rss_with_mib']:.1f} MiB with "
        f"subscribers ({core['per_subscriber_kib']:.1f} KiB each), "
        f"{core['rss_end_mib']:.1f} MiB at the end"
    )
    print(f"  append with {core['subscribers']} listening: {core['append_us_listening']:.1f} µs")


def run_ws(args: argparse.Namespace) -> None:
    ws = asyncio.run(over_websockets(args.ws_subscribers, args.ws_rate, args.seconds))
    print(
        f"\n[real WebSockets, uvicorn child process] {ws['subscribers']} subscribers, "
        f"agent at {args.ws_rate}/s for {args.seconds:g} s"
    )
    print(
        f"  received {ws['received']:,} ({ws['delivered_per_s']:,.0f} events/s of "
        f"{ws['expected_per_s']:,} offered), lagged subscribers: {ws['lagged']}"
    )
    print(
        f"  append->receipt latency p50 {ws['p50_ms']:.1f} ms, p99 {ws['p99_ms']:.1f} ms "
        f"(target <= 50), max {ws['max_ms']:.1f} ms"
    )
    print(
        f"  server RSS {ws['server_rss_idle_mib']:.1f} MiB idle -> "
        f"{ws['server_rss_with_mib']:.1f} MiB subscribed ({ws['per_subscriber_kib']:.1f} KiB "
        f"each) -> {ws['server_rss_end_mib']:.1f} MiB after the run"
    )


if __name__ == "__main__":
    main()
