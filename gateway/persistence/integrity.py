"""What a read got, checked against what the database says exists (issue 20, point 4).

A session's `sessions` row states its log: `event_count` events, seqs
`0..event_count-1` with no gap (the writer checks and advances it with the
inserts), and, when derived, its class counts. A damaged file can lose rows
without any error from the engine: a b-tree page whose cell count was
overwritten hides its other cells, and SQLite silently skips a row an intact
index names but the damaged table no longer holds. A read that believed what
it got would answer short (a last page with `hasNextPage: false` while
`totalCount` says more, a replay that "completes" early).

So every ranged read checks its rows against that statement, on rows it
already holds and counts the same read transaction read (no extra query):

- a range of every class (`check_run`): exactly the seqs `lo..hi` clipped to
  the stored log, the first `limit` of them: an early end or a gap is damage;
- a range of some classes (`check_ascending`): ascending inside the range; and
  when it covers the whole log and came back whole, as many rows as the stored
  class counts say (`check_class_total`). Such a read goes through the class
  index, so `derived.py` also compares it with the seqs the index alone names
  (index-only, the page's size), and on the last page of a listing counts the
  index entries before it against the class count (the one check that costs
  more than its page). A read narrowed by time or type (SPEC §12) is only
  checked for order: nothing states how many rows it should find;
- a surface: as many rows as the stored CURRENT count;
- a whole log (`check_run` from 0): `event_count` rows; a single event below
  the count must be found.

A failed check raises `StoredDataError` (reported as PERSISTENCE_FAILED, the log
naming the session, the seqs expected and what was read). `is_corruption`
tells a driver's "the file is damaged" error from an ordinary failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import StoredDataError

_SQLITE_CORRUPT = 11
_PG_CORRUPT_STATES = frozenset({"XX001", "XX002"})
"""PostgreSQL's data_corrupted and index_corrupted."""


@dataclass(frozen=True, slots=True)
class StoredExtent:
    """What a session's `sessions` row states about its log, as one read saw it."""

    event_count: int
    current_count: int = 0
    shadowed_count: int = 0
    derived_count: int = 0

    @property
    def derived(self) -> bool:
        """Whether the class counts cover the whole log (else they say nothing)."""
        return self.derived_count == self.event_count

    def class_count(self, codes: frozenset[int]) -> int:
        """Stored events of these class codes (0 LOG_ONLY, 1 CURRENT, 2 SHADOWED)."""
        by_code = (
            self.event_count - self.current_count - self.shadowed_count,
            self.current_count,
            self.shadowed_count,
        )
        return sum(by_code[c] for c in codes if 0 <= c <= 2)


def _span(lo: int, hi: int) -> str:
    return f"seqs {lo}..{hi}" if lo <= hi else "no seqs"


def _first_wrong(seqs: Sequence[int], start: int) -> str:
    """Where `seqs` first leaves the run start, start+1, ...: a gap, or the early end."""
    expected = start
    for seq in seqs:
        if seq != expected:
            before = f"after seq {expected - 1} " if expected > start else ""
            return f"seq {expected} is missing ({before}the next row read is seq {seq})"
        expected += 1
    return f"the rows end at seq {expected - 1}" if seqs else "no row was read"


def check_run(
    session_id: str,
    seqs: Sequence[int],
    lo: int,
    hi: int,
    extent: StoredExtent,
    limit: int | None = None,
    *,
    what: str = "a read",
) -> None:
    """`seqs` must be exactly `lo..hi` clipped to the stored log (its first `limit`)."""
    start = max(lo, 0)
    end = min(hi, extent.event_count - 1)
    want = max(end - start + 1, 0)
    if limit is not None:
        want = min(want, max(limit, 0))
    n = len(seqs)
    if n == want and list(seqs) == list(range(start, start + n)):  # the run, in C
        return
    raise StoredDataError(
        session_id,
        f"the session stores {extent.event_count} events; {what} of {_span(start, end)} "
        f"expected {want} row(s) and read {n}: {_first_wrong(seqs, start)}",
    )


def check_ascending(
    session_id: str, seqs: Sequence[int], lo: int, hi: int, *, what: str = "a read"
) -> None:
    """`seqs` (a read of some classes only) must ascend strictly inside `lo..hi`."""
    previous = lo - 1
    for seq in seqs:
        if not previous < seq <= hi:
            raise StoredDataError(
                session_id,
                f"{what} of {_span(lo, hi)} read seq {seq} after seq {previous}: "
                "rows out of range or out of order",
            )
        previous = seq


def check_class_total(
    session_id: str, found: int, codes: frozenset[int], extent: StoredExtent, *, what: str
) -> None:
    """A read of every event of these classes must hold as many as the stored counts say
    (checked only when the counts are derived: they say nothing otherwise)."""
    if not extent.derived:
        return
    want = extent.class_count(codes)
    if found != want:
        raise StoredDataError(
            session_id,
            f"the session stores {want} event(s) of the classes read "
            f"({extent.event_count} in all); {what} read {found}",
        )


def is_corruption(exc: BaseException) -> bool:
    """Whether a driver error (or one it caused) says the stored data is damaged:
    SQLite's SQLITE_CORRUPT ("database disk image is malformed"), PostgreSQL's
    data_corrupted / index_corrupted. Not SQLite's "file is not a database": that
    file cannot be used at all (the path names another file, or its header is
    gone), which readers and `/readyz` report as an unusable database."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        code = getattr(seen, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF == _SQLITE_CORRUPT:
            return True
        if getattr(seen, "sqlstate", None) in _PG_CORRUPT_STATES:
            return True
        inner = getattr(seen, "orig", None)
        seen = inner if isinstance(inner, BaseException) else seen.__cause__
    return False
