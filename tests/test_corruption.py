"""Issue 20, point 4: a damaged database is an error, never a short answer.

A real SQLite file holds a session of 3,000 events with 1 KB payloads (its table
spans hundreds of b-tree pages); each test damages a copy of it the way a disk or
a stray write does, serves the copy with a real uvicorn server and asks it:

- `hidden`: the cell count of one leaf page of `events` in the middle of the
  file set to 1, so SQLite itself reads the log with a gap and no error (the
  test checks that first, with the stdlib's sqlite3, so it can fail);
- `garbled`: 64 KB of random bytes over 16 consecutive `events` pages in the
  middle (each page's first 64 bytes kept): "database disk image is malformed";
- `zeroed`: the same 16 pages' cells zeroed, which leaves the class index
  intact and makes SQLite skip the rows behind it silently on a filtered read.

Paging, the surface, a subscription replay and a filtered page fail with
`SESSION_QUERY_PERSISTENCE_FAILED` (with the correlation id the log line names,
the log saying which session and seqs), `/readyz` turns 503 and stays so, and
`verify --quick` exits 1 naming the damage. The undamaged copy answers in full,
`/readyz` 200 and `verify --quick` 0. On both engines, a row deleted behind the
gateway's back (a gap) is PERSISTENCE_FAILED too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from gateway import SessionQuery, create_app
from gateway.cli import main as cli_main
from gateway.core import SessionEvent, SessionHeader
from gateway.persistence import SqlPersistence, migrate
from gateway.persistence.base import PROBE_ROWS
from gateway.persistence.errors import StoredDataError
from gateway.server.config import GatewayConfig
from tests.support.server import running_server
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_url_fixture,
    engine_name_fixture,
)

N = 3_000
SID = "big"
PAGE = 500
FAILED = "SESSION_QUERY_PERSISTENCE_FAILED"
PAGES_QUERY = """
query($after: String, $surface: [EventSurface!]) {
  events(sessionId: "big", first: 500, after: $after, surface: $surface) {
    totalCount pageInfo { hasNextPage endCursor } nodes { seq }
  }
}
"""
SURFACE_QUERY = 'query { session(id: "big") { surface { seq } } }'
SUBSCRIPTION = 'subscription { sessionEvents(sessionId: "big") { seq } }'


def log_of(n: int) -> list[SessionEvent]:
    """Every third event a user message on the surface, the rest log-only; 1 KB each."""
    out = []
    for seq in range(n):
        if seq % 3 == 0:
            data: Any = {"content": [{"type": "text", "text": f"m{seq} " + "x" * 1000}]}
            out.append(SessionEvent("user/message", seq, 1_000 + seq, data, "append"))
        else:
            out.append(SessionEvent("turn/start", seq, 1_000 + seq, {"pad": "y" * 1000}))
    return out


CURRENT = [seq for seq in range(N) if seq % 3 == 0]
"""The model of the surface (and of the CURRENT class): every third seq."""


async def fill(url: str) -> None:
    await migrate(url)
    db = SqlPersistence(url)
    try:
        events = log_of(N)
        await db.create(SessionHeader(SID, 1))
        for start in range(0, N, 500):
            await db.append(SID, events[start : start + 500])
        await db.create(SessionHeader("small", 2), [SessionEvent("turn/start", 0, 5, {})])
    finally:
        await db.close()


@pytest.fixture(scope="module")
def clean_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corruption") / "clean.db"
    asyncio.run(fill(f"sqlite+aiosqlite:///{path}"))
    with sqlite3.connect(path) as conn:  # one file, no WAL beside it: a copy is the database
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    return path


# -- damage ---------------------------------------------------------------------------


def events_pages(path: Path) -> tuple[int, list[tuple[int, str]]]:
    """The page size and the (page number, page type) of every page of `events`."""
    with sqlite3.connect(path) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        rows = conn.execute(
            "SELECT pageno, pagetype FROM dbstat WHERE name = 'events' ORDER BY pageno"
        ).fetchall()
    return size, rows


def hide_cells(path: Path) -> None:
    """One leaf page in the middle claims to hold one cell: the others vanish silently."""
    size, pages = events_pages(path)
    leaves = [p for p, kind in pages if kind == "leaf"]
    page = leaves[len(leaves) // 2]
    with path.open("r+b") as f:
        f.seek((page - 1) * size + 3)  # a b-tree page header's cell count
        f.write((1).to_bytes(2, "big"))


def _overwrite_span(path: Path, fill: Callable[[int], bytes]) -> None:
    size, pages = events_pages(path)
    first = pages[len(pages) // 2][0]
    with path.open("r+b") as f:
        for page in range(first, first + 16):  # 64 KB of 4 KB pages
            f.seek((page - 1) * size + 64)
            f.write(fill(size - 64))


def garble(path: Path) -> None:
    rng = random.Random(20)
    _overwrite_span(path, rng.randbytes)


def zero(path: Path) -> None:
    _overwrite_span(path, bytes)


def raw_seqs(path: Path, where: str = "") -> list[int]:
    """What SQLite itself reads of the log (no error means it thinks this is all)."""
    with sqlite3.connect(path) as conn:
        sql = f"SELECT seq FROM events WHERE session_id = 'big' {where} ORDER BY seq"
        return [row[0] for row in conn.execute(sql)]


@pytest.fixture
def copy_of(clean_file: Path, tmp_path: Path) -> Callable[[Callable[[Path], None] | None], Path]:
    def make(damage: Callable[[Path], None] | None) -> Path:
        path = tmp_path / "copy.db"
        shutil.copyfile(clean_file, path)
        if damage is not None:
            damage(path)
        return path

    return make


# -- the served copy --------------------------------------------------------------------


@contextmanager
def served(url: str) -> Iterator[str]:
    """`url` served for real; its integrity probe sweeps on every call (no interval), so
    a few `/readyz` calls cover the log."""
    db = SqlPersistence(url, probe_interval=0)
    app = create_app(SessionQuery(persistence=db), GatewayConfig())
    try:
        with running_server(app) as base:
            yield base
    finally:
        asyncio.run(db.close())


def ask(base: str, query: str, **variables: Any) -> dict[str, Any]:
    response = httpx.post(
        base + "/graphql", json={"query": query, "variables": variables}, timeout=60
    )
    assert response.status_code == 200, response.text  # an error answer, never a 500
    body: dict[str, Any] = response.json()
    return body


def page_through(
    base: str, surface: list[str] | None = None
) -> tuple[list[int], dict[str, Any] | None]:
    """Every seq the pages give until the last page or the first error (returned)."""
    seqs: list[int] = []
    after = None
    while True:
        body = ask(base, PAGES_QUERY, after=after, surface=surface)
        if body.get("errors"):
            return seqs, body["errors"][0]
        page = body["data"]["events"]
        seqs += [node["seq"] for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            # the last page: what it ends on must be what totalCount says exists
            assert len(seqs) == page["totalCount"], "a short answer: the pages end early"
            return seqs, None
        after = page["pageInfo"]["endCursor"]


def replay(base: str) -> tuple[list[int], list[tuple[str, Any]]]:
    """The SSE subscription replay: the seqs sent and every other message."""
    seqs: list[int] = []
    others: list[tuple[str, Any]] = []
    kind = None
    with httpx.stream(
        "POST",
        base + "/graphql",
        json={"query": SUBSCRIPTION},
        headers={"Accept": "text/event-stream"},
        timeout=60,
    ) as response:
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind is not None:
                data = json.loads(line.removeprefix("data: ") or "null")
                if kind == "next" and data.get("data"):
                    seqs.append(data["data"]["sessionEvents"]["seq"])
                else:
                    others.append((kind, data))
                kind = None
    return seqs, others


def readiness(base: str, calls: int) -> list[tuple[int, str]]:
    out = []
    for _ in range(calls):
        response = httpx.get(base + "/readyz", timeout=30)
        out.append((response.status_code, response.json()["reason"]))
    return out


def verify_quick(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli_main(["verify", "--quick", "--database", url])
    return code, capsys.readouterr().out


def assert_persistence_failed(
    error: dict[str, Any] | None, caplog: pytest.LogCaptureFixture
) -> list[str]:
    """The error's code, and a log line with its correlation id naming the damage (the
    lines are returned)."""
    assert error is not None, "answered in full from a damaged file"
    assert error["extensions"]["code"] == FAILED
    message = error["message"]
    assert "correlation id" in message and "Traceback" not in message
    cid = message.rsplit("correlation id ", 1)[1].rstrip(")")
    lines = [r.getMessage() for r in caplog.records if cid in r.getMessage()]
    assert lines, f"no log line names correlation id {cid}"
    assert any("StoredDataError" in line or "malformed" in line for line in lines), lines
    return lines


SURFACE_SEQ_SAMPLE = CURRENT[:5]
"""Clean answers compare with the model; `raw_seqs` says what a damage hid."""


# -- the undamaged copy ------------------------------------------------------------------


def test_an_undamaged_copy_answers_in_full_is_ready_and_verifies(
    copy_of: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = copy_of(None)
    url = f"sqlite+aiosqlite:///{path}"
    with served(url) as base:
        seqs, error = page_through(base)
        assert error is None and seqs == list(range(N))
        seqs, error = page_through(base, ["CURRENT"])
        assert error is None and seqs == CURRENT
        surface = ask(base, SURFACE_QUERY)
        assert [n["seq"] for n in surface["data"]["session"]["surface"]] == CURRENT
        sent, others = replay(base)
        assert sent == list(range(N)) and others == [("complete", None)]
        # a whole sweep of the probe (and one more) passes
        calls = N // PROBE_ROWS + 2
        assert readiness(base, calls) == [(200, "persistence reachable")] * calls
    code, out = verify_quick(url, capsys)
    assert code == 0, out
    assert "2 session(s), 3,001 events stored: ok" in out


# -- damaged copies ----------------------------------------------------------------------


def test_the_hidden_cells_are_a_gap_sqlite_itself_does_not_report(
    copy_of: Callable[..., Path],
) -> None:
    """The precondition of the `hidden` cases: without the gateway's checks, a read of
    this file answers short with no error."""
    seqs = raw_seqs(copy_of(hide_cells))
    assert 0 < len(seqs) < N and seqs[0] == 0 and seqs[-1] == N - 1


def test_zeroed_table_pages_hide_rows_from_a_filtered_read_without_an_error(
    copy_of: Callable[..., Path],
) -> None:
    """The precondition of the `zeroed` filtered case: the class index is intact and
    SQLite skips the rows it names that the table lost."""
    seqs = raw_seqs(copy_of(zero), "AND surface = 1 AND type = 'user/message'")
    assert 0 < len(seqs) < len(CURRENT)


@pytest.mark.parametrize("damage", [hide_cells, garble], ids=["hidden", "garbled"])
def test_paging_through_damage_is_persistence_failed_never_a_short_last_page(
    damage: Callable[[Path], None],
    copy_of: Callable[..., Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = copy_of(damage)
    with caplog.at_level(logging.ERROR), served(f"sqlite+aiosqlite:///{path}") as base:
        seqs, error = page_through(base)
    assert_persistence_failed(error, caplog)
    assert seqs == list(range(len(seqs))) and len(seqs) < N  # the pages before the damage


def test_the_log_says_which_session_which_seqs_were_expected_and_what_was_read(
    copy_of: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    path = copy_of(hide_cells)
    lost = sorted(set(range(N)) - set(raw_seqs(path)))
    with caplog.at_level(logging.ERROR), served(f"sqlite+aiosqlite:///{path}") as base:
        _, error = page_through(base)
    assert error is not None
    cid = error["message"].rsplit("correlation id ", 1)[1].rstrip(")")
    (line,) = [r.getMessage() for r in caplog.records if cid in r.getMessage()]
    assert "session 'big'" in line and "stores 3000 events" in line
    assert f"seq {lost[0]} is missing" in line


@pytest.mark.parametrize("damage", [hide_cells, garble], ids=["hidden", "garbled"])
def test_the_surface_and_the_replay_of_a_damaged_log_are_persistence_failed(
    damage: Callable[[Path], None],
    copy_of: Callable[..., Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = copy_of(damage)
    with caplog.at_level(logging.ERROR), served(f"sqlite+aiosqlite:///{path}") as base:
        surface = ask(base, SURFACE_QUERY)
        sent, others = replay(base)
    assert surface["data"] is None or surface["data"]["session"] is None
    assert_persistence_failed(surface["errors"][0], caplog)
    assert sent == list(range(len(sent))) and len(sent) < N
    errors = [data for kind, data in others if kind == "next" and data.get("errors")]
    assert errors, f"the replay ended without an error: {others}"
    assert_persistence_failed(errors[0]["errors"][0], caplog)


def test_a_filtered_page_through_rows_lost_behind_the_class_index_is_persistence_failed(
    copy_of: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    path = copy_of(zero)
    with caplog.at_level(logging.ERROR), served(f"sqlite+aiosqlite:///{path}") as base:
        seqs, error = page_through(base, ["CURRENT"])
        surface = ask(base, SURFACE_QUERY)
    assert_persistence_failed(error, caplog)
    assert seqs == CURRENT[: len(seqs)] and len(seqs) < len(CURRENT)
    assert_persistence_failed(surface["errors"][0], caplog)


@pytest.mark.parametrize("damage", [hide_cells, garble, zero], ids=["hidden", "garbled", "zeroed"])
def test_readyz_fails_its_integrity_probe_and_stays_failed_and_verify_quick_names_it(
    damage: Callable[[Path], None],
    copy_of: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = copy_of(damage)
    url = f"sqlite+aiosqlite:///{path}"
    with served(url) as base:
        answers = readiness(base, N // PROBE_ROWS + 1)  # the sweep reaches the damage
        failed = [i for i, (status, _) in enumerate(answers) if status == 503]
        assert failed, answers
        later = readiness(base, 3)
    _, reason = answers[failed[0]]
    assert "failed its integrity probe" in reason and "correlation id" in reason
    assert all(s == 503 and "integrity probe" in r for s, r in later), later
    code, out = verify_quick(url, capsys)
    assert code == 1, out
    assert "quick_check: " in out and "storage message(s)" in out.splitlines()[-1]


# -- a row deleted behind the gateway's back (both engines) -------------------------------


async def delete_row(url: str, seq: int) -> None:
    db = SqlPersistence(url)
    try:
        async with db.engine.begin() as conn:
            await conn.execute(
                text("DELETE FROM events WHERE session_id = :sid AND seq = :seq"),
                {"sid": SID, "seq": seq},
            )
    finally:
        await db.close()


def test_a_row_deleted_behind_the_gateways_back_is_persistence_failed(
    db_url: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(fill(db_url))
    asyncio.run(delete_row(db_url, 1_234))
    with caplog.at_level(logging.ERROR), served(db_url) as base:
        seqs, error = page_through(base)
        assert_persistence_failed(error, caplog)
        assert seqs == list(range(1_000))  # pages 0..999, then the page holding 1234
        window = ask(
            base, 'query { readEvent(sessionId: "big", seq: 1230, before: 0, after: 9) { endSeq } }'
        )
        assert_persistence_failed(window["errors"][0], caplog)
        event = ask(base, 'query { event(sessionId: "big", seq: 1234) { seq } }')
        assert_persistence_failed(event["errors"][0], caplog)
        count = ask(
            base,
            'query { events(sessionId: "big", first: 1, filter: {seq: {from: 1000, to: 1999}})'
            " { totalCount } }",
        )
        (line,) = assert_persistence_failed(count["errors"][0], caplog)
        assert "a count of seqs 1000..1999 expected 1000 and counted 999" in line
        filtered, error = page_through(base, ["LOG_ONLY"])
        assert_persistence_failed(error, caplog)  # on its last page: the class count
        assert filtered == [seq for seq in range(N) if seq % 3 and seq != 1_234][: 3 * PAGE]
    code, out = verify_quick(db_url, capsys)
    assert code == 1, out
    assert "big  EVENTS  stored 3000 events  found 2999 row(s), seqs 0..2999" in out


def test_a_load_of_a_log_with_a_gap_raises_stored_data_error(db_url: str) -> None:
    asyncio.run(fill(db_url))
    asyncio.run(delete_row(db_url, 7))

    async def load() -> None:
        db = SqlPersistence(db_url)
        try:
            with pytest.raises(StoredDataError, match="seq 7 is missing"):
                await db.load(SID)
            with pytest.raises(StoredDataError, match="seq 7 is missing"):
                await db.load_window(SID, 5, 9)
            _, events = await db.load_window(SID, 8, 12)  # the rest is intact
            assert [e.seq for e in events] == [8, 9, 10, 11, 12]
        finally:
            await db.close()

    asyncio.run(load())


def test_verify_quick_takes_no_session_and_its_help_says_full_from_quick(
    copy_of: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{copy_of(None)}"
    assert cli_main(["verify", "--quick", "--database", url, SID]) == 2
    assert "--quick checks every session" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["verify", "--help"])
    shown = capsys.readouterr().out
    assert "Full (the default) or quick" in shown and "PRAGMA quick_check" in shown


def test_the_integrity_probe_sweeps_every_log_and_stops_at_a_gap(db_url: str) -> None:
    """On both engines: a clean database passes every call of a whole sweep (and wraps);
    a deleted row fails the call whose run holds it, and every call after it."""
    asyncio.run(fill(db_url))

    async def probe(calls: int, interval: float = 0) -> list[str | None]:
        db = SqlPersistence(db_url, probe_interval=interval)
        try:
            return [await db.probe_integrity() for _ in range(calls)]
        finally:
            await db.close()

    sweep = N // PROBE_ROWS + 2  # every run of the big log, the small one, and a wrap
    assert asyncio.run(probe(sweep)) == [None] * sweep
    asyncio.run(delete_row(db_url, N - 1))  # the last row: found only at the sweep's end
    found = asyncio.run(probe(sweep))
    first = next(i for i, problem in enumerate(found) if problem is not None)
    assert first == N // PROBE_ROWS - 1
    assert all(p is not None and "session 'big'" in p for p in found[first:]), found
    assert "the rows end at seq 2998" in str(found[first])
    # a passing probe sweeps at most once per interval: calls in between only ping
    assert asyncio.run(probe(sweep, interval=60)) == [None] * sweep
