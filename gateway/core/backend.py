"""What the core needs of a persistence backend (SPEC §6), and nothing more.

A backend is any object with `list()` and `load()`. Backends may also offer
the optional fast paths below; the core uses them when present and the
contract's results stay identical.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .model import SessionEvent, SessionHeader


@runtime_checkable
class PersistenceBackend(Protocol):
    """The required surface of a backend: authoritative headers and whole logs."""

    async def list(self) -> builtins.list[SessionHeader]: ...

    async def load(self, session_id: str) -> tuple[SessionHeader, builtins.list[SessionEvent]]: ...


class HeaderLookup(Protocol):
    """Fast path: prove one id is there without listing every header."""

    async def load_header(self, session_id: str) -> SessionHeader | None: ...


class WindowLoader(Protocol):
    """Fast path: the events with `start <= seq <= end`, ascending, and the header."""

    async def load_window(
        self, session_id: str, start: int, end: int
    ) -> tuple[SessionHeader, list[SessionEvent]]: ...


class FoldLogLoader(Protocol):
    """Fast path: every event, but `data` only where the fold needs it (tool/result).

    Other events come back with `data=None`; enough for listing and tracing.
    """

    async def load_fold_log(self, session_id: str) -> tuple[SessionHeader, list[SessionEvent]]: ...


class BatchLoaders(Protocol):
    """Fast paths for many keys at once; missing keys are left out of the answer.

    The core coalesces the keys asked for in one event-loop turn of one
    observation (a GraphQL request) into one call of these, when present.
    """

    async def load_headers(self, session_ids: Sequence[str]) -> dict[str, SessionHeader]: ...

    async def load_fold_logs(
        self, session_ids: Sequence[str]
    ) -> dict[str, tuple[SessionHeader, builtins.list[SessionEvent]]]: ...

    async def load_windows(
        self, requests: Sequence[tuple[str, int, int]]
    ) -> dict[tuple[str, int, int], tuple[SessionHeader, builtins.list[SessionEvent]]]: ...


def has_method(backend: object, name: str) -> bool:
    """Whether a backend offers an optional fast path."""
    return callable(getattr(backend, name, None))
