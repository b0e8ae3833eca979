"""Issue 20, point 3: a token check never waits on a writer (a real `serve`).

While another connection holds the database's write lock (SQLite: a `BEGIN
IMMEDIATE` transaction that wrote, as an import does; PostgreSQL: a row lock
on the token's own row, which the old `last_used_at` UPDATE waited on), a
request with a token never used before answers 200 within 2 s, and the
token's `last_used_at` is written once the lock is gone (by `serve`'s
background flusher, off the request path).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest

from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import LAST_USED_WAIT, TokenStore
from tests.support.tokens import KEY

ROOT = Path(__file__).resolve().parents[1]
ANSWER_WITHIN_S = 2.0
QUERY = {"query": "{ sessions(first: 1) { totalCount } }"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def _serving(env: dict[str, str], url: str) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--database", url, "--port", str(port),
         "--auth", "tokens", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("SESSION_GATEWAY_TOKEN_KEY", None)
    return env


def _last_used(env: dict[str, str], url: str, name: str) -> int | None:
    """The token's `last_used_at` as the database has it now (read with the key file
    `token create` wrote, through the same TokenStore `token list` uses)."""

    async def read() -> int | None:
        db = SqlPersistence(url)
        try:
            infos = {i.name: i for i in await TokenStore(db, None).list()}
        finally:
            await db.close()
        return infos[name].last_used_at

    return asyncio.run(read())


def _timed_request(base: str, secret: str) -> tuple[int, float]:
    started = time.perf_counter()
    r = httpx.post(
        f"{base}/graphql", json=QUERY, headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )
    return r.status_code, time.perf_counter() - started


def _eventually(check: Callable[[], bool], limit_s: float = 20.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    return False


def test_a_new_token_answers_within_2s_while_an_import_holds_the_sqlite_write_lock(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    path = tmp_path / "gw.db"
    url = f"sqlite+aiosqlite:///{path}"
    _cli(env, "migrate", "--database", url)
    secret = _cli(env, "token", "create", "--database", url, "--name", "fresh", "--grant", "all")
    with _serving(env, url) as base:
        writer = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            writer.execute("BEGIN IMMEDIATE")  # what an import's transaction holds
            writer.execute("UPDATE access_tokens SET name = name")
            status, took = _timed_request(base, secret.strip())
            assert status == 200 and took < ANSWER_WITHIN_S, (status, took)
            time.sleep(1.0)  # a flush ran meanwhile and could not write: nothing failed
            status, took = _timed_request(base, secret.strip())
            assert status == 200 and took < ANSWER_WITHIN_S, (status, took)
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert _last_used(env, url, "fresh") is None  # not written under the lock
        assert _eventually(lambda: _last_used(env, url, "fresh") is not None)


def test_a_new_token_answers_within_2s_while_a_writer_locks_its_postgresql_row(
    tmp_path: Path, postgres_url: str
) -> None:
    env = _env(tmp_path)
    _cli(env, "migrate", "--database", postgres_url)
    secret = _cli(
        env, "token", "create", "--database", postgres_url, "--name", "fresh", "--grant", "all"
    ).strip()
    token_id = secret.split("_")[1]
    dsn = postgres_url.replace("postgresql+asyncpg://", "postgresql://")

    async def hold_then_request(base: str) -> tuple[int, float, int, float]:
        conn = await asyncpg.connect(dsn)
        try:
            tx = conn.transaction()
            await tx.start()
            # the row the old request-path UPDATE of last_used_at waited on
            await conn.execute("UPDATE access_tokens SET name = name WHERE token_id = $1", token_id)
            first = await asyncio.to_thread(_timed_request, base, secret)
            await asyncio.sleep(1.0)
            second = await asyncio.to_thread(_timed_request, base, secret)
            await tx.rollback()
        finally:
            await conn.close()
        return (*first, *second)

    with _serving(env, postgres_url) as base:
        s1, t1, s2, t2 = asyncio.run(hold_then_request(base))
        assert s1 == 200 and t1 < ANSWER_WITHIN_S, (s1, t1)
        assert s2 == 200 and t2 < ANSWER_WITHIN_S, (s2, t2)
        assert _eventually(lambda: _last_used(env, postgres_url, "fresh") is not None)


async def test_a_flush_under_the_write_lock_waits_briefly_logs_once_and_keeps_the_times(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gw.db"
    db = SqlPersistence(f"sqlite+aiosqlite:///{path}")
    try:
        tokens = TokenStore(db, KEY)
        _, secret = await tokens.create("fresh", ["all"])
        writer = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("UPDATE access_tokens SET name = name")
            started = time.perf_counter()
            await tokens.authenticate(secret)  # reads only: answers under the lock
            assert time.perf_counter() - started < 1.0
            assert tokens.pending_uses == 1
            with caplog.at_level(logging.INFO, logger="gateway.persistence.tokens"):
                for _ in range(3):
                    started = time.perf_counter()
                    assert await tokens.flush_last_used() is False
                    assert time.perf_counter() - started < LAST_USED_WAIT + 1.0
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1 and "last-used" in warnings[0].getMessage()
            assert tokens.pending_uses == 1  # kept for the next flush
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert await tokens.flush_last_used() is True and tokens.pending_uses == 0
        (info,) = await tokens.list()
        assert info.last_used_at is not None
        # the connection's own busy timeout is back for every other write
        async with db.engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar() == 10_000
    finally:
        await db.close()
