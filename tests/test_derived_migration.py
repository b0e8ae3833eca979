"""Migration 0002 on SQLite and PostgreSQL: logs written in the 0001 shape (a replacement,
a tool-result rewrite, citations, an invalid log) come out derived exactly as the fold
derives them, the invalid log stays underived, and downgrade + upgrade is a round trip."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from gateway import cli
from gateway.core import SessionEvent, SessionHeader
from gateway.persistence import SqlPersistence, migrate
from gateway.persistence.engine import create_engine, normalize_url
from tests.core_helpers import ev, replace
from tests.test_derived_properties import assert_stored_equal_the_fold, stored_rows
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    U,
    db_url_fixture,
    engine_name_fixture,
    run,
    sample_log,
)

CHAIN = [
    ev(0, U, {"t": 0}, "append"),
    ev(1, "assistant/message", {"t": 1}, "append", [0]),
    ev(2, U, {"t": 2}, replace(0, 1), [0, 1]),
    ev(3, "turn/start"),
    ev(4, U, {"t": 4}, replace(2, 2), [2, 3]),
]
INVALID = [
    ev(0, "turn/start"),
    ev(1, U, {}, "append"),
    ev(2, U, {}, replace(0, 1), [0, 1]),  # rule 4: seq 0 is log-only
]
LOGS = {"sample": sample_log(), "chain": CHAIN, "invalid": INVALID, "empty": []}


def dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


async def write_0001_shape(url: str) -> None:
    """Sessions and events as revision 0001 stored them (no derivation columns)."""
    engine = create_engine(normalize_url(url))
    try:
        async with engine.begin() as conn:
            for created, (sid, events) in enumerate(LOGS.items()):
                await conn.execute(
                    text(
                        "INSERT INTO sessions (id, version, created_at, event_count) "
                        "VALUES (:id, 0, :at, :n)"
                    ),
                    {"id": sid, "at": created, "n": len(events)},
                )
                for e in events:
                    await conn.execute(
                        text(
                            "INSERT INTO events (session_id, seq, type, time, surface_op, "
                            "source_event_seqs, ignorable, data) "
                            "VALUES (:sid, :seq, :type, :time, :op, :src, :ign, :data)"
                        ),
                        {
                            "sid": sid,
                            "seq": e.seq,
                            "type": e.type,
                            "time": e.time,
                            "op": dumps(e.surface_op),
                            "src": dumps(
                                None if e.source_event_seqs is None else list(e.source_event_seqs)
                            ),
                            "ign": e.ignorable,
                            "data": json.dumps(e.data, separators=(",", ":")),
                        },
                    )
    finally:
        await engine.dispose()


async def column_names(url: str) -> list[str]:
    engine = create_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            if url.startswith("sqlite"):
                rows = (await conn.execute(text("PRAGMA table_info(events)"))).all()
                return [r[1] for r in rows]
            rows = (
                await conn.execute(
                    text(
                        "SELECT column_name FROM information_schema.columns "
                        "WHERE table_name = 'events' ORDER BY ordinal_position"
                    )
                )
            ).all()
            return [r[0] for r in rows]
    finally:
        await engine.dispose()


async def check_derived(url: str) -> None:
    db = SqlPersistence(url)
    try:
        for sid in ("sample", "chain", "empty"):
            assert_stored_equal_the_fold(LOGS[sid], *await stored_rows(db, sid))
        rows, cites, counts = await stored_rows(db, "invalid")
        assert [r[1:] for r in rows] == [(None, None, None)] * 3
        assert cites == set() and counts == (3, 0, 0, 0)
        sessions = await db.load_sessions(list(LOGS))
        assert sessions["invalid"].counts is None
        assert sessions["sample"].counts == (5, 4, 3)
        assert sessions["chain"].counts == (1, 1, 3)
        assert sessions["empty"].counts == (0, 0, 0)
        loaded = await db.load("sample")
        assert [e.to_json() for e in loaded[1]] == [e.to_json() for e in LOGS["sample"]]
    finally:
        await db.close()


async def scenario(url: str) -> None:
    await migrate(url, "0001")
    await write_0001_shape(url)
    await migrate(url)
    await check_derived(url)
    columns = await column_names(url)
    assert {"surface", "replaced_by", "surface_label"} <= set(columns)
    if url.startswith("sqlite"):
        assert columns[-1] == "data"  # payloads stay behind the small columns

    await migrate(url, "0001")
    assert await column_names(url) == [
        "session_id", "seq", "type", "time", "surface_op", "source_event_seqs", "ignorable",
        "data",
    ]  # fmt: skip
    await migrate(url)
    await check_derived(url)


def test_migration_derives_stored_logs_like_the_fold_and_round_trips(db_url: str) -> None:
    run(scenario(db_url))
    # the invalid log is what verify reports; the rest agree
    assert cli.main(["verify", "--database", db_url, "sample", "chain", "empty"]) == 0
    assert cli.main(["verify", "--database", db_url]) == 1


def test_appending_to_a_migrated_log_keeps_the_derivations_right(db_url: str) -> None:
    async def go() -> None:
        await migrate(db_url, "0001")
        await write_0001_shape(db_url)
        await migrate(db_url)
        db = SqlPersistence(db_url)
        try:
            more = [ev(5, U, {"t": 5}, replace(4, 4), [4]), ev(6, U, {}, "append", [0, 5])]
            await db.append("chain", more)
            assert_stored_equal_the_fold(CHAIN + more, *await stored_rows(db, "chain"))
        finally:
            await db.close()

    run(go())


def test_a_log_without_derivations_is_derived_whole_on_its_next_append(db_url: str) -> None:
    async def go() -> None:
        await migrate(db_url)
        db = SqlPersistence(db_url)
        try:
            log: list[SessionEvent] = sample_log()
            await db.create(SessionHeader("s", 1), log)
            async with db.engine.begin() as conn:  # as a writer that stores no derivations
                await conn.execute(
                    text(
                        "UPDATE events SET surface = NULL, replaced_by = NULL, surface_label = NULL"
                    )
                )
                await conn.execute(text("DELETE FROM citations"))
                await conn.execute(
                    text(
                        "UPDATE sessions SET derived_count = 0, current_count = 0, "
                        "shadowed_count = 0"
                    )
                )
            assert (await db.load_sessions(["s"]))["s"].counts is None
            more = [ev(12, U, {}, replace(6, 6), [6])]
            await db.append("s", more)
            assert_stored_equal_the_fold(log + more, *await stored_rows(db, "s"))
        finally:
            await db.close()

    run(go())
