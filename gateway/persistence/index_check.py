"""Reads for checking the search index and title seqs (`session-gateway verify`).

Like `read_derivations`, for checking, not serving: it reads the payloads of
every event that can have a text, so that the checker recomputes the rows
with `gateway.persistence.texts` and compares them with what is stored.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text

from gateway.core.event_text import TEXT_EVENT_TYPES

from .base import SqlBase
from .codec import _chunks, _json_text, _loads
from .tables import event_texts, events, sessions
from .texts import TITLE_TYPE, TextRow

_ID_CHUNK = 200
_TYPES = sorted({*TEXT_EVENT_TYPES, TITLE_TYPE})


class IndexEvent(tuple[int, str, int, Any]):
    """(seq, type, time, data) of a stored event that can have a text or is a title."""

    __slots__ = ()

    @property
    def seq(self) -> int:
        return int(self[0])

    @property
    def type(self) -> str:
        return str(self[1])

    @property
    def time(self) -> int:
        return int(self[2])

    @property
    def data(self) -> Any:
        return self[3]


@dataclass(frozen=True, slots=True)
class StoredIndex:
    """One session's stored text rows and title seq, with the events they derive from."""

    title_seq: int | None
    events: builtins.list[IndexEvent]
    rows: builtins.list[TextRow]


class SqlIndexReads(SqlBase):
    """What `verify` compares for search and titles (module docstring)."""

    async def read_text_index(self, session_ids: Sequence[str]) -> dict[str, StoredIndex]:
        """Each stored id's text rows, title seq and text/title events (one transaction)."""
        ids = builtins.list(dict.fromkeys(session_ids))
        out: dict[str, StoredIndex] = {}
        pg = not self.is_sqlite
        row_columns = [
            event_texts.c.session_id,
            event_texts.c.seq,
            event_texts.c.type,
            event_texts.c.time,
            event_texts.c.length,
            event_texts.c.text,
        ]
        if pg:
            row_columns.append(event_texts.c.terms)
        async with self._reading() as conn:
            for chunk in _chunks(ids, _ID_CHUNK):
                heads = await conn.execute(
                    select(sessions.c.id, sessions.c.title_seq).where(sessions.c.id.in_(chunk))
                )
                titles = {sid: None if seq is None else int(seq) for sid, seq in heads}
                found: dict[str, builtins.list[IndexEvent]] = {sid: [] for sid in titles}
                result = await conn.execute(
                    select(
                        events.c.session_id,
                        events.c.seq,
                        events.c.type,
                        events.c.time,
                        _json_text(events.c.data),
                    )
                    .where(events.c.session_id.in_(chunk), events.c.type.in_(_TYPES))
                    .order_by(events.c.session_id, events.c.seq)
                )
                for sid, seq, etype, time, data in result:
                    found[sid].append(IndexEvent((int(seq), etype, int(time), _loads(data))))
                rows: dict[str, builtins.list[TextRow]] = {sid: [] for sid in titles}
                result = await conn.execute(
                    select(*row_columns)
                    .where(event_texts.c.session_id.in_(chunk))
                    .order_by(event_texts.c.session_id, event_texts.c.seq)
                )
                for found_row in result:
                    row: Any = tuple(found_row)
                    terms = builtins.list(row[6]) if pg else None
                    rows.setdefault(row[0], []).append(
                        TextRow(
                            row[0], int(row[1]), row[2], int(row[3]), int(row[4]), row[5], terms
                        )
                    )
                for sid, seq in titles.items():
                    out[sid] = StoredIndex(seq, found[sid], rows.get(sid, []))
        return out

    async def check_search_index(self) -> str | None:
        """SQLite: FTS5's own check that `event_fts` indexes exactly `event_texts`
        (None when it does, else what FTS5 said). PostgreSQL keeps the tokens in
        the rows themselves, which `read_text_index` returns: always None."""
        if not self.is_sqlite:
            return None
        try:
            async with self._reading() as conn:
                await conn.execute(
                    text("INSERT INTO event_fts (event_fts, rank) VALUES ('integrity-check', 1)")
                )
        except Exception as exc:  # FTS5 reports a mismatch as SQLITE_CORRUPT_VTAB
            return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
        return None
