"""The closed set of session-query errors (SPEC §5).

One exception class carries one of eight codes; every layer above the core
(GraphQL, CLI) maps it without inventing new codes.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Every failure the query contract can report."""

    EVENT_NOT_FOUND = "SESSION_QUERY_EVENT_NOT_FOUND"
    INVALID_CONFIG = "SESSION_QUERY_INVALID_CONFIG"
    INVALID_LINEAGE = "SESSION_QUERY_INVALID_LINEAGE"
    INVALID_SURFACE = "SESSION_QUERY_INVALID_SURFACE"
    INVALID_WINDOW = "SESSION_QUERY_INVALID_WINDOW"
    PERSISTENCE_FAILED = "SESSION_QUERY_PERSISTENCE_FAILED"
    SESSION_NOT_FOUND = "SESSION_QUERY_SESSION_NOT_FOUND"
    SOURCE_CONFLICT = "SESSION_QUERY_SOURCE_CONFLICT"


class SessionQueryError(Exception):
    """A contract failure: `code` is one of `ErrorCode`, `message` says what was wrong."""

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(f"{self.code.value}: {message}")

    def __reduce__(self) -> tuple[type[SessionQueryError], tuple[str, str]]:
        return (SessionQueryError, (self.code.value, self.message))
