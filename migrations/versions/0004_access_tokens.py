"""Access tokens (SPEC §10): who may call the gateway, and what they may see.

One row per token. The secret itself is never stored: `secret_hash` is its
HMAC-SHA256 under a server-side key that lives outside the database (see
`gateway.persistence.tokens`), so a copy of the database alone neither reveals
a secret nor lets anyone test a guess. `token_id` is the public half of a
token string (`sgw_<token_id>_<secret>`): the row is found by it, then the
secret is compared in constant time. Revoked tokens keep their row (and their
name) so `token list` can show them.

For scoped reads it also adds:

* an index on `sessions.cwd` (on PostgreSQL with `text_pattern_ops`, which
  lets `LIKE 'prefix/%'` use it whatever the database's collation);
* `cwd_stats`, the number of sessions per cwd, kept by triggers like
  `corpus_stats` (0003): a scope made of `cwd:` grants counts its sessions by
  summing the few rows whose cwd matches, not by reading every visible
  session. Trade-off: on PostgreSQL, writers creating sessions in the same cwd
  serialise briefly on its row until they commit.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_SQLITE_TRIGGERS = (
    "CREATE TRIGGER tr_sessions_cwd_insert AFTER INSERT ON sessions "
    "WHEN NEW.cwd IS NOT NULL BEGIN "
    "INSERT INTO cwd_stats (cwd, session_count) VALUES (NEW.cwd, 1) "
    "ON CONFLICT (cwd) DO UPDATE SET session_count = session_count + 1; END",
    "CREATE TRIGGER tr_sessions_cwd_delete AFTER DELETE ON sessions "
    "WHEN OLD.cwd IS NOT NULL BEGIN "
    "UPDATE cwd_stats SET session_count = session_count - 1 WHERE cwd = OLD.cwd; "
    "DELETE FROM cwd_stats WHERE cwd = OLD.cwd AND session_count <= 0; END",
    "CREATE TRIGGER tr_sessions_cwd_update AFTER UPDATE OF cwd ON sessions "
    "WHEN OLD.cwd IS NOT NEW.cwd BEGIN "
    "UPDATE cwd_stats SET session_count = session_count - 1 WHERE cwd = OLD.cwd; "
    "DELETE FROM cwd_stats WHERE cwd = OLD.cwd AND session_count <= 0; "
    "INSERT INTO cwd_stats (cwd, session_count) SELECT NEW.cwd, 1 WHERE NEW.cwd IS NOT NULL "
    "ON CONFLICT (cwd) DO UPDATE SET session_count = session_count + 1; END",
)
_PG_FUNCTIONS = (
    "CREATE FUNCTION gateway_cwd_inserted() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN INSERT INTO cwd_stats (cwd, session_count) "
    "SELECT cwd, count(*) FROM cwd_inserted_rows WHERE cwd IS NOT NULL GROUP BY cwd "
    "ON CONFLICT (cwd) DO UPDATE SET session_count = "
    "cwd_stats.session_count + EXCLUDED.session_count; RETURN NULL; END $$",
    "CREATE FUNCTION gateway_cwd_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN UPDATE cwd_stats c SET session_count = c.session_count - d.n "
    "FROM (SELECT cwd, count(*) AS n FROM cwd_deleted_rows WHERE cwd IS NOT NULL "
    "GROUP BY cwd) d WHERE c.cwd = d.cwd; "
    "DELETE FROM cwd_stats WHERE session_count <= 0; RETURN NULL; END $$",
    "CREATE FUNCTION gateway_cwd_updated() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN IF OLD.cwd IS NOT NULL THEN "
    "UPDATE cwd_stats SET session_count = session_count - 1 WHERE cwd = OLD.cwd; "
    "DELETE FROM cwd_stats WHERE cwd = OLD.cwd AND session_count <= 0; END IF; "
    "IF NEW.cwd IS NOT NULL THEN INSERT INTO cwd_stats (cwd, session_count) "
    "VALUES (NEW.cwd, 1) ON CONFLICT (cwd) DO UPDATE SET "
    "session_count = cwd_stats.session_count + 1; END IF; RETURN NULL; END $$",
)
_PG_TRIGGERS = (
    "CREATE TRIGGER tr_sessions_cwd_insert AFTER INSERT ON sessions "
    "REFERENCING NEW TABLE AS cwd_inserted_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION gateway_cwd_inserted()",
    "CREATE TRIGGER tr_sessions_cwd_delete AFTER DELETE ON sessions "
    "REFERENCING OLD TABLE AS cwd_deleted_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION gateway_cwd_deleted()",
    "CREATE TRIGGER tr_sessions_cwd_update AFTER UPDATE OF cwd ON sessions "
    "FOR EACH ROW WHEN (OLD.cwd IS DISTINCT FROM NEW.cwd) "
    "EXECUTE FUNCTION gateway_cwd_updated()",
)


def upgrade() -> None:
    op.create_table(
        "access_tokens",
        sa.Column("token_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.Text(), nullable=False),
        sa.Column("grants", sa.Text(), nullable=False),
        sa.Column(
            "trusted_documents_only", sa.Boolean(), nullable=False, server_default=sa.false()
        ),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=True),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.Column("last_used_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("token_id", name="pk_access_tokens"),
        sa.UniqueConstraint("name", name="uq_access_tokens_name"),
    )

    op.create_index(
        "ix_sessions_cwd", "sessions", ["cwd"], postgresql_ops={"cwd": "text_pattern_ops"}
    )
    op.create_table(
        "cwd_stats",
        sa.Column("cwd", sa.Text(), nullable=False),
        sa.Column("session_count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("cwd", name="pk_cwd_stats"),
    )
    op.create_index(
        "ix_cwd_stats_pattern", "cwd_stats", ["cwd"], postgresql_ops={"cwd": "text_pattern_ops"}
    )
    bind = op.get_bind()
    bind.execute(
        sa.text(
            "INSERT INTO cwd_stats (cwd, session_count) "
            "SELECT cwd, count(*) FROM sessions WHERE cwd IS NOT NULL GROUP BY cwd"
        )
    )
    statements = (
        _SQLITE_TRIGGERS if bind.dialect.name == "sqlite" else (*_PG_FUNCTIONS, *_PG_TRIGGERS)
    )
    for statement in statements:
        bind.execute(sa.text(statement))


def downgrade() -> None:
    bind = op.get_bind()
    for name in ("tr_sessions_cwd_insert", "tr_sessions_cwd_delete", "tr_sessions_cwd_update"):
        on = "" if bind.dialect.name == "sqlite" else " ON sessions"
        bind.execute(sa.text(f"DROP TRIGGER IF EXISTS {name}{on}"))
    if bind.dialect.name != "sqlite":
        for name in ("gateway_cwd_inserted", "gateway_cwd_deleted", "gateway_cwd_updated"):
            bind.execute(sa.text(f"DROP FUNCTION IF EXISTS {name}()"))
    op.drop_index("ix_cwd_stats_pattern", table_name="cwd_stats")
    op.drop_table("cwd_stats")
    op.drop_index("ix_sessions_cwd", table_name="sessions")
    op.drop_table("access_tokens")
