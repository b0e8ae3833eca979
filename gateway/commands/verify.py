"""Check that a database's stored derivations equal the fold of its stored logs.

Full (the default) or quick. The full check reads and refolds every stored
log, payloads of rewrites included, so its time grows with the logs. `--quick`
asks only whether the database holds what it states, in seconds: on SQLite
`PRAGMA quick_check` (every page of the file well formed and used once), and
for every session, on both engines, its stored event count against its rows
(their number, first and last seq) read through the table and through its
index. Run `--quick` first when the file may be damaged (a failing `/readyz`
integrity probe, PERSISTENCE_FAILED answers naming damaged stored data); the
full check after a repair or an upgrade. `--quick` takes no SESSION and
prints each problem on its own line:

  quick_check: MESSAGE              (SQLite's own words, at most 100 lines)
  SESSION  EVENTS  stored N events  found M row(s), seqs A..B[; the index counts K]

then a summary line; exit 1 if it found any problem, 0 if none, 2 as below.

The full check:
The writer stores, with every event, what the surface fold derives (its class,
its replacer and its order label), the citations between events and each
session's class counts, and readers answer from them (SPEC §3a). This command
refolds each stored log (every session, or the SESSIONs named) and compares
every stored value with the fold. It also recomputes the search index's rows
(the §13 text of each event, its length, type and time, and on PostgreSQL its
tokens: `gateway.persistence.texts`) and the session's title seq from the
stored events, and compares them with `event_texts` and `sessions.title_seq`;
when every session is checked on SQLite, FTS5's own integrity check confirms
that `event_fts` indexes exactly `event_texts`. Nothing is written.

Each disagreeing value is printed on its own line (at most --max-rows per
session, then a count of the rest):

  SESSION  seq SEQ  WHAT  stored S  expected E

(WHAT is a derivation, `text row`, `text`, `length`, `type`, `time`, `terms`
or `title_seq`.)

Sessions whose stored log is invalid (the fold rejects it: readers report
SESSION_QUERY_INVALID_SURFACE for it) are printed with the rule they break.
A session whose derivations do not cover its log (derived_count is not its
event count: written by other means, or an invalid log the migration left
underived) is reported as "not derived" and is not a failure: readers fold
such a log themselves. Progress goes to stderr on big databases; a summary
line ends the output.

The database is --database, else $SESSION_GATEWAY_DATABASE_URL, else the
embedded SQLite file; it must be at the current schema revision (it is never
migrated here). Exit status: 0 when every derived session agrees with the
fold, 1 when any value disagrees or any stored log is invalid, 2 on usage
errors (an unknown SESSION, a bad URL) or when the database cannot be used.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from gateway.commands import add_database_argument

if TYPE_CHECKING:
    from gateway.persistence.derived import StoredDerivations
    from gateway.persistence.index_check import StoredIndex
    from gateway.persistence.sql import SqlPersistence

MAX_ROWS = 20
"""Disagreements printed per session by default."""
GROUP_SESSIONS = 200
GROUP_EVENTS = 50_000
PROGRESS_EVERY = 2.0
"""Seconds between progress lines on stderr."""
_CLASS_NAMES = {0: "LOG_ONLY", 1: "CURRENT", 2: "SHADOWED"}
_DERIVED = ("surface", "replaced_by", "surface_label")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sessions", nargs="*", metavar="SESSION", help="session ids to check (default: all)"
    )
    add_database_argument(parser)
    parser.add_argument(
        "--max-rows",
        type=int,
        default=MAX_ROWS,
        metavar="N",
        help=f"disagreements printed per session (default {MAX_ROWS}; the rest are counted)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="check storage only (SQLite quick_check; each session's count against its "
        "rows), in seconds; no refold (see above)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="print progress on stderr (default: when checking many sessions)",
    )


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One stored value that is not what the fold derives."""

    session_id: str
    seq: int | None
    what: str
    stored: object
    expected: object

    def render(self) -> str:
        where = "-" if self.seq is None else f"seq {self.seq}"
        return (
            f"{self.session_id}  {where}  {self.what}  "
            f"stored {_show(self.what, self.stored)}  expected {_show(self.what, self.expected)}"
        )


def _show(what: str, value: object) -> str:
    if value is None:
        return "NULL"
    if what == "surface" and isinstance(value, int) and value in _CLASS_NAMES:
        return f"{value} ({_CLASS_NAMES[value]})"
    return str(value)


@dataclass(slots=True)
class SessionCheck:
    """The outcome for one session: `status` is agrees, disagrees, invalid or not-derived."""

    session_id: str
    status: str
    events: int
    disagreements: list[Disagreement] = field(default_factory=list)
    reason: str | None = None


def check_session(stored: StoredDerivations) -> SessionCheck:
    """Compare one session's stored derivations with the fold of its stored log."""
    from gateway.core.errors import SessionQueryError
    from gateway.core.fold import SurfaceFold

    sid, log = stored.header.id, stored.log
    if len(log) != stored.event_count:
        return SessionCheck(
            sid,
            "invalid",
            len(log),
            reason=f"the header counts {stored.event_count} events, the log has {len(log)}",
        )
    fold = SurfaceFold(log.__getitem__)
    try:
        for event in log:
            fold.apply(event)
    except SessionQueryError as exc:
        return SessionCheck(sid, "invalid", len(log), reason=exc.message)
    if stored.derived_count != stored.event_count:
        return SessionCheck(
            sid,
            "not-derived",
            len(log),
            reason=f"derived_count is {stored.derived_count} of {stored.event_count} events",
        )
    out: list[Disagreement] = []
    for seq, (have, want) in enumerate(zip(stored.derivations, fold.derivations(0), strict=True)):
        if have != want:
            for what, a, b in zip(
                ("surface", "replaced_by", "surface_label"), have, want, strict=True
            ):
                if a != b:
                    out.append(Disagreement(sid, seq, what, a, b))
    expected = {
        (source, event.seq)
        for event in log
        if event.source_event_seqs
        for source in event.source_event_seqs
    }
    have_cites = set(stored.citations)
    for seq, cited_by in sorted(have_cites ^ expected):
        present = (seq, cited_by) in have_cites
        out.append(
            Disagreement(
                sid,
                seq,
                f"citation by {cited_by}",
                "present" if present else "absent",
                "absent" if present else "present",
            )
        )
    codes = fold.codes
    current, shadowed = codes.count(1), codes.count(2)
    for what, a, b in (
        ("current_count", stored.current_count, current),
        ("shadowed_count", stored.shadowed_count, shadowed),
    ):
        if a != b:
            out.append(Disagreement(sid, None, what, a, b))
    return SessionCheck(sid, "disagrees" if out else "agrees", len(log), out)


def check_index(session_id: str, stored: StoredIndex, *, with_terms: bool) -> list[Disagreement]:
    """Compare one session's text rows and title seq with those its stored events give."""
    from gateway.persistence.texts import text_rows, title_seq

    out: list[Disagreement] = []
    expected = {r.seq: r for r in text_rows(session_id, stored.events, with_terms=with_terms)}
    have = {r.seq: r for r in stored.rows}
    for seq in sorted(expected.keys() | have.keys()):
        a, b = have.get(seq), expected.get(seq)
        if a is None or b is None:
            present = a is not None
            out.append(
                Disagreement(
                    session_id,
                    seq,
                    "text row",
                    "present" if present else "absent",
                    "absent" if present else "present",
                )
            )
            continue
        for what in ("type", "time", "length", "text", "terms"):
            x, y = getattr(a, what), getattr(b, what)
            if x != y:
                out.append(Disagreement(session_id, seq, what, _brief(x), _brief(y)))
    want = title_seq(stored.events)
    if stored.title_seq != want:
        out.append(Disagreement(session_id, None, "title_seq", stored.title_seq, want))
    return out


def _brief(value: object, limit: int = 60) -> object:
    """A long text or token list shown by its start (the line says which row differs)."""
    if isinstance(value, list | str):
        shown_value = repr(value)
        return shown_value if len(shown_value) <= limit else shown_value[: limit - 1] + "…"
    return value


class Progress:
    """Progress lines on stderr at most every PROGRESS_EVERY seconds, and a last one."""

    def __init__(self, stream: TextIO, total: int, enabled: bool) -> None:
        self.stream, self.total, self.enabled = stream, total, enabled
        self.started = self.last = time.monotonic()

    def __call__(self, done: int, events: int, final: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not final and now - self.last < PROGRESS_EVERY):
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        self.stream.write(
            f"verified {done:,}/{self.total:,} sessions, {events:,} events ({rate:,.0f}/s)\n"
        )
        self.stream.flush()


def _groups(counts: Sequence[tuple[str, int]]) -> Iterator[list[str]]:
    """Session ids in groups read by one transaction each (bounded sessions and events)."""
    group: list[str] = []
    events = 0
    for sid, count in counts:
        if group and (len(group) >= GROUP_SESSIONS or events + count > GROUP_EVENTS):
            yield group
            group, events = [], 0
        group.append(sid)
        events += count
    if group:
        yield group


async def _verify(args: argparse.Namespace) -> int:
    from gateway.persistence.engine import (
        DatabaseUrlError,
        default_database_url,
        display_url,
        is_sqlite,
        normalize_url,
        sqlite_file,
    )
    from gateway.persistence.errors import SchemaVersionError
    from gateway.persistence.sql import SqlPersistence

    if args.max_rows < 0:
        print("session-gateway verify: --max-rows must be 0 or more", file=sys.stderr)
        return 2
    try:
        url = normalize_url(args.database or default_database_url())
    except DatabaseUrlError as exc:
        print(f"session-gateway verify: {exc}", file=sys.stderr)
        return 2
    path = sqlite_file(url) if is_sqlite(url) else None
    if path is not None and not path.is_file():
        print(f"session-gateway verify: no database file at {path}", file=sys.stderr)
        return 2
    if args.quick and args.sessions:
        print("session-gateway verify: --quick checks every session; name none", file=sys.stderr)
        return 2
    db = SqlPersistence(url, auto_migrate=False)
    shown = display_url(db.url)
    if args.quick:
        try:
            return await _verify_quick(db, shown)
        finally:
            await db.close()
    try:
        try:
            await db.ensure_schema()
            if args.sessions:
                named = list(dict.fromkeys(args.sessions))
                found = await db.load_sessions(named)
                missing = [sid for sid in named if sid not in found]
                if missing:
                    print(
                        f"session-gateway verify: no stored session {', '.join(map(repr, missing))}"
                        f" in {shown}",
                        file=sys.stderr,
                    )
                    return 2
            else:
                found = await db.load_sessions(sorted(h.id for h in await db.list()))
        except SchemaVersionError as exc:
            print(f"session-gateway verify: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:
            print(
                f"session-gateway verify: cannot use database {shown}: "
                f"{type(exc).__name__}: {str(exc).strip()}",
                file=sys.stderr,
            )
            return 2
        counts = [(sid, s.event_count) for sid, s in found.items()]
        show = args.progress if args.progress is not None else len(counts) >= 1000
        progress = Progress(sys.stderr, len(counts), show)
        tally = {"agrees": 0, "disagrees": 0, "invalid": 0, "not-derived": 0}
        rows = done = events = 0
        try:
            for group in _groups(counts):
                stored = await db.read_derivations(group)
                indexed = await db.read_text_index(group)
                for sid in group:
                    if sid not in stored:  # deleted meanwhile
                        continue
                    result = check_session(stored[sid])
                    if result.status in ("agrees", "disagrees") and sid in indexed:
                        wrong = check_index(sid, indexed[sid], with_terms=not db.is_sqlite)
                        result.disagreements.extend(wrong)
                        if wrong:
                            result.status = "disagrees"
                    tally[result.status] += 1
                    events += result.events
                    rows += len(result.disagreements)
                    _report(result, args.max_rows)
                done += len(group)
                progress(done, events)
        except Exception as exc:
            print(
                f"session-gateway verify: reading {shown} failed: "
                f"{type(exc).__name__}: {str(exc).strip()}",
                file=sys.stderr,
            )
            return 2
        progress(done, events, final=True)
        if not args.sessions:
            problem = await db.check_search_index()
            if problem is not None:
                print(f"event_fts  -  index  stored {problem}  expected the index of event_texts")
                tally["disagrees"] += 1
                rows += 1
    finally:
        await db.close()
    print(
        f"{shown}: {done:,} session(s), {events:,} events: {tally['agrees']:,} agree, "
        f"{tally['disagrees']:,} disagree ({rows:,} value(s)), {tally['invalid']:,} invalid, "
        f"{tally['not-derived']:,} not derived"
    )
    return 1 if tally["disagrees"] or tally["invalid"] else 0


async def _verify_quick(db: SqlPersistence, shown: str) -> int:
    """`--quick`: the storage check (`gateway.persistence.storage_check`), reported."""
    from gateway.persistence.errors import SchemaVersionError
    from gateway.persistence.integrity import is_corruption

    started = time.monotonic()
    try:
        await db.ensure_schema()
        report = await db.quick_check()
    except SchemaVersionError as exc:
        print(f"session-gateway verify: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if is_corruption(exc):  # not even the schema could be read: the file is damaged
            print(f"quick_check: the schema cannot be read: {type(exc).__name__}: {exc}")
            print(f"{shown}: quick check: the database is damaged")
            return 1
        print(
            f"session-gateway verify: cannot use database {shown}: "
            f"{type(exc).__name__}: {str(exc).strip()}",
            file=sys.stderr,
        )
        return 2
    for line in report.engine:
        print(f"quick_check: {line}")
    for problem in report.extents:
        print(problem.render())
    verdict = (
        "ok"
        if report.ok
        else (
            f"{len(report.engine):,} storage message(s), "
            f"{len(report.extents):,} session(s) whose rows are not their stored count"
        )
    )
    counted = (
        f"{report.sessions:,} session(s), {report.events:,} events stored"
        if report.counted
        else "the counts could not be read"
    )
    print(
        f"{shown}: quick check ({report.engine_check}; counts against rows): "
        f"{counted}: {verdict} in {time.monotonic() - started:.1f} s"
    )
    return 0 if report.ok else 1


def _report(result: SessionCheck, max_rows: int) -> None:
    if result.status == "invalid":
        print(f"{result.session_id}  INVALID  {result.reason}")
    elif result.status == "not-derived":
        print(f"{result.session_id}  not derived ({result.reason}); readers fold it themselves")
    for row in result.disagreements[:max_rows]:
        print(row.render())
    hidden = len(result.disagreements) - max_rows
    if hidden > 0:
        print(f"{result.session_id}  ... and {hidden:,} more disagreement(s)")


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_verify(args))
