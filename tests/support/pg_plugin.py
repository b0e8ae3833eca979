"""pytest plugin: one throwaway PostgreSQL server per run, one fresh database per test.

Register with `pytest_plugins = ["tests.support.pg_plugin"]` (or `-p tests.support.pg_plugin`).
Outside CI, `SESSION_GATEWAY_SKIP_POSTGRES=1` skips PostgreSQL-backed tests; in every
other case, failing to get a server is a test error, never a silent skip.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator

import pytest

from tests.support.postgres import PostgresServer

SKIP_ENV = "SESSION_GATEWAY_SKIP_POSTGRES"
_PG_FIXTURES = {"postgres_server", "postgres_url"}


def _skip_allowed() -> bool:
    in_ci = os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}
    return os.environ.get(SKIP_ENV) == "1" and not in_ci


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests that use the server as `postgres`, so `-m "not postgres"` works."""
    for item in items:
        if _PG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def postgres_server(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    """One server for the whole run (start-up dominates a per-test server's cost)."""
    if _skip_allowed():
        pytest.skip(f"{SKIP_ENV}=1: PostgreSQL-backed tests skipped")
    server: PostgresServer | None = None
    try:
        # Uncaptured, so a one-time apt-get install shows its progress line in CI logs.
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            PostgresServer.ensure_binaries()
        server = PostgresServer()
        server.start()
    except Exception as exc:
        if server is not None:
            server.cleanup()
        pytest.fail(
            f"could not start the throwaway PostgreSQL test server: {type(exc).__name__}: {exc}\n"
            f"(outside CI, set {SKIP_ENV}=1 to skip PostgreSQL-backed tests)",
            pytrace=False,
        )
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database for this test, as a `postgresql+asyncpg://` URL."""
    slug = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")[:40]
    name = f"t_{slug}_{uuid.uuid4().hex[:8]}"
    postgres_server.start()  # No-op when running; revives it if an outage drill left it down.
    postgres_server.create_database(name)
    yield postgres_server.url(name)
    postgres_server.start()
    postgres_server.drop_database(name)
