"""Export (SPEC §15) of one long session, and titles of a page. One command, prints figures:

    .venv/bin/python -m benchmarks.bench_export [--events 100000]

1. A stored session of `--events` events (a third of them streamed text chunks in runs
   of 12, a third user messages, a third bookkeeping) in a SQLite file, exported
   through `GET /sessions/{id}/export` (httpx's ASGI transport): wall time, MB/s, and
   how late a 10 ms timer on the same event loop woke meanwhile (the encoding runs
   off the loop; the backend's row decoding of each page does not).
2. The same with `?descendants=true` (a zip of the one session).
3. The peak of Python allocations (`tracemalloc`) while `Export.chunks()` is read and
   each chunk dropped, against the body's size: the export must hold neither the log
   nor the artifact whole.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import tracemalloc
from pathlib import Path

import httpx

from benchmarks.bench_scale import Figure, figure_table
from gateway import SessionQuery, create_app
from gateway.core import SessionEvent, SessionHeader
from gateway.dsh_export import open_export
from gateway.persistence import SqlPersistence


def long_log(n: int) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    t = 1_780_000_000_000
    while len(events) < n:
        seq = len(events)
        kind = (seq // 12) % 3
        t += 7
        if kind == 0:
            chunk = {"type": "text-delta", "index": 0, "text": f"word{seq} "}
            events.append(
                SessionEvent(
                    "assistant/chunk", seq, t, {"turn": seq // 36, "step": 0, "chunk": chunk}
                )
            )
        elif kind == 1:
            text = f"message {seq}: ECONNREFUSED 127.0.0.1:{seq % 65535} " * 3
            data = {"content": [{"type": "text", "text": text}]}
            events.append(SessionEvent("user/message", seq, t, data, "append"))
        else:
            events.append(SessionEvent("turn/start", seq, t, {"turn": seq}))
    return events


async def export_once(app: object, url: str) -> tuple[float, int, float]:
    """(seconds, bytes, max loop lag in ms) of one export over the app."""
    lag = 0.0
    running = True

    async def ticker() -> None:
        nonlocal lag
        while running:
            start = time.perf_counter()
            await asyncio.sleep(0.01)
            lag = max(lag, (time.perf_counter() - start - 0.01) * 1000)

    size = 0
    tick = asyncio.create_task(ticker())
    start = time.perf_counter()
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
        response = await client.get(url)
        assert response.status_code == 200, response.status_code
        size = len(response.content)
    seconds = time.perf_counter() - start
    running = False
    await tick
    return seconds, size, lag


async def core_peak(query: SessionQuery, descendants: bool) -> tuple[int, int, int]:
    """(peak traced bytes, body bytes, chunks) of `Export.chunks()` read and dropped."""
    obs = query.observe()
    size = chunks = 0
    tracemalloc.start()
    try:
        export = await open_export(obs, "big", descendants=descendants)
        async for part in export.chunks():
            size += len(part)
            chunks += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        obs.close()
    return peak, size, chunks


async def main(events: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-export-"))
    db = SqlPersistence(f"sqlite+aiosqlite:///{folder / 'x.db'}")
    log = long_log(events)
    await db.create(SessionHeader("big", 1_780_000_000_000))
    for i in range(0, len(log), 10_000):
        await db.append("big", log[i : i + 10_000])
    query = SessionQuery(persistence=db)
    app = create_app(query)
    start = time.perf_counter()
    await db.load("big")
    load_s = time.perf_counter() - start
    figures = [
        Figure(
            f"load() of the {events:,}-event log",
            f"{load_s:.2f} s",
            "report",
            "SqlPersistence.load of the whole log (the floor of reading it at all)",
        )
    ]
    artifact = 0  # the JSONL body's size: what a zip holds, uncompressed
    for label, url, descendants in (
        ("export JSONL", "/sessions/big/export", False),
        ("export zip", "/sessions/big/export?descendants=true", True),
    ):
        seconds, size, lag = await export_once(app, url)
        peak, body, chunks = await core_peak(query, descendants)
        artifact = artifact or body
        figures += [
            Figure(
                f"{label}, {events:,} events",
                f"{seconds:.2f} s, {size / 1e6 / seconds:.1f} MB/s",
                "report",
                f"GET {url} through httpx's ASGI transport, whole body read ({size:,} bytes)",
            ),
            Figure(
                f"{label}: event-loop lag",
                f"{lag:.0f} ms max",
                "report",
                "how late a 10 ms asyncio.sleep on the same loop woke during that request",
            ),
            Figure(
                f"{label}: peak Python allocations",
                f"{peak / 1e6:.1f} MB ({peak / artifact:.2f}x the artifact, {chunks} chunks)",
                "< 1x the artifact",
                "tracemalloc peak while Export.chunks() is read and each chunk dropped, "
                "against the JSONL artifact's size (a zip's, uncompressed)",
                "ok" if peak < artifact else "MISSED",
            ),
        ]
    await db.close()
    print(figure_table(figures))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    asyncio.run(main(parser.parse_args().events))
