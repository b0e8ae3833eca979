"""Import dsh JSONL session artifacts into a database.

Each PATH is an artifact file or a directory, searched recursively for *.jsonl
files (imported in sorted order). An artifact holds one session: a header line
("type": "session") and its events, packed chunk rows included.

For each file the whole log is validated with the surface fold before anything
is written, and the session is written in one transaction. Outcomes:

  imported   a new session was stored
  unchanged  the identical session is already stored; nothing was written
             (importing the same files again is a no-op)
  replaced   a different log was stored under the id; --replace swapped it
  refused    nothing was written; the reason names the line or the rule:
             a line that is not JSON or longer than --max-line-bytes, a
             missing, malformed or repeated header (or one behind a UTF-8
             byte order mark), an id or header text with NUL or a lone
             surrogate, a malformed packed row, a log that breaks a surface
             rule, a different log already stored under the id (without
             --replace), or a path that is not a regular file (a FIFO or
             device would block or never end)

A torn final record (the last line has no newline and is not JSON, as an
interrupted writer leaves it) is discarded with a warning, as the harness that
writes these files does on load; the rest of the file is imported. A bad file
never stops the others.

Progress goes to stderr (a bar on a terminal, or when there are many files);
a summary table of every file goes to stdout.

Exit status: 0 when no file was refused, 1 when any was, 2 on usage errors or
when the database cannot be used at all.

The database is --database, else $SESSION_GATEWAY_DATABASE_URL, else the
embedded SQLite file, which is created and migrated on first use. A SQLite
file that does not exist yet is created only when some file would be
imported: when every file is refused, nothing is created. A PostgreSQL
database must be migrated first: session-gateway migrate --database URL.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, TextIO

from gateway.commands import add_database_argument
from gateway.commands.database import DatabaseRefused, resolve
from gateway.dsh_jsonl import DEFAULT_MAX_LINE_BYTES

if TYPE_CHECKING:
    from gateway.ingest import FileReport, ImportSummary

PROGRESS_MIN_FILES = 20
"""Below this many files, progress is shown only on a terminal."""
BAR_WIDTH = 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="artifact files or directories")
    add_database_argument(parser)
    parser.add_argument(
        "--replace",
        action="store_true",
        help="replace a different log already stored under a session id (default: refuse it)",
    )
    parser.add_argument(
        "--max-line-bytes",
        type=int,
        default=DEFAULT_MAX_LINE_BYTES,
        metavar="N",
        help=f"refuse a file with a line longer than N bytes (default {DEFAULT_MAX_LINE_BYTES:,}, "
        "64 MiB): files are read line by line, so memory follows the longest line",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"show a progress bar on stderr (default: on a terminal, or for "
        f"{PROGRESS_MIN_FILES} files or more)",
    )


class ProgressBar:
    """A text progress bar on a stream: redrawn in place on a terminal, one line per
    tenth of the work otherwise (so CI logs stay short)."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self.stream = stream
        self.total = total
        self.tty = stream.isatty()
        self.events = 0
        self.refused = 0
        self._last_step = -1

    def __call__(self, done: int, total: int, report: FileReport) -> None:
        if report.status in ("imported", "replaced"):
            self.events += report.events
        if report.status == "refused":
            self.refused += 1
        line = self.render(done, total)
        if self.tty:
            end = "\n" if done == total else ""
            self.stream.write(f"\r{line}{end}")
        else:
            step = done * 10 // max(total, 1)
            if step == self._last_step and done != total:
                return
            self._last_step = step
            self.stream.write(f"{line}\n")
        self.stream.flush()

    def render(self, done: int, total: int) -> str:
        filled = BAR_WIDTH * done // max(total, 1)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        refused = f", {self.refused} refused" if self.refused else ""
        return f"[{bar}] {done}/{total} files, {self.events:,} events{refused}"


def format_summary(summary: ImportSummary, database: str | None = None) -> str:
    """The table of every file and the closing count line (naming `database` if given)."""
    from gateway.ingest import STATUSES

    rows = [("STATUS", "EVENTS", "FILE", "SESSION / REASON")]
    notes: dict[int, tuple[str, ...]] = {}
    for report in summary.reports:
        events = f"{report.events:,}" if report.status != "refused" else "-"
        detail = report.session_id or "" if report.status != "refused" else report.reason or ""
        rows.append((report.status, events, report.path, detail))
        if report.warnings:
            notes[len(rows) - 1] = report.warnings
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = []
    for i, (status, events, path, detail) in enumerate(rows):
        lines.append(
            f"{status:<{widths[0]}}  {events:>{widths[1]}}  {path:<{widths[2]}}  {detail}".rstrip()
        )
        for warning in notes.get(i, ()):
            lines.append(f"    warning: {warning}")
    counts = ", ".join(f"{summary.count(s)} {s}" for s in STATUSES)
    files = len(summary.reports)
    tail = f"; {summary.warnings} warning(s)" if summary.warnings else ""
    into = f" into {database}" if database else ""
    lines.append(
        f"{files} file(s): {counts}; {summary.events_written:,} events written{into}{tail}"
    )
    return "\n".join(lines)


async def _import(args: argparse.Namespace) -> int:
    from gateway.ingest import ImportSummary, collect_files, import_paths, leading_refusals
    from gateway.persistence.errors import SchemaVersionError
    from gateway.persistence.sql import SqlPersistence

    prog = "session-gateway import"
    try:
        db = resolve(args.database)
    except DatabaseRefused as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    # Bad paths are usage errors, reported before the database is opened or created.
    collected = collect_files(args.paths)
    files, missing = collected
    if missing:
        for report in missing:
            print(f"{prog}: {report.path}: {report.reason}", file=sys.stderr)
        return 2
    if not files:
        print(
            f"{prog}: no *.jsonl files found under {', '.join(args.paths)}; nothing imported",
            file=sys.stderr,
        )
        return 1
    if db.path is not None and not db.path.exists():
        # A new SQLite file is made only for an import that writes something.
        refused = await asyncio.to_thread(leading_refusals, files, args.max_line_bytes)
        if len(refused) == len(files):
            print(format_summary(ImportSummary(refused)))
            print(f"{prog}: every file was refused; {db.shown} was not created", file=sys.stderr)
            return 1
    backend = SqlPersistence(db.url)
    try:
        try:
            await backend.ensure_schema()
        except SchemaVersionError as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:
            reason = str(exc).splitlines()[0] if str(exc) else ""
            print(
                f"{prog}: cannot use database {db.shown}: {type(exc).__name__}: {reason}",
                file=sys.stderr,
            )
            return 2
        show = args.progress
        if show is None:
            show = sys.stderr.isatty() or len(files) >= PROGRESS_MIN_FILES
        print(f"importing {len(files)} file(s) into {db.shown}", file=sys.stderr)
        bar = ProgressBar(sys.stderr, len(files)) if show and files else None
        summary = await import_paths(
            backend,
            args.paths,
            replace=args.replace,
            progress=bar,
            collected=collected,
            max_line_bytes=args.max_line_bytes,
        )
    finally:
        await backend.close()
    print(format_summary(summary, db.shown))
    return 0 if summary.ok else 1


def run(args: argparse.Namespace) -> int:
    if args.max_line_bytes < 1:
        print("session-gateway import: --max-line-bytes must be positive", file=sys.stderr)
        return 2
    return asyncio.run(_import(args))
