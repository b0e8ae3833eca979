"""Access tokens in the database (SPEC §10): create, list, revoke, authenticate.

A token string is `sgw_<token_id>_<secret>`: `token_id` (12 hex digits) is
public and finds the row; `secret` (32 random bytes from `secrets`, base64url)
is never stored. The row keeps `HMAC-SHA256(key, secret)`, compared with
`hmac.compare_digest`.

Why HMAC and not a slow password KDF (scrypt, argon2): the secrets are 256
random bits, so nobody can guess one however fast the hash is; a slow KDF
would only add tens of milliseconds to every request. The key is what a KDF's
slowness would otherwise buy: it lives outside the database
(`SESSION_GATEWAY_TOKEN_KEY`, else a 0600 key file beside the user's config,
created by the first `token create`), so a leaked database (a backup, a
replica) neither reveals a secret nor lets anyone check a guess offline.
Every replica that authenticates needs the same key.

Nothing is cached: each request reads its token's row, so a revocation or an
expiry takes effect on the next request of every replica. The read is one
question of the read path (`gateway.persistence.readers`): one hop on SQLite.

The token check only reads, so a request never waits on a writer (an import
holding SQLite's write lock, a PostgreSQL row lock). `last_used_at` is
recorded off the request path: a use is noted in memory (one entry per token,
the latest time) when the row's time is a minute old or more, and
`flush_last_used` writes the noted times in one short transaction — every
`LAST_USED_FLUSH_INTERVAL` seconds from `run_last_used_flusher`, a background
task of the app's lifespan (`serve` starts it). The flush is best effort: it
waits at most `LAST_USED_WAIT` seconds for a lock, a failure is logged once
(until a flush succeeds again) and its times are kept for the next flush, never
reported to a request. A time may be late by the flush interval, and lost if the
process dies first; `token list` shows it at the minute's resolution as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.core.scope import Scope

from .base import SqlBase
from .readers import fixed
from .tables import access_tokens

ENV_TOKEN_KEY = "SESSION_GATEWAY_TOKEN_KEY"
TOKEN_PREFIX = "sgw_"
LAST_USED_RESOLUTION_MS = 60_000
LAST_USED_FLUSH_INTERVAL = 2.0
"""Seconds between two writes of the noted token uses."""
LAST_USED_WAIT = 0.5
"""Seconds a flush waits for a lock (SQLite's write lock, a PostgreSQL row lock)."""
MIN_KEY_CHARS = 32
_TOKEN_RE = re.compile(r"sgw_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,99}")


logger = logging.getLogger("gateway.persistence.tokens")


class TokenError(Exception):
    """A token operation that cannot be done (clear message for the operator)."""


class TokenRefused(Exception):
    """A presented token that does not authenticate; `reason` is safe to show its holder."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def now_ms() -> int:
    return int(time.time() * 1000)


def default_key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "session-gateway" / "token.key"


def load_token_key(*, create: bool = False, path: Path | None = None) -> bytes:
    """The server-side HMAC key: `$SESSION_GATEWAY_TOKEN_KEY`, else the key file
    (made, mode 0600, when `create` and it does not exist yet)."""
    env = os.environ.get(ENV_TOKEN_KEY)
    if env is not None:
        if len(env) < MIN_KEY_CHARS:
            raise TokenError(
                f"{ENV_TOKEN_KEY} must be at least {MIN_KEY_CHARS} characters "
                "(for example: openssl rand -hex 32)"
            )
        return env.encode("utf-8")
    path = path or default_key_path()
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        if not create:
            raise TokenError(
                f"no token key: set {ENV_TOKEN_KEY} or create a token first "
                f"(`session-gateway token create` writes {path})"
            ) from None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = secrets.token_hex(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(text + "\n")
    except OSError as exc:
        raise TokenError(f"cannot read the token key {path}: {exc.strerror}") from exc
    if len(text) < MIN_KEY_CHARS:
        raise TokenError(f"the token key file {path} is too short; remove it and create a token")
    return text.encode("ascii")


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """What is known about a token (never its secret)."""

    name: str
    token_id: str
    grants: tuple[str, ...]
    trusted_documents_only: bool
    created_at: int
    expires_at: int | None
    revoked_at: int | None
    last_used_at: int | None

    def state(self, now: int) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"


_COLUMNS = (
    access_tokens.c.name,
    access_tokens.c.token_id,
    access_tokens.c.grants,
    access_tokens.c.trusted_documents_only,
    access_tokens.c.created_at,
    access_tokens.c.expires_at,
    access_tokens.c.revoked_at,
    access_tokens.c.last_used_at,
)


_SELECT_TOKEN = select(*_COLUMNS, access_tokens.c.secret_hash).where(
    access_tokens.c.token_id == bindparam("tid")
)
fixed(_SELECT_TOKEN)


def _info(row: Sequence[Any]) -> TokenInfo:
    name, token_id, grants, trusted, created, expires, revoked, used = row
    return TokenInfo(
        str(name),
        str(token_id),
        tuple(json.loads(str(grants))),
        bool(trusted),
        int(created),
        None if expires is None else int(expires),
        None if revoked is None else int(revoked),
        None if used is None else int(used),
    )


class TokenStore:
    """The access tokens of one database, hashed under one key (None: a store that only
    lists, which hashes nothing)."""

    def __init__(self, db: SqlBase, key: bytes | None) -> None:
        self._db = db
        self._key = key
        self._used: dict[str, int] = {}  # token id -> latest use not yet written (ms)
        self._failing = False  # the last flush failed (logged once until one succeeds)

    def _hash(self, secret: str) -> str:
        if self._key is None:  # a store made for listing only
            raise TokenError(f"this needs the token key: set {ENV_TOKEN_KEY}")
        return hmac.new(self._key, secret.encode("ascii"), hashlib.sha256).hexdigest()

    async def create(
        self,
        name: str,
        grants: list[str],
        *,
        expires_in_days: float | None = None,
        trusted_documents_only: bool = False,
    ) -> tuple[TokenInfo, str]:
        """A new token and its token string (shown once: only its hash is kept)."""
        if not _NAME_RE.fullmatch(name):
            raise TokenError(
                f"token name {name!r}: use 1-100 letters, digits, '.', '_', '@' or '-', "
                "starting with a letter or digit"
            )
        if not grants:
            raise TokenError("a token needs at least one --grant (all, cwd:, id: or tree:)")
        try:
            Scope.parse(grants)
        except ValueError as exc:
            raise TokenError(str(exc)) from None
        if expires_in_days is not None and not 0 < expires_in_days <= 36_500:
            raise TokenError("--expires-in must be a number of days between 0 and 36500")
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        created = now_ms()
        expires = None if expires_in_days is None else created + int(expires_in_days * 86_400_000)
        kept = list(dict.fromkeys(grants))
        row = {
            "token_id": token_id,
            "name": name,
            "secret_hash": self._hash(secret),
            "grants": json.dumps(kept),
            "trusted_documents_only": trusted_documents_only,
            "created_at": created,
            "expires_at": expires,
        }
        try:
            async with self._db._writing() as conn:
                await conn.execute(access_tokens.insert(), row)
        except IntegrityError:
            raise TokenError(
                f"a token named {name!r} already exists (revoked tokens keep their name); "
                "choose another name"
            ) from None
        info = TokenInfo(
            name,
            token_id,
            tuple(kept),
            trusted_documents_only,
            created,
            expires,
            None,
            None,
        )
        return info, f"{TOKEN_PREFIX}{token_id}_{secret}"

    async def list(self) -> list[TokenInfo]:
        """Every token, oldest first."""
        async with self._db._reading() as conn:
            rows = await conn.execute(
                select(*_COLUMNS).order_by(access_tokens.c.created_at, access_tokens.c.name)
            )
            return [_info(tuple(r)) for r in rows]

    async def revoke(self, name: str) -> TokenInfo:
        """Revoke the token of this name (revoking twice keeps the first time)."""
        async with self._db._writing() as conn:
            await conn.execute(
                update(access_tokens)
                .where(access_tokens.c.name == name, access_tokens.c.revoked_at.is_(None))
                .values(revoked_at=now_ms())
            )
            row = (
                await conn.execute(select(*_COLUMNS).where(access_tokens.c.name == name))
            ).first()
        if row is None:
            raise TokenError(
                f"no token is named {name!r} (`session-gateway token list` shows them)"
            )
        return _info(tuple(row))

    async def authenticate(self, token: str, within: object | None = None) -> TokenInfo:
        """The active token this string is, or TokenRefused saying why not.

        `within`: a backend reading in a request's snapshot (a `BackendSnapshot`'s,
        maybe behind proxies). When it reads this store's database, the token is read
        in that snapshot, as the request's first read: one transaction (on PostgreSQL
        one connection and its renewal) for the token and the request's reads."""
        match = _TOKEN_RE.fullmatch(token)
        if match is None:
            raise TokenRefused("the bearer token is not a session-gateway token")
        token_id, secret = match.groups()
        rows = await self._reader(within)._read(
            lambda conn: conn.rows(_SELECT_TOKEN, {"tid": token_id}), inline=True
        )
        row = rows[0] if rows else None
        expected = str(row[-1]) if row is not None else "0" * 64
        matches = hmac.compare_digest(expected, self._hash(secret))
        if row is None or not matches:
            raise TokenRefused("the bearer token is not valid")
        info = _info(tuple(row[:-1]))
        now = now_ms()
        state = info.state(now)
        if state != "active":
            raise TokenRefused(f"the bearer token has been {state}")
        if info.last_used_at is None or now - info.last_used_at >= LAST_USED_RESOLUTION_MS:
            self._used[token_id] = max(now, self._used.get(token_id, now))  # written later
        return info

    def _reader(self, within: object | None) -> SqlBase:
        """The view to read a token in: `within`'s when it is this database's."""
        if within is not None:
            view = getattr(within, "sql_view", None)
            found = view() if callable(view) else None
            if isinstance(found, SqlBase) and found._origin is self._db._origin:
                return found
        return self._db

    # -- last_used_at, off the request path ------------------------------------------

    @property
    def pending_uses(self) -> int:
        """How many tokens have a use noted and not yet written."""
        return len(self._used)

    async def flush_last_used(self) -> bool:
        """Write the noted uses in one short transaction; True when they were written
        (or none were noted). Never raises: a failure keeps them for the next flush."""
        if not self._used:
            return True
        batch, self._used = self._used, {}
        try:
            async with self._short_write() as conn:
                await conn.execute(
                    update(access_tokens)
                    .where(access_tokens.c.token_id == bindparam("tid"))
                    .values(last_used_at=bindparam("used")),
                    [{"tid": tid, "used": used} for tid, used in batch.items()],
                )
        except asyncio.CancelledError:
            self._keep(batch)
            raise
        except Exception as exc:  # best effort: never a request's failure
            self._keep(batch)
            if not self._failing:
                self._failing = True
                logger.warning(
                    "could not record token last-used times (kept for the next try; "
                    "logged once until it works again): %s: %s",
                    type(exc).__name__,
                    next(iter(str(exc).splitlines()), ""),
                )
            return False
        if self._failing:
            self._failing = False
            logger.info("token last-used times are recorded again")
        return True

    def _keep(self, batch: dict[str, int]) -> None:
        for tid, used in batch.items():
            self._used[tid] = max(used, self._used.get(tid, used))

    @contextlib.asynccontextmanager
    async def _short_write(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction that waits at most `LAST_USED_WAIT` for a lock."""
        db = self._db
        await db._ensure_ready()
        async with db.engine.connect() as conn:
            if db.is_sqlite:
                # the connection's busy timeout, shortened for this transaction only
                kept = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
                await conn.exec_driver_sql(f"PRAGMA busy_timeout={int(LAST_USED_WAIT * 1000)}")
                await conn.commit()  # reading the pragma began a transaction
                try:
                    await conn.execution_options(**db._write_options)
                    async with conn.begin():
                        yield conn
                finally:
                    with contextlib.suppress(Exception):
                        await conn.exec_driver_sql(f"PRAGMA busy_timeout={int(kept or 0)}")
                        await conn.commit()
            else:
                async with conn.begin():
                    wait = f"{int(LAST_USED_WAIT * 1000)}ms"
                    await conn.execute(text(f"SET LOCAL lock_timeout = '{wait}'"))
                    await conn.execute(text(f"SET LOCAL statement_timeout = '{wait}'"))
                    yield conn

    async def run_last_used_flusher(self, interval: float = LAST_USED_FLUSH_INTERVAL) -> None:
        """Flush the noted uses every `interval` seconds until cancelled, then once more
        (within `LAST_USED_WAIT`): the app's lifespan runs it as a background task."""
        try:
            while True:
                await asyncio.sleep(interval)
                await self.flush_last_used()
        finally:
            if self._used:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(self.flush_last_used(), LAST_USED_WAIT * 2)


__all__ = [
    "ENV_TOKEN_KEY",
    "LAST_USED_FLUSH_INTERVAL",
    "LAST_USED_WAIT",
    "TokenError",
    "TokenInfo",
    "TokenRefused",
    "TokenStore",
    "default_key_path",
    "load_token_key",
]
