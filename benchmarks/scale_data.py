"""Data for the scale benchmarks (`benchmarks.bench_scale`), built fast and never timed.

* Corpora of persisted sessions: header rows bulk-inserted into a migrated SQLite
  file with one `executemany` of the stdlib driver (a million rows in seconds).
  Sessions have no events; `event_count` is 0.
* Lineage: a 10,000-deep chain, a root with 10,000 descendants (fan-out 10) and
  100,000 unrelated sessions, inserted the same way.
* dsh JSONL artifacts (SPEC §9) for `session-gateway import`: many one-file small
  sessions (spread over sub-directories) and one long generated log
  (`benchmarks.logs.generate_log`, chunk runs packed as the harness writes them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path

from benchmarks.logs import generate_log
from gateway.core import SessionEvent, SessionHeader
from gateway.dsh_jsonl import dumps_artifact
from gateway.persistence import migrate

BASE_MS = 1_780_000_000_000
"""createdAt of the newest generated corpus session (epoch ms)."""

SessionRow = tuple[str, int, "str | None", "str | None"]
"""(id, created_at, cwd, parent_session) of a bulk-inserted session."""

_INSERT = (
    "INSERT INTO sessions (id, version, created_at, cwd, parent_session, event_count) "
    "VALUES (?, 0, ?, ?, ?, 0)"
)
_BATCH = 50_000


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


async def migrated_sqlite(path: Path) -> str:
    """A fresh SQLite file with the current schema; its URL."""
    url = sqlite_url(path)
    await migrate(url)
    return url


def insert_sessions(path: Path, rows: Iterable[SessionRow]) -> int:
    """Bulk-insert session header rows into a migrated SQLite file; how many."""
    count = 0
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA synchronous = OFF")
        batch: list[SessionRow] = []
        for row in rows:
            batch.append(row)
            if len(batch) == _BATCH:
                con.executemany(_INSERT, batch)
                count += len(batch)
                batch.clear()
        if batch:
            con.executemany(_INSERT, batch)
            count += len(batch)
        con.commit()
    finally:
        con.close()
    return count


# -- corpora ------------------------------------------------------------------------


def corpus_key(i: int) -> tuple[int, str]:
    """(createdAt, id) of the corpus session at position `i` of the list order.

    Two sessions share each createdAt (ties broken by id), and ids ascend with `i`,
    so position `i` in `sessions` order is exactly session `i`.
    """
    return BASE_MS - i // 2, f"s{i:07d}"


def corpus_rows(n: int) -> Iterator[SessionRow]:
    """`n` sessions; every fifth one forked from the one before it."""
    for i in range(n):
        created_at, sid = corpus_key(i)
        parent = corpus_key(i - 1)[1] if i % 5 == 1 else None
        yield sid, created_at, f"/bench/{i % 97}", parent


# -- lineage ------------------------------------------------------------------------

CHAIN_PREFIX, TREE_PREFIX, UNRELATED_PREFIX = "chain-", "tree-", "u"


def chain_id(i: int) -> str:
    return f"{CHAIN_PREFIX}{i:06d}"


def tree_id(j: int) -> str:
    return f"{TREE_PREFIX}{j:06d}"


def lineage_rows(depth: int, descendants: int, unrelated: int) -> Iterator[SessionRow]:
    """A chain of `depth` sessions (leaf: `chain_id(depth - 1)`), a tree of `descendants`
    sessions below `tree_id(0)` (node j's parent is node (j - 1) // 10), and
    `unrelated` parentless sessions, all older than the chain and the tree."""
    for i in range(unrelated):
        yield f"{UNRELATED_PREFIX}{i:07d}", BASE_MS - 1_000_000 - i, "/other", None
    for i in range(depth):
        yield chain_id(i), BASE_MS + i, "/chain", chain_id(i - 1) if i else None
    for j in range(descendants + 1):
        yield tree_id(j), BASE_MS + j, "/tree", tree_id((j - 1) // 10) if j else None


# -- artifacts ------------------------------------------------------------------------

SMALL_LOG_EVENTS = 6


def small_log() -> list[SessionEvent]:
    """The log of every small imported session (valid under the fold)."""
    return generate_log(SMALL_LOG_EVENTS, replace_ratio=0.0, seed=3)


def write_small_artifacts(directory: Path, n: int, prefix: str) -> list[str]:
    """`n` one-session artifacts under `directory` (1,000 per sub-directory); their ids."""
    log = small_log()
    ids = []
    for i in range(n):
        sid = f"{prefix}{i:07d}"
        header = SessionHeader(sid, BASE_MS - i, cwd="/imported")
        folder = directory / f"{i // 1000:04d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{sid}.jsonl").write_text(dumps_artifact(header, log), encoding="utf-8")
        ids.append(sid)
    return ids


def write_log_artifact(path: Path, session_id: str, n_events: int) -> list[SessionEvent]:
    """One artifact holding a generated log of `n_events` (1 % replacements); the log."""
    log = generate_log(n_events)
    header = SessionHeader(session_id, BASE_MS + 10, cwd="/long")
    path.write_text(dumps_artifact(header, log), encoding="utf-8")
    return log
