"""SqlPersistence as a backend, on SQLite and PostgreSQL: schema round trips, the write
rules of `create`/`append`, and the read paths (whole log, window, fold columns)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import event, text

from gateway.core import ErrorCode, SessionEvent, SessionHeader, SessionQueryError
from gateway.persistence import (
    DatabaseUrlError,
    InvalidEventError,
    NonContiguousAppendError,
    SchemaVersionError,
    SessionExistsError,
    SqlPersistence,
    UnknownSessionError,
    default_database_url,
    normalize_url,
)
from tests.core_helpers import ev, replace, tool_data
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    HEADER,
    T_RESULT,
    TRICKY_DATA,
    A,
    U,
    canonical,
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
    log_json,
    sample_log,
)

# -- headers -----------------------------------------------------------------------


async def test_every_header_field_round_trips(db: SqlPersistence) -> None:
    await db.create(HEADER)
    assert await db.load_header("full") == HEADER
    assert (await db.load("full"))[0].to_json() == HEADER.to_json()


async def test_absent_optional_header_fields_stay_absent(db: SqlPersistence) -> None:
    await db.create(SessionHeader("bare", 7))
    (header,) = await db.list()
    assert header.to_json() == {"version": 0, "id": "bare", "createdAt": 7}
    assert header.delegation_depth is None and header.seed_length is None


async def test_zero_and_empty_values_stay_present(db: SqlPersistence) -> None:
    header = SessionHeader("zero", 0, cwd="", seed_length=0, delegation_depth=0)
    await db.create(header)
    assert (await db.load_header("zero")).to_json() == header.to_json()


async def test_created_at_keeps_more_than_32_bits(db: SqlPersistence) -> None:
    await db.create(SessionHeader("late", 2**53 - 1))
    assert (await db.load_header("late")).created_at == 2**53 - 1


async def test_list_returns_every_header_newest_first_ties_by_id(db: SqlPersistence) -> None:
    for sid, at in [("b", 5), ("a", 5), ("old", 1), ("new", 9)]:
        await db.create(SessionHeader(sid, at))
    assert [h.id for h in await db.list()] == ["new", "a", "b", "old"]


async def test_load_header_of_a_missing_session_is_none(db: SqlPersistence) -> None:
    assert await db.load_header("nope") is None


async def test_load_of_a_missing_session_raises_unknown_session(db: SqlPersistence) -> None:
    for call in (db.load("nope"), db.load_window("nope", 0, 5)):
        with pytest.raises(UnknownSessionError, match="'nope' is not stored"):
            await call
    with pytest.raises(KeyError):
        await db.count("nope")


async def test_duplicate_create_raises_session_exists_and_keeps_the_first(
    db: SqlPersistence,
) -> None:
    await db.create(SessionHeader("s", 1), [ev(0)])
    with pytest.raises(SessionExistsError, match="'s' is already stored"):
        await db.create(SessionHeader("s", 2))
    header, events = await db.load("s")
    assert header.created_at == 1 and len(events) == 1


# -- events ------------------------------------------------------------------------


async def test_create_with_a_log_round_trips_every_event_field(db: SqlPersistence) -> None:
    log = sample_log()
    await db.create(HEADER, log)
    header, events = await db.load("full")
    assert header == HEADER
    assert log_json(events) == log_json(log)
    assert events == log  # dataclass equality too: tuples for sources, bools, ...
    assert await db.count("full") == len(log)


async def test_payload_values_round_trip_exactly(db: SqlPersistence) -> None:
    await db.create(SessionHeader("s", 1), [ev(0, data=TRICKY_DATA)])
    (stored,) = (await db.load("s"))[1]
    assert canonical(stored.data) == canonical(TRICKY_DATA)
    assert type(stored.data["floats"][1]) is float and stored.data["big"] == 2**70
    assert list(stored.data["order"]) == ["b", "a", "c"]  # key order kept, too


async def test_json_null_payload_is_json_null_not_sql_null(db: SqlPersistence) -> None:
    await db.create(SessionHeader("s", 1), [ev(0, data={}), SessionEvent("x", 1, 5, None)])
    async with db.engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT seq, data IS NULL, CAST(data AS TEXT), surface_op IS NULL, "
                    "source_event_seqs IS NULL FROM events ORDER BY seq"
                )
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        (0, False, "{}", True, True),
        (1, False, "null", True, True),
    ]
    assert (await db.load("s"))[1][1].data is None


async def test_absent_surface_op_and_sources_are_sql_null_and_come_back_absent(
    db: SqlPersistence,
) -> None:
    log = [ev(0), ev(1, U, {}, "append"), ev(2, A, {}, "append", [])]
    await db.create(SessionHeader("s", 1), log)
    events = (await db.load("s"))[1]
    assert [e.to_json().keys() - {"type", "seq", "time", "data"} for e in events] == [
        set(),
        {"surfaceOp"},
        {"surfaceOp", "sourceEventSeqs"},
    ]
    assert events[2].source_event_seqs == ()  # present-but-empty stays present


async def test_create_with_an_invalid_log_writes_nothing(db: SqlPersistence) -> None:
    bad = [ev(0, U, {}, None)]  # rule 3: a surface event without surfaceOp
    with pytest.raises(SessionQueryError) as info:
        await db.create(SessionHeader("s", 1), bad)
    assert info.value.code is ErrorCode.INVALID_SURFACE and "rule 3" in info.value.message
    assert await db.list() == []


async def test_create_with_a_gap_in_the_seqs_breaks_rule_1(db: SqlPersistence) -> None:
    with pytest.raises(SessionQueryError, match="rule 1"):
        await db.create(SessionHeader("s", 1), [ev(0), ev(2)])
    assert await db.list() == []


@pytest.mark.parametrize(
    ("event", "what"),
    [
        (SessionEvent("x", 0, None, {}), "time None"),  # type: ignore[arg-type]
        (SessionEvent("x", 0, "5", {}), "time '5'"),  # type: ignore[arg-type]
        (SessionEvent("x", 0, 2**63, {}), "time"),
        (SessionEvent("", 0, 1, {}), "type ''"),
        (SessionEvent("x", 0, 1, {1, 2}), "not JSON"),
        (SessionEvent("x", 0, 1, float("nan")), "not JSON"),
        (SessionEvent("x", 0, 1, {}, ignorable=1), "ignorable"),  # type: ignore[arg-type]
    ],
)
async def test_fields_the_schema_cannot_hold_are_refused(
    db: SqlPersistence, event: SessionEvent, what: str
) -> None:
    await db.create(SessionHeader("s", 1))
    with pytest.raises(InvalidEventError, match=what):
        await db.append("s", [event])
    with pytest.raises(InvalidEventError):
        await db.create(SessionHeader("t", 1), [event])
    assert await db.count("s") == 0 and await db.load_header("t") is None


# -- append --------------------------------------------------------------------------


async def test_append_adds_contiguous_batches(db: SqlPersistence) -> None:
    log = sample_log()
    await db.create(HEADER)
    assert await db.append("full", log[:3]) == 3
    assert await db.append("full", []) == 3
    assert await db.append("full", log[3:8]) == 8
    assert await db.append("full", log[8:]) == len(log)
    assert log_json((await db.load("full"))[1]) == log_json(log)


async def test_append_to_an_unknown_session_is_refused(db: SqlPersistence) -> None:
    with pytest.raises(UnknownSessionError):
        await db.append("ghost", [ev(0)])


@pytest.mark.parametrize("first", [0, 1, 3, -1])
async def test_batch_not_starting_at_the_next_seq_is_refused_and_nothing_written(
    db: SqlPersistence, first: int
) -> None:
    await db.create(SessionHeader("s", 1), [ev(0), ev(1)])
    with pytest.raises(
        NonContiguousAppendError, match=f"at seq 2, but the batch starts seq {first}"
    ):
        await db.append("s", [ev(first), ev(first + 1)])
    assert await db.count("s") == 2


async def test_batch_with_a_gap_is_refused_and_nothing_written(db: SqlPersistence) -> None:
    await db.create(SessionHeader("s", 1), [ev(0)])
    with pytest.raises(NonContiguousAppendError, match="position 2 seq 4"):
        await db.append("s", [ev(1), ev(2), ev(4)])
    assert await db.count("s") == 1


STORED = [ev(0, U, {}, "append"), ev(1, "tool/call", {}), ev(2, T_RESULT, tool_data("x"), "append")]


@pytest.mark.parametrize(
    ("batch", "rule"),
    [
        ([ev(3, "turn/start", {}, "append")], 2),
        ([ev(3, "turn/start", {}, None, [0])], 2),
        ([ev(3, U, {}, None)], 3),
        ([ev(3, U, {}, {"op": "replace", "start": 0})], 3),
        ([ev(3, U, {}, replace(1, 1), [1])], 4),  # log-only endpoint
        ([ev(3, U, {}, replace(2, 0), [0, 2])], 4),  # start after end
        ([ev(3, U, {}, replace(0, 0), [0]), ev(4, U, {}, replace(0, 0), [0])], 4),  # shadowed
        ([ev(3, U, {}, "append", [3])], 5),
        ([ev(3, U, {}, "append", [])], 5),
        ([ev(3, U, {}, replace(0, 2), [0])], 6),
        ([ev(3, T_RESULT, tool_data("y"), replace(0, 0), [0])], 7),  # not a tool/result
        ([ev(3, T_RESULT, tool_data("y", extra=1), replace(2, 2), [2])], 7),
        ([ev(3, T_RESULT, {"message": {}}, replace(2, 2), [2])], 7),
    ],
)
async def test_batch_breaking_a_fold_rule_is_refused_and_nothing_written(
    db: SqlPersistence, batch: list[SessionEvent], rule: int
) -> None:
    await db.create(SessionHeader("s", 1), STORED)
    with pytest.raises(SessionQueryError) as info:
        await db.append("s", batch)
    assert info.value.code is ErrorCode.INVALID_SURFACE
    assert f"rule {rule}" in info.value.message
    assert await db.count("s") == 3


async def test_valid_events_before_the_bad_one_are_not_written_either(db: SqlPersistence) -> None:
    await db.create(SessionHeader("s", 1), STORED)
    batch = [ev(3, "turn/start"), ev(4, A, {}, "append", [2]), ev(5, U, {}, None)]
    with pytest.raises(SessionQueryError, match="seq 5 breaks surface rule 3"):
        await db.append("s", batch)
    assert await db.count("s") == 3
    assert len((await db.load("s"))[1]) == 3
    assert await db.append("s", batch[:2]) == 5  # the state was not advanced by the refusal


async def test_tool_result_rewrite_is_checked_against_the_stored_payload(
    db: SqlPersistence,
) -> None:
    await db.create(SessionHeader("s", 1), STORED)
    rewrite = ev(3, T_RESULT, tool_data("[elided]"), replace(2, 2), [2])
    assert await db.append("s", [rewrite]) == 4
    # and a rewrite of that rewrite, in a later batch, against what the last batch stored
    again = ev(4, T_RESULT, tool_data("[gone]"), replace(3, 3), [3])
    assert await db.append("s", [again]) == 5
    bad = ev(5, T_RESULT, tool_data("z", toolCallId="other"), replace(4, 4), [4])
    with pytest.raises(SessionQueryError, match="rule 7"):
        await db.append("s", [bad])


async def test_replace_spanning_stored_and_batch_events(db: SqlPersistence) -> None:
    await db.create(SessionHeader("s", 1), STORED)
    batch = [ev(3, A, {}, "append", [2]), ev(4, U, {}, replace(0, 3), [0, 2, 3])]
    assert await db.append("s", batch) == 5
    # the replaced nodes are gone from the surface: replacing them again breaks rule 4
    with pytest.raises(SessionQueryError, match="rule 4"):
        await db.append("s", [ev(5, U, {}, replace(2, 2), [2])])


async def test_append_reads_payloads_only_of_rewritten_tool_results(
    db: SqlPersistence,
) -> None:
    log = sample_log()
    await db.create(HEADER, log)
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        await db.append("full", [ev(12, "turn/start", {"n": 1}), ev(13, U, {}, "append")])
        reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert reads and not any("data" in s for s in reads), reads
        statements.clear()
        rewrite = ev(14, T_RESULT, tool_data("[again]"), replace(7, 7), [7])
        await db.append("full", [rewrite])
        with_data = [s for s in statements if "data" in s and "SELECT" in s.upper()]
        assert len(with_data) == 1 and " IN " in with_data[0].upper(), with_data
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)


async def test_concurrent_appends_at_the_same_seq_cannot_both_succeed(
    db: SqlPersistence, db_url: str
) -> None:
    await db.create(SessionHeader("s", 1), [ev(0)])
    other = SqlPersistence(db_url)
    try:
        results = await asyncio.gather(
            db.append("s", [ev(1, data={"by": "one"})]),
            other.append("s", [ev(1, data={"by": "two"})]),
            return_exceptions=True,
        )
    finally:
        await other.close()
    errors = [r for r in results if isinstance(r, Exception)]
    assert sorted(map(type, errors), key=str) == [NonContiguousAppendError], results
    assert await db.count("s") == 2


# -- reads -------------------------------------------------------------------------------


async def test_window_is_the_key_range_clipped_to_the_log(db: SqlPersistence) -> None:
    log = sample_log()
    await db.create(HEADER, log)
    for start, end in [(0, 0), (3, 7), (10, 50), (12, 20), (5, 4)]:
        header, events = await db.load_window("full", start, end)
        assert header == HEADER
        assert log_json(events) == log_json(log[start : end + 1])


async def test_load_headers_answers_like_load_header_and_leaves_out_missing_ids(
    db: SqlPersistence,
) -> None:
    await db.create(HEADER, sample_log())
    await db.create(SessionHeader("small", 2), [ev(0), ev(1, U, {"x": 1}, "append")])
    await db.create(SessionHeader("empty", 3))
    ids = ["full", "ghost", "small", "empty", "full"]
    assert await db.load_headers(ids) == {
        sid: await db.load_header(sid) for sid in ("full", "small", "empty")
    }


async def test_delete_removes_the_session_and_its_log(db: SqlPersistence) -> None:
    await db.create(HEADER, sample_log())
    assert await db.delete("full") is True
    assert await db.delete("full") is False
    assert await db.list() == []
    await db.create(HEADER)  # the id is free again
    assert await db.count("full") == 0


async def test_ping_checks_the_database_without_reading_sessions(db: SqlPersistence) -> None:
    await db.create(HEADER, sample_log())
    assert await db.ping() is None


async def test_ping_reports_a_schema_that_cannot_be_used(db_url: str) -> None:
    db = SqlPersistence(db_url, auto_migrate=False)
    try:
        with pytest.raises(SchemaVersionError, match="session-gateway migrate --database"):
            await db.ping()
    finally:
        await db.close()


async def test_a_closed_backend_can_be_used_again(db: SqlPersistence) -> None:
    await db.create(HEADER)
    await db.close()
    assert [h.id for h in await db.list()] == ["full"]


# -- URLs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("sqlite+aiosqlite:////abs/x.db", "sqlite+aiosqlite:////abs/x.db"),
        ("postgresql://u@h:5/d", "postgresql+asyncpg://u@h:5/d"),
        ("postgres://u@h/d", "postgresql+asyncpg://u@h/d"),
        ("postgresql+asyncpg://u:pw@h/d", "postgresql+asyncpg://u:pw@h/d"),
    ],
)
def test_urls_are_upgraded_to_the_async_drivers(given: str, expected: str) -> None:
    assert normalize_url(given).render_as_string(hide_password=False) == expected


@pytest.mark.parametrize("url", ["mysql://h/d", "postgresql+psycopg2://h/d", "not a url"])
def test_other_urls_are_refused_with_what_is_accepted(url: str) -> None:
    with pytest.raises(DatabaseUrlError, match="sqlite\\+aiosqlite"):
        SqlPersistence(url)


def test_password_is_hidden_in_repr() -> None:
    assert "secret" not in repr(SqlPersistence("postgresql://u:secret@h/d"))


def test_database_url_default_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("SESSION_GATEWAY_DATABASE_URL", "postgresql://u@h/d")
    assert default_database_url() == "postgresql://u@h/d"
    monkeypatch.delenv("SESSION_GATEWAY_DATABASE_URL")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_database_url() == f"sqlite+aiosqlite:///{tmp_path}/session-gateway/sessions.db"
    assert SqlPersistence().is_sqlite
