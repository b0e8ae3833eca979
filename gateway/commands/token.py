"""Manage the access tokens of `serve --auth tokens` (SPEC §10).

  token create --name NAME --grant GRANT... [--expires-in DAYS] [--trusted-documents-only]
      makes a token and prints it ONCE, alone on stdout (only a keyed hash is
      stored; a lost token cannot be shown again: revoke it and make another).
  token list     every token: name, state, grants, times (never a secret).
  token revoke NAME
      refuses the token from the next request on, on every replica.

Grants (a token sees a session when any of its grants matches):
  all            every session
  cwd:PREFIX     sessions whose cwd is PREFIX or below it (cwd:/srv/app)
  id:GLOB        sessions whose id matches GLOB (* any run, ? one character)
  tree:ID        session ID and every session forked from it, at any depth

The hashing key is $SESSION_GATEWAY_TOKEN_KEY, else the key file
$XDG_CONFIG_HOME/session-gateway/token.key (~/.config/...), which the first
`token create` writes (mode 0600). `serve --auth tokens` needs the same key:
give every replica the same SESSION_GATEWAY_TOKEN_KEY.

The database is --database, else $SESSION_GATEWAY_DATABASE_URL, else the
embedded SQLite file. Exit status: 0 on success, 1 when the database failed,
2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from gateway.commands import add_database_argument

PROG = "session-gateway token"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="token_action", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="make a token and print it once",
        description=(
            "Make an access token for `serve --auth tokens` and print its secret once, on "
            "stdout (a summary goes to stderr). Only a keyed hash of the secret is stored; "
            "the key is $SESSION_GATEWAY_TOKEN_KEY, else the key file, written by the "
            "first create. Each --grant widens what the token sees (SPEC §10)."
        ),
    )
    add_database_argument(create)
    create.add_argument("--name", required=True, help="a unique name for the token's holder")
    create.add_argument(
        "--grant",
        dest="grants",
        action="extend",
        nargs="+",
        required=True,
        metavar="GRANT",
        help="all | cwd:PREFIX | id:GLOB | tree:ID (repeatable)",
    )
    create.add_argument(
        "--expires-in", type=float, metavar="DAYS", help="expire after DAYS (default: never)"
    )
    create.add_argument(
        "--trusted-documents-only",
        action="store_true",
        help="allow only the documents of serve --trusted-documents",
    )
    listing = actions.add_parser(
        "list",
        help="list tokens (never their secrets)",
        description=(
            "List every token of the database: name, state (active, expired, revoked), "
            "grants and times. Secrets are never stored, so none are shown, and listing "
            "needs no token key."
        ),
    )
    add_database_argument(listing)
    revoke = actions.add_parser(
        "revoke",
        help="revoke a token by name",
        description=(
            "Revoke the token of NAME: every replica refuses it from its next operation, "
            "and running subscriptions that use it end within seconds. Revoking twice "
            "keeps the first time."
        ),
    )
    add_database_argument(revoke)
    revoke.add_argument("name", metavar="NAME")


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


async def _run(args: argparse.Namespace) -> int:
    from gateway.commands.database import DatabaseRefused, resolve
    from gateway.persistence import SqlPersistence
    from gateway.persistence.engine import (
        display_url,
    )
    from gateway.persistence.errors import SchemaVersionError
    from gateway.persistence.tokens import TokenError, TokenStore, load_token_key, now_ms

    try:
        url = resolve(args.database).url
    except DatabaseRefused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        # Listing hashes no secret, so it needs no key (and works before the first create).
        key = (
            None
            if args.token_action == "list"
            else load_token_key(create=args.token_action == "create")
        )
    except TokenError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    db = SqlPersistence(url)
    tokens = TokenStore(db, key)
    try:
        if args.token_action == "create":
            info, secret = await tokens.create(
                args.name,
                args.grants,
                expires_in_days=args.expires_in,
                trusted_documents_only=args.trusted_documents_only,
            )
            print(secret, flush=True)
            print(
                f"created token {info.name!r} ({', '.join(info.grants)}; expires "
                f"{_when(info.expires_at) if info.expires_at else 'never'}) in "
                f"{display_url(url)}. It is shown only now: store it somewhere safe.",
                file=sys.stderr,
            )
        elif args.token_action == "list":
            _print_table(await tokens.list(), now_ms())
        else:
            info = await tokens.revoke(args.name)
            print(f"revoked token {info.name!r} ({_when(info.revoked_at)})")
    except TokenError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except SchemaVersionError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(
            f"{PROG}: database {display_url(url)} failed: {type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}",
            file=sys.stderr,
        )
        return 1
    finally:
        await db.close()
    return 0


def _print_table(infos: list[Any], now: int) -> None:
    header = ("NAME", "STATE", "GRANTS", "CREATED", "EXPIRES", "LAST USED", "TRUSTED-ONLY")
    rows = [
        (
            i.name,
            i.state(now),
            " ".join(i.grants),
            _when(i.created_at),
            _when(i.expires_at),
            _when(i.last_used_at),
            "yes" if i.trusted_documents_only else "no",
        )
        for i in infos
    ]
    if not rows:
        print("no tokens (make one with `session-gateway token create`)")
        return
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))
