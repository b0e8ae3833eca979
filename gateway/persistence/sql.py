"""`SqlPersistence`: the reference persistence backend on SQLAlchemy 2 (async, Core).

SQLite (aiosqlite) is the embedded default; PostgreSQL (asyncpg) the server
option. Besides the core's `list()` and `load()`, it offers every fast path the
core uses when present (`load_header`, `load_window`, `load_fold_log`) and the
write side: `create`, `append`, `import_log`, `delete`.

Writes:

- `create(header, events=())` stores a new session, optionally with its log,
  in one transaction. The log is validated as a whole with the core's
  `fold_surface` (a gap in the seqs is fold rule 1).
- `append(id, events)` adds a batch atomically. The batch must start at the
  stored log's length and be contiguous (else `NonContiguousAppendError`, a
  ValueError) and must keep the log valid under the fold (else the core's
  `SessionQueryError(SESSION_QUERY_INVALID_SURFACE)`). The fold state is
  rebuilt from the stored *fold columns* of surface events only; payloads are
  read only for the stored `tool/result` events that a replacement in the
  batch rewrites (rule 7). The stored log itself is trusted to be valid: every
  writer here validated it.
- `import_log(header, events, replace=False)` writes a whole log: stored as
  new, recognised as identical (a no-op), refused when a different log is
  stored under the id (`SessionConflictError`), or replaced (delete and insert
  in one transaction) with `replace=True`.

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

Reads: every read is SQLAlchemy Core (no ORM objects) over the primary key
`(session_id, seq)`: `load_window` is a key range, `load_fold_log` reads the
fold columns only, plus the few payloads rule 7 compares (tool/result
replacements and the results they rewrite). Batch variants (`load_headers`,
`load_logs`, `load_fold_logs`, `load_windows`) answer many keys per query, so
the core's per-request coalescing keeps the number of statements flat. Reads
of several statements run in one transaction (REPEATABLE READ on PostgreSQL,
SQLite's snapshot), so a header and its events always match. JSON columns are
read as text and decoded here (the same on both engines), and the cyclic GC
is paused while a long log is fetched and decoded (see `gateway.core.gcpause`).

Inserts use the Core insert of `events`, compiled once per dialect and run
with positional rows in chunks of 5,000.

One `SqlPersistence` belongs to one event loop; `close()` it before the loop ends.
"""

from __future__ import annotations

from .corpus import SqlCorpusReads
from .derived import SqlDerivedReads
from .reads import SqlReads
from .writes import ImportOutcome, SqlWrites


class SqlPersistence(SqlReads, SqlCorpusReads, SqlDerivedReads, SqlWrites):
    """The reference persistence backend (module docstring): SQLite or PostgreSQL.

    `url`: `sqlite+aiosqlite:///path.db`, `postgresql+asyncpg://...` (plain `sqlite:`
    and `postgresql:` are upgraded); default `$SESSION_GATEWAY_DATABASE_URL`, else the
    embedded SQLite file. `auto_migrate`: migrate a fresh or older schema on first use;
    default True for SQLite, False for PostgreSQL (see `gateway.persistence.migrations`).
    Timeouts are in seconds: `connect_timeout` and `statement_timeout` for PostgreSQL
    (`statement_timeout=None` disables it), `busy_timeout` for SQLite locks.
    """


__all__ = ["ImportOutcome", "SqlPersistence"]
