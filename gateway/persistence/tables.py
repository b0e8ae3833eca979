"""The schema as SQLAlchemy Core tables (the migrations in `migrations/` create it).

`sessions`: one row per session, every header field in its own column (epoch
ms as BIGINT, absent optional fields as SQL NULL), plus `event_count`, the
stored log's length (= the next seq), which `append` checks and advances in
the same transaction as its inserts. Indexed for newest-first order
(`created_at DESC, id`) and by parent id (lineage).

`sessions` also keeps what the writer derived from the fold, in the same
transaction as the events (SPEC §3a): `current_count` and `shadowed_count`
(log-only is the rest), and `derived_count`, how many leading events carry
their derivations. A reader trusts the stored derivations only when
`derived_count == event_count`; otherwise (a log written by other means) it
folds the log itself.

`events`: primary key `(session_id, seq)`, so a window is a primary-key range
scan and two writers can never both store one seq. On SQLite the table is
WITHOUT ROWID, clustered by that key: a session's events sit together even
when many sessions append in turn. The small fold columns come first and
`data` last, so reading the fold columns never walks a large payload's
overflow pages.

JSON columns hold the exact JSON text: TEXT on SQLite, `json` on PostgreSQL.
Not `jsonb`: jsonb refuses `\\u0000` in strings (two artifacts of the real
corpus hold it) and lone surrogates, re-orders keys and prints a float such as
`1e300` back as an integer. Nothing queries inside payloads, so jsonb's
indexing would buy nothing here. A `data` of JSON `null` is stored as the text
`null`, never SQL NULL (the column is NOT NULL); `surface_op` and
`source_event_seqs` are SQL NULL when absent.

Derivations per event (SQL NULL until derived): `surface` (0 LOG_ONLY,
1 CURRENT, 2 SHADOWED, see `gateway.core.backend`), `replaced_by` (the
immediate replacer of a shadowed event) and `surface_label`, the fold's order
label of a surface event: labels strictly increase along the surface at every
moment and never change, so `ORDER BY surface_label` gives the current surface
in model order and the nodes one replacement removed in their surface order.

`citations`: one row per (cited seq, citing seq) of a session: the reverse of
`source_event_seqs`, so "who cites this event" is a key range.

`sessions.title_seq` (migration 0005) is the seq of the session's last
`session/title` event (NULL: none), advanced by the writer with the events, so
a page of titles is one join by primary key (SPEC §14).

`event_texts` (migration 0005): one row per event whose §13 text is not empty,
with its type, time and length, written with the events; on SQLite it is the
external content of the FTS5 table `event_fts`, on PostgreSQL it holds the
tokens (`terms`) behind a GIN index. See `gateway.persistence.texts`.

`corpus_stats`: one row whose `session_count` triggers (migration 0003) keep
equal to the number of `sessions` rows, so a corpus count is one read.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    column,
    false,
    table,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import TypeDecorator, TypeEngine, UserDefinedType

from gateway.core.model import HEADER_FIELDS

from .engine import dumps_json, loads_json


class PgJsonText(UserDefinedType[Any]):
    """PostgreSQL `json` bound and read as text-encoded JSON with no SQLAlchemy processing.

    The asyncpg dialect's `json` codec decodes results; binds are JSON text made by
    `JsonText`.
    """

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "JSON"


class JsonText(TypeDecorator[Any]):
    """A JSON value stored as its exact text (TEXT on SQLite, json on PostgreSQL).

    With `none_as_null`, Python None is SQL NULL (an absent field); without it,
    None is the JSON text `null`.
    """

    impl = Text
    cache_ok = True

    def __init__(self, none_as_null: bool = False) -> None:
        super().__init__()
        self.none_as_null = none_as_null

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(PgJsonText())
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None if self.none_as_null else "null"
        return dumps_json(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value  # SQL NULL, or already decoded by the asyncpg json codec
        return loads_json(value)


metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("id", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("cwd", Text),
    Column("parent_session", Text),
    Column("seed_length", BigInteger),
    Column("origin", Text),
    Column("delegation_depth", BigInteger),
    Column("agent_preset", Text),
    Column("event_count", BigInteger, nullable=False, server_default=text("0")),
    Column("current_count", BigInteger, nullable=False, server_default=text("0")),
    Column("shadowed_count", BigInteger, nullable=False, server_default=text("0")),
    Column("derived_count", BigInteger, nullable=False, server_default=text("0")),
    Column("title_seq", BigInteger),
    PrimaryKeyConstraint("id", name="pk_sessions"),
)
Index("ix_sessions_newest_first", sessions.c.created_at.desc(), sessions.c.id)
Index("ix_sessions_parent_session", sessions.c.parent_session)
Index("ix_sessions_cwd", sessions.c.cwd, postgresql_ops={"cwd": "text_pattern_ops"})

events = Table(
    "events",
    metadata,
    Column(
        "session_id",
        Text,
        ForeignKey("sessions.id", ondelete="CASCADE", name="fk_events_session_id"),
        nullable=False,
    ),
    Column("seq", BigInteger, nullable=False),
    Column("type", Text, nullable=False),
    Column("time", BigInteger, nullable=False),
    Column("surface_op", JsonText(none_as_null=True)),
    Column("source_event_seqs", JsonText(none_as_null=True)),
    Column("ignorable", Boolean, nullable=False, server_default=false()),
    Column("surface", SmallInteger),
    Column("replaced_by", BigInteger),
    Column("surface_label", BigInteger),
    Column("data", JsonText(), nullable=False),
    PrimaryKeyConstraint("session_id", "seq", name="pk_events"),
    sqlite_with_rowid=False,
)
Index("ix_events_surface_seq", events.c.session_id, events.c.surface, events.c.seq)
Index("ix_events_surface_label", events.c.session_id, events.c.surface, events.c.surface_label)
Index(
    "ix_events_replaced_by",
    events.c.session_id,
    events.c.replaced_by,
    events.c.surface_label,
    sqlite_where=events.c.replaced_by.is_not(None),
    postgresql_where=events.c.replaced_by.is_not(None),
)

citations = Table(
    "citations",
    metadata,
    Column(
        "session_id",
        Text,
        ForeignKey("sessions.id", ondelete="CASCADE", name="fk_citations_session_id"),
        nullable=False,
    ),
    Column("seq", BigInteger, nullable=False),
    Column("cited_by", BigInteger, nullable=False),
    PrimaryKeyConstraint("session_id", "seq", "cited_by", name="pk_citations"),
    sqlite_with_rowid=False,
)

event_texts = Table(
    "event_texts",
    metadata,
    Column("id", Integer),
    Column("session_id", Text, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("type", Text, nullable=False),
    Column("time", BigInteger, nullable=False),
    Column("length", BigInteger, nullable=False),
    Column("text", Text, nullable=False),
    Column("terms", ARRAY(Text)),
)
"""The indexed text of each event that has one (SPEC §13; `gateway.persistence.texts`).

The migration creates it per engine: on SQLite `id` is its INTEGER PRIMARY KEY
(the FTS5 rowid) with `(session_id, seq)` unique, and there is no `terms`; on
PostgreSQL the key is `(session_id, seq)`, there is no `id`, and `terms` holds
the folded tokens behind a GIN index. Rows go with their session (ON DELETE
CASCADE, and deleted explicitly by the writer)."""

event_fts = table("event_fts", column("rowid", Integer), column("text", Text))
"""SQLite only: the FTS5 index (`unicode61`) whose content is `event_texts`."""

HEADER_COLUMNS: tuple[str, ...] = HEADER_FIELDS
"""The `sessions` columns that hold header fields (SessionHeader attribute names)."""

corpus_stats = Table(
    "corpus_stats",
    metadata,
    Column("id", Integer, nullable=False),
    Column("session_count", BigInteger, nullable=False),
    CheckConstraint("id = 1", name="ck_corpus_stats_one_row"),
    PrimaryKeyConstraint("id", name="pk_corpus_stats"),
)

cwd_stats = Table(
    "cwd_stats",
    metadata,
    Column("cwd", Text, nullable=False),
    Column("session_count", BigInteger, nullable=False),
    PrimaryKeyConstraint("cwd", name="pk_cwd_stats"),
)
"""Sessions per cwd, kept by triggers (migration 0004): counts of `cwd:` scopes."""
Index("ix_cwd_stats_pattern", cwd_stats.c.cwd, postgresql_ops={"cwd": "text_pattern_ops"})

access_tokens = Table(
    "access_tokens",
    metadata,
    Column("token_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("secret_hash", Text, nullable=False),
    Column("grants", Text, nullable=False),
    Column("trusted_documents_only", Boolean, nullable=False, server_default=false()),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger),
    Column("revoked_at", BigInteger),
    Column("last_used_at", BigInteger),
    PrimaryKeyConstraint("token_id", name="pk_access_tokens"),
    UniqueConstraint("name", name="uq_access_tokens_name"),
)
"""Access tokens (migration 0004, SPEC §10); secrets stored only as keyed hashes."""
