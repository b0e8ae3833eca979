"""Resolving a command's database before it is opened: the URL, the absolute SQLite path,
and the checks that keep a typo from silently becoming a new empty database.

Kept apart from `gateway.persistence` because these are command-line policies
(which files a command may create, which it must refuse), and importing nothing
heavy at module level keeps `--help` fast (SQLAlchemy loads inside `resolve`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from gateway.persistence.sql import SqlPersistence


class DatabaseRefused(Exception):
    """The database named on the command line cannot be used as asked (one clean line)."""


@dataclass(frozen=True)
class ResolvedDatabase:
    url: URL
    shown: str
    """What banners and summaries print: the absolute path for SQLite, else the URL
    with the password hidden."""
    path: Path | None
    """The SQLite file, absolute (None for PostgreSQL and in-memory SQLite)."""
    is_default: bool


def resolve(database: str | None, *, create_dirs_default_only: bool = True) -> ResolvedDatabase:
    """The database `--database` (else the environment, else the embedded default) names.

    A relative SQLite path is made absolute against the current directory, so the
    location shown is the one used. Raises DatabaseRefused for a URL that is not one,
    or a SQLite file whose directory does not exist (only the embedded default's
    directory is ever created).
    """
    from gateway.persistence.engine import (
        DatabaseUrlError,
        default_database_url,
        display_url,
        is_default_database,
        is_sqlite,
        normalize_url,
        sqlite_file,
    )

    try:
        url = normalize_url(database or default_database_url())
    except DatabaseUrlError as exc:
        raise DatabaseRefused(str(exc)) from None
    if not is_sqlite(url):
        return ResolvedDatabase(url, display_url(url), None, False)
    path = sqlite_file(url)
    if path is None:
        return ResolvedDatabase(url, display_url(url), None, False)
    path = Path(path).expanduser().absolute()
    url = url.set(database=str(path))
    is_default = is_default_database(path)
    if create_dirs_default_only and not is_default and not path.parent.is_dir():
        raise DatabaseRefused(
            f"no such directory {path.parent} for the SQLite database {path} "
            "(only the embedded default's directory is created; make it first)"
        )
    return ResolvedDatabase(url, str(path), path, is_default)


def foreign_tables(path: Path) -> list[str]:
    """Tables in the SQLite file at `path` that are not the gateway's (nor SQLite's or
    Alembic's). Read with the stdlib driver, read-only, before any engine opens it."""
    from gateway.persistence.tables import metadata
    from gateway.persistence.texts import SQLITE_INDEX_TABLES

    ours = set(metadata.tables) | {"alembic_version", *SQLITE_INDEX_TABLES}
    uri = f"{path.as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise DatabaseRefused(f"{path} is not a SQLite database ({exc})") from None
    return sorted(
        name for (name,) in rows if name not in ours and not str(name).startswith("sqlite_")
    )


def check_serve_target(db: ResolvedDatabase, *, create: bool) -> None:
    """`serve` refuses a SQLite file that does not exist (but the embedded default) or
    that holds tables that are not ours, unless `--create`: serving would otherwise
    answer an empty corpus, or add our tables to someone else's file, without a word."""
    if db.path is None or db.is_default or create:
        return
    if not db.path.exists():
        raise DatabaseRefused(
            f"no SQLite database at {db.path}; pass --create to make a new empty one there "
            "(or check the path: sqlite:///x.db is relative, sqlite:////abs/x.db absolute)"
        )
    if db.path.is_dir():
        raise DatabaseRefused(f"{db.path} is a directory, not a SQLite database")
    foreign = foreign_tables(db.path)
    if foreign:
        raise DatabaseRefused(
            f"{db.path} holds tables that are not the gateway's ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}); pass --create to add the gateway's "
            "tables to it anyway"
        )


async def open_existing(
    database: str | None, *, missing_hint: str = ""
) -> tuple[ResolvedDatabase, SqlPersistence]:
    """The resolved database and a backend on it, for a command that reads an existing
    database and never migrates it (`export`, `mcp`): DatabaseRefused with one line for
    a bad URL, a missing file (`missing_hint` appended) or a schema it cannot use."""
    from gateway.persistence.errors import SchemaVersionError
    from gateway.persistence.sql import SqlPersistence

    db = resolve(database)
    if db.path is not None and not db.path.is_file():
        raise DatabaseRefused(f"no database file at {db.path}{missing_hint}")
    backend = SqlPersistence(db.url, auto_migrate=False)
    try:
        await backend.ensure_schema()
    except BaseException as exc:
        await backend.close()
        if isinstance(exc, SchemaVersionError):
            raise DatabaseRefused(str(exc)) from None
        if not isinstance(exc, Exception):
            raise
        first = next(iter(str(exc).strip().splitlines()), "")
        raise DatabaseRefused(
            f"cannot use database {db.shown}: {type(exc).__name__}: {first}"
        ) from None
    return db, backend
