"""Stored fold derivations: per-event class, replacer and order label; citations; counts.

Adds `sessions.current_count/shadowed_count/derived_count`, `events.surface/
replaced_by/surface_label`, the table `citations` and the indexes that read
them (see `gateway/persistence/tables.py`), then derives them for every stored
log with the canonical fold (`gateway.core.fold.SurfaceFold`). A stored log
the fold rejects keeps `derived_count = 0` (readers fold it themselves and
report the rule it breaks).

On SQLite `events` is rebuilt so that `data` stays its last column (a payload
column before the small ones would make every small read walk overflow
pages): the derivations are computed into a temporary table first, then the
rows are copied once, joined with them. On PostgreSQL the columns are added
and filled by one UPDATE joined with the same temporary table.

SQLite also gets planner statistics for `events` and `citations` in
`sqlite_stat1`, describing a typical database (many events per session).
Without any, SQLite's planner prefers the primary key range over the
derivation indexes for reads that need other columns, and so scans a whole
session to find a page of one class. A later `ANALYZE` replaces them with
measured ones.

Revision ID: 0002
Revises: 0001
Create Date: 2026-02-01
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any, NamedTuple

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from gateway.core.errors import SessionQueryError
from gateway.core.fold import SurfaceFold

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Exact JSON text: TEXT on SQLite, json (not jsonb) on PostgreSQL; see persistence/tables.py.
JSON_TEXT = sa.Text().with_variant(postgresql.JSON(), "postgresql")

COUNT_COLUMNS = ("current_count", "shadowed_count", "derived_count")
TEMP = "_backfill_derivations"
SESSIONS_PER_READ = 500
EVENTS_PER_READ = 50_000
ROWS_PER_WRITE = 10_000
TOOL_RESULT = "tool/result"
SQLITE_STATS = (  # (table, index, stat): rows, then rows per distinct index prefix
    ("events", "events", "1000000 1000 1"),
    ("events", "ix_events_surface_seq", "1000000 1000 400 1"),
    ("events", "ix_events_surface_label", "1000000 1000 400 1"),
    ("events", "ix_events_replaced_by", "100000 1000 1 1"),
    ("citations", "citations", "200000 1000 2 1"),
)

_events = sa.table(
    "events",
    sa.column("session_id"),
    sa.column("seq"),
    sa.column("type"),
    sa.column("surface_op"),
    sa.column("source_event_seqs"),
    sa.column("data"),
)
_temp = sa.table(
    TEMP,
    sa.column("session_id"),
    sa.column("seq"),
    sa.column("surface"),
    sa.column("replaced_by"),
    sa.column("surface_label"),
)
_citations = sa.table("citations", sa.column("session_id"), sa.column("seq"), sa.column("cited_by"))
_IDS = sa.bindparam("ids", expanding=True)
_SELECT_FOLD = (
    sa.select(
        _events.c.session_id,
        _events.c.seq,
        _events.c.type,
        sa.cast(_events.c.surface_op, sa.Text),
        sa.cast(_events.c.source_event_seqs, sa.Text),
    )
    .where(_events.c.session_id.in_(_IDS))
    .order_by(_events.c.session_id, _events.c.seq)
)
_sessions = sa.table(
    "sessions",
    sa.column("id"),
    sa.column("current_count"),
    sa.column("shadowed_count"),
    sa.column("derived_count"),
)
_UPDATE_COUNTS = (
    _sessions.update()
    .where(_sessions.c.id == sa.bindparam("sid"))
    .values(
        current_count=sa.bindparam("current"),
        shadowed_count=sa.bindparam("shadowed"),
        derived_count=sa.bindparam("derived"),
    )
)


class _Event(NamedTuple):
    """What the fold reads of a stored event (data only where rule 7 compares it)."""

    type: str
    seq: int
    data: Any
    surface_op: Any
    source_event_seqs: Any


def _derivation_columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("surface", sa.SmallInteger(), nullable=True),
        sa.Column("replaced_by", sa.BigInteger(), nullable=True),
        sa.Column("surface_label", sa.BigInteger(), nullable=True),
    ]


def upgrade() -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    for name in COUNT_COLUMNS:
        op.add_column(
            "sessions",
            sa.Column(name, sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        )
    op.create_table(
        "citations",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("cited_by", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_citations_session_id", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("session_id", "seq", "cited_by", name="pk_citations"),
        sqlite_with_rowid=False,
    )
    bind.execute(
        sa.text(
            f"CREATE TEMPORARY TABLE {TEMP} (session_id TEXT NOT NULL, seq BIGINT NOT NULL, "
            "surface SMALLINT NOT NULL, replaced_by BIGINT, surface_label BIGINT, "
            "PRIMARY KEY (session_id, seq))" + (" WITHOUT ROWID" if sqlite else "")
        )
    )
    counts = _derive_every_log(bind)
    if sqlite:
        _rebuild_sqlite_events()
    else:
        for column in _derivation_columns():
            op.add_column("events", column)
        bind.execute(
            sa.text(
                f"UPDATE events AS e SET surface = d.surface, replaced_by = d.replaced_by, "
                f"surface_label = d.surface_label FROM {TEMP} AS d "
                "WHERE e.session_id = d.session_id AND e.seq = d.seq"
            )
        )
    bind.execute(sa.text(f"DROP TABLE {TEMP}"))
    update = _Writer(bind, _UPDATE_COUNTS)
    for row in counts:
        update.add(row)
    update.flush()
    op.create_index(
        "ix_events_surface_seq", "events", ["session_id", "surface", "seq"], unique=False
    )
    op.create_index("ix_events_surface_label", "events", ["session_id", "surface", "surface_label"])
    op.create_index(
        "ix_events_replaced_by",
        "events",
        ["session_id", "replaced_by", "surface_label"],
        unique=False,
        sqlite_where=sa.text("replaced_by IS NOT NULL"),
        postgresql_where=sa.text("replaced_by IS NOT NULL"),
    )
    if sqlite:
        _seed_sqlite_stats(bind)


def _seed_sqlite_stats(bind: sa.Connection) -> None:
    """Planner statistics for the derivation indexes (module docstring)."""
    bind.execute(sa.text("ANALYZE alembic_version"))  # creates sqlite_stat1 if missing
    bind.execute(sa.text("DELETE FROM sqlite_stat1 WHERE tbl IN ('events', 'citations')"))
    bind.execute(
        sa.text("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (:tbl, :idx, :stat)"),
        [{"tbl": tbl, "idx": idx, "stat": stat} for tbl, idx, stat in SQLITE_STATS],
    )
    bind.execute(sa.text("ANALYZE sqlite_master"))  # reload them on this connection


def _rebuild_sqlite_events() -> None:
    """Recreate `events` with the derivation columns before `data`, filled from TEMP."""
    op.create_table(
        "_events_0002",
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("time", sa.BigInteger(), nullable=False),
        sa.Column("surface_op", JSON_TEXT, nullable=True),
        sa.Column("source_event_seqs", JSON_TEXT, nullable=True),
        sa.Column("ignorable", sa.Boolean(), server_default=sa.false(), nullable=False),
        *_derivation_columns(),
        sa.Column("data", JSON_TEXT, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name="fk_events_session_id", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("session_id", "seq", name="pk_events"),
        sqlite_with_rowid=False,
    )
    op.execute(
        "INSERT INTO _events_0002 (session_id, seq, type, time, surface_op, source_event_seqs, "
        "ignorable, surface, replaced_by, surface_label, data) "
        "SELECT e.session_id, e.seq, e.type, e.time, e.surface_op, e.source_event_seqs, "
        "e.ignorable, d.surface, d.replaced_by, d.surface_label, e.data "
        f"FROM events AS e LEFT JOIN {TEMP} AS d "
        "ON d.session_id = e.session_id AND d.seq = e.seq "
        "ORDER BY e.session_id, e.seq"
    )
    op.drop_table("events")
    op.rename_table("_events_0002", "events")


def _session_groups(bind: sa.Connection) -> Iterator[list[tuple[str, int]]]:
    """Stored sessions as (id, event_count), in groups read by one query each."""
    group: list[tuple[str, int]] = []
    events = 0
    for sid, count in bind.execute(sa.text("SELECT id, event_count FROM sessions ORDER BY id")):
        if group and (len(group) >= SESSIONS_PER_READ or events + count > EVENTS_PER_READ):
            yield group
            group, events = [], 0
        group.append((sid, int(count)))
        events += int(count)
    if group:
        yield group


class _Writer:
    """Positional executemany of a Core insert compiled once for the connection's dialect
    (per-row parameter processing would cost more than the rows themselves)."""

    def __init__(self, bind: sa.Connection, statement: Any) -> None:
        compiled = statement.compile(dialect=bind.dialect)
        self.bind, self.sql = bind, str(compiled)
        self.order = tuple(compiled.positiontup or ())
        self.rows: list[tuple[Any, ...]] = []

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(tuple(row[name] for name in self.order))
        if len(self.rows) >= ROWS_PER_WRITE:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.bind.exec_driver_sql(self.sql, self.rows)
            self.rows = []


def _insert(table: Any, *names: str) -> Any:
    return table.insert().values({name: sa.bindparam(name) for name in names})


def _derive_every_log(bind: sa.Connection) -> list[dict[str, Any]]:
    """Fold every stored log; write derivations to TEMP and citations; return the counts."""
    counts: list[dict[str, Any]] = []
    derived = _Writer(
        bind, _insert(_temp, "session_id", "seq", "surface", "replaced_by", "surface_label")
    )
    cited = _Writer(bind, _insert(_citations, "session_id", "seq", "cited_by"))
    for group in _session_groups(bind):
        expected = dict(group)
        rows = bind.execute(_SELECT_FOLD, {"ids": list(expected)}).all()
        logs: dict[str, list[_Event]] = {}
        for sid, session_rows in groupby(rows, key=itemgetter(0)):
            logs[sid] = [
                _Event(
                    etype,
                    seq,
                    None,
                    None if op_text is None else _load_op(op_text),
                    None if src is None else _load_sources(src),
                )
                for _, seq, etype, op_text, src in session_rows
            ]
        del rows
        _fill_payloads(bind, logs)
        for sid, log in logs.items():
            fold = _fold(log, expected[sid])
            if fold is None:
                continue
            tally = [0, 0, 0]
            for event, (code, replaced_by, label) in zip(log, fold.derivations(0), strict=True):
                tally[code] += 1
                derived.add(
                    {
                        "session_id": sid,
                        "seq": event.seq,
                        "surface": code,
                        "replaced_by": replaced_by,
                        "surface_label": label,
                    }
                )
                if event.source_event_seqs is not None:
                    for source in event.source_event_seqs:
                        cited.add({"session_id": sid, "seq": source, "cited_by": event.seq})
            counts.append(
                {"sid": sid, "current": tally[1], "shadowed": tally[2], "derived": len(log)}
            )
    derived.flush()
    cited.flush()
    return counts


def _fill_payloads(bind: sa.Connection, logs: dict[str, list[_Event]]) -> None:
    """Put into these logs (in place) the payloads rule 7 compares: those of tool/result
    replacements and of the events they name as `start`; one query per 500 of them."""
    needed: dict[tuple[str, int], int] = {}
    for sid, log in logs.items():
        for position, event in enumerate(log):
            op_value = event.surface_op
            if (
                event.type == TOOL_RESULT
                and type(op_value) is dict
                and op_value.get("op") == "replace"
            ):
                needed[(sid, event.seq)] = position
                start = op_value.get("start")
                if type(start) is int and 0 <= start < position and log[start].seq == start:
                    needed[(sid, start)] = start
    keys = sorted(needed)
    for i in range(0, len(keys), 500):
        by_session: dict[str, list[int]] = {}
        for sid, seq in keys[i : i + 500]:
            by_session.setdefault(sid, []).append(seq)
        statement = _payloads_statement(len(by_session))
        params: dict[str, Any] = {}
        for j, (sid, seqs) in enumerate(by_session.items()):
            params[f"s{j}"], params[f"q{j}"] = sid, seqs
        result = bind.execute(statement, params)
        for sid, seq, data in result:
            position = needed[(sid, seq)]
            log = logs[sid]
            log[position] = log[position]._replace(data=json.loads(data))


def _load_op(text: str) -> Any:
    return "append" if text == '"append"' else json.loads(text)


def _load_sources(text: str) -> Any:
    """A stored sourceEventSeqs (fast for the usual compact list of integers)."""
    if text == "[]":
        return []
    if text[:1] == "[" and text[-1:] == "]":
        try:
            return [int(part) for part in text[1:-1].split(",")]
        except ValueError:
            pass
    return json.loads(text)


@functools.cache
def _payloads_statement(sessions: int) -> Any:
    """The payloads of `seq IN :q{j}` of session `:s{j}`, for j < sessions (built once)."""
    condition = sa.or_(
        *(
            sa.and_(
                _events.c.session_id == sa.bindparam(f"s{j}"),
                _events.c.seq.in_(sa.bindparam(f"q{j}", expanding=True)),
            )
            for j in range(sessions)
        )
    )
    columns = (_events.c.session_id, _events.c.seq, sa.cast(_events.c.data, sa.Text))
    return sa.select(*columns).where(condition)


def _fold(log: list[_Event], event_count: int) -> SurfaceFold | None:
    """The fold of a stored log, or None when the fold rejects it (or its count is off)."""
    if len(log) != event_count:
        return None
    fold = SurfaceFold(log.__getitem__)
    try:
        for event in log:
            fold.apply(event)
    except SessionQueryError:
        return None
    return fold


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        has_stats = bind.execute(
            sa.text("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'")
        ).scalar()
        if has_stats:
            bind.execute(sa.text("DELETE FROM sqlite_stat1 WHERE tbl IN ('events', 'citations')"))
            bind.execute(sa.text("ANALYZE sqlite_master"))
    op.drop_index("ix_events_replaced_by", table_name="events")
    op.drop_index("ix_events_surface_label", table_name="events")
    op.drop_index("ix_events_surface_seq", table_name="events")
    op.drop_table("citations")
    for name in ("surface_label", "replaced_by", "surface"):
        op.drop_column("events", name)
    for name in reversed(COUNT_COLUMNS):
        op.drop_column("sessions", name)
