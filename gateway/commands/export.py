"""Export a stored session as a dsh JSONL artifact (the format `import` reads).

Writes the session ID as an artifact: its header line, then one line per
event, except that every run of three or more stream chunks that a packed
chunk row can hold exactly is one row, as the harness writes them. `import`
of the file gives back the same header and events.

With --descendants the output is a zip archive instead: the session as
session.jsonl, then every descendant (sessions forked from it, their forks,
and so on: depth first, siblings by createdAt then id) as
subagents/<id>/session.jsonl, every character of the id outside
[A-Za-z0-9_-] written "_".

The output goes to -o FILE (written whole, then moved into place: a failed
export leaves no partial file), else to stdout; a zip is not written to a
terminal. The database is --database, else $SESSION_GATEWAY_DATABASE_URL,
else the embedded SQLite file; it is only read (never created or migrated).

Exit status: 0 when the session was exported, 2 on usage errors (an unknown
ID, a bad URL, a missing database file, an unwritable FILE) or when the
database cannot be used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

from gateway.commands import add_database_argument

PROG = "session-gateway export"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session", metavar="ID", help="the id of the session to export")
    add_database_argument(parser)
    parser.add_argument(
        "--descendants",
        action="store_true",
        help="write a zip: the session and every descendant, each as its own artifact",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default=None,
        help="write to FILE instead of stdout (made whole, then moved into place)",
    )


class _Refused(Exception):
    """A clean one-line refusal (exit 2)."""


async def _export(args: argparse.Namespace, out: BinaryIO) -> None:
    from gateway.commands.database import DatabaseRefused, open_existing
    from gateway.core import SessionQuery, SessionQueryError
    from gateway.dsh_export import UnexportableLog, open_export

    try:
        db, backend = await open_existing(args.database)
    except DatabaseRefused as exc:
        raise _Refused(str(exc)) from None
    try:
        obs = SessionQuery(persistence=backend).observe()
        try:
            try:
                export = await open_export(obs, args.session, descendants=args.descendants)
                async for chunk in export.chunks():
                    out.write(chunk)
            except SessionQueryError as exc:
                if exc.code.value == "SESSION_QUERY_SESSION_NOT_FOUND":
                    raise _Refused(f"no session {args.session!r} in {db.shown}") from None
                raise _Refused(f"{exc.code.value}: {exc.message}") from None
            except UnexportableLog as exc:
                raise _Refused(f"session {args.session!r} cannot be exported: {exc}") from None
        finally:
            obs.close()
    finally:
        await backend.close()


def run(args: argparse.Namespace) -> int:
    try:
        if args.output is None:
            if args.descendants and sys.stdout.isatty():
                raise _Refused("a zip archive is not written to a terminal: pass -o FILE")
            sys.stdout.flush()
            asyncio.run(_export(args, sys.stdout.buffer))
            sys.stdout.buffer.flush()
            return 0
        target = Path(args.output)
        folder = target.parent if str(target.parent) else Path(".")
        if not folder.is_dir():
            raise _Refused(f"cannot write {target}: no such directory {folder}")
        try:
            fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
        except OSError as exc:
            raise _Refused(f"cannot write {target}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "wb") as out:
                asyncio.run(_export(args, out))
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)  # as an ordinary new file (mkstemp makes it 0600)
            os.replace(temp, target)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
    except _Refused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to say
        return 0
    return 0
