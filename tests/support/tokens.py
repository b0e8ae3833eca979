"""Real access tokens for tests of what runs behind auth (CORS, trusted documents,
rate limits): issued by `TokenStore` into a SQLite file, checked by the gateway's
own `token_authenticator`, exactly as `serve --auth tokens` does.

Each spec is `(name, grants, trusted_documents_only)`; the answer maps each name
to its secret (the bearer token).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import TokenStore
from gateway.server.auth import token_authenticator
from gateway.server.principal import Authenticate

from .sqlite_backend import sqlite_url

KEY = b"test-token-key-" * 3
TokenSpec = tuple[str, list[str], bool]


async def _issue(db: SqlPersistence, specs: tuple[TokenSpec, ...]) -> dict[str, str]:
    store = TokenStore(db, KEY)
    issued = {}
    for name, grants, trusted_only in specs:
        _, issued[name] = await store.create(name, grants, trusted_documents_only=trusted_only)
    return issued


@asynccontextmanager
async def issued_tokens(
    path: Path, *specs: TokenSpec
) -> AsyncIterator[tuple[Authenticate, dict[str, str]]]:
    """`(authenticate, {name: secret})` over a token table in the SQLite file `path`."""
    db = SqlPersistence(sqlite_url(path))
    try:
        secrets = await _issue(db, specs)
        yield token_authenticator(TokenStore(db, KEY)), secrets
    finally:
        await db.close()


@contextmanager
def issued_tokens_for_a_server(
    path: Path, *specs: TokenSpec
) -> Iterator[tuple[Authenticate, dict[str, str]]]:
    """The same, for an app served on another event loop (`running_server`'s thread)."""

    async def issue() -> dict[str, str]:
        db = SqlPersistence(sqlite_url(path))
        try:
            return await _issue(db, specs)
        finally:
            await db.close()  # keep no connection pooled on this loop

    secrets = asyncio.run(issue())
    db = SqlPersistence(sqlite_url(path))
    try:
        yield token_authenticator(TokenStore(db, KEY)), secrets
    finally:
        asyncio.run(db.close())


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}
