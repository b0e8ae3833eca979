"""The read side of `SqlPersistence`: headers, logs, windows and their batch forms.

Every read is SQLAlchemy Core (no ORM objects) over the primary key
`(session_id, seq)`: `load_window` is a key range; batch variants answer many
keys per query, so the core's per-request coalescing keeps the number of
statements flat.
"""

from __future__ import annotations

import asyncio
import builtins
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Select,
    and_,
    bindparam,
    null,
    or_,
    select,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.core.model import SessionEvent, SessionHeader

from .base import SqlBase
from .codec import (
    _TOOL_RESULT,
    _chunks,
    _driver_rows,
    _events_from_rows,
    _grouped_events,
    _header_from_row,
    _json_text,
    _loads,
    _make_event,
    _position,
    _raw,
)
from .errors import (
    UnknownSessionError,
)
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


def _events_select(data: Literal["all", "none"]) -> Select[Any]:
    payload: ColumnElement[Any] = _json_text(events.c.data) if data == "all" else null()
    return (
        select(*_EVENT_COLUMNS, _raw(payload).label("data"))
        .where(events.c.session_id == _SID)
        .order_by(events.c.seq)
    )


_SELECT_ALL = _events_select("all")
_SELECT_FOLD = _events_select("none")
_SELECT_PAYLOADS = select(events.c.seq, _json_text(events.c.data)).where(
    events.c.session_id == _SID, events.c.seq.in_(bindparam("seqs", expanding=True))
)
_PAYLOAD_CHUNK = 1000
_KEY_CHUNK = 500
_WINDOW_CHUNK = 100
_SELECT_HEADERS_IN = select(*_HEADER_SELECT).where(
    sessions.c.id.in_(bindparam("ids", expanding=True))
)
_SELECT_MANY_ALL = select(
    events.c.session_id, *_EVENT_COLUMNS, _json_text(events.c.data).label("data")
).order_by(events.c.session_id, events.c.seq)
_SELECT_MANY_FOLD = select(
    events.c.session_id, *_EVENT_COLUMNS, _raw(null()).label("data")
).order_by(events.c.session_id, events.c.seq)
_SELECT_WINDOW = _SELECT_ALL.where(events.c.seq >= bindparam("lo"), events.c.seq <= bindparam("hi"))
_SELECT_HEADER = select(*_HEADER_SELECT).where(sessions.c.id == _SID)
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
        async with self._reading() as conn:
            rows = (await conn.execute(_SELECT_HEADERS)).all()
        return [_header_from_row(row) for row in rows]

    async def load_header(self, session_id: str) -> SessionHeader | None:
        """The stored header of one session, or None."""
        async with self._reading() as conn:
            row = (await conn.execute(_SELECT_HEADER, {"sid": session_id})).first()
        return None if row is None else _header_from_row(row)

    async def count(self, session_id: str) -> int:
        """The stored log's length (the next seq); UnknownSessionError if not stored."""
        async with self._reading() as conn:
            value = (
                await conn.execute(
                    select(sessions.c.event_count).where(sessions.c.id == session_id)
                )
            ).scalar()
        if value is None:
            raise UnknownSessionError(session_id)
        return int(value)

    async def load(self, session_id: str) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """The header and the whole log, payloads included."""
        return await self._load(session_id, _SELECT_ALL, {})

    async def load_fold_log(
        self, session_id: str
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """Every event, with `data` only where the fold reads it, None elsewhere.

        The fold reads payloads for one rule only (7: a tool/result replace rewrites
        just one tool/result's content), so only tool/result replacements and the
        events they name as `start` carry their data; a second, keyed query reads
        those few payloads. The fold's outcome is the same as over the whole log.
        """
        return await self._load(session_id, _SELECT_FOLD, {}, rewrite_payloads=True)

    async def load_window(
        self, session_id: str, start: int, end: int
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        """The header and the events with start <= seq <= end, ascending (a key range scan)."""
        return await self._load(session_id, _SELECT_WINDOW, {"lo": start, "hi": end})

    async def _load(
        self,
        session_id: str,
        statement: Select[Any],
        params: dict[str, Any],
        *,
        rewrite_payloads: bool = False,
    ) -> tuple[SessionHeader, builtins.list[SessionEvent]]:
        async with self._reading() as conn:
            row = (await conn.execute(_SELECT_HEADER, {"sid": session_id})).first()
            if row is None:
                raise UnknownSessionError(session_id)
            rows = await _driver_rows(conn, statement, {"sid": session_id, **params})
            loaded = await decode_events(rows)
            del rows
            if rewrite_payloads:
                await self._fill_rewrite_payloads(conn, session_id, loaded)
        return _header_from_row(row), loaded

    @staticmethod
    async def _fill_rewrite_payloads(
        conn: AsyncConnection, session_id: str, loaded: builtins.list[SessionEvent]
    ) -> None:
        """Put the payloads rule 7 compares into a fold-columns-only log (in place)."""
        needed: set[int] = set()
        for event in loaded:
            op = event.surface_op
            if event.type == _TOOL_RESULT and type(op) is dict and op.get("op") == "replace":
                needed.add(event.seq)
                start = op.get("start")
                if type(start) is int and 0 <= start < event.seq:
                    needed.add(start)
        wanted = sorted(needed)
        for i in range(0, len(wanted), _PAYLOAD_CHUNK):
            chunk = wanted[i : i + _PAYLOAD_CHUNK]
            result = await conn.execute(_SELECT_PAYLOADS, {"sid": session_id, "seqs": chunk})
            for seq, data in result:
                pos = (
                    seq if seq < len(loaded) and loaded[seq].seq == seq else _position(loaded, seq)
                )
                e = loaded[pos]
                loaded[pos] = _make_event(
                    e.type, e.seq, e.time, _loads(data), e.surface_op, e.source_event_seqs,
                    e.ignorable,
                )  # fmt: skip

    # -- batch reads (the core coalesces one observation's loads into these) -------

    async def load_headers(self, session_ids: Sequence[str]) -> dict[str, SessionHeader]:
        """The stored headers of these ids; ids that are not stored are left out."""
        async with self._reading() as conn:
            return await self._headers_of(conn, session_ids)

    async def load_logs(
        self, session_ids: Sequence[str]
    ) -> dict[str, tuple[SessionHeader, builtins.list[SessionEvent]]]:
        """`load` for many ids in one transaction; ids that are not stored are left out."""
        return await self._load_many(session_ids, with_data=True)

    async def load_fold_logs(
        self, session_ids: Sequence[str]
    ) -> dict[str, tuple[SessionHeader, builtins.list[SessionEvent]]]:
        """`load_fold_log` for many ids in one transaction; missing ids are left out."""
        return await self._load_many(session_ids, with_data=False)

    async def load_windows(
        self, requests: Sequence[tuple[str, int, int]]
    ) -> dict[tuple[str, int, int], tuple[SessionHeader, builtins.list[SessionEvent]]]:
        """`load_window` for many (id, start, end) at once: one key-range query per
        chunk of requests; requests for ids that are not stored are left out."""
        wanted = builtins.list(dict.fromkeys(requests))
        out: dict[tuple[str, int, int], tuple[SessionHeader, builtins.list[SessionEvent]]] = {}
        async with self._reading() as conn:
            headers = await self._headers_of(conn, [sid for sid, _, _ in wanted])
            present = [r for r in wanted if r[0] in headers]
            for chunk in _chunks(present, _WINDOW_CHUNK):
                condition = or_(
                    *(
                        and_(events.c.session_id == sid, events.c.seq >= lo, events.c.seq <= hi)
                        for sid, lo, hi in chunk
                    )
                )
                rows = (await conn.execute(_SELECT_MANY_ALL.where(condition))).all()
                logs = _grouped_events(rows)
                del rows
                for sid, lo, hi in chunk:
                    log = logs.get(sid, [])
                    seqs = [e.seq for e in log]
                    picked = log[bisect_left(seqs, lo) : bisect_right(seqs, hi)]
                    out[(sid, lo, hi)] = (headers[sid], picked)
        return out

    @staticmethod
    async def _headers_of(
        conn: AsyncConnection, session_ids: Iterable[str]
    ) -> dict[str, SessionHeader]:
        ids = builtins.list(dict.fromkeys(session_ids))
        out: dict[str, SessionHeader] = {}
        for chunk in _chunks(ids, _KEY_CHUNK):
            result = await conn.execute(_SELECT_HEADERS_IN, {"ids": chunk})
            for row in result:
                out[row[0]] = _header_from_row(row)
        return out

    async def _load_many(
        self, session_ids: Sequence[str], *, with_data: bool
    ) -> dict[str, tuple[SessionHeader, builtins.list[SessionEvent]]]:
        statement = _SELECT_MANY_ALL if with_data else _SELECT_MANY_FOLD
        async with self._reading() as conn:
            headers = await self._headers_of(conn, session_ids)
            logs: dict[str, builtins.list[SessionEvent]] = {}
            ids = builtins.list(headers)
            if len(ids) == 1:  # the common case of a long log: the single-session fast read
                single = _SELECT_ALL if with_data else _SELECT_FOLD
                rows = await _driver_rows(conn, single, {"sid": ids[0]})
                logs[ids[0]] = await decode_events(rows)
                del rows
            else:
                for chunk in _chunks(ids, _KEY_CHUNK):
                    rows = (
                        await conn.execute(statement.where(events.c.session_id.in_(chunk)))
                    ).all()
                    logs.update(_grouped_events(rows))
                    del rows
            if not with_data:
                for sid, log in logs.items():
                    await self._fill_rewrite_payloads(conn, sid, log)
        return {sid: (header, logs.get(sid, [])) for sid, header in headers.items()}

    # -- writes -------------------------------------------------------------
