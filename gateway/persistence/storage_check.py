"""`quick_check()`: the storage check behind `session-gateway verify --quick`.

Where `verify` refolds every stored log (minutes on a big database), this asks
only whether the database holds what it states, in seconds:

- on SQLite, `PRAGMA quick_check`: every b-tree page of the file well formed
  and used once (not the cross-check of indexes against tables that
  `integrity_check` adds);
- for every session, on both engines, its stored `event_count` against its
  rows read through the table (the number of rows, the lowest and highest
  seq: a log is seqs `0..event_count-1`), and the number of rows its index
  entries count (a table row lost behind an intact index is what SQLite skips
  silently on a filtered read).

A read the engine refuses because the file is damaged (`is_corruption`) is
reported as a problem too; any other failure raises.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field

from sqlalchemy import func, select, text

from .base import SqlBase
from .errors import describe_failure
from .integrity import is_corruption
from .tables import events, sessions

MAX_ENGINE_MESSAGES = 100
"""Lines of `PRAGMA quick_check` output kept (it can name every page of a big file)."""

_SELECT_COUNTS = select(sessions.c.id, sessions.c.event_count)
_TABLE_EXTENTS = select(
    events.c.session_id,
    func.count(events.c.time),  # `time` is in no index: the rows of the table itself
    func.min(events.c.seq),
    func.max(events.c.seq),
).group_by(events.c.session_id)
_INDEX_COUNTS = select(events.c.session_id, func.count()).group_by(events.c.session_id)


@dataclass(frozen=True, slots=True)
class ExtentProblem:
    """A session whose rows are not the log its `sessions` row states."""

    session_id: str
    stored: int | None
    """Its `event_count`; None when there is no `sessions` row for the rows."""
    rows: int
    first: int | None
    last: int | None
    indexed: int | None
    """Rows its index entries count (None: not read, or as many as the table's)."""

    def render(self) -> str:
        seqs = "no rows" if self.first is None else f"seqs {self.first}..{self.last}"
        stored = "no sessions row" if self.stored is None else f"{self.stored} events"
        shown = f"{self.session_id}  EVENTS  stored {stored}  found {self.rows} row(s), {seqs}"
        if self.indexed is not None:
            shown += f"; the index counts {self.indexed}"
        return shown


@dataclass(slots=True)
class QuickReport:
    """What `quick_check()` found; `ok` when nothing."""

    engine_check: str
    """What the engine's own check was (`PRAGMA quick_check`, or none on PostgreSQL)."""
    sessions: int = 0
    events: int = 0
    engine: builtins.list[str] = field(default_factory=builtins.list)
    """The engine check's messages and reads it refused (empty: passed)."""
    extents: builtins.list[ExtentProblem] = field(default_factory=builtins.list)
    counted: bool = False
    """Whether the counts could be read and compared at all (the file may refuse it)."""

    @property
    def ok(self) -> bool:
        return not self.engine and not self.extents


class SqlStorageChecks(SqlBase):
    """The storage check of `verify --quick` (module docstring)."""

    async def quick_check(self) -> QuickReport:
        """Check the file's pages (SQLite) and every session's rows against its count."""
        report = QuickReport("PRAGMA quick_check" if self.is_sqlite else "none (PostgreSQL)")
        if self.is_sqlite:
            try:
                async with self._reading() as conn:
                    result = await conn.execute(text("PRAGMA quick_check"))
                    lines = [line for row in result for line in str(row[0]).splitlines()]
            except Exception as exc:
                if not is_corruption(exc):
                    raise
                lines = [f"PRAGMA quick_check failed: {describe_failure(exc)}"]
            if lines != ["ok"]:
                kept = lines[:MAX_ENGINE_MESSAGES]
                if len(lines) > len(kept):
                    kept.append(f"... and {len(lines) - len(kept):,} more line(s)")
                report.engine.extend(kept)
        try:
            async with self._reading() as conn:
                stored = {str(sid): int(n) for sid, n in await conn.execute(_SELECT_COUNTS)}
                table = {
                    str(sid): (int(n), first, last)
                    for sid, n, first, last in await conn.execute(_TABLE_EXTENTS)
                }
                indexed = {str(sid): int(n) for sid, n in await conn.execute(_INDEX_COUNTS)}
        except Exception as exc:
            if not is_corruption(exc):
                raise
            report.engine.append(f"reading the session counts failed: {describe_failure(exc)}")
            return report
        report.sessions, report.events = len(stored), sum(stored.values())
        report.counted = True
        for sid in sorted(stored.keys() | table.keys()):
            want = stored.get(sid)
            rows, first, last = table.get(sid, (0, None, None))
            in_index = indexed.get(sid, 0)
            whole = rows == want and (rows == 0 or (first == 0 and last == rows - 1))
            if not whole or in_index != rows:
                shown_index = None if in_index == rows else in_index
                report.extents.append(ExtentProblem(sid, want, rows, first, last, shown_index))
        return report
