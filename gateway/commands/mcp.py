"""Serve the read-only session tools to an agent over MCP (stdio).

An MCP client (Claude Desktop, an IDE, an agent host) starts this command and
talks to it on stdin/stdout. It offers five read-only tools over the same
query core as GraphQL: session_search, session_event_search, session_trace,
session_event_trace and session_event_read (docs: README, "MCP (agents)").

What the agent sees: with no --grant, every session of the database (the
whole corpus, as `serve` without auth). Each --grant narrows that to the
sessions it matches, exactly as a token with those grants sees them over
/graphql and /mcp (an invisible session is "not found", like an absent one):
  all            every session
  cwd:PREFIX     sessions whose cwd is PREFIX or below it (cwd:/srv/app)
  id:GLOB        sessions whose id matches GLOB (* any run, ? one character)
  tree:ID        session ID and every session forked from it, at any depth

The database is --database, else $SESSION_GATEWAY_DATABASE_URL, else the
embedded SQLite file; it is only read (never created or migrated). Logs go to
stderr (stdout is the protocol). Exit status: 0 when the client closed the
connection, 2 on usage errors (a bad grant or URL, a missing database file, a
database that cannot be used).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from gateway.commands import add_database_argument
from gateway.observability.logging import add_logging_arguments

PROG = "session-gateway mcp"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_argument(parser)
    parser.add_argument(
        "--grant",
        dest="grants",
        action="append",
        default=None,
        metavar="GRANT",
        help="all | cwd:PREFIX | id:GLOB | tree:ID (repeatable; default: every session)",
    )
    parser.add_argument(
        "--max-results",
        type=_positive,
        default=None,
        metavar="N",
        help="most hits one search returns before it says it stopped (default: 100)",
    )
    add_logging_arguments(parser)


class _Refused(Exception):
    """A clean one-line refusal (exit 2)."""


async def _serve(args: argparse.Namespace, scope: object) -> None:
    from gateway.agent_tools import DEFAULT_MAX_RESULTS, AgentTools
    from gateway.commands.database import DatabaseRefused, open_existing
    from gateway.core import Scope, SessionQuery
    from gateway.mcp import serve_stdio

    assert scope is None or isinstance(scope, Scope)
    try:
        _, backend = await open_existing(
            args.database, missing_hint=" (make one with `session-gateway import`)"
        )
    except DatabaseRefused as exc:
        raise _Refused(str(exc)) from None
    try:
        tools = AgentTools(
            SessionQuery(persistence=backend),
            max_results=args.max_results or DEFAULT_MAX_RESULTS,
        )
        await serve_stdio(tools, scope)
    finally:
        await backend.close()


def run(args: argparse.Namespace) -> int:
    from gateway.core import InvalidGrant, Scope
    from gateway.observability.logging import configure_logging

    try:
        scope = None if args.grants is None else Scope.parse(args.grants)
    except InvalidGrant as exc:
        print(f"{PROG}: error: {exc} (see {PROG} --help)", file=sys.stderr)
        return 2
    configure_logging(json=args.log_format == "json", level=args.log_level, stream=sys.stderr)
    try:
        asyncio.run(_serve(args, scope))
    except _Refused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    return 0
