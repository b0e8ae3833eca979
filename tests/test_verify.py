"""`session-gateway verify` on SQLite and PostgreSQL: a clean database agrees with the fold,
a value corrupted on purpose is named, an invalid or underived log is reported as such,
and usage or connection problems exit 2 with one clean line."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from gateway import cli
from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence, migrate
from gateway.persistence.engine import create_engine, normalize_url
from tests.core_helpers import ev
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    HEADER,
    U,
    db_url_fixture,
    engine_name_fixture,
    run,
    sample_log,
)


async def execute(url: str, *statements: str) -> None:
    engine = create_engine(normalize_url(url))
    try:
        async with engine.begin() as conn:
            for sql in statements:
                await conn.execute(text(sql))
    finally:
        await engine.dispose()


async def fill(url: str) -> None:
    await migrate(url)
    db = SqlPersistence(url)
    try:
        await db.create(HEADER, sample_log())
        await db.create(SessionHeader("other", 5), [ev(0, U, {}, "append")])
        await db.append("other", [ev(1, U, {}, {"op": "replace", "start": 0, "end": 0}, [0])])
        await db.create(SessionHeader("empty", 6))
    finally:
        await db.close()


def verify(url: str, *args: str) -> int:
    return cli.main(["verify", "--database", url, *args])


@pytest.fixture
def filled(db_url: str) -> str:
    run(fill(db_url))
    return db_url


def test_a_clean_database_agrees_with_the_fold(
    filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert verify(filled) == 0
    out = capsys.readouterr().out
    assert "3 session(s), 14 events: 3 agree, 0 disagree (0 value(s)), 0 invalid" in out


def test_a_corrupted_surface_is_named_with_stored_and_expected(
    filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(execute(filled, "UPDATE events SET surface = 1 WHERE session_id = 'full' AND seq = 5"))
    assert verify(filled) == 1
    out = capsys.readouterr().out
    assert "full  seq 5  surface  stored 1 (CURRENT)  expected 2 (SHADOWED)" in out
    assert "1 disagree (1 value(s))" in out


def test_corrupted_labels_citations_and_counts_are_each_named(
    filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(
        execute(
            filled,
            "UPDATE events SET surface_label = 99, replaced_by = 3 "
            "WHERE session_id = 'other' AND seq = 0",
            "DELETE FROM citations WHERE session_id = 'full' AND seq = 4 AND cited_by = 5",
            "INSERT INTO citations (session_id, seq, cited_by) VALUES ('full', 0, 2)",
            "UPDATE sessions SET current_count = 7 WHERE id = 'other'",
        )
    )
    assert verify(filled, "other", "full") == 1
    out = capsys.readouterr().out
    assert "other  seq 0  replaced_by  stored 3  expected 1" in out
    assert "other  seq 0  surface_label  stored 99  expected 0" in out
    assert "other  -  current_count  stored 7  expected 1" in out
    assert "full  seq 4  citation by 5  stored absent  expected present" in out
    assert "full  seq 0  citation by 2  stored present  expected absent" in out
    assert "2 session(s)" in out and "2 disagree (5 value(s))" in out


def test_rows_printed_per_session_are_capped(
    filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(execute(filled, "UPDATE events SET surface_label = 1000 + seq WHERE session_id = 'full'"))
    assert verify(filled, "full", "--max-rows", "2") == 1
    out = capsys.readouterr().out
    assert out.count("full  seq") == 2
    assert "full  ... and 10 more disagreement(s)" in out


def test_an_invalid_stored_log_fails_and_an_underived_one_is_reported(
    filled: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(execute(filled, "UPDATE sessions SET derived_count = 0 WHERE id = 'other'"))
    assert verify(filled) == 0
    out = capsys.readouterr().out
    assert "other  not derived (derived_count is 0 of 2 events)" in out
    assert "1 not derived" in out
    run(
        execute(
            filled,
            "UPDATE events SET surface_op = '\"append\"' WHERE session_id = 'full' AND seq = 0",
        )
    )
    assert verify(filled) == 1
    out = capsys.readouterr().out
    assert "full  INVALID  event seq 0 breaks surface rule 2" in out


def test_usage_and_connection_errors_exit_2_without_a_traceback(
    filled: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert verify(filled, "nope") == 2
    assert "no stored session 'nope'" in capsys.readouterr().err
    assert verify("mysql://h/d") == 2
    assert "unsupported database URL scheme" in capsys.readouterr().err
    assert verify(f"sqlite:///{tmp_path / 'missing.db'}") == 2
    assert "no database file" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()
    assert verify("postgresql+asyncpg://nobody@127.0.0.1:9/none") == 2
    err = capsys.readouterr().err
    assert err.startswith("session-gateway verify: cannot use database") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_database_behind_the_schema_is_refused_not_migrated(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(migrate(db_url, "0001"))
    assert verify(db_url) == 2
    assert "session-gateway migrate --database" in capsys.readouterr().err


def test_help_explains_statuses_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["verify", "--help"])
    out = capsys.readouterr().out
    assert "not derived" in out and "Exit status" in out and "--max-rows" in out
