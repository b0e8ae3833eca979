"""The closed set of session-query errors (SPEC §5).

One exception class carries one of ten codes; every layer above the core
(GraphQL, CLI) maps it without inventing new codes.
"""

from __future__ import annotations

import logging
import secrets
from enum import StrEnum

from .ids import shown


class ErrorCode(StrEnum):
    """Every failure the query contract can report."""

    EVENT_NOT_FOUND = "SESSION_QUERY_EVENT_NOT_FOUND"
    INVALID_CONFIG = "SESSION_QUERY_INVALID_CONFIG"
    INVALID_FILTER = "SESSION_QUERY_INVALID_FILTER"
    INVALID_LINEAGE = "SESSION_QUERY_INVALID_LINEAGE"
    INVALID_QUERY = "SESSION_QUERY_INVALID_QUERY"
    INVALID_SURFACE = "SESSION_QUERY_INVALID_SURFACE"
    INVALID_WINDOW = "SESSION_QUERY_INVALID_WINDOW"
    PERSISTENCE_FAILED = "SESSION_QUERY_PERSISTENCE_FAILED"
    SESSION_NOT_FOUND = "SESSION_QUERY_SESSION_NOT_FOUND"
    SOURCE_CONFLICT = "SESSION_QUERY_SOURCE_CONFLICT"


class SessionQueryError(Exception):
    """A contract failure: `code` is one of `ErrorCode`, `message` says what was wrong."""

    correlation_id: str | None = None
    """Set on PERSISTENCE_FAILED from a backend exception: the id of its log line."""

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(f"{self.code.value}: {message}")

    def __reduce__(self) -> tuple[type[SessionQueryError], tuple[str, str]]:
        return (SessionQueryError, (self.code.value, self.message))


_log = logging.getLogger("gateway.core")


def backend_failure(what: str, exc: BaseException) -> SessionQueryError:
    """PERSISTENCE_FAILED for a backend exception, its text kept out of the message.

    Driver messages hold SQL, bound parameters and host:port; they go to the log
    with a fresh correlation id, and the error (its message and its
    `correlation_id`) names only what failed, the class of the exception at the root
    of it and that id.
    """
    correlation_id = secrets.token_hex(8)
    _log.error(
        "persistence backend failed to %s (correlation id %s): %s: %s",
        what,
        correlation_id,
        type(exc).__name__,
        exc,
        exc_info=(type(exc), exc, exc.__traceback__),
    )
    error = SessionQueryError(
        ErrorCode.PERSISTENCE_FAILED,
        f"persistence backend failed to {what} ({type(_root_cause(exc)).__name__}; "
        f"correlation id {correlation_id})",
    )
    error.correlation_id = correlation_id
    return error


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception a wrapper stands for (a database library's `orig`, or the
    `__cause__` chain): its class says what happened (`QueryCanceledError`,
    `ConnectionRefusedError`) where the wrapper's says only `DBAPIError`."""
    for _ in range(8):
        inner = getattr(exc, "orig", None)
        if not isinstance(inner, BaseException):
            inner = exc.__cause__
        if inner is None or inner is exc:
            return exc
        exc = inner
    return exc


def session_not_found(session_id: str, why: str) -> SessionQueryError:
    """SESSION_NOT_FOUND for `session_id` (shown safely), saying why."""
    return SessionQueryError(
        ErrorCode.SESSION_NOT_FOUND, f"session {shown(session_id)} was not found: {why}"
    )


def source_conflict(session_id: str, what: str, fields: list[str]) -> SessionQueryError:
    """SOURCE_CONFLICT: two headers of `session_id` (`what`) disagree on `fields`."""
    return SessionQueryError(
        ErrorCode.SOURCE_CONFLICT,
        f"session {session_id!r}: {what} disagree on {', '.join(fields) or 'their fields'}",
    )
