"""The number of stored sessions, kept by triggers: `totalCount` without a scan.

`count(*)` over `sessions` walks a whole index on both engines (about 4 ms at
a million sessions on SQLite, more on PostgreSQL), so a page's `totalCount`
grew with the corpus. `corpus_stats` holds one row whose `session_count` the
database itself keeps right on every insert and delete of a session, whoever
writes (our writers, a test, an operator's SQL). On PostgreSQL the triggers
are per statement with transition tables (one update per bulk insert); on
SQLite, which has only row triggers, per row.

Trade-off: concurrent writers that create or delete sessions on PostgreSQL
serialise briefly on that one row until they commit.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_TRIGGERS = (
    "CREATE TRIGGER tr_sessions_count_insert AFTER INSERT ON sessions BEGIN "
    "UPDATE corpus_stats SET session_count = session_count + 1 WHERE id = 1; END",
    "CREATE TRIGGER tr_sessions_count_delete AFTER DELETE ON sessions BEGIN "
    "UPDATE corpus_stats SET session_count = session_count - 1 WHERE id = 1; END",
)
_PG_FUNCTIONS = (
    "CREATE FUNCTION gateway_sessions_inserted() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN UPDATE corpus_stats SET session_count = session_count + "
    "(SELECT count(*) FROM inserted_rows) WHERE id = 1; RETURN NULL; END $$",
    "CREATE FUNCTION gateway_sessions_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN UPDATE corpus_stats SET session_count = session_count - "
    "(SELECT count(*) FROM deleted_rows) WHERE id = 1; RETURN NULL; END $$",
)
_PG_TRIGGERS = (
    "CREATE TRIGGER tr_sessions_count_insert AFTER INSERT ON sessions "
    "REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION gateway_sessions_inserted()",
    "CREATE TRIGGER tr_sessions_count_delete AFTER DELETE ON sessions "
    "REFERENCING OLD TABLE AS deleted_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION gateway_sessions_deleted()",
)


def upgrade() -> None:
    op.create_table(
        "corpus_stats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_count", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_corpus_stats_one_row"),
        sa.PrimaryKeyConstraint("id", name="pk_corpus_stats"),
    )
    bind = op.get_bind()
    bind.execute(
        sa.text("INSERT INTO corpus_stats (id, session_count) SELECT 1, count(*) FROM sessions")
    )
    statements = (
        _SQLITE_TRIGGERS if bind.dialect.name == "sqlite" else (*_PG_FUNCTIONS, *_PG_TRIGGERS)
    )
    for statement in statements:
        bind.execute(sa.text(statement))


def downgrade() -> None:
    bind = op.get_bind()
    for name in ("tr_sessions_count_insert", "tr_sessions_count_delete"):
        on = "" if bind.dialect.name == "sqlite" else " ON sessions"
        bind.execute(sa.text(f"DROP TRIGGER IF EXISTS {name}{on}"))
    if bind.dialect.name != "sqlite":
        for name in ("gateway_sessions_inserted", "gateway_sessions_deleted"):
            bind.execute(sa.text(f"DROP FUNCTION IF EXISTS {name}()"))
    op.drop_table("corpus_stats")
