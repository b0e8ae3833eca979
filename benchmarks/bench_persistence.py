"""Persistence benchmarks: import throughput, `list_events` against a raw-SQLite floor,
and `read_event` windows. One command, prints figures:

    python benchmarks/bench_persistence.py              # SQLite and PostgreSQL
    python benchmarks/bench_persistence.py --no-postgres
    python benchmarks/bench_persistence.py --big 200000 # a smaller "1M" run

PostgreSQL runs on a throwaway local cluster (tests/support/postgres.py); without
its binaries the PostgreSQL figures are skipped, with a note.

Figures:
1. corpus import: the 120 dsh JSONL artifacts into a fresh database
   (`gateway.ingest.import_paths`: read, parse, fold-validate, write), events/s.
2. big import: one generated session (default 1,000,000 events) written as a dsh
   JSONL file and imported: parse, then validate and write (`import_log`), events/s.
3. `list_events` on a persisted 100,000-event session, against the floor of a raw
   `sqlite3` SELECT of the same columns (seq, type, time, surface_op,
   source_event_seqs) of the same rows. Target: <= 4x the floor.
4. `read_event(before=50, after=50)` on that session. Target: <= 20 ms.
Timings are medians of several runs in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.logs import generate_log  # noqa: E402
from gateway import SessionQuery  # noqa: E402
from gateway.core import SessionHeader  # noqa: E402
from gateway.dsh_jsonl import dumps_artifact, read_artifact  # noqa: E402
from gateway.ingest import import_paths  # noqa: E402
from gateway.persistence import SqlPersistence, migrate  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "dsh-jsonl"
LIST_EVENTS_TARGET = 4.0
READ_EVENT_TARGET_MS = 20.0


class Engines:
    """Fresh databases on SQLite (files in a temp dir) and, if available, PostgreSQL."""

    def __init__(self, workdir: Path, postgres: bool) -> None:
        self.workdir = workdir
        self.server: Any = None
        self.note = ""
        self._n = 0
        if postgres:
            try:
                from tests.support.postgres import PostgresServer

                self.server = PostgresServer()
                self.server.start()
            except Exception as exc:  # binaries missing, cannot start: say so, go on
                self.server = None
                self.note = f"PostgreSQL skipped: {type(exc).__name__}: {exc}"

    @property
    def names(self) -> list[str]:
        return ["sqlite", "postgres"] if self.server is not None else ["sqlite"]

    async def fresh(self, engine: str) -> str:
        self._n += 1
        if engine == "sqlite":
            url = f"sqlite+aiosqlite:///{self.workdir / f'bench{self._n}.db'}"
        else:
            name = f"bench{self._n}"
            self.server.create_database(name)
            url = self.server.url(name)
        await migrate(url)
        return url

    def close(self) -> None:
        if self.server is not None:
            self.server.cleanup()


async def median_time(call: Callable[[], Awaitable[Any]], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def rate(events: int, seconds: float) -> str:
    return f"{events / seconds:>12,.0f} events/s"


async def bench_corpus(engines: Engines, runs: int) -> None:
    events = sum(len(read_artifact(p).events) for p in CORPUS.glob("*.jsonl"))
    print(f"\n1. corpus import: 120 artifacts, {events:,} events (median of {runs} fresh imports)")
    for engine in engines.names:
        times = []
        for _ in range(runs):
            db = SqlPersistence(await engines.fresh(engine))
            try:
                started = time.perf_counter()
                summary = await import_paths(db, [CORPUS])
                times.append(time.perf_counter() - started)
                assert summary.count("imported") == 120, summary.refused
            finally:
                await db.close()
        seconds = statistics.median(times)
        print(f"   {engine:<9} {seconds:7.2f} s  {rate(events, seconds)}")


async def bench_big_import(engines: Engines, size: int, workdir: Path) -> None:
    print(f"\n2. big import: one generated session of {size:,} events")
    started = time.perf_counter()
    log = generate_log(size)
    path = workdir / "big.jsonl"
    path.write_text(dumps_artifact(SessionHeader("big", 1_780_000_000_000), log))
    del log
    print(
        f"   (generated and written in {time.perf_counter() - started:.1f} s, "
        f"{path.stat().st_size / 2**20:,.0f} MiB of JSONL)"
    )
    gc.collect()
    started = time.perf_counter()
    artifact = read_artifact(path)
    parse = time.perf_counter() - started
    print(f"   parse      {parse:7.2f} s  {rate(size, parse)}  (read_artifact)")
    for engine in engines.names:
        db = SqlPersistence(await engines.fresh(engine))
        try:
            started = time.perf_counter()
            await db.import_log(artifact.header, artifact.events)
            write = time.perf_counter() - started
        finally:
            await db.close()
        print(
            f"   {engine:<9} {write:7.2f} s  {rate(size, write)}  (validate + write); "
            f"end to end {rate(size, parse + write).strip()}"
        )
    del artifact
    gc.collect()


async def bench_reads(engines: Engines, size: int, runs: int) -> None:
    print(f"\n3./4. reads of a persisted {size:,}-event session (median of {runs})")
    for engine in engines.names:
        url = await engines.fresh(engine)
        db = SqlPersistence(url)
        try:
            log = generate_log(size)
            await db.create(SessionHeader("s", 1), log)
            del log
            gc.collect()
            query = SessionQuery(persistence=db)
            await query.list_events("s")  # warm: pool, schema check, page cache
            listing = await median_time(lambda q=query: q.list_events("s"), runs)
            line = f"   {engine:<9} list_events {listing * 1000:7.1f} ms"
            if engine == "sqlite":
                floor = raw_floor(url, runs)
                ratio = listing / floor
                verdict = "OK" if ratio <= LIST_EVENTS_TARGET else "MISSED"
                line += (
                    f"\n             raw sqlite3 floor {floor * 1000:7.1f} ms"
                    f"   ratio {ratio:4.1f}x (target <= {LIST_EVENTS_TARGET:.0f}x: {verdict})"
                )
            print(line)
            rng = random.Random(1)
            seqs = [rng.randrange(size) for _ in range(200)]
            times = []
            for seq in seqs:
                started = time.perf_counter()
                window = await query.read_event("s", seq, 50, 50)
                times.append(time.perf_counter() - started)
                assert window.target.seq == seq
            times.sort()
            p50, p95 = statistics.median(times) * 1000, times[int(len(times) * 0.95)] * 1000
            verdict = "OK" if p50 <= READ_EVENT_TARGET_MS else "MISSED"
            print(
                f"             read_event(50, 50) median {p50:5.2f} ms, p95 {p95:5.2f} ms "
                f"(target <= {READ_EVENT_TARGET_MS:.0f} ms: {verdict})"
            )
        finally:
            await db.close()


def raw_floor(url: str, runs: int) -> float:
    """A raw sqlite3 SELECT of the fold columns of the same rows, fetched into tuples."""
    path = url.split(":///", 1)[1]
    conn = sqlite3.connect(path)
    sql = (
        "SELECT seq, type, time, surface_op, source_event_seqs FROM events "
        "WHERE session_id = ? ORDER BY seq"
    )
    try:
        conn.execute(sql, ("s",)).fetchall()
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            conn.execute(sql, ("s",)).fetchall()
            times.append(time.perf_counter() - started)
        return statistics.median(times)
    finally:
        conn.close()


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-persistence-"))
    engines = Engines(workdir, postgres=not args.no_postgres)
    try:
        load = Path("/proc/loadavg").read_text().split()[:3]  # noqa: ASYNC240
    except OSError:
        load = ["?"]
    print(f"persistence benchmarks (python {sys.version.split()[0]}, load average {load})")
    if engines.note:
        print(engines.note)
    try:
        await bench_corpus(engines, args.runs)
        await bench_big_import(engines, args.big, workdir)
        await bench_reads(engines, args.size, args.runs)
    finally:
        engines.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--big", type=int, default=1_000_000, help="events in the big import")
    parser.add_argument("--size", type=int, default=100_000, help="events in the read session")
    parser.add_argument("--runs", type=int, default=7, help="repetitions per median")
    asyncio.run(main(parser.parse_args()))
