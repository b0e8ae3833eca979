"""What the search index costs the writer (issue 19: import with the index vs without).

    .venv/bin/python benchmarks/bench_index_write.py [--copies 10] [--no-postgres]

Corpus: the 120 dsh JSONL artifacts, each imported `--copies` times under new ids
(`import_many` in batches of 500 sessions, as `session-gateway import` writes).
"Without the index" is the same writer with the text derivation and the
`event_texts`/FTS writes switched off (monkeypatched here, never in the product).
Figures per engine: events/s with and without (median of `--runs`), their ratio
(target >= 60 %), and index bytes per byte of event text (UTF-8 of the indexed
texts): on SQLite the database's size with the index minus without (event_texts,
its key index and the FTS5 tables), on PostgreSQL `pg_total_relation_size` of
`event_texts` (heap, TOAST, primary key and GIN).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from benchmarks.bench_persistence import CORPUS, Engines  # noqa: E402
from gateway.core import SessionEvent, SessionHeader  # noqa: E402
from gateway.dsh_jsonl import read_artifact  # noqa: E402
from gateway.persistence import SqlPersistence, writes  # noqa: E402

RATIO_TARGET = 0.60


def corpus(copies: int) -> list[tuple[SessionHeader, list[SessionEvent]]]:
    artifacts = [read_artifact(p) for p in sorted(CORPUS.glob("*.jsonl"))]
    out = []
    for k in range(copies):
        for a in artifacts:
            header = dataclasses.replace(a.header, id=f"{a.header.id}~{k}")
            out.append((header, list(a.events)))
    return out


class NoIndex:
    """Switch the writer's text rows off (derivation and inserts) while active."""

    def __enter__(self) -> None:
        self.saved = (writes.text_rows, writes.SqlWrites._insert_texts)
        writes.text_rows = lambda *a, **k: []  # type: ignore[assignment]

        async def nothing(self: Any, conn: Any, rows: Any) -> None:
            return None

        writes.SqlWrites._insert_texts = nothing  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        writes.text_rows, writes.SqlWrites._insert_texts = self.saved  # type: ignore[method-assign]


async def import_once(url: str, items: list[Any]) -> float:
    db = SqlPersistence(url)
    try:
        started = time.perf_counter()
        for i in range(0, len(items), 500):
            outcomes = await db.import_many(items[i : i + 500])
            assert all(o == "created" for o in outcomes), outcomes[:3]
        return time.perf_counter() - started
    finally:
        await db.close()


async def sizes(url: str) -> tuple[int, int]:
    """(bytes of the database or of event_texts, UTF-8 bytes of the indexed texts)."""
    db = SqlPersistence(url)
    try:
        async with db.engine.connect() as conn:
            texts = await conn.execute(text("SELECT text FROM event_texts"))
            text_bytes = sum(len(t.encode("utf-8")) for (t,) in texts)
            if db.is_sqlite:
                pages = (await conn.execute(text("PRAGMA page_count"))).scalar()
                size = (await conn.execute(text("PRAGMA page_size"))).scalar()
                return int(pages or 0) * int(size or 0), text_bytes
            await conn.execute(text("ANALYZE"))
            total = (
                await conn.execute(text("SELECT pg_total_relation_size('event_texts')"))
            ).scalar()
            return int(total or 0), text_bytes
    finally:
        await db.close()


async def main(args: argparse.Namespace) -> None:
    items = corpus(args.copies)
    n_events = sum(len(e) for _, e in items)
    print(f"import of {len(items):,} sessions, {n_events:,} events (median of {args.runs})")
    with tempfile.TemporaryDirectory() as tmp:
        engines = Engines(Path(tmp), postgres=not args.no_postgres)
        if engines.note:
            print(engines.note)
        try:
            for engine in engines.names:
                with_times, without_times = [], []
                with_url = without_url = ""
                for _ in range(args.runs):
                    with NoIndex():
                        without_url = await engines.fresh(engine)
                        without_times.append(await import_once(without_url, items))
                    with_url = await engines.fresh(engine)
                    with_times.append(await import_once(with_url, items))
                t_with, t_without = statistics.median(with_times), statistics.median(without_times)
                ratio = t_without / t_with
                print(
                    f"{engine:>8}: with index {n_events / t_with:>10,.0f} events/s, "
                    f"without {n_events / t_without:>10,.0f} events/s: "
                    f"{ratio:.0%} (target >= {RATIO_TARGET:.0%})"
                )
                with_size, text_bytes = await sizes(with_url)
                if engine == "sqlite":
                    without_size, _ = await sizes(without_url)
                    index_bytes = with_size - without_size
                else:
                    index_bytes = with_size
                print(
                    f"{'':>8}  index {index_bytes:,} bytes for {text_bytes:,} bytes of event "
                    f"text: {index_bytes / max(text_bytes, 1):.2f} bytes per byte"
                )
        finally:
            engines.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    asyncio.run(main(parser.parse_args()))
