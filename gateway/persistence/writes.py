"""The write side of `SqlPersistence`: create, append, import_log, delete.

See `gateway.persistence.sql` for the contract of each write.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    Dialect,
    and_,
    bindparam,
    delete,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.core.errors import ErrorCode, SessionQueryError
from gateway.core.fold import FoldableEvent, SurfaceFold
from gateway.core.gcpause import gc_paused
from gateway.core.model import SessionEvent, SessionHeader

from .base import SqlBase
from .codec import (
    _CITATION_ORDER,
    _INSERT_CITATIONS,
    _TOOL_RESULT,
    _canonical,
    _check_contiguous,
    _citation_rows,
    _derived_rows,
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
from .tables import HEADER_COLUMNS, citations, events, sessions

ImportOutcome = Literal["created", "unchanged", "replaced"]
_INSERT_CHUNK = 5000
_COMPARE_CHUNK = 10000
# Rule 7 (a tool/result rewrite changes only data.message.content[0].content) was
# checked when the stored log was written; replaying it compares this stub to itself.
_REWRITE_STUB: dict[str, Any] = {"message": {"content": [{}]}}
_SHADOWED = 2
_LOCK_FOR_APPEND = (
    select(sessions.c.event_count, sessions.c.derived_count)
    .where(sessions.c.id == bindparam("sid"))
    .with_for_update()
)
_SHADOW_STORED = (
    update(events)
    .where(events.c.session_id == bindparam("b_sid"), events.c.seq == bindparam("b_seq"))
    .values(surface=_SHADOWED, replaced_by=bindparam("b_by"))
)
_DERIVE_STORED = (
    update(events)
    .where(events.c.session_id == bindparam("b_sid"), events.c.seq == bindparam("b_seq"))
    .values(
        surface=bindparam("b_surface"),
        replaced_by=bindparam("b_by"),
        surface_label=bindparam("b_label"),
    )
)
_COMPILED_CITATIONS: dict[str, str] = {}


def _citations_sql(dialect: Dialect) -> str:
    """The citations insert compiled for `dialect`, run with positional rows."""
    sql = _COMPILED_CITATIONS.get(dialect.name)
    if sql is None:
        compiled = _INSERT_CITATIONS.compile(dialect=dialect)
        if tuple(compiled.positiontup or ()) != _CITATION_ORDER:  # pragma: no cover
            raise RuntimeError(f"unexpected insert parameter order {compiled.positiontup}")
        sql = _COMPILED_CITATIONS[dialect.name] = str(compiled)
    return sql


def _whole_fold(batch: builtins.list[SessionEvent]) -> SurfaceFold:
    """A whole log's fold state (raises INVALID_SURFACE naming the rule, like `fold_surface`)."""
    fold = SurfaceFold(batch.__getitem__)
    apply = fold.apply
    with gc_paused():
        for event in batch:
            apply(event)
    return fold


def _derive_whole(
    header: SessionHeader, batch: builtins.list[SessionEvent]
) -> tuple[dict[str, Any], builtins.list[_EventRow], builtins.list[tuple[str, int, int]]]:
    """Validate a whole log and make its session row, event rows and citation rows."""
    header_row = _header_row(header, len(batch))
    encoded = _encode_events(header.id, batch)
    fold = _whole_fold(batch)
    derivations = fold.derivations(0)
    _, current, shadowed = fold.counts()
    header_row.update(current_count=current, shadowed_count=shadowed, derived_count=len(batch))
    return header_row, _derived_rows(encoded, derivations), _citation_rows(header.id, batch)


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
        header_row, rows, cites = _derive_whole(header, builtins.list(events))
        async with self._writing() as conn:
            await self._insert_session(conn, header, header_row, rows, cites)

    async def _insert_session(
        self,
        conn: AsyncConnection,
        header: SessionHeader,
        header_row: dict[str, Any],
        rows: builtins.list[_EventRow],
        cites: builtins.list[tuple[str, int, int]],
    ) -> None:
        try:
            await conn.execute(sessions.insert(), header_row)
        except IntegrityError:
            raise SessionExistsError(header.id) from None
        await self._insert_events(conn, rows)
        await self._insert_citations(conn, cites)

    async def _insert_events(self, conn: AsyncConnection, rows: builtins.list[_EventRow]) -> None:
        # The Core insert, compiled once for this dialect, run with positional rows:
        # per-row parameter processing would cost more than the encoding itself.
        sql = self._insert_sql
        for i in range(0, len(rows), _INSERT_CHUNK):
            await conn.exec_driver_sql(sql, rows[i : i + _INSERT_CHUNK])

    @staticmethod
    async def _insert_citations(
        conn: AsyncConnection, rows: builtins.list[tuple[str, int, int]]
    ) -> None:
        if not rows:
            return
        sql = _citations_sql(conn.dialect)
        for i in range(0, len(rows), _INSERT_CHUNK):
            await conn.exec_driver_sql(sql, rows[i : i + _INSERT_CHUNK])

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> int:
        """Append a batch atomically (module docstring); returns the log's new length.

        In the same transaction, stores the batch's derivations, marks the stored
        events a replacement in the batch shadows, adds the batch's citations and
        moves the session's counts. A stored log that was never derived (written by
        other means) is derived whole on its first append.
        """
        batch = builtins.list(events)
        encoded = _encode_events(session_id, batch)
        async with self._writing() as conn:
            locked = (await conn.execute(_LOCK_FOR_APPEND, {"sid": session_id})).first()
            if locked is None:
                raise UnknownSessionError(session_id)
            stored, derived = int(locked.event_count), int(locked.derived_count)
            if not batch:
                return stored
            _check_contiguous(session_id, batch, stored)
            fold, log = await self._stored_fold(conn, session_id, stored, batch)
            with gc_paused():
                for event in batch:
                    fold.apply(event)
            derivations = fold.derivations(stored)
            try:
                await self._insert_events(conn, _derived_rows(encoded, derivations))
            except IntegrityError:
                raise NonContiguousAppendError(session_id, stored, batch[0].seq) from None
            cites = _citation_rows(session_id, batch)
            if derived == stored:
                newly = [
                    {"b_sid": session_id, "b_seq": seq, "b_by": made.seq}
                    for made in fold.replacements_since(stored)
                    for seq in made.shadowed
                    if seq < stored
                ]
                if newly:
                    await conn.execute(_SHADOW_STORED, newly)
            else:
                await self._derive_stored(conn, session_id, fold.derivations(0)[:stored])
                cites = _citation_rows(session_id, log) + cites
            _, current, shadowed = fold.counts()
            await self._insert_citations(conn, cites)
            new_count = stored + len(batch)
            await conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(
                    event_count=new_count,
                    derived_count=new_count,
                    current_count=current,
                    shadowed_count=shadowed,
                )
            )
        return new_count

    @staticmethod
    async def _derive_stored(
        conn: AsyncConnection,
        session_id: str,
        derivations: Sequence[tuple[int, int | None, int | None]],
    ) -> None:
        """Store the derivations of a stored log that has none (its citations too)."""
        await conn.execute(delete(citations).where(citations.c.session_id == session_id))
        params = [
            {"b_sid": session_id, "b_seq": seq, "b_surface": code, "b_by": by, "b_label": label}
            for seq, (code, by, label) in enumerate(derivations)
        ]
        for i in range(0, len(params), _INSERT_CHUNK):
            await conn.execute(_DERIVE_STORED, params[i : i + _INSERT_CHUNK])

    async def _stored_fold(
        self,
        conn: AsyncConnection,
        session_id: str,
        stored: int,
        batch: Sequence[SessionEvent],
    ) -> tuple[SurfaceFold, builtins.list[FoldableEvent]]:
        """The fold state after the stored log, ready to validate `batch` (which follows it),
        and the replayed log (surface events' fold columns; placeholders for the rest).

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
        return fold, log

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
        header_row, rows, cites = _derive_whole(header, batch)
        async with self._writing() as conn:
            locked = (await conn.execute(_SELECT_HEADER_FOR_UPDATE, {"sid": header.id})).first()
            if locked is None:
                await self._insert_session(conn, header, header_row, rows, cites)
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
            await self._insert_session(conn, header, header_row, rows, cites)
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
        await conn.execute(delete(citations).where(citations.c.session_id == session_id))
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
