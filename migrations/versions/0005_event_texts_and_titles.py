"""Event texts for full-text search (SPEC §13) and each session's title seq (§14).

Adds `event_texts` (one row per event whose §13 text is not empty) with its
index: on SQLite an external-content FTS5 table `event_fts` (`unicode61`) kept
by triggers, on PostgreSQL the folded tokens in `terms text[]` behind a GIN
index and the function `gateway_phrase_count` (see
`gateway/persistence/texts.py`, which also derives every row, so this backfill
and the writer agree by construction). Adds `sessions.title_seq`, the seq of
the session's last `session/title` event.

The backfill reads the events of the types that can have a text in keyset
batches of `EVENTS_PER_READ` (by primary key), derives their rows in Python and
inserts them; the title seqs are one UPDATE from the events.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from gateway.core.event_text import TEXT_EVENT_TYPES
from gateway.persistence.texts import (
    PG_DDL,
    PG_DROP,
    SQLITE_DDL,
    SQLITE_DROP,
    TITLE_TYPE,
    text_row,
)

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENTS_PER_READ = 5_000
_TYPES = sorted(TEXT_EVENT_TYPES)
_SQLITE_INSERT = sa.text(
    "INSERT INTO event_texts (session_id, seq, type, time, length, text) "
    "VALUES (:session_id, :seq, :type, :time, :length, :text)"
)
_PG_INSERT = sa.text(
    "INSERT INTO event_texts (session_id, seq, type, time, length, text, terms) "
    "VALUES (:session_id, :seq, :type, :time, :length, :text, :terms)"
).bindparams(sa.bindparam("terms", type_=sa.ARRAY(sa.Text())))
_TITLES = sa.text(
    "UPDATE sessions SET title_seq = (SELECT max(e.seq) FROM events e "
    "WHERE e.session_id = sessions.id AND e.type = :title)"
)


def _select(data: str, after: bool) -> sa.TextClause:
    where = "type IN :types"
    if after:
        where += " AND (session_id > :sid OR (session_id = :sid AND seq > :seq))"
    return sa.text(
        f"SELECT session_id, seq, type, time, {data} FROM events WHERE {where} "
        "ORDER BY session_id, seq LIMIT :n"
    ).bindparams(sa.bindparam("types", expanding=True))


def _backfill(bind: sa.Connection, pg: bool) -> None:
    data = "CAST(data AS TEXT)" if pg else "data"
    first, more = _select(data, False), _select(data, True)
    insert = _PG_INSERT if pg else _SQLITE_INSERT
    params: dict[str, object] = {"types": _TYPES, "n": EVENTS_PER_READ}
    statement = first
    while True:
        rows = bind.execute(statement, params).all()
        if not rows:
            return
        out = []
        for sid, seq, etype, time, text in rows:
            row = text_row(sid, int(seq), etype, int(time), json.loads(text), with_terms=pg)
            if row is not None:
                values = row._asdict()
                if not pg:
                    del values["terms"]
                out.append(values)
        if out:
            bind.execute(insert, out)
        params["sid"], params["seq"] = rows[-1][0], rows[-1][1]
        statement = more


def upgrade() -> None:
    bind = op.get_bind()
    pg = bind.dialect.name == "postgresql"
    op.add_column("sessions", sa.Column("title_seq", sa.BigInteger(), nullable=True))
    for statement in PG_DDL if pg else SQLITE_DDL:
        bind.execute(sa.text(statement))
    _backfill(bind, pg)
    bind.execute(_TITLES, {"title": TITLE_TYPE})


def downgrade() -> None:
    bind = op.get_bind()
    pg = bind.dialect.name == "postgresql"
    for statement in PG_DROP if pg else SQLITE_DROP:
        bind.execute(sa.text(statement))
    op.drop_column("sessions", "title_seq")
