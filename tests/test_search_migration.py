"""Migration 0005 and `verify` for the search index and titles, on SQLite and PostgreSQL.

The 120 real artifacts written at head, the schema taken down to 0004 (index and
title seqs dropped) and up again: the backfill rebuilds exactly the rows the
writer wrote, and search answers as before. `verify` agrees with a fresh index
and reports a tampered text row, a missing one, a wrong title seq and (SQLite) an
FTS5 index that does not match its content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text

from gateway import cli
from gateway.ingest import import_paths
from gateway.persistence import SqlPersistence, migrate
from gateway.persistence.engine import create_engine, normalize_url
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_url_fixture,
    engine_name_fixture,
    run,
)
from tests.test_search_store import make_search

CORPUS = Path(__file__).parent / "data" / "dsh-jsonl"


async def _index(url: str) -> tuple[list[Any], list[Any]]:
    engine = create_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            pg = conn.dialect.name == "postgresql"
            columns = "session_id, seq, type, time, length, text" + (", terms" if pg else "")
            rows = (
                await conn.execute(
                    text(f"SELECT {columns} FROM event_texts ORDER BY session_id, seq")
                )
            ).all()
            titles = (
                await conn.execute(text("SELECT id, title_seq FROM sessions ORDER BY id"))
            ).all()
    finally:
        await engine.dispose()
    return [tuple(r) for r in rows], [tuple(r) for r in titles]


async def _tables(url: str) -> set[str]:
    engine = create_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def _search(url: str, query: str) -> list[Any]:
    db = SqlPersistence(url)
    try:
        return [h.key for h in await db.search_sessions(make_search(query, 50))]
    finally:
        await db.close()


async def _import(url: str) -> None:
    await migrate(url)
    db = SqlPersistence(url)
    try:
        summary = await import_paths(db, [CORPUS])
        assert [r.status for r in summary.reports] == ["imported"] * 120
    finally:
        await db.close()


async def test_migration_0005_builds_the_index_the_writer_writes(db_url: str) -> None:
    await _import(db_url)
    written = await _index(db_url)
    assert len(written[0]) > 800 and any(seq is not None for _, seq in written[1])
    before = await _search(db_url, "notes txt")
    assert before
    await migrate(db_url, "0004")
    assert not {t for t in await _tables(db_url) if t.startswith("event_")}
    await migrate(db_url)
    assert await _index(db_url) == written
    assert await _search(db_url, "notes txt") == before


async def _execute(url: str, *statements: str) -> None:
    engine = create_engine(normalize_url(url))
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    finally:
        await engine.dispose()


def test_verify_agrees_with_the_index_and_reports_tampering(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(_import(db_url))
    assert cli.main(["verify", "--database", db_url]) == 0
    capsys.readouterr()
    sid = "apps-web--approval-composer"
    rows, _ = run(_index(db_url))
    first, second = [seq for s, seq, *_ in rows if s == sid][:2]
    run(
        _execute(
            db_url,
            "UPDATE event_texts SET text = 'tampered', length = 8 "
            f"WHERE session_id = '{sid}' AND seq = {first}",
            f"DELETE FROM event_texts WHERE session_id = '{sid}' AND seq = {second}",
            f"UPDATE sessions SET title_seq = NULL WHERE id = '{sid}'",
        )
    )
    assert cli.main(["verify", "--database", db_url, sid]) == 1
    out = capsys.readouterr().out
    assert f"{sid}  seq {first}  text  stored 'tampered'" in out
    assert f"{sid}  seq {first}  length  stored 8" in out
    assert f"{sid}  seq {second}  text row  stored absent  expected present" in out
    assert f"{sid}  -  title_seq  stored NULL  expected " in out
    if db_url.startswith("sqlite"):
        run(_execute(db_url, "INSERT INTO event_fts (rowid, text) VALUES (987654321, 'ghost')"))
        assert cli.main(["verify", "--database", db_url]) == 1
        assert "event_fts  -  index  stored " in capsys.readouterr().out
