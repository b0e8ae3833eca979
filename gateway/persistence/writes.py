"""The write side of `SqlPersistence`: create, append, import_log, delete.

See `gateway.persistence.sql` for the contract of each write.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    and_,
    delete,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.core.errors import ErrorCode, SessionQueryError
from gateway.core.fold import FoldableEvent, SurfaceFold, fold_surface
from gateway.core.gcpause import gc_paused
from gateway.core.model import SessionEvent, SessionHeader

from .base import SqlBase
from .codec import (
    _TOOL_RESULT,
    _canonical,
    _check_contiguous,
    _encode_events,
    _EventRow,
    _events_from_rows,
    _header_from_row,
    _header_row,
    _json_text,
    _load_op,
    _load_sources,
    _loads,
)
from .errors import (
    NonContiguousAppendError,
    SessionConflictError,
    SessionExistsError,
    UnknownSessionError,
)
from .reads import _SELECT_HEADER_FOR_UPDATE, _SELECT_SURFACE_FOLD, _SELECT_WINDOW
from .tables import HEADER_COLUMNS, events, sessions

ImportOutcome = Literal["created", "unchanged", "replaced"]
_INSERT_CHUNK = 5000
_COMPARE_CHUNK = 10000
# Rule 7 (a tool/result rewrite changes only data.message.content[0].content) was
# checked when the stored log was written; replaying it compares this stub to itself.
_REWRITE_STUB: dict[str, Any] = {"message": {"content": [{}]}}


@dataclass(slots=True)
class _FoldEvent:
    """What the fold reads of a stored event (FoldableEvent)."""

    type: str
    seq: int
    data: Any
    surface_op: Any
    source_event_seqs: Any


class SqlWrites(SqlBase):
    """Writes (see `gateway.persistence.sql`)."""

    async def create(self, header: SessionHeader, events: Sequence[SessionEvent] = ()) -> None:
        """Store a new session, with its initial log (validated as a whole), atomically."""
        batch = builtins.list(events)
        header_row = _header_row(header, len(batch))
        rows = _encode_events(header.id, batch)
        if batch:
            fold_surface(batch)
        async with self._writing() as conn:
            await self._insert_session(conn, header, header_row, rows)

    async def _insert_session(
        self,
        conn: AsyncConnection,
        header: SessionHeader,
        header_row: dict[str, Any],
        rows: builtins.list[_EventRow],
    ) -> None:
        try:
            await conn.execute(sessions.insert(), header_row)
        except IntegrityError:
            raise SessionExistsError(header.id) from None
        await self._insert_events(conn, rows)

    async def _insert_events(self, conn: AsyncConnection, rows: builtins.list[_EventRow]) -> None:
        # The Core insert, compiled once for this dialect, run with positional rows:
        # per-row parameter processing would cost more than the encoding itself.
        sql = self._insert_sql
        for i in range(0, len(rows), _INSERT_CHUNK):
            await conn.exec_driver_sql(sql, rows[i : i + _INSERT_CHUNK])

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> int:
        """Append a batch atomically (module docstring); returns the log's new length."""
        batch = builtins.list(events)
        rows = _encode_events(session_id, batch)
        async with self._writing() as conn:
            locked = (await conn.execute(_SELECT_HEADER_FOR_UPDATE, {"sid": session_id})).first()
            if locked is None:
                raise UnknownSessionError(session_id)
            stored = int(locked.event_count)
            if not batch:
                return stored
            _check_contiguous(session_id, batch, stored)
            fold = await self._stored_fold(conn, session_id, stored, batch)
            for event in batch:
                fold.apply(event)
            try:
                await self._insert_events(conn, rows)
            except IntegrityError:
                raise NonContiguousAppendError(session_id, stored, batch[0].seq) from None
            new_count = stored + len(batch)
            await conn.execute(
                update(sessions).where(sessions.c.id == session_id).values(event_count=new_count)
            )
        return new_count

    async def _stored_fold(
        self,
        conn: AsyncConnection,
        session_id: str,
        stored: int,
        batch: Sequence[SessionEvent],
    ) -> SurfaceFold:
        """The fold state after the stored log, ready to validate `batch` (which follows it).

        Only surface events' fold columns are read; log-only events are placeholders.
        Payloads are read only for stored tool/results that the batch rewrites.
        """
        log: builtins.list[FoldableEvent] = []
        add = log.append
        with gc_paused():
            rows = (await conn.execute(_SELECT_SURFACE_FOLD, {"sid": session_id})).all()
            for seq, etype, op, src in rows:
                while len(log) < seq:
                    add(_FoldEvent("", len(log), None, None, None))
                stub = _REWRITE_STUB if etype == _TOOL_RESULT else None
                sources = None if src is None else _load_sources(src)
                add(_FoldEvent(etype, seq, stub, _load_op(op), sources))
            while len(log) < stored:
                add(_FoldEvent("", len(log), None, None, None))

        real: dict[int, FoldableEvent] = {}
        replaying = True

        def lookup(seq: int) -> FoldableEvent:
            if replaying:
                return log[seq]
            if seq >= stored:
                return batch[seq - stored]
            found = real.get(seq)
            if found is None:  # pragma: no cover - guarded by _rewrite_targets
                raise RuntimeError(f"append: the payload of stored seq {seq} was not loaded")
            return found

        fold = SurfaceFold(lookup)
        try:
            with gc_paused():
                for event in log:
                    fold.apply(event)
        except SessionQueryError as exc:
            raise SessionQueryError(
                ErrorCode.INVALID_SURFACE,
                f"the stored log of session {session_id!r} is itself invalid: {exc.message}",
            ) from exc
        if len(fold) != stored:
            raise SessionQueryError(
                ErrorCode.INVALID_SURFACE,
                f"the stored log of session {session_id!r} has {len(fold)} events, "
                f"but its header counts {stored}",
            )
        targets = _rewrite_targets(batch, stored)
        if targets:
            result = await conn.execute(
                select(events.c.seq, events.c.type, _json_text(events.c.data)).where(
                    and_(events.c.session_id == session_id, events.c.seq.in_(sorted(targets)))
                )
            )
            for seq, etype, data in result:
                real[seq] = _FoldEvent(etype, seq, _loads(data), None, None)
        replaying = False
        return fold

    async def import_log(
        self,
        header: SessionHeader,
        events: Sequence[SessionEvent],
        *,
        replace: bool = False,
    ) -> ImportOutcome:
        """Store a whole log under its header's id in one transaction.

        Returns "created", "unchanged" (the identical header and log are stored:
        nothing is written) or "replaced" (only with `replace=True`). A different
        log under the id raises SessionConflictError naming the difference. The
        log is validated with the fold before anything is written.
        """
        batch = builtins.list(events)
        header_row = _header_row(header, len(batch))
        rows = _encode_events(header.id, batch)
        fold_surface(batch)
        async with self._writing() as conn:
            locked = (await conn.execute(_SELECT_HEADER_FOR_UPDATE, {"sid": header.id})).first()
            if locked is None:
                await self._insert_session(conn, header, header_row, rows)
                return "created"
            difference = await self._difference(conn, header, batch, locked)
            if difference is None:
                return "unchanged"
            if not replace:
                raise SessionConflictError(
                    header.id,
                    f"a different log is already stored ({difference}); "
                    "refused (use --replace / replace=True to overwrite it)",
                )
            await self._delete(conn, header.id)
            await self._insert_session(conn, header, header_row, rows)
            return "replaced"

    async def _difference(
        self,
        conn: AsyncConnection,
        header: SessionHeader,
        batch: Sequence[SessionEvent],
        locked: Any,
    ) -> str | None:
        """How the stored session differs from `header` + `batch`, or None if identical."""
        stored_header = _header_from_row(locked[: len(HEADER_COLUMNS)])
        ours, theirs = header.to_json(), stored_header.to_json()
        if ours != theirs:
            fields = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            return f"the headers differ on {', '.join(fields)}"
        stored = int(locked.event_count)
        if stored != len(batch):
            return f"the stored log has {stored} events, the new one {len(batch)}"
        for lo in range(0, stored, _COMPARE_CHUNK):
            hi = min(stored, lo + _COMPARE_CHUNK) - 1
            rows = (
                await conn.execute(_SELECT_WINDOW, {"sid": header.id, "lo": lo, "hi": hi})
            ).all()
            for old in _events_from_rows(rows):
                if _canonical(old) != _canonical(batch[old.seq]):
                    return f"event seq {old.seq} differs"
        return None

    async def delete(self, session_id: str) -> bool:
        """Delete a session and its log; returns whether it was stored."""
        async with self._writing() as conn:
            return await self._delete(conn, session_id)

    @staticmethod
    async def _delete(conn: AsyncConnection, session_id: str) -> bool:
        await conn.execute(delete(events).where(events.c.session_id == session_id))
        result = await conn.execute(delete(sessions).where(sessions.c.id == session_id))
        return bool(result.rowcount)


def _rewrite_targets(batch: Sequence[SessionEvent], stored: int) -> set[int]:
    """Stored seqs whose payload a tool/result replace in the batch compares against."""
    targets = set()
    for event in batch:
        op = event.surface_op
        if event.type == _TOOL_RESULT and type(op) is dict:
            start = op.get("start")
            if type(start) is int and 0 <= start < stored:
                targets.add(start)
    return targets
