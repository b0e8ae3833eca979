"""Alembic migrations on SQLite and PostgreSQL: the round trip, the first-use policy, the
refusals (with the command to run) and `session-gateway migrate`."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from gateway import cli
from gateway.core import SessionHeader
from gateway.persistence import SchemaVersionError, SqlPersistence, head_revision, migrate
from gateway.persistence.engine import create_engine, normalize_url
from gateway.persistence.migrations import current_revision, script_location
from gateway.persistence.tables import metadata
from tests.core_helpers import ev
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_url_fixture,
    engine_name_fixture,
    run,
)

ROOT = Path(__file__).resolve().parent.parent


async def tables(url: str) -> set[str]:
    engine = create_engine(normalize_url(url))
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def execute(url: str, sql: str) -> None:
    engine = create_engine(normalize_url(url))
    try:
        async with engine.begin() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


async def test_upgrade_downgrade_upgrade_again(db_url: str) -> None:
    result = await migrate(db_url)
    assert (result.before, result.after) == (None, head_revision())
    assert {"sessions", "events", "alembic_version"} <= await tables(db_url)
    db = SqlPersistence(db_url)
    await db.create(SessionHeader("s", 1), [ev(0)])
    await db.close()

    result = await migrate(db_url, "base")
    assert (result.before, result.after) == (head_revision(), None)
    assert not {"sessions", "events"} & await tables(db_url)
    assert (await current_revision(db_url)).status == "fresh"

    assert (await migrate(db_url)).after == head_revision()
    assert not (await migrate(db_url)).changed  # at head already: a no-op
    db = SqlPersistence(db_url)
    try:
        assert await db.list() == []
        await db.create(SessionHeader("s", 1), [ev(0)])
        assert await db.count("s") == 1
    finally:
        await db.close()


async def test_migrated_schema_matches_the_table_definitions(db_url: str) -> None:
    await migrate(db_url)
    engine = create_engine(normalize_url(db_url))

    def compare_type(_ctx: Any, _col: Any, insp_col: Any, meta_col: Any, *_: Any) -> bool:
        return False  # the JSON columns are TypeDecorators; their DDL is checked below

    def include_name(name: str | None, kind: str, _parents: Any) -> bool:
        # The search index differs by engine by design (FTS5 and its shadow tables on
        # SQLite, token arrays on PostgreSQL: gateway/persistence/texts.py); its shape is
        # checked in tests/test_search_migration.py.
        return not (kind == "table" and name is not None and name.startswith("event_"))

    def diff(conn: Any) -> list[Any]:
        def include_object(obj: Any, name: str | None, kind: str, *rest: Any) -> bool:
            return include_name(name, kind, None)

        opts = {
            "compare_type": compare_type,
            "include_name": include_name,
            "include_object": include_object,
        }
        ctx = MigrationContext.configure(conn, opts=opts)
        return list(compare_metadata(ctx, metadata))

    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(diff) == []
            columns = await conn.run_sync(
                lambda c: {col["name"]: col for col in inspect(c).get_columns("events")}
            )
            indexes = await conn.run_sync(lambda c: inspect(c).get_indexes("sessions"))
            pk = await conn.run_sync(lambda c: inspect(c).get_pk_constraint("events"))
    finally:
        await engine.dispose()
    json_type = "TEXT" if db_url.startswith("sqlite") else "JSON"
    for name in ("data", "surface_op", "source_event_seqs"):
        assert str(columns[name]["type"]) == json_type
    assert columns["data"]["nullable"] is False
    assert pk["constrained_columns"] == ["session_id", "seq"]
    assert {i["name"] for i in indexes} == {
        "ix_sessions_newest_first",
        "ix_sessions_parent_session",
        "ix_sessions_cwd",
    }


async def test_a_fresh_sqlite_file_is_migrated_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "there.db"  # its directory exists: only the default's is ever made
    db = SqlPersistence(f"sqlite:///{path}")
    try:
        assert await db.list() == []
    finally:
        await db.close()
    assert path.is_file()
    assert (await current_revision(f"sqlite:///{path}")).status == "current"


@pytest.mark.postgres
async def test_postgres_is_not_migrated_on_first_use_and_the_error_names_the_command(
    postgres_url: str,
) -> None:
    db = SqlPersistence(postgres_url)
    try:
        with pytest.raises(SchemaVersionError) as info:
            await db.list()
    finally:
        await db.close()
    assert f"session-gateway migrate --database {postgres_url}" in str(info.value)
    assert await tables(postgres_url) == set()


async def test_auto_migrate_can_be_turned_off_for_sqlite(tmp_path: Path) -> None:
    db = SqlPersistence(f"sqlite:///{tmp_path / 'x.db'}", auto_migrate=False)
    try:
        with pytest.raises(SchemaVersionError, match="no session-gateway schema yet"):
            await db.list()
    finally:
        await db.close()


async def test_a_database_at_an_unknown_newer_revision_is_refused(db_url: str) -> None:
    await migrate(db_url)
    await execute(db_url, "UPDATE alembic_version SET version_num = 'ffff0002'")
    db = SqlPersistence(db_url, auto_migrate=True)
    try:
        with pytest.raises(SchemaVersionError) as info:
            await db.list()
    finally:
        await db.close()
    message = str(info.value)
    assert "revision ffff0002, which this version of session-gateway does not know" in message
    assert "session-gateway migrate --database" in message
    with pytest.raises(SchemaVersionError, match="does not know"):
        await migrate(db_url)  # and migrate leaves it alone
    assert "events" in await tables(db_url)


async def test_our_tables_without_a_revision_are_refused(db_url: str) -> None:
    await migrate(db_url)
    await execute(db_url, "DROP TABLE alembic_version")
    db = SqlPersistence(db_url, auto_migrate=True)
    try:
        with pytest.raises(SchemaVersionError, match="no Alembic revision"):
            await db.list()
    finally:
        await db.close()


async def test_an_unknown_target_revision_is_refused(db_url: str) -> None:
    with pytest.raises(SchemaVersionError, match="unknown target revision 'nope'"):
        await migrate(db_url, "nope")


def test_migrate_command_upgrades_reports_and_downgrades(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["migrate", "--database", db_url]) == 0
    assert f"migrated from revision none to {head_revision()}" in capsys.readouterr().out
    assert cli.main(["migrate", "--database", db_url]) == 0
    assert "already at revision" in capsys.readouterr().out
    assert cli.main(["migrate", "--database", db_url, "--status"]) == 0
    assert f"revision {head_revision()}" in capsys.readouterr().out
    assert cli.main(["migrate", "--database", db_url, "--revision", "base"]) == 0
    assert "to none (base)" in capsys.readouterr().out
    assert run(tables(db_url)) & {"sessions", "events"} == set()


def test_migrate_command_uses_the_environment_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("SESSION_GATEWAY_DATABASE_URL", url)
    assert cli.main(["migrate"]) == 0
    assert "env.db: migrated" in capsys.readouterr().out


def test_migrate_command_fails_on_a_refused_database(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(migrate(db_url))
    run(execute(db_url, "UPDATE alembic_version SET version_num = 'ffff0002'"))
    assert cli.main(["migrate", "--database", db_url]) == 1
    assert "does not know" in capsys.readouterr().err


def test_migrate_command_rejects_a_bad_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["migrate", "--database", "mysql://h/d"]) == 2
    assert "unsupported database URL scheme" in capsys.readouterr().err


def test_migrate_help_explains_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["migrate", "--help"])
    out = capsys.readouterr().out
    assert "migrates itself on first use" in out and "--revision" in out


def test_the_scripts_are_found_from_the_source_checkout() -> None:
    location = script_location()
    assert (location / "env.py").is_file()
    assert location == ROOT / "migrations" or location.name == "_migrations"


def test_the_wheel_carries_the_migration_scripts() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["gateway._migrations"] == "migrations"
    packages = set(config["packages"])
    on_disk = {
        ".".join(d.relative_to(ROOT).parts)
        for d in [ROOT / "gateway", *(ROOT / "gateway").rglob("*")]
        if d.is_dir() and d.name != "__pycache__"
    }
    assert on_disk | {"gateway._migrations", "gateway._migrations.versions"} <= packages, (
        "list every directory of gateway/ in [tool.setuptools] packages"
    )
    data = config["package-data"]["gateway._migrations"]
    assert "*.mako" in data and "versions/*.py" in data
