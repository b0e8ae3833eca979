"""Checkpointing: persist the tail of a live session that the backend lacks.

Persisted state may lag live state (SPEC §3: the live header and log win on
reads; `persisted` says whether a backend holds the session at all). A host
calls `checkpoint(session, backend)` whenever it likes (after each turn, on a
timer, before `store.remove`), and the backend catches up with the snapshot the
live session has at that moment.
"""

from __future__ import annotations

import json

from gateway.core.model import SessionEvent
from gateway.core.store import LiveSession

from .errors import SessionConflictError, SessionExistsError
from .sql import SqlPersistence


def _key(event: SessionEvent) -> str:
    return json.dumps(event.to_json(), sort_keys=True, separators=(",", ":"))


async def checkpoint(
    session: LiveSession, backend: SqlPersistence, *, verify_prefix: bool = True
) -> int:
    """Write the events of `session` that `backend` lacks; return how many were written.

    Takes one snapshot of the live session. When the backend has no such session,
    the header and the whole log are created together. Otherwise the stored
    header must equal the live one and the stored log must be a prefix of the
    live log (every stored event equal to the live event at its seq, as JSON
    values), else `SessionConflictError` and nothing is written; then only the
    missing tail is appended (atomically, validated like any append). Checking
    the prefix reads the stored log; `verify_prefix=False` skips that for a host
    that is the only writer of its sessions and checkpoints often (the seqs and
    the fold are still checked by `append`).

    A concurrent writer that gets there first makes the append fail with
    `NonContiguousAppendError`; checkpointing again then picks up from there.
    """
    header, events = session.snapshot()
    stored_header = await backend.load_header(header.id)
    if stored_header is None:
        try:
            await backend.create(header, events)
        except SessionExistsError:
            pass  # created concurrently: fall through and append what it lacks
        else:
            return len(events)
        stored_header = await backend.load_header(header.id)
        assert stored_header is not None
    if stored_header.to_json() != header.to_json():
        ours, theirs = header.to_json(), stored_header.to_json()
        fields = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        raise SessionConflictError(
            header.id,
            f"cannot checkpoint: the stored header differs from the live one on "
            f"{', '.join(fields)}",
        )
    stored_count = await backend.count(header.id)
    if stored_count > len(events):
        raise SessionConflictError(
            header.id,
            f"cannot checkpoint: the stored log has {stored_count} events, "
            f"more than the live session's {len(events)}",
        )
    if verify_prefix and stored_count:
        _, stored = await backend.load_window(header.id, 0, stored_count - 1)
        for old in stored:
            if _key(old) != _key(events[old.seq]):
                raise SessionConflictError(
                    header.id,
                    f"cannot checkpoint: stored event seq {old.seq} differs from the live one",
                )
    tail = events[stored_count:]
    if not tail:
        return 0
    await backend.append(header.id, tail)
    return len(tail)
