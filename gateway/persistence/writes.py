"""The write side of `SqlPersistence`: create, append, import_log, delete.

See `gateway.persistence.sql` for the contract of each write.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from itertools import groupby
from operator import itemgetter
from typing import Any, Literal, NamedTuple

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
from gateway.core.fold import CURRENT_CODE, SHADOWED_CODE, FoldableEvent, SurfaceFold
from gateway.core.gcpause import gc_paused
from gateway.core.model import SessionEvent, SessionHeader

from .base import SqlBase
from .codec import (
    _CITATION_ORDER,
    _INSERT_CITATIONS,
    _TOOL_RESULT,
    _canonical,
    _check_contiguous,
    _chunks,
    _citation_rows,
    _derived_rows,
    _driver_rows,
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
from .reads import (
    _HEADER_SELECT,
    _SELECT_HEADER_FOR_UPDATE,
    _SELECT_MANY_ALL,
    _SELECT_SURFACE_FOLD,
    _SELECT_WINDOW,
)
from .tables import HEADER_COLUMNS, citations, event_texts, events, sessions
from .texts import TextRow, stored_terms, text_rows, title_seq

ImportOutcome = Literal["created", "unchanged", "replaced"]
_INSERT_CHUNK = 5000
_IMPORT_BATCH = 500
"""Sessions per transaction of `import_many`."""
_ID_CHUNK = 500
_COMPARE_CHUNK = 10000
# Rule 7 (a tool/result rewrite changes only data.message.content[0].content) was
# checked when the stored log was written; replaying it compares this stub to itself.
_REWRITE_STUB: dict[str, Any] = {"message": {"content": [{}]}}
_SELECT_CURRENT = (
    select(events.c.seq, events.c.surface_label)
    .where(events.c.session_id == bindparam("sid"), events.c.surface == CURRENT_CODE)
    .order_by(events.c.surface_label)
)
_LOCK_FOR_APPEND = (
    select(
        sessions.c.event_count,
        sessions.c.derived_count,
        sessions.c.current_count,
        sessions.c.shadowed_count,
    )
    .where(sessions.c.id == bindparam("sid"))
    .with_for_update()
)
_SHADOW_STORED = (
    update(events)
    .where(events.c.session_id == bindparam("b_sid"), events.c.seq == bindparam("b_seq"))
    .values(surface=SHADOWED_CODE, replaced_by=bindparam("b_by"))
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
_LOCK_HEADERS = select(*_HEADER_SELECT, sessions.c.event_count).with_for_update()
_PAUSE_GC_FROM = 1000
"""Logs at least this long are folded with the cyclic GC paused (`gc_paused`)."""
_OFF_LOOP_FROM = 20_000
"""Logs at least this long are validated, folded and encoded in a worker thread."""
_SESSION_ORDER = tuple(column.name for column in sessions.columns)
_INSERT_SESSIONS = sessions.insert().values({name: bindparam(name) for name in _SESSION_ORDER})
_COMPILED_SESSIONS: dict[str, str] = {}
_TEXT_ORDER = ("session_id", "seq", "type", "time", "length", "text")
_INSERT_TEXTS = event_texts.insert().values({name: bindparam(name) for name in _TEXT_ORDER})
_INSERT_TEXTS_PG = event_texts.insert().values(
    {name: bindparam(name) for name in (*_TEXT_ORDER, "terms")}
)
_COMPILED_TEXTS: dict[str, str] = {}


def _positional_sql(
    cache: dict[str, str], insert: Any, order: tuple[str, ...], dialect: Dialect
) -> str:
    """`insert` compiled once for `dialect`, to run with positional rows in `order`."""
    sql = cache.get(dialect.name)
    if sql is None:
        compiled = insert.compile(dialect=dialect)
        if tuple(compiled.positiontup or ()) != order:  # pragma: no cover
            raise RuntimeError(f"unexpected insert parameter order {compiled.positiontup}")
        sql = cache[dialect.name] = str(compiled)
    return sql


def _sessions_sql(dialect: Dialect) -> str:
    """The sessions insert, run with positional rows (`_SESSION_ORDER`)."""
    return _positional_sql(_COMPILED_SESSIONS, _INSERT_SESSIONS, _SESSION_ORDER, dialect)


def _texts_sql(dialect: Dialect) -> str:
    """The event_texts insert, run with positional `TextRow`s (with `terms` on PostgreSQL)."""
    if dialect.name == "postgresql":
        order = (*_TEXT_ORDER, "terms")
        return _positional_sql(_COMPILED_TEXTS, _INSERT_TEXTS_PG, order, dialect)
    return _positional_sql(_COMPILED_TEXTS, _INSERT_TEXTS, _TEXT_ORDER, dialect)


def _citations_sql(dialect: Dialect) -> str:
    """The citations insert, run with positional rows (`_CITATION_ORDER`)."""
    return _positional_sql(_COMPILED_CITATIONS, _INSERT_CITATIONS, _CITATION_ORDER, dialect)


def _whole_fold(batch: builtins.list[SessionEvent], *, pause_gc: bool = True) -> SurfaceFold:
    """A whole log's fold state (raises INVALID_SURFACE naming the rule, like `fold_surface`).

    `pause_gc=False` in a worker thread: the pause is process-wide, and the event
    loop serves other requests meanwhile."""
    fold = SurfaceFold(batch.__getitem__)
    if len(batch) < _PAUSE_GC_FROM or not pause_gc:
        fold.apply_all(batch)
        return fold
    with gc_paused():
        fold.apply_all(batch)
    return fold


class PreparedImport(NamedTuple):
    """A whole log validated with the fold and encoded for `SqlPersistence.import_prepared`
    (plain values: it can be made in another process and sent over)."""

    header: SessionHeader
    events: builtins.list[SessionEvent]
    session_row: dict[str, Any]
    event_rows: builtins.list[_EventRow]
    citation_rows: builtins.list[tuple[str, int, int]]
    text_rows: builtins.list[TextRow]
    """The search index's rows (`gateway.persistence.texts`); tokens only `with_terms`."""


def prepare_import(
    header: SessionHeader, events: Sequence[SessionEvent], *, with_terms: bool = True
) -> PreparedImport:
    """Validate a whole log (the fold's SessionQueryError, InvalidEventError for what no
    column holds) and encode it with its derivations. Pure: no database.

    `with_terms`: tokenize the texts for PostgreSQL's index (SQLite's FTS5 tokenizes
    them itself; `SqlPersistence.import_prepared` tokenizes rows that lack them)."""
    batch = builtins.list(events)
    return PreparedImport(header, batch, *_derive_whole(header, batch, with_terms=with_terms))


_Derived = tuple[
    dict[str, Any],
    builtins.list[_EventRow],
    builtins.list[tuple[str, int, int]],
    builtins.list[TextRow],
]


def _derive_whole(
    header: SessionHeader,
    batch: builtins.list[SessionEvent],
    *,
    pause_gc: bool = True,
    with_terms: bool = True,
) -> _Derived:
    """Validate a whole log and make its session row, event rows, citation rows and
    text rows (the title seq in the session row)."""
    header_row = _header_row(header, len(batch))
    encoded = _encode_events(header.id, batch)
    fold = _whole_fold(batch, pause_gc=pause_gc)
    derivations = fold.derivations(0)
    codes = fold.codes
    current, shadowed = codes.count(1), codes.count(2)
    header_row.update(
        current_count=current,
        shadowed_count=shadowed,
        derived_count=len(batch),
        title_seq=title_seq(batch),
    )
    texts = text_rows(header.id, batch, with_terms=with_terms)
    return header_row, _derived_rows(encoded, derivations), _citation_rows(header.id, batch), texts


async def _derive_off_loop(
    header: SessionHeader, batch: builtins.list[SessionEvent], *, with_terms: bool
) -> _Derived:
    """`_derive_whole`, in a worker thread for a long log so that the event loop of a
    host that writes while it serves keeps answering (CPU work would stall it)."""
    if len(batch) < _OFF_LOOP_FROM:
        return _derive_whole(header, batch, with_terms=with_terms)
    return await asyncio.to_thread(
        partial(_derive_whole, header, batch, pause_gc=False, with_terms=with_terms)
    )


def text_rows_terms(rows: Iterable[TextRow]) -> builtins.list[TextRow]:
    """`rows` with their PostgreSQL tokens (those prepared without them get them)."""
    return [r if r.terms is not None else r._replace(terms=stored_terms(r.text)) for r in rows]


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
        derived = await _derive_off_loop(
            header, builtins.list(events), with_terms=not self.is_sqlite
        )
        async with self._writing() as conn:
            await self._insert_session(conn, header, *derived)

    async def _insert_session(
        self,
        conn: AsyncConnection,
        header: SessionHeader,
        header_row: dict[str, Any],
        rows: builtins.list[_EventRow],
        cites: builtins.list[tuple[str, int, int]],
        texts: builtins.list[TextRow],
    ) -> None:
        try:
            await conn.execute(sessions.insert(), header_row)
        except IntegrityError:
            raise SessionExistsError(header.id) from None
        await self._insert_events(conn, rows)
        await self._insert_citations(conn, cites)
        await self._insert_texts(conn, texts)

    async def _insert_texts(self, conn: AsyncConnection, rows: builtins.list[TextRow]) -> None:
        """The batch's search-index rows (SQLite's FTS5 follows by trigger)."""
        if not rows:
            return
        sql = _texts_sql(conn.dialect)
        if conn.dialect.name == "postgresql":
            rows = await _terms_off_loop(rows)
            params: builtins.list[tuple[Any, ...]] = builtins.list(rows)
        else:
            params = [row[:6] for row in rows]
        for i in range(0, len(params), _INSERT_CHUNK):
            await conn.exec_driver_sql(sql, params[i : i + _INSERT_CHUNK])

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
            log: builtins.list[FoldableEvent] = []
            if derived == stored:  # resume from the stored surface: no replay of the log
                fold = await self._resumed_fold(conn, session_id, stored, batch)
            else:
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
            await self._insert_texts(
                conn, await _batch_texts(session_id, batch, with_terms=not self.is_sqlite)
            )
            codes = fold.codes
            if derived == stored:
                newly = [
                    {"b_sid": session_id, "b_seq": seq, "b_by": made.seq}
                    for made in fold.replacements_since(stored)
                    for seq in made.shadowed
                    if seq < stored
                ]
                if newly:
                    await conn.execute(_SHADOW_STORED, newly)
                # the stored counts, moved by the batch (the resumed fold knows only it)
                current = int(locked.current_count) - len(newly) + codes.count(1, stored)
                shadowed = int(locked.shadowed_count) + len(newly) + codes.count(2, stored)
            else:
                await self._derive_stored(conn, session_id, fold.derivations(0)[:stored])
                cites = _citation_rows(session_id, log) + cites
                current, shadowed = codes.count(1), codes.count(2)
            await self._insert_citations(conn, cites)
            new_count = stored + len(batch)
            values: dict[str, Any] = {
                "event_count": new_count,
                "derived_count": new_count,
                "current_count": current,
                "shadowed_count": shadowed,
            }
            titled = title_seq(batch)
            if titled is not None:
                values["title_seq"] = titled
            await conn.execute(update(sessions).where(sessions.c.id == session_id).values(**values))
        return new_count

    @staticmethod
    async def _resumed_fold(
        conn: AsyncConnection, session_id: str, stored: int, batch: Sequence[SessionEvent]
    ) -> SurfaceFold:
        """The fold state after a derived stored log, from its stored current surface
        (labels in order) and the codes of the stored seqs the batch's replacements
        name: an append costs the surface and the batch, not the log."""
        current = [
            (int(seq), int(label))
            for seq, label in await conn.execute(_SELECT_CURRENT, {"sid": session_id})
        ]
        on_surface = {seq for seq, _ in current}
        named = {
            v
            for event in batch
            if type(event.surface_op) is dict
            for v in (event.surface_op.get("start"), event.surface_op.get("end"))
            if type(v) is int and 0 <= v < stored and v not in on_surface
        }
        codes: dict[int, int] = {}
        if named:
            result = await conn.execute(
                select(events.c.seq, events.c.surface).where(
                    events.c.session_id == session_id, events.c.seq.in_(sorted(named))
                )
            )
            codes = {int(seq): int(code) for seq, code in result}
        real = await _rewrite_payloads(conn, session_id, batch, stored)
        return SurfaceFold.resume(stored, current, codes, _append_lookup(batch, stored, real))

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
        rows = await _driver_rows(conn, _SELECT_SURFACE_FOLD, {"sid": session_id})
        real: dict[int, FoldableEvent] = {}
        replaying = True
        appending = _append_lookup(batch, stored, real)

        def lookup(seq: int) -> FoldableEvent:
            return log[seq] if replaying else appending(seq)

        fold = SurfaceFold(lookup)

        def replay(pause_gc: bool) -> None:
            """Rebuild the stored log's fold (synchronous: a GC pause never spans an await)."""
            add = log.append
            with gc_paused() if pause_gc else nullcontext():
                for seq, etype, op, src in rows:
                    while len(log) < seq:
                        add(_FoldEvent("", len(log), None, None, None))
                    stub = _REWRITE_STUB if etype == _TOOL_RESULT else None
                    sources = None if src is None else _load_sources(src)
                    add(_FoldEvent(etype, seq, stub, _load_op(op), sources))
                while len(log) < stored:
                    add(_FoldEvent("", len(log), None, None, None))
                fold.apply_all(log)

        try:
            if stored < _OFF_LOOP_FROM:
                replay(True)
            else:  # a long log: off the event loop, so a host serving reads keeps answering
                await asyncio.to_thread(replay, False)
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
        real.update(await _rewrite_payloads(conn, session_id, batch, stored))
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
        derived = await _derive_off_loop(header, batch, with_terms=not self.is_sqlite)
        prepared = PreparedImport(header, batch, *derived)
        async with self._writing() as conn:
            return await self._import_one(conn, prepared, replace=replace)

    async def _import_one(
        self, conn: AsyncConnection, prepared: PreparedImport, *, replace: bool
    ) -> ImportOutcome:
        header, batch, header_row, rows, cites, texts = prepared
        locked = (await conn.execute(_SELECT_HEADER_FOR_UPDATE, {"sid": header.id})).first()
        if locked is None:
            await self._insert_session(conn, header, header_row, rows, cites, texts)
            return "created"
        difference = await self._difference(conn, header, batch, locked)
        if difference is None:
            return "unchanged"
        if not replace:
            raise _conflict(header.id, difference)
        await self._delete(conn, header.id)
        await self._insert_session(conn, header, header_row, rows, cites, texts)
        return "replaced"

    async def import_many(
        self,
        items: Sequence[tuple[SessionHeader, Sequence[SessionEvent]]],
        *,
        replace: bool = False,
    ) -> builtins.list[ImportOutcome | Exception]:
        """`import_log` for many sessions, many per transaction; one outcome per item.

        Each item is all-or-nothing and gets what `import_log` would give it: its
        outcome, or the exception `import_log` would raise (returned, not raised:
        the fold's SessionQueryError, InvalidEventError, SessionConflictError, or a
        driver error that made its transaction fail). Every log is validated and
        encoded before anything is written; then new sessions are inserted together
        (one query finds which ids are stored, then batched inserts), and stored
        ids go through `import_log`'s comparison in the same transaction. If the
        batch transaction fails (a concurrent writer created one of the ids), its
        items are imported one by one instead. An id repeated within `items` is
        imported after the first, as a later `import_log` would be.
        """
        results: builtins.list[ImportOutcome | Exception | None] = [None] * len(items)
        prepared: builtins.list[tuple[int, PreparedImport]] = []
        for i, (header, log) in enumerate(items):
            try:
                prepared.append((i, prepare_import(header, log, with_terms=not self.is_sqlite)))
            except Exception as exc:  # the fold's or the encoder's refusal of this item
                results[i] = exc
        outcomes = await self.import_prepared([p for _, p in prepared], replace=replace)
        for (i, _), outcome in zip(prepared, outcomes, strict=True):
            results[i] = outcome
        return [r if r is not None else RuntimeError("not imported") for r in results]

    async def import_prepared(
        self, items: Sequence[PreparedImport], *, replace: bool = False
    ) -> builtins.list[ImportOutcome | Exception]:
        """`import_many` for logs already validated and encoded by `prepare_import`."""
        results: builtins.list[ImportOutcome | Exception | None] = [None] * len(items)
        ready: builtins.list[tuple[int, PreparedImport]] = []
        later: builtins.list[int] = []
        seen: set[str] = set()
        for i, prepared in enumerate(items):
            if prepared.header.id in seen:
                later.append(i)
            else:
                seen.add(prepared.header.id)
                ready.append((i, prepared))
        for chunk in _chunks(ready, _IMPORT_BATCH):
            try:
                async with self._writing() as conn:
                    done = await self._import_batch(conn, chunk, replace=replace)
            except IntegrityError:
                done = {}
                for i, prepared in chunk:
                    results[i] = await self._import_alone(prepared, replace)
            except Exception as exc:  # the database failed: nothing of the batch was written
                done = {i: exc for i, _ in chunk}
            for i, outcome in done.items():
                results[i] = outcome
        for i in later:
            results[i] = await self._import_alone(items[i], replace)
        return [r if r is not None else RuntimeError("not imported") for r in results]

    async def _import_alone(
        self, prepared: PreparedImport, replace: bool
    ) -> ImportOutcome | Exception:
        try:
            async with self._writing() as conn:
                return await self._import_one(conn, prepared, replace=replace)
        except Exception as exc:
            return exc

    async def _import_batch(
        self,
        conn: AsyncConnection,
        chunk: Sequence[tuple[int, PreparedImport]],
        *,
        replace: bool,
    ) -> dict[int, ImportOutcome | Exception]:
        """One transaction of `import_many`: new ids inserted together, stored ones compared."""
        ids = [prepared.header.id for _, prepared in chunk]
        stored: set[str] = set()
        for part in _chunks(ids, _ID_CHUNK):
            result = await conn.execute(select(sessions.c.id).where(sessions.c.id.in_(part)))
            stored.update(row[0] for row in result)
        out: dict[int, ImportOutcome | Exception] = {}
        header_rows: builtins.list[dict[str, Any]] = []
        rows: builtins.list[_EventRow] = []
        cites: builtins.list[tuple[str, int, int]] = []
        texts: builtins.list[TextRow] = []
        differences = await self._differences(conn, [p for _, p in chunk if p.header.id in stored])
        for i, prepared in chunk:
            sid = prepared.header.id
            if sid in stored:
                if sid not in differences:  # deleted meanwhile: as import_log would
                    out[i] = await self._import_one(conn, prepared, replace=replace)
                    continue
                difference = differences[sid]
                if difference is None:
                    out[i] = "unchanged"
                    continue
                if not replace:
                    out[i] = _conflict(sid, difference)
                    continue
                await self._delete(conn, sid)
                out[i] = "replaced"
            else:
                out[i] = "created"
            header_rows.append(prepared.session_row)
            rows.extend(prepared.event_rows)
            cites.extend(prepared.citation_rows)
            texts.extend(prepared.text_rows)
        if header_rows:
            order = _SESSION_ORDER
            await conn.exec_driver_sql(
                _sessions_sql(conn.dialect),
                [tuple(row[name] for name in order) for row in header_rows],
            )
            await self._insert_events(conn, rows)
            await self._insert_citations(conn, cites)
            await self._insert_texts(conn, texts)
        return out

    async def _difference(
        self,
        conn: AsyncConnection,
        header: SessionHeader,
        batch: Sequence[SessionEvent],
        locked: Any,
    ) -> str | None:
        """How the stored session differs from `header` + `batch`, or None if identical."""
        found = _header_difference(header, len(batch), locked)
        if found is not None:
            return found
        stored = int(locked.event_count)
        for lo in range(0, stored, _COMPARE_CHUNK):
            hi = min(stored, lo + _COMPARE_CHUNK) - 1
            rows = (
                await conn.execute(_SELECT_WINDOW, {"sid": header.id, "lo": lo, "hi": hi})
            ).all()
            found = _events_difference(_events_from_rows(rows), batch)
            if found is not None:
                return found
        return None

    async def _differences(
        self, conn: AsyncConnection, items: Sequence[PreparedImport]
    ) -> dict[str, str | None]:
        """`_difference` for many stored sessions (locked here): few queries for small logs.

        Ids that are no longer stored are left out.
        """
        ids = [p.header.id for p in items]
        locked: dict[str, Any] = {}
        for id_part in _chunks(ids, _ID_CHUNK):
            result = await conn.execute(_LOCK_HEADERS.where(sessions.c.id.in_(id_part)))
            for found in result:
                locked[found.id] = found
        out: dict[str, str | None] = {}
        same: builtins.list[PreparedImport] = []
        for p in items:
            row: Any = locked.get(p.header.id)
            if row is not None:
                out[p.header.id] = _header_difference(p.header, len(p.events), row)
                if out[p.header.id] is None and p.events:
                    same.append(p)
        if sum(len(p.events) for p in same) > _COMPARE_CHUNK:
            for p in same:
                out[p.header.id] = await self._difference(
                    conn, p.header, p.events, locked[p.header.id]
                )
            return out
        for part in _chunks(same, _ID_CHUNK):
            by_id = {p.header.id: p for p in part}
            condition = events.c.session_id.in_(builtins.list(by_id))
            rows = (await conn.execute(_SELECT_MANY_ALL.where(condition))).all()
            for sid, group in groupby(rows, key=itemgetter(0)):
                out[sid] = _rows_difference(group, by_id[sid])
        return out

    async def delete(self, session_id: str) -> bool:
        """Delete a session and its log; returns whether it was stored."""
        async with self._writing() as conn:
            return await self._delete(conn, session_id)

    @staticmethod
    async def _delete(conn: AsyncConnection, session_id: str) -> bool:
        await conn.execute(delete(event_texts).where(event_texts.c.session_id == session_id))
        await conn.execute(delete(citations).where(citations.c.session_id == session_id))
        await conn.execute(delete(events).where(events.c.session_id == session_id))
        result = await conn.execute(delete(sessions).where(sessions.c.id == session_id))
        return bool(result.rowcount)


async def _batch_texts(
    session_id: str, batch: builtins.list[SessionEvent], *, with_terms: bool
) -> builtins.list[TextRow]:
    """An appended batch's text rows; off the event loop for a long batch."""
    if len(batch) < _OFF_LOOP_FROM:
        return text_rows(session_id, batch, with_terms=with_terms)
    return await asyncio.to_thread(partial(text_rows, session_id, batch, with_terms=with_terms))


async def _terms_off_loop(rows: builtins.list[TextRow]) -> builtins.list[TextRow]:
    """Rows prepared without tokens get them (in a worker thread when many lack them)."""
    missing = sum(1 for row in rows if row.terms is None)
    if not missing:
        return rows
    if missing < _OFF_LOOP_FROM // 10:
        return text_rows_terms(rows)
    return await asyncio.to_thread(text_rows_terms, rows)


def _header_difference(header: SessionHeader, length: int, locked: Any) -> str | None:
    """How a stored header and log length (a locked sessions row) differ from ours."""
    stored_header = _header_from_row(locked[: len(HEADER_COLUMNS)])
    ours, theirs = header.to_json(), stored_header.to_json()
    if ours != theirs:
        fields = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        return f"the headers differ on {', '.join(fields)}"
    stored = int(locked.event_count)
    if stored != length:
        return f"the stored log has {stored} events, the new one {length}"
    return None


def _events_difference(stored: Sequence[SessionEvent], batch: Sequence[SessionEvent]) -> str | None:
    """The first stored event that differs from ours at its seq (as JSON values)."""
    for old in stored:
        if _canonical(old) != _canonical(batch[old.seq]):
            return f"event seq {old.seq} differs"
    return None


def _rows_difference(rows: Iterable[Any], prepared: PreparedImport) -> str | None:
    """`_events_difference` on stored rows (session_id, seq, type, time, surface_op,
    sources, ignorable, data; JSON as stored text): a row whose text equals what we
    would store is equal (one encoder made both); only others are decoded and
    compared as JSON values."""
    ours = prepared.event_rows
    for row in rows:
        seq = row[1]
        mine = ours[seq] if 0 <= seq < len(ours) else None
        if mine is not None and (
            row[2] == mine[2]
            and row[3] == mine[3]
            and row[4] == mine[4]
            and row[5] == mine[5]
            and bool(row[6]) == mine[6]
            and row[7] == mine[10]
        ):
            continue
        (old,) = _events_from_rows([row[1:]])
        if mine is None or _canonical(old) != _canonical(prepared.events[seq]):
            return f"event seq {seq} differs"
    return None


def _conflict(session_id: str, difference: str) -> SessionConflictError:
    return SessionConflictError(
        session_id,
        f"a different log is already stored ({difference}); "
        "refused (use --replace / replace=True to overwrite it)",
    )


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


async def _rewrite_payloads(
    conn: AsyncConnection, session_id: str, batch: Sequence[SessionEvent], stored: int
) -> dict[int, FoldableEvent]:
    """The stored tool/results a replacement in `batch` rewrites, with their payloads:
    the only stored payloads fold rule 7 compares."""
    targets = _rewrite_targets(batch, stored)
    if not targets:
        return {}
    result = await conn.execute(
        select(events.c.seq, events.c.type, _json_text(events.c.data)).where(
            and_(events.c.session_id == session_id, events.c.seq.in_(sorted(targets)))
        )
    )
    return {seq: _FoldEvent(etype, seq, _loads(data), None, None) for seq, etype, data in result}


def _append_lookup(
    batch: Sequence[SessionEvent], stored: int, real: dict[int, FoldableEvent]
) -> Callable[[int], FoldableEvent]:
    """The fold's `lookup` while a batch is applied after `stored` events: batch events
    by position, stored ones from the rule-7 payloads read for the batch (`real`)."""

    def lookup(seq: int) -> FoldableEvent:
        if seq >= stored:
            return batch[seq - stored]
        found = real.get(seq)
        if found is None:  # pragma: no cover - guarded by _rewrite_targets
            raise RuntimeError(f"append: the payload of stored seq {seq} was not loaded")
        return found

    return lookup
