"""Initial schema: sessions (headers) and events (append-only logs).

Revision ID: 0001
Revises:
Create Date: 2026-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Exact JSON text: TEXT on SQLite, json (not jsonb) on PostgreSQL; see persistence/tables.py.
JSON_TEXT = sa.Text().with_variant(postgresql.JSON(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("cwd", sa.Text(), nullable=True),
        sa.Column("parent_session", sa.Text(), nullable=True),
        sa.Column("seed_length", sa.BigInteger(), nullable=True),
        sa.Column("origin", sa.Text(), nullable=True),
        sa.Column("delegation_depth", sa.BigInteger(), nullable=True),
        sa.Column("agent_preset", sa.Text(), nullable=True),
        sa.Column("event_count", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
    )
    op.create_index(
        "ix_sessions_newest_first", "sessions", [sa.text("created_at DESC"), "id"], unique=False
    )
    op.create_index("ix_sessions_parent_session", "sessions", ["parent_session"], unique=False)
    op.create_table(
        "events",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.Column("surface_op", JSON_TEXT, nullable=True),
        sa.Column("source_event_seqs", JSON_TEXT, nullable=True),
        sa.Column("ignorable", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("data", JSON_TEXT, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_events_session_id", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("session_id", "seq", name="pk_events"),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("events")
    op.drop_index("ix_sessions_parent_session", table_name="sessions")
    op.drop_index("ix_sessions_newest_first", table_name="sessions")
    op.drop_table("sessions")
