"""Shared fixtures for the persistence tests, and checks of the fixtures themselves.

Every persistence test runs on both engines through `db_url` (SQLite in
tmp_path, and a fresh database on the throwaway PostgreSQL server of
`tests.support.pg_plugin`, which never skips silently in CI). Other modules
import the fixtures by their function names (`db_fixture`, `db_url_fixture`,
`engine_name_fixture`), which register them under `db`, `db_url`, `engine_name`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import pytest

from gateway.core import SessionEvent, SessionHeader
from gateway.persistence import SqlPersistence, migrate
from tests.core_helpers import ev, replace, tool_data

T = TypeVar("T")

ENGINES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]

U, A, T_RESULT = "user/message", "assistant/message", "tool/result"


@pytest.fixture(name="engine_name", params=ENGINES)
def engine_name_fixture(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(name="db_url")
def db_url_fixture(engine_name: str, request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """An empty, unmigrated database on the engine under test."""
    if engine_name == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(name="db")
async def db_fixture(db_url: str) -> AsyncIterator[SqlPersistence]:
    """A migrated database and a backend on it (closed afterwards)."""
    await migrate(db_url)
    backend = SqlPersistence(db_url)
    try:
        yield backend
    finally:
        await backend.close()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from a synchronous test (the CLI owns its own event loop)."""
    return asyncio.run(coro)


def canonical(value: Any) -> str:
    """Equal iff equal as JSON values, with JSON's types kept apart (1, 1.0 and true differ)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def log_json(events: list[SessionEvent]) -> list[str]:
    return [canonical(e.to_json()) for e in events]


HEADER = SessionHeader(
    "full",
    1_780_000_000_123,
    cwd="/work",
    parent_session="parent",
    seed_length=2,
    origin="subagent",
    delegation_depth=1,
    agent_preset="coder",
)

TRICKY_DATA: dict[str, Any] = {
    "big": 2**70,
    "negbig": -(2**63) - 1,
    "safe": 2**53 - 1,
    "floats": [0.1, 1e300, 1e16, 1.0, -2.5e-308, 123456789.125],
    "nul": "a\u0000b",
    "lone": "x\ud800y",
    "unicode": "h\u00e9llo \u2028 \U0001f600",
    "nested": {"z": 1, "a": [None, True, False, {}, []]},
    "order": {"b": 1, "a": 2, "c": 3},
}


def sample_log() -> list[SessionEvent]:
    """A log using every feature: log-only events, appends, sources (empty too), a
    positional replacement, a tool-result rewrite, ignorable, null and tricky data."""
    events = [
        ev(0, "turn/start", {"turn": 1}),
        ev(1, U, {"content": [{"type": "text", "text": "hi"}]}, "append"),
        ev(2, "assistant/chunk", {"turn": 1, "step": 1, "chunk": {"text": "o"}}),
        ev(3, A, {"content": [{"type": "text", "text": "ok"}]}, "append", []),
        ev(4, "tool/call", {"id": "c1", "name": "bash"}),
        ev(5, T_RESULT, tool_data("long output"), "append", [4]),
        ev(6, U, TRICKY_DATA, "append", [1, 3]),
        ev(7, T_RESULT, tool_data("[elided]"), replace(5, 5), [5]),
        ev(8, A, {"content": [{"type": "text", "text": "summary"}]}, replace(1, 3), [1, 3]),
        SessionEvent("step/end", 9, 1_009, None, ignorable=True),
        ev(10, "plugin/unknown", [1, "two", None]),
        ev(11, U, "just a string", "append"),
    ]
    return events


async def test_db_fixture_gives_a_migrated_empty_database(db: SqlPersistence) -> None:
    assert await db.list() == []
    state = await db.ensure_schema()
    assert state.status == "current"


def test_sample_log_is_valid_under_the_fold() -> None:
    from gateway.core import EventSurface, fold_surface

    fold = fold_surface(sample_log())
    assert fold.surface_of(5) is EventSurface.SHADOWED
    assert fold.nodes == (8, 7, 6, 11)
