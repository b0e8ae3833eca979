"""Access tokens (SPEC §10): who may call the gateway, and what they may see.

One row per token. The secret itself is never stored: `secret_hash` is its
HMAC-SHA256 under a server-side key that lives outside the database (see
`gateway.persistence.tokens`), so a copy of the database alone neither reveals
a secret nor lets anyone test a guess. `token_id` is the public half of a
token string (`sgw_<token_id>_<secret>`): the row is found by it, then the
secret is compared in constant time. Revoked tokens keep their row (and their
name) so `token list` can show them.

The migration also indexes `sessions.cwd`, so a `cwd:` grant's page and count
read an index range instead of every row (on PostgreSQL with
`text_pattern_ops`, which lets `LIKE 'prefix/%'` use it whatever the
database's collation).

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


def downgrade() -> None:
    op.drop_index("ix_sessions_cwd", table_name="sessions")
    op.drop_table("access_tokens")
