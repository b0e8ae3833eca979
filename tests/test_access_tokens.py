"""SPEC §10: tokens (create, list, revoke; only keyed hashes stored), `serve --auth
tokens` (401 UNAUTHENTICATED with `WWW-Authenticate: Bearer`, `/metrics` needs
`all`, health open), scoped answers over GraphQL, cursors bound to their token,
and `--allow-remote` refusing to run without auth. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from gateway import SessionQuery, SessionStore, create_app
from gateway.cli import main as cli_main
from gateway.core import SessionHeader
from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import ENV_TOKEN_KEY, TokenError, TokenStore
from gateway.server.auth import token_authenticator
from tests.test_graphql_helpers import client
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

KEY = b"k" * 40


@pytest.fixture(autouse=True)
def token_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test gets its own key file location and no key in the environment."""
    monkeypatch.delenv(ENV_TOKEN_KEY, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


async def every_stored_text(db: SqlPersistence) -> str:
    """Every value of every row of the token table, as text."""
    async with db.engine.connect() as conn:
        rows = (await conn.execute(text("SELECT * FROM access_tokens"))).all()
    return repr(rows)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_access_tokens_created_listed_and_revoked_through_the_cli_secret_shown_once(
    db_url: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    assert cli(capsys, "migrate", "--database", db_url)[0] == 0  # PostgreSQL needs it first
    with caplog.at_level(logging.DEBUG):
        code, out, err = cli(
            capsys, "token", "create", "--database", db_url, "--name", "web",
            "--grant", "cwd:/srv/app", "--grant", "tree:s1", "--expires-in", "30",
        )  # fmt: skip
    assert code == 0, err
    secret = out.strip()
    assert out.count("\n") == 1 and secret.startswith("sgw_") and len(secret) > 50
    assert secret not in err and "web" in err
    code, listing, _ = cli(capsys, "token", "list", "--database", db_url)
    assert code == 0 and "web" in listing and "active" in listing and "cwd:/srv/app" in listing
    assert secret not in listing and secret.split("_", 2)[2] not in listing
    assert secret.split("_", 2)[2] not in caplog.text

    db = SqlPersistence(db_url)
    try:
        stored = asyncio.run(every_stored_text(db))
    finally:
        asyncio.run(db.close())
    assert "web" in stored and secret.split("_", 2)[2] not in stored and secret not in stored

    code, out, err = cli(capsys, "token", "revoke", "--database", db_url, "web")
    assert code == 0 and "revoked" in out
    code, listing, _ = cli(capsys, "token", "list", "--database", db_url)
    assert "revoked" in listing
    code, _, err = cli(capsys, "token", "revoke", "--database", db_url, "nobody")
    assert code == 2 and "no token is named 'nobody'" in err
    code, _, err = cli(
        capsys, "token", "create", "--database", db_url, "--name", "web", "--grant", "all"
    )
    assert code == 2 and "already exists" in err
    code, _, err = cli(
        capsys, "token", "create", "--database", db_url, "--name", "x", "--grant", "cwd:"
    )
    assert code == 2 and "grant 'cwd:'" in err and "Traceback" not in err


def test_access_tokens_key_file_is_private_and_the_env_key_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'k.db'}"
    code, _, _ = cli(capsys, "token", "create", "--database", url, "--name", "a", "--grant", "all")
    key_file = tmp_path / "config" / "session-gateway" / "token.key"
    assert code == 0 and key_file.stat().st_mode & 0o077 == 0
    monkeypatch.setenv(ENV_TOKEN_KEY, "short")
    code, _, err = cli(
        capsys, "token", "create", "--database", url, "--name", "b", "--grant", "all"
    )
    assert code == 2 and ENV_TOKEN_KEY in err


# -- over HTTP ------------------------------------------------------------------------


async def corpus(db: SqlPersistence) -> SessionQuery:
    """/srv/app: root <- child; /srv/other: other <- grandchild-of-other; live: live-app."""
    for header in (
        SessionHeader("root", 1, cwd="/srv/app"),
        SessionHeader("child", 2, cwd="/srv/app/sub", parent_session="root"),
        SessionHeader("other", 3, cwd="/srv/other"),
        SessionHeader("fork", 4, cwd="/srv/app", parent_session="other"),
    ):
        await db.create(header)
    store = SessionStore()
    store.create("live-app", created_at=5, cwd="/srv/app")
    store.create("live-other", created_at=6, cwd="/tmp")
    return SessionQuery(live=[store], persistence=db)


async def post(app: Any, query: str, token: str | None, **variables: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with client(app) as c:
        return await c.post(
            "/graphql", json={"query": query, "variables": variables}, headers=headers
        )


PAGE = "query($after: String) { sessions(first: 2, after: $after) { totalCount nodes { id } pageInfo { endCursor hasNextPage } } }"  # noqa: E501
SESSION = "query($id: ID!) { session(id: $id) { id } }"


async def test_auth_missing_unknown_expired_or_revoked_token_is_401_unauthenticated(
    db: SqlPersistence,
) -> None:
    tokens = TokenStore(db, KEY)
    _, good = await tokens.create("good", ["all"])
    _, soon = await tokens.create("soon", ["all"], expires_in_days=1e-6)  # 86 ms
    _, revoked = await tokens.create("gone", ["all"])
    app = create_app(await corpus(db), authenticate=token_authenticator(tokens))
    assert (await post(app, PAGE, good)).status_code == 200
    await asyncio.sleep(0.2)
    assert (await post(app, PAGE, revoked)).status_code == 200
    await tokens.revoke("gone")
    other_key = TokenStore(db, b"z" * 40)
    _, foreign = await other_key.create("foreign", ["all"])
    cases = {
        None: "Authorization: Bearer",
        "sgw_000000000000_" + "A" * 43: "not valid",
        good[:-1] + ("A" if good[-1] != "A" else "B"): "not valid",
        "not-a-token": "not a session-gateway token",
        soon: "expired",
        revoked: "revoked",
        foreign: "not valid",  # hashed under another key
    }
    for token, words in cases.items():
        r = await post(app, PAGE, token)
        assert r.status_code == 401, (token, r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")
        (error,) = r.json()["errors"]
        assert error["extensions"]["code"] == "UNAUTHENTICATED" and words in error["message"]
    async with client(app) as c:
        r = await c.post(
            "/graphql", json={"query": "{ __typename }"}, headers={"Authorization": "Basic eA=="}
        )
        assert r.status_code == 401
        for path in ("/healthz", "/readyz"):
            assert (await c.get(path)).status_code == 200
        page = await c.get("/graphql", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert (
            await c.get("/graphql?query={__typename}", headers={"Accept": "text/html"})
        ).status_code == 401
    async with client(app) as c:
        typed = await c.post(
            "/graphql",
            json={"query": "{ __typename }"},
            headers={"Accept": "application/graphql-response+json"},
        )
    assert typed.status_code == 401
    assert typed.headers["content-type"].startswith("application/graphql-response+json")
    assert await tokens.flush_last_used()  # off the request path (serve's background task)
    infos = {i.name: i for i in await tokens.list()}
    assert infos["good"].last_used_at is not None and infos["soon"].last_used_at is None


async def test_auth_metrics_needs_a_token_with_the_all_grant(db: SqlPersistence) -> None:
    tokens = TokenStore(db, KEY)
    _, everything = await tokens.create("ops", ["all"])
    _, scoped = await tokens.create("web", ["cwd:/srv/app"])
    app = create_app(await corpus(db), authenticate=token_authenticator(tokens))
    async with client(app) as c:
        assert (await c.get("/metrics")).status_code == 401
        r = await c.get("/metrics", headers={"Authorization": f"Bearer {scoped}"})
        assert r.status_code == 403 and r.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"
        r = await c.get("/metrics", headers={"Authorization": f"Bearer {everything}"})
        assert r.status_code == 200 and "graphql_operations_total" in r.text


async def test_scoped_corpus_over_graphql_counts_pages_lineage_and_not_found(
    db: SqlPersistence,
) -> None:
    tokens = TokenStore(db, KEY)
    _, app_token = await tokens.create("app", ["cwd:/srv/app"])
    _, tree_token = await tokens.create("tree", ["tree:other"])
    _, all_token = await tokens.create("all", ["all"])
    app = create_app(await corpus(db), authenticate=token_authenticator(tokens))

    async def ids(token: str) -> tuple[int, list[str]]:
        got, after, total = [], None, -1
        while True:
            body = (await post(app, PAGE, token, after=after)).json()["data"]["sessions"]
            total = body["totalCount"]
            got += [n["id"] for n in body["nodes"]]
            if not body["pageInfo"]["hasNextPage"]:
                return total, got
            after = body["pageInfo"]["endCursor"]

    assert await ids(app_token) == (4, ["live-app", "fork", "child", "root"])
    assert await ids(tree_token) == (2, ["fork", "other"])
    assert (await ids(all_token))[0] == 6

    # an invisible id fails exactly like an absent one
    hidden = (await post(app, SESSION, app_token, id="other")).json()["errors"][0]
    absent = (await post(app, SESSION, app_token, id="nobody")).json()["errors"][0]
    assert (
        hidden["extensions"]["code"]
        == absent["extensions"]["code"]
        == ("SESSION_QUERY_SESSION_NOT_FOUND")
    )
    assert hidden["message"].replace("'other'", "X") == absent["message"].replace("'nobody'", "X")

    # the fork's parent is invisible to the cwd token: the chain stops there
    lineage = "query($id: ID!) { traceSession(sessionId: $id) { complete unresolvedParentId ancestors { id } } }"  # noqa: E501
    body = (await post(app, lineage, app_token, id="fork")).json()["data"]["traceSession"]
    assert body == {"complete": False, "unresolvedParentId": "other", "ancestors": []}
    kids = "query($id: ID!) { session(id: $id) { children { id } parent { id } } }"
    body = (await post(app, kids, tree_token, id="other")).json()["data"]["session"]
    assert body == {"children": [{"id": "fork"}], "parent": None}


async def test_scoped_corpus_cursor_issued_to_one_token_is_refused_for_another(
    db: SqlPersistence,
) -> None:
    tokens = TokenStore(db, KEY)
    _, first = await tokens.create("first", ["all"])
    _, second = await tokens.create("second", ["all"])
    app = create_app(await corpus(db), authenticate=token_authenticator(tokens))
    body = (await post(app, PAGE, first)).json()["data"]["sessions"]
    cursor = body["pageInfo"]["endCursor"]
    assert (await post(app, PAGE, first, after=cursor)).json().get("errors") is None
    refused = (await post(app, PAGE, second, after=cursor)).json()["errors"][0]
    assert (
        refused["extensions"]["code"] == "BAD_USER_INPUT" and "another token" in refused["message"]
    )


async def test_auth_database_down_is_503_without_internals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = SqlPersistence(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    tokens = TokenStore(db, KEY)
    _, token = await tokens.create("t", ["all"])
    await db.close()
    (tmp_path / "x.db").unlink()
    (tmp_path / "x.db").mkdir()  # the database path is now a directory: every read fails
    app = create_app(SessionQuery(), authenticate=token_authenticator(tokens))
    with caplog.at_level(logging.ERROR):
        r = await post(app, PAGE, token)
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    error = r.json()["errors"][0]
    assert error["extensions"]["code"] == "AUTH_UNAVAILABLE" and "x.db" not in r.text
    assert "correlation id" in error["message"]
    await db.close()


# -- serve's refusals -----------------------------------------------------------------


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_auth_allow_remote_refuses_to_start_without_auth(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)}
    env.pop(ENV_TOKEN_KEY, None)
    env.pop("SESSION_GATEWAY_AUTH", None)
    r = run_serve("--host", "0.0.0.0", "--allow-remote", env=env)
    assert r.returncode == 2 and "--auth tokens" in r.stderr and "Traceback" not in r.stderr
    r = run_serve("--auth", "tokens", "--port", "0", env=env)  # no key anywhere
    assert r.returncode == 2 and ENV_TOKEN_KEY in r.stderr and "Traceback" not in r.stderr
    r = run_serve("--port", "0", env={**env, "SESSION_GATEWAY_AUTH": "maybe"})
    assert r.returncode == 2 and "SESSION_GATEWAY_AUTH" in r.stderr


def test_token_store_refuses_bad_input_with_clear_errors(db: SqlPersistence) -> None:
    tokens = TokenStore(db, KEY)
    for name, grants, days in (
        ("", ["all"], None),
        ("a b", ["all"], None),
        ("ok", [], None),
        ("ok", ["root"], None),
        ("ok", ["all"], -1),
    ):
        with pytest.raises(TokenError):
            asyncio.run(tokens.create(name, grants, expires_in_days=days))
