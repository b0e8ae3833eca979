"""Bulk import (`SqlPersistence.import_many`, `session-gateway import` of many files) on
SQLite and PostgreSQL: many sessions per transaction, each all or nothing with the
outcome `import_log` gives it; a bad file is named and never stops the others; the
stored derivations of what was imported equal the fold."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from gateway import cli, ingest
from gateway.core import SessionEvent, SessionHeader, SessionQueryError
from gateway.dsh_jsonl import dumps_artifact
from gateway.persistence import SessionConflictError, SqlPersistence, migrate
from gateway.persistence.writes import SqlWrites
from tests.core_helpers import ev, replace
from tests.test_derived_properties import assert_stored_equal_the_fold, stored_rows
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    U,
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
    run,
    sample_log,
)


def log_of(i: int) -> list[SessionEvent]:
    return [
        ev(0, "turn/start", {"i": i}),
        ev(1, U, {"text": f"hello {i}"}, "append"),
        ev(2, "assistant/message", {"text": "ok"}, "append", [1]),
        ev(3, U, {"text": "again"}, replace(1, 2), [1, 2]),
    ]


def write_tree(root: Path, n: int) -> dict[str, Path]:
    """n good artifacts, one whose log breaks rule 4 and one with a line that is not JSON."""
    paths = {}
    for i in range(n):
        path = root / f"{i // 10:02d}" / f"good{i:03d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps_artifact(SessionHeader(f"good{i:03d}", i), log_of(i)))
        paths[f"good{i:03d}"] = path
    bad_log = [ev(0, "turn/start"), ev(1, U, {}, replace(0, 0), [0])]
    paths["rule4"] = root / "05" / "rule4.jsonl"
    paths["rule4"].parent.mkdir(parents=True, exist_ok=True)
    paths["rule4"].write_text(dumps_artifact(SessionHeader("rule4", 1), bad_log))
    paths["notjson"] = root / "00" / "notjson.jsonl"
    text = dumps_artifact(SessionHeader("notjson", 1), log_of(0))
    paths["notjson"].write_text(text.replace('"seq":2', '"seq":2,,', 1))
    return paths


def check_tree_import(url: str, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_tree(root, 45)
    run(migrate(url))
    assert cli.main(["import", "--database", url, str(root), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "47 file(s): 45 imported, 0 unchanged, 0 replaced, 2 refused" in out
    rule4 = next(line for line in out.splitlines() if str(paths["rule4"]) in line)
    assert rule4.startswith("refused") and "breaks surface rule 4" in rule4
    notjson = next(line for line in out.splitlines() if str(paths["notjson"]) in line)
    assert notjson.startswith("refused") and "line 4" in notjson

    async def stored() -> None:
        db = SqlPersistence(url)
        try:
            ids = {h.id for h in await db.list()}
            assert ids == {f"good{i:03d}" for i in range(45)}
            for i in (0, 17, 44):
                assert_stored_equal_the_fold(log_of(i), *await stored_rows(db, f"good{i:03d}"))
        finally:
            await db.close()

    run(stored())
    assert cli.main(["verify", "--database", url]) == 0
    capsys.readouterr()
    # importing the same tree again changes nothing and still names the bad files
    assert cli.main(["import", "--database", url, str(root), "--no-progress"]) == 1
    assert "0 imported, 45 unchanged, 0 replaced, 2 refused" in capsys.readouterr().out


def test_a_batch_with_one_bad_file_imports_the_others_and_names_the_bad_one(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "BATCH_FILES", 20)  # several batches, the bad files inside them
    check_tree_import(db_url, tmp_path / "tree", capsys)


def test_worker_processes_load_files_with_the_same_outcomes(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest, "BATCH_FILES", 20)
    monkeypatch.setattr(ingest, "PARALLEL_FROM", 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    pools: list[Any] = []
    real = ingest._process_pool

    def spy(files: int) -> Any:
        made = real(files)
        pools.append(made[0])
        return made

    monkeypatch.setattr(ingest, "_process_pool", spy)
    check_tree_import(db_url, tmp_path / "tree", capsys)
    assert pools and all(pool is not None for pool in pools)


async def test_import_many_gives_each_item_what_import_log_would(db: SqlPersistence) -> None:
    await db.create(SessionHeader("stored", 1), log_of(1))
    await db.create(SessionHeader("other", 1), log_of(2))
    items: list[tuple[SessionHeader, list[SessionEvent]]] = [
        (SessionHeader("new", 1), log_of(3)),
        (SessionHeader("stored", 1), log_of(1)),  # identical: unchanged
        (SessionHeader("other", 1), log_of(9)),  # different: refused by name
        (SessionHeader("bad", 1), [ev(0, U, {})]),  # rule 3
        (SessionHeader("new", 1), log_of(3)),  # again in the batch: now unchanged
        (SessionHeader("twice", 1), log_of(4)),
        (SessionHeader("twice", 1), log_of(5)),  # a different log under an id just written
        (SessionHeader("empty", 1), []),
    ]
    outcomes = await db.import_many(items)
    assert outcomes[0] == "created" and outcomes[1] == "unchanged"
    assert isinstance(outcomes[2], SessionConflictError) and "'other'" in str(outcomes[2])
    assert isinstance(outcomes[3], SessionQueryError) and "rule 3" in outcomes[3].message
    assert outcomes[4] == "unchanged" and outcomes[5] == "created"
    assert isinstance(outcomes[6], SessionConflictError)
    assert outcomes[7] == "created"
    assert {h.id for h in await db.list()} == {"stored", "other", "new", "twice", "empty"}
    assert_stored_equal_the_fold(log_of(2), *await stored_rows(db, "other"))
    assert_stored_equal_the_fold(log_of(4), *await stored_rows(db, "twice"))

    replaced = await db.import_many([(SessionHeader("other", 1), log_of(9))], replace=True)
    assert replaced == ["replaced"]
    assert_stored_equal_the_fold(log_of(9), *await stored_rows(db, "other"))


async def test_a_batch_that_loses_a_race_is_imported_one_by_one(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = SqlWrites._import_batch
    calls = []

    async def racing(self: Any, conn: Any, chunk: Any, *, replace: bool) -> Any:
        calls.append(len(chunk))
        await real(self, conn, chunk, replace=replace)  # written, then rolled back
        raise IntegrityError("INSERT", {}, Exception("another writer got there first"))

    monkeypatch.setattr(SqlWrites, "_import_batch", racing)
    items = [(SessionHeader(f"s{i}", 1), log_of(i)) for i in range(3)]
    assert await db.import_many(items) == ["created"] * 3
    assert calls == [3]
    for i in range(3):
        assert_stored_equal_the_fold(log_of(i), *await stored_rows(db, f"s{i}"))


async def test_a_database_failure_refuses_the_batch_and_writes_none_of_it(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = SqlWrites._import_batch

    async def failing(self: Any, conn: Any, chunk: Any, *, replace: bool) -> Any:
        await real(self, conn, chunk, replace=replace)
        raise ConnectionResetError("the database went away")

    monkeypatch.setattr(SqlWrites, "_import_batch", failing)
    outcomes = await db.import_many([(SessionHeader(f"s{i}", 1), log_of(i)) for i in range(3)])
    assert all(isinstance(o, ConnectionResetError) for o in outcomes)
    assert await db.list() == []


async def test_a_stored_log_equal_as_json_values_is_unchanged_whatever_its_key_order(
    db: SqlPersistence,
) -> None:
    stored = [ev(0, U, {"a": 1, "b": [1.5, {"y": None, "x": True}]}, "append")]
    await db.create(SessionHeader("k", 1), stored)
    reordered = [ev(0, U, {"b": [1.5, {"x": True, "y": None}], "a": 1}, "append")]
    changed = [ev(0, U, {"b": [1.5, {"x": True, "y": None}], "a": 1.0}, "append")]
    assert await db.import_many([(SessionHeader("k", 1), reordered)]) == ["unchanged"]
    (outcome,) = await db.import_many([(SessionHeader("k", 1), changed)])
    assert isinstance(outcome, SessionConflictError)
    assert "event seq 0 differs" in str(outcome)
