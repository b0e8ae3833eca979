"""The real persistence backend on a SQLite file, for tests that need a persisted source.

`sql_backend(path)` opens `SqlPersistence` on `path` (a fresh file is migrated on
first use) and closes it on exit. Use it in a yielding fixture:

    @pytest.fixture
    async def backend(tmp_path):
        async with sql_backend(tmp_path / "x.db") as db:
            yield db
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from gateway.persistence import SqlPersistence


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


@asynccontextmanager
async def sql_backend(path: Path) -> AsyncIterator[SqlPersistence]:
    """A `SqlPersistence` on the SQLite file `path`, closed when the block ends."""
    db = SqlPersistence(sqlite_url(path))
    try:
        yield db
    finally:
        await db.close()
