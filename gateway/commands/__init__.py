"""One module per `session-gateway` subcommand: `add_arguments(parser)` and `run(args) -> int`."""

from __future__ import annotations

import argparse

DATABASE_HELP = (
    "database URL: sqlite+aiosqlite:///path.db or postgresql+asyncpg://user@host/db "
    "(default: $SESSION_GATEWAY_DATABASE_URL, else the embedded SQLite file "
    "$XDG_DATA_HOME/session-gateway/sessions.db)"
)


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    """`--database URL`, the same for every command that opens a database."""
    parser.add_argument("--database", metavar="URL", default=None, help=DATABASE_HELP)
