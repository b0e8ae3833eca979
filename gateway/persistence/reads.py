"""The plain read side of `SqlPersistence`: headers, whole logs and windows.

What the contract requires of every backend (`list()`, `load()`) plus the
by-id header lookups and the ranged read that hosts (`checkpoint`) use. The
core's per-request questions go to `corpus.py` and `derived.py` instead.
Every read is SQLAlchemy Core over the primary key `(session_id, seq)`, each
question one synchronous function run in one hop (`gateway.persistence.readers`).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    Select,
    bindparam,
    select,
)

from gateway.core.model import SessionEvent, SessionHeader

from .base import SqlBase
from .codec import (
    _chunks,
    _events_from_rows,
    _header_from_row,
    _json_text,
    _raw,
)
from .errors import (
    UnknownSessionError,
)
from .integrity import StoredExtent, check_run
from .readers import ReadConn, fixed
from .tables import HEADER_COLUMNS, events, sessions

_HEADER_SELECT = [sessions.c[name] for name in HEADER_COLUMNS]
_SID: BindParameter[str] = bindparam("sid")
_EVENT_COLUMNS = (
    events.c.seq,
    events.c.type,
    events.c.time,
    _json_text(events.c.surface_op),
    _json_text(events.c.source_event_seqs),
    _raw(events.c.ignorable),
)


_SELECT_ALL = (
    select(*_EVENT_COLUMNS, _json_text(events.c.data).label("data"))
    .where(events.c.session_id == _SID)
    .order_by(events.c.seq)
)
_KEY_CHUNK = 500
_SELECT_HEADERS_IN = select(*_HEADER_SELECT).where(
    sessions.c.id.in_(bindparam("ids", expanding=True))
)
_SELECT_MANY_ALL = select(
    events.c.session_id, *_EVENT_COLUMNS, _json_text(events.c.data).label("data")
).order_by(events.c.session_id, events.c.seq)
_SELECT_WINDOW = _SELECT_ALL.where(events.c.seq >= bindparam("lo"), events.c.seq <= bindparam("hi"))
_SELECT_HEADER = select(*_HEADER_SELECT).where(sessions.c.id == _SID)
_SELECT_HEADER_AND_COUNT = select(*_HEADER_SELECT, sessions.c.event_count).where(
    sessions.c.id == _SID
)
_SELECT_HEADER_FOR_UPDATE = (
    select(*_HEADER_SELECT, sessions.c.event_count).where(sessions.c.id == _SID).with_for_update()
)
_SELECT_HEADERS = select(*_HEADER_SELECT).order_by(sessions.c.created_at.desc(), sessions.c.id)
_SELECT_SURFACE_FOLD = (
    select(
        events.c.seq,
        events.c.type,
        _json_text(events.c.surface_op),
        _json_text(events.c.source_event_seqs),
    )
    .where(events.c.session_id == _SID, events.c.surface_op.is_not(None))
    .order_by(events.c.seq)
)


_SELECT_COUNT = select(sessions.c.event_count).where(sessions.c.id == _SID)
fixed(
    _SELECT_ALL,
    _SELECT_HEADERS_IN,
    _SELECT_WINDOW,
    _SELECT_HEADER,
    _SELECT_HEADER_AND_COUNT,
    _SELECT_HEADERS,
    _SELECT_COUNT,
)

_PAYLOAD_CHUNK = 1000
_KEY_CHUNK = 500
_WINDOW_CHUNK = 100


_DECODE_IN_THREAD = 20_000
"""Rows beyond which a whole log is decoded in a worker thread, off the event loop."""


async def decode_events(rows: Sequence[Any]) -> builtins.list[SessionEvent]:
    """Decode a whole log's rows; a long one in a worker thread so the loop keeps
    serving (and with no GC pause there: a pause is process-wide, and the loop
    runs other requests meanwhile)."""
    if len(rows) <= _DECODE_IN_THREAD:
        return _events_from_rows(rows)
    return await asyncio.to_thread(_events_from_rows, rows, pause_gc=False)


class SqlReads(SqlBase):
    """Reads (module docstring)."""

    async def list(self) -> builtins.list[SessionHeader]:
        """Every stored header, newest first (ties by id)."""
        rows = await self._read(lambda conn: conn.rows(_SELECT_HEADERS))
        return [_header_from_row(row) for row in rows]

    async def load_header(self, session_id: str) -> SessionHeader | None:
        """The stored header of one session, or None."""
        rows = await self._read(
            lambda conn: conn.rows(_SELECT_HEADER, {"sid": session_id}), inline=True
        )
        return _header_from_row(rows[0]) if rows else None

    async def count(self, session_id: str) -> int:
        """The stored log's length (the next seq); UnknownSessionError if not stored."""
        value = await self._read(
            lambda conn: conn.scalar(_SELECT_COUNT, {"sid": session_id}), inline=True
        )
        if value is None:
            raise UnknownSessionError(session_id)
        return int(value)

    async def load(self, session_id: str) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """The header and the whole log, payloads included: exactly the stored count of
        events (else `StoredDataError`, `gateway.persistence.integrity`)."""
        return await self._load(session_id, _SELECT_ALL, {}, 0, None)

    async def load_window(
        self, session_id: str, start: int, end: int
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """The header and the events with start <= seq <= end, ascending (a key range scan):
        every one of them the stored log holds (else `StoredDataError`)."""
        return await self._load(session_id, _SELECT_WINDOW, {"lo": start, "hi": end}, start, end)

    async def _load(
        self,
        session_id: str,
        statement: Select[Any],
        params: dict[str, Any],
        lo: int,
        hi: int | None,
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        def read(conn: ReadConn) -> tuple[Any, builtins.list[Any]]:
            heads = conn.rows(_SELECT_HEADER_AND_COUNT, {"sid": session_id})
            if not heads:
                raise UnknownSessionError(session_id)
            row = heads[0]
            rows = conn.rows(statement, {"sid": session_id, **params})
            extent = StoredExtent(int(row[-1]))
            end = extent.event_count - 1 if hi is None else hi
            check_run(session_id, [r[0] for r in rows], lo, end, extent, what="a load")
            return row, rows

        row, rows = await self._read(read)
        loaded = await decode_events(rows)
        del rows
        return _header_from_row(row[:-1]), loaded

    async def load_headers(self, session_ids: Sequence[str]) -> dict[str, SessionHeader]:
        """The stored headers of these ids; ids that are not stored are left out."""
        return await self._read(lambda conn: headers_of(conn, session_ids), inline=True)


def headers_of(conn: ReadConn, session_ids: Iterable[str]) -> dict[str, SessionHeader]:
    """The stored headers of these ids, by id (one statement per chunk of ids)."""
    ids = builtins.list(dict.fromkeys(session_ids))
    out: dict[str, SessionHeader] = {}
    for chunk in _chunks(ids, _KEY_CHUNK):
        for row in conn.rows(_SELECT_HEADERS_IN, {"ids": chunk}):
            out[row[0]] = _header_from_row(row)
    return out
