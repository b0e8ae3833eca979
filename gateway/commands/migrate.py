"""Create or upgrade a database's schema (Alembic migrations).

Brings the database to the newest schema revision this version knows, or to
--revision (an older revision downgrades; "base" drops every table of ours).
Run it once for a new PostgreSQL database, and after upgrading session-gateway.
The embedded SQLite database migrates itself on first use, so it never needs
this, but it is allowed.

A database at a revision this version does not know (a newer release migrated
it), or with tables of ours but no revision, is refused and left alone.
--status prints the revision and changes nothing.

The database is --database, else $SESSION_GATEWAY_DATABASE_URL, else the
embedded SQLite file. Exit status: 0 on success, 1 when the database was
refused or could not be reached, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from gateway.commands import add_database_argument
from gateway.commands.database import DatabaseRefused, resolve


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_argument(parser)
    parser.add_argument(
        "--revision",
        default="head",
        metavar="REV",
        help='target revision: "head" (default), "base" (drop the schema) or a revision id',
    )
    parser.add_argument(
        "--status", action="store_true", help="print the current revision; change nothing"
    )


async def _migrate(args: argparse.Namespace) -> int:
    from gateway.persistence.errors import SchemaVersionError
    from gateway.persistence.migrations import current_revision, head_revision, migrate

    try:
        db = resolve(args.database)
    except DatabaseRefused as exc:
        print(f"session-gateway migrate: {exc}", file=sys.stderr)
        return 2
    url, shown = db.url, db.shown
    try:
        if args.status:
            if db.path is not None and not db.path.exists():
                # Reading the revision must not create the file it reports on.
                print(f"session-gateway migrate: no database file at {shown}", file=sys.stderr)
                return 2
            state = await current_revision(url)
            print(
                f"{shown}: revision {state.revision or 'none'} "
                f"(this version's head: {state.head}; {state.status})"
            )
            return 0
        result = await migrate(url, args.revision)
    except SchemaVersionError as exc:
        print(f"session-gateway migrate: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(
            f"session-gateway migrate: cannot migrate {shown}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    before, after = result.before or "none", result.after or "none (base)"
    if result.changed:
        print(f"{shown}: migrated from revision {before} to {after}")
    else:
        print(f"{shown}: already at revision {after} (head is {head_revision()})")
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_migrate(args))
