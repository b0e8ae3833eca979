"""Backends for core tests: the real SqlPersistence, a call counter around it, and
doubles that inject failures a real backend cannot produce on cue."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gateway.core import SessionEvent, SessionHeader


async def persist(db: Any, header: SessionHeader, events: list[SessionEvent] = ()) -> None:
    """Write a session through the real backend's public API."""
    await db.create(header)
    if events:
        await db.append(header.id, list(events))


class Counting:
    """Wraps a real backend and counts every call by method name."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await attr(*args, **kwargs)

        return counted

    def reset(self) -> None:
        self.calls.clear()

    @property
    def total(self) -> int:
        return sum(self.calls.values())


class Broken:
    """A backend whose every call raises, and which records that it was called."""

    def __init__(self, exc: Exception | None = None) -> None:
        self.exc = exc or ConnectionRefusedError("database is down")
        self.calls = 0

    async def list(self) -> list[SessionHeader]:
        self.calls += 1
        raise self.exc

    async def load(self, session_id: str) -> tuple[SessionHeader, list[SessionEvent]]:
        self.calls += 1
        raise self.exc


class Scripted:
    """Answers list/load from fixed data: for headers that disagree between list and load,
    or logs a validating backend would never have stored."""

    def __init__(
        self,
        listed: list[SessionHeader],
        logs: dict[str, tuple[SessionHeader, list[SessionEvent]]],
    ) -> None:
        self.listed = listed
        self.logs = logs

    async def list(self) -> list[SessionHeader]:
        return list(self.listed)

    async def load(self, session_id: str) -> tuple[SessionHeader, list[SessionEvent]]:
        header, events = self.logs[session_id]
        return header, list(events)
