"""Programmatic Alembic: where the scripts are, what revision a database is at, and
upgrading or downgrading it.

Policy (what `SqlPersistence` does on first use, via `ensure_schema`):

- a database at the head revision is used as it is;
- a SQLite database that is fresh (no tables of ours, no revision) or at an
  older known revision is migrated automatically: SQLite is the embedded
  store, owned by the process that opens it;
- any other database (PostgreSQL, or SQLite with `auto_migrate=False`) that
  is fresh or behind is refused until an operator runs
  `session-gateway migrate --database URL`;
- a database at an unknown revision (one a newer release wrote), or with our
  tables but no revision, is always refused, never touched.

Every refusal is a `SchemaVersionError` whose message names the command to run.
Migrations run in one transaction (transactional DDL on both engines); on
PostgreSQL an advisory lock serialises concurrent migrators, on SQLite
`BEGIN IMMEDIATE` does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .engine import (
    create_engine,
    display_url,
    is_default_database,
    is_sqlite,
    normalize_url,
    sqlite_file,
    write_options,
)
from .errors import SchemaVersionError

OUR_TABLES = frozenset({"sessions", "events"})
_ADVISORY_LOCK_KEY = 0x5E55_1011  # "session" migrations, any fixed 32-bit value

Status = Literal["current", "fresh", "behind", "unknown", "unversioned"]


def script_location() -> Path:
    """The directory holding `env.py` and `versions/`.

    An installed wheel carries it as `gateway/_migrations`; a source checkout
    (including an editable install) has it at the top-level `migrations/`.
    """
    here = Path(__file__).resolve().parent
    candidates = (here.parent / "_migrations", here.parents[1] / "migrations")
    for candidate in candidates:
        if (candidate / "env.py").is_file() and (candidate / "versions").is_dir():
            return candidate
    raise RuntimeError(
        "the Alembic migration scripts were not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "); the installation is incomplete"
    )


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()).replace("%", "%%"))
    return cfg


@functools.cache
def script_directory() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    head = script_directory().get_current_head()
    if head is None:
        raise RuntimeError("the migration scripts define no revision")
    return head


def revision_history() -> list[str]:
    """Known revisions from the first to the head (the history is linear)."""
    return [r.revision for r in reversed(list(script_directory().walk_revisions()))]


def migrate_command(url: URL) -> str:
    """The command an operator runs to migrate this database."""
    return f"session-gateway migrate --database {display_url(url)}"


@dataclass(frozen=True, slots=True)
class SchemaState:
    """Where a database's schema stands relative to this code's migrations."""

    status: Status
    revision: str | None
    head: str
    tables: frozenset[str]

    def refusal(self, url: URL) -> str:
        """Why this database cannot be used as it is, and what to run."""
        where = f"database {display_url(url)}"
        cmd = migrate_command(url)
        if self.status == "fresh":
            return f"{where} has no session-gateway schema yet; create it with `{cmd}`"
        if self.status == "behind":
            return (
                f"{where} is at schema revision {self.revision}, older than this "
                f"version's {self.head}; upgrade it with `{cmd}`"
            )
        if self.status == "unversioned":
            return (
                f"{where} has tables {', '.join(sorted(self.tables & OUR_TABLES))} but no "
                f"Alembic revision, so their schema is unknown and they were left alone; "
                f"use an empty database and create the schema with `{cmd}`"
            )
        if self.status == "unknown":
            return (
                f"{where} is at schema revision {self.revision}, which this version of "
                f"session-gateway does not know (its newest is {self.head}): a newer "
                f"release migrated it. Use that release, or downgrade the database with "
                f"that release's `{cmd} --revision {self.head}`"
            )
        return f"{where} is at the current schema revision {self.head}"


def _inspect_state(conn: Connection) -> SchemaState:
    head = head_revision()
    tables = frozenset(inspect(conn).get_table_names())
    heads = MigrationContext.configure(conn).get_current_heads()
    status: Status
    revision = heads[0] if len(heads) == 1 else (",".join(heads) or None)
    if heads == (head,):
        status = "current"
    elif not heads:
        status = "unversioned" if tables & OUR_TABLES else "fresh"
    elif len(heads) == 1 and heads[0] in revision_history():
        status = "behind"
    else:
        status = "unknown"
    return SchemaState(status, revision, head, tables)


async def schema_state(conn: AsyncConnection) -> SchemaState:
    """The schema state as seen on an open connection."""
    return await conn.run_sync(_inspect_state)


@dataclass(frozen=True, slots=True)
class MigrationResult:
    """What `migrate` did: the revision before and after (None = no schema)."""

    before: str | None
    after: str | None

    @property
    def changed(self) -> bool:
        return self.before != self.after


def _resolve_target(revision: str) -> str | None:
    if revision == "head":
        return head_revision()
    if revision == "base":
        return None
    history = revision_history()
    if revision not in history:
        raise SchemaVersionError(
            f"unknown target revision {revision!r}; known: base, " + ", ".join(history) + ", head"
        )
    return revision


def _migrate_sync(conn: Connection, url: URL, target: str | None) -> MigrationResult:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_LOCK_KEY})
    state = _inspect_state(conn)
    if state.status in ("unknown", "unversioned"):
        raise SchemaVersionError(state.refusal(url))
    before = state.revision
    if before == target:
        return MigrationResult(before, target)
    history = revision_history()
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    position = {rev: i for i, rev in enumerate(history)}
    current_pos = -1 if before is None else position[before]
    target_pos = -1 if target is None else position[target]
    if target_pos > current_pos:
        command.upgrade(cfg, target or "head")
    else:
        command.downgrade(cfg, target or "base")
    return MigrationResult(before, target)


def _make_default_directory(url: URL) -> None:
    """Create the embedded default database's directory, and no other.

    Any other SQLite file's directory must exist: creating it would turn a typo in a
    path into a new, empty database in a new folder.
    """
    path = sqlite_file(url) if is_sqlite(url) else None
    if path is not None and is_default_database(path):
        path.parent.mkdir(parents=True, exist_ok=True)


async def migrate_engine(engine: AsyncEngine, url: URL, revision: str = "head") -> MigrationResult:
    """Upgrade or downgrade the database behind `engine` to `revision` in one transaction.

    `revision` is `head`, `base` or a revision id. Refuses (SchemaVersionError) a
    database at an unknown revision or with unversioned tables of ours.
    """
    target = _resolve_target(revision)
    _make_default_directory(url)
    async with engine.connect() as conn:
        conn = await conn.execution_options(**write_options(url))
        async with conn.begin():
            return await conn.run_sync(_migrate_sync, url, target)


async def migrate(url: str | URL, revision: str = "head") -> MigrationResult:
    """Migrate the database at `url` to `revision` (no statement timeout applies)."""
    normalized = normalize_url(url)
    engine = create_engine(normalized, statement_timeout=None)
    try:
        return await migrate_engine(engine, normalized, revision)
    finally:
        await engine.dispose()


async def current_revision(url: str | URL) -> SchemaState:
    """The schema state of the database at `url` (read-only)."""
    normalized = normalize_url(url)
    engine = create_engine(normalized)
    try:
        async with engine.connect() as conn:
            return await schema_state(conn)
    finally:
        await engine.dispose()


async def ensure_schema(engine: AsyncEngine, url: URL, *, auto_migrate: bool) -> SchemaState:
    """Make sure the database can be used, migrating it when policy allows (module docstring)."""
    if auto_migrate:
        _make_default_directory(url)
    async with engine.connect() as conn:
        state = await schema_state(conn)
    if state.status == "current":
        return state
    if auto_migrate and state.status in ("fresh", "behind"):
        await migrate_engine(engine, url, "head")
        async with engine.connect() as conn:
            state = await schema_state(conn)
        if state.status == "current":
            return state
    raise SchemaVersionError(state.refusal(url))
