"""Errors of the SQL persistence layer, outside the query contract's closed set.

The query core wraps any backend failure as `SESSION_QUERY_PERSISTENCE_FAILED`;
these classes exist for writers (`create`, `append`, import, checkpoint) and
for operators (schema state), so each failure says what was wrong and what to
do. A batch that breaks a surface-fold rule is not one of these: it raises the
core's `SessionQueryError(SESSION_QUERY_INVALID_SURFACE)`.

Every class derives from `PersistenceError` and from the builtin that fits
(`ValueError`, `KeyError`, `RuntimeError`), so generic handlers keep working.
"""

from __future__ import annotations

import re

from sqlalchemy.exc import StatementError


class PersistenceError(Exception):
    """Base class: a write or schema problem the caller can act on."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # KeyError would otherwise print the repr of the message
        return self.message


class UnknownSessionError(PersistenceError, KeyError):
    """No session with this id is stored (append, count, load of a missing id)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is not stored in this database")
        self.session_id = session_id


class SessionExistsError(PersistenceError, ValueError):
    """`create` of an id that is already stored (created earlier, or concurrently)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is already stored in this database")
        self.session_id = session_id


class NonContiguousAppendError(PersistenceError, ValueError):
    """An append batch does not continue the stored log at its next seq.

    `expected` is the stored log's length (the seq the batch had to start
    with, or the seq at the position that broke contiguity); `got` is what the
    batch held there. Another writer appending first produces this error too.
    """

    def __init__(self, session_id: str, expected: int, got: object, *, position: int = 0) -> None:
        where = "starts" if position == 0 else f"has at position {position}"
        super().__init__(
            f"append to session {session_id!r} must continue the stored log at seq {expected}, "
            f"but the batch {where} seq {got!r}; nothing was written"
        )
        self.session_id = session_id
        self.expected = expected
        self.got = got


class InvalidEventError(PersistenceError, ValueError):
    """An event or header field the database cannot hold (not a fold rule).

    E.g. a `time` that is not an integer, a type that is not a string, or a
    payload that is not JSON.
    """


class SessionConflictError(PersistenceError, ValueError):
    """A different log is already stored under this id (import without --replace,
    or a checkpoint whose live session disagrees with what is stored)."""

    def __init__(self, session_id: str, detail: str) -> None:
        super().__init__(f"session {session_id!r}: {detail}")
        self.session_id = session_id
        self.detail = detail


class StoredDataError(PersistenceError, RuntimeError):
    """The database holds less than it states: a read of a session did not get the rows
    its `sessions` row counts (a damaged file, or rows deleted behind the writer's
    back; see `gateway.persistence.integrity`). Readers report it as
    PERSISTENCE_FAILED, never as a short answer; `session-gateway verify --quick`
    finds it across the database."""

    def __init__(self, session_id: str, detail: str) -> None:
        super().__init__(f"stored data of session {session_id!r} is damaged: {detail}")
        self.session_id = session_id
        self.detail = detail


class SchemaVersionError(PersistenceError, RuntimeError):
    """The database's schema is missing, older than this code, unknown or newer.

    The message names the command that fixes it
    (`session-gateway migrate --database URL`).
    """


_CLASS_PREFIX = re.compile(r"^<class '([\w.]+)'>:\s*")


def describe_failure(exc: BaseException) -> str:
    """A database failure in an operator's terms, one line: the driver's own message,
    without the SQL statement and bound parameters SQLAlchemy appends to it."""
    inner = getattr(exc, "orig", None) if isinstance(exc, StatementError) else None
    source = inner if isinstance(inner, BaseException) else exc
    text = str(source).strip()
    line = text.splitlines()[0] if text else ""
    named = _CLASS_PREFIX.match(line)
    kind = named.group(1).rsplit(".", 1)[-1] if named else type(source).__name__
    line = _CLASS_PREFIX.sub("", line)[:300]
    return f"{kind}: {line}" if line else kind
