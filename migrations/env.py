"""Alembic environment for the session-query gateway.

Normally run through `gateway.persistence.migrations`, which hands over an open
connection (already inside a transaction) in `config.attributes["connection"]`.
Run by the `alembic` tool instead, it connects to the URL given as
`-x url=...`, the `sqlalchemy.url` option, or `$SESSION_GATEWAY_DATABASE_URL`.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from gateway.persistence.engine import create_engine, default_database_url, normalize_url
from gateway.persistence.tables import metadata

config = context.config
target_metadata = metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url")
        or config.get_main_option("sqlalchemy.url")
        or default_database_url()
    )


async def _run_with_own_engine() -> None:
    engine = create_engine(normalize_url(_url()), statement_timeout=None)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run)
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    context.configure(
        url=normalize_url(_url()),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_with_own_engine())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
