"""`SqlPersistence`: the reference persistence backend on SQLAlchemy 2 (async, Core).

SQLite (aiosqlite) is the embedded default; PostgreSQL (asyncpg) the server
option. Besides the core's `list()` and `load()`, it answers every capability
of `gateway.core.backend` by index: `CorpusReads` (keyset pages, counts,
children, recursive lineage: `corpus.py`) and `DerivedReads` (classified
pages, single events, surfaces and traces from the stored fold: `derived.py`),
`FilterReads` (the filters of SPEC §12 on pages and counts: `filters.py`),
plus `load_header(s)`, `count` and the ranged `load_window` (`reads.py`),
`SearchReads` (ranked phrase search of the stored event texts: `search.py`)
and `TitleReads` (each session's last `session/title` event: `titles.py`).

Writes (`writes.py`) store, in the transaction that writes the events, what
the fold derives from them (each event's class, replacer and surface label,
the citations, the class counts, the event texts with their search index and
the title seq; see `tables.py` and `texts.py`), so reads never refold:

- `create(header, events=())` stores a new session, optionally with its log,
  in one transaction. The log is validated as a whole with the core's fold
  (a gap in the seqs is fold rule 1).
- `append(id, events)` adds a batch atomically. The batch must start at the
  stored log's length and be contiguous (else `NonContiguousAppendError`, a
  ValueError) and must keep the log valid under the fold (else the core's
  `SessionQueryError(SESSION_QUERY_INVALID_SURFACE)`). The fold state is
  rebuilt from the stored *fold columns* of surface events only (payloads
  only for the stored tool/results a replacement in the batch rewrites, rule
  7), and earlier events the batch shadows are marked in the same transaction.
- `import_log(header, events, replace=False)` writes a whole log: stored as
  new, recognised as identical (a no-op), refused when a different log is
  stored under the id (`SessionConflictError`), or replaced (delete and insert
  in one transaction) with `replace=True`. `import_many` does the same for
  many sessions per transaction, each still all or nothing (the bulk import).

Each write is one transaction that first locks the session: `BEGIN IMMEDIATE`
on SQLite, `SELECT ... FOR UPDATE` on the session row on PostgreSQL. Two
concurrent appends at the same seq therefore serialise, and the second gets a
`NonContiguousAppendError`; the `(session_id, seq)` primary key backs this up.

Other errors: `UnknownSessionError` (a KeyError) for a missing id on append,
count and load; `SessionExistsError` (a ValueError) for a duplicate create;
`InvalidEventError` (a ValueError) for a field the schema cannot hold (a
`time` that is not an integer, data that is not JSON, ...); `SchemaVersionError`
when the database's schema is missing or unknown (see `migrations`). Driver
errors (connection refused, timeouts) propagate unchanged; the query core
reports them as `SESSION_QUERY_PERSISTENCE_FAILED`.

Reads of several statements run in one transaction (REPEATABLE READ on
PostgreSQL, SQLite's snapshot). JSON columns are read as text and decoded by
`codec.py` (the same on both engines); a long log is decoded in a worker
thread. `session-gateway verify` refolds stored logs and compares them with
the stored derivations.

Reads also check what they got against what the `sessions` row states (each
log is seqs `0..event_count-1`; `integrity.py`): rows a damaged file or a
deletion behind the writer's back lost raise `StoredDataError` (reported as
PERSISTENCE_FAILED) instead of giving a short answer. `probe_integrity()`
(`base.py`) is the bounded check `/readyz` runs; `quick_check()`
(`storage_check.py`) the whole-database one of `session-gateway verify --quick`.

One `SqlPersistence` belongs to one event loop; `close()` it before the loop ends.
"""

from __future__ import annotations

from .corpus import SqlCorpusReads
from .derived import SqlDerivedReads
from .filters import SqlFilterReads
from .index_check import SqlIndexReads
from .reads import SqlReads
from .search import SqlSearchReads
from .storage_check import SqlStorageChecks
from .titles import SqlTitleReads
from .writes import ImportOutcome, SqlWrites


class SqlPersistence(
    SqlReads,
    SqlCorpusReads,
    SqlDerivedReads,
    SqlFilterReads,
    SqlSearchReads,
    SqlTitleReads,
    SqlIndexReads,
    SqlStorageChecks,
    SqlWrites,
):
    """The reference persistence backend (module docstring): SQLite or PostgreSQL.

    `url`: `sqlite+aiosqlite:///path.db`, `postgresql+asyncpg://...` (plain `sqlite:`
    and `postgresql:` are upgraded); default `$SESSION_GATEWAY_DATABASE_URL`, else the
    embedded SQLite file. `auto_migrate`: migrate a fresh or older schema on first use;
    default True for SQLite, False for PostgreSQL (see `gateway.persistence.migrations`).
    Timeouts are in seconds: `connect_timeout` and `statement_timeout` for PostgreSQL
    (`statement_timeout=None` disables it), `busy_timeout` for SQLite locks;
    `probe_interval` the least time between two runs of a passing integrity probe
    (`probe_integrity`, what `/readyz` runs).
    """


__all__ = ["ImportOutcome", "SqlPersistence"]
