"""Each session's title (SPEC §14) by one join (`gateway.core.backend.TitleReads`).

The writer keeps `sessions.title_seq`, the seq of the last `session/title`
event, in the transaction that writes the events; a page of titles is then one
statement joining it to `events` by primary key: it costs the page, not the logs
(one synchronous question in one hop, `SqlBase._read`).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, bindparam, select

from gateway.core.model import SessionEvent

from .base import SqlBase
from .codec import _chunks, _events_from_rows, _json_text, _raw
from .readers import ReadConn, fixed
from .tables import events, sessions

_KEY_CHUNK = 500
_SELECT_TITLES = (
    select(
        sessions.c.id,
        events.c.seq,
        events.c.type,
        events.c.time,
        _json_text(events.c.surface_op),
        _json_text(events.c.source_event_seqs),
        _raw(events.c.ignorable),
        _json_text(events.c.data),
    )
    .select_from(
        sessions.join(
            events, and_(events.c.session_id == sessions.c.id, events.c.seq == sessions.c.title_seq)
        )
    )
    .where(sessions.c.id.in_(bindparam("ids", expanding=True)))
)
fixed(_SELECT_TITLES)


class SqlTitleReads(SqlBase):
    """Titles of stored sessions (module docstring)."""

    async def load_titles(self, session_ids: Sequence[str]) -> dict[str, SessionEvent]:
        """The last `session/title` event of each stored id that has one (one read)."""
        ids = builtins.list(dict.fromkeys(session_ids))
        if not ids:
            return {}

        def read(conn: ReadConn) -> builtins.list[Any]:
            rows: builtins.list[Any] = []
            for chunk in _chunks(ids, _KEY_CHUNK):
                rows.extend(conn.rows(_SELECT_TITLES, {"ids": chunk}))
            return rows

        rows = await self._read(read)
        found = _events_from_rows(row[1:] for row in rows)
        return {row[0]: event for row, event in zip(rows, found, strict=True)}
