"""Trusted documents (SPEC §10): `documentId` in place of `query`, a checked manifest,
trusted-only tokens, and `session-gateway documents hash`."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.cli import main
from gateway.server.config import GatewayConfig
from gateway.server.documents import document_id
from tests.support.tokens import bearer, issued_tokens
from tests.test_graphql_helpers import client, codes, simple_log

GR = "application/graphql-response+json"
SESSIONS = "query Sessions { sessions(first: 5) { totalCount nodes { id } } }\n"
TWO_OPS = 'query One { session(id: "a") { id } }\nquery Two { session(id: "b") { id } }\n'
WITH_VARS = "query S($id: ID!) { session(id: $id) { id } }"
MANIFEST = {document_id(d): d for d in (SESSIONS, TWO_OPS, WITH_VARS)}


def _query() -> SessionQuery:
    store = SessionStore()
    store.create("a", created_at=1, seed=simple_log(3))
    store.create("b", created_at=2, parent_session="a")
    return SessionQuery(live=[store])


def _app(**options: Any) -> Any:
    return create_app(_query(), GatewayConfig(trusted_documents=MANIFEST), **options)


async def test_document_id_runs_the_trusted_document_over_post_and_get() -> None:
    app = _app()
    async with client(app) as c:
        adhoc = await c.post("/graphql", json={"query": SESSIONS})
        by_post = await c.post("/graphql", json={"documentId": document_id(SESSIONS)})
        by_get = await c.get("/graphql", params={"documentId": document_id(SESSIONS)})
    assert by_post.status_code == by_get.status_code == 200
    assert by_post.json() == by_get.json() == adhoc.json()
    assert by_post.json()["data"]["sessions"]["totalCount"] == 2


async def test_document_id_takes_operation_name_and_variables() -> None:
    app = _app()
    async with client(app) as c:
        two = await c.post(
            "/graphql", json={"documentId": document_id(TWO_OPS), "operationName": "Two"}
        )
        with_vars = await c.get(
            "/graphql",
            params={"documentId": document_id(WITH_VARS), "variables": json.dumps({"id": "a"})},
        )
    assert two.json() == {"data": {"session": {"id": "b"}}}
    assert with_vars.json() == {"data": {"session": {"id": "a"}}}


async def test_an_unknown_document_id_is_a_clear_error_with_the_views_status_rules() -> None:
    unknown = document_id("{ nothing }")
    app = _app()
    async with client(app) as c:
        strict = await c.post("/graphql", json={"documentId": unknown}, headers={"Accept": GR})
        legacy = await c.post(
            "/graphql", json={"documentId": unknown}, headers={"Accept": "application/json"}
        )
        by_get = await c.get("/graphql", params={"documentId": unknown}, headers={"Accept": GR})
    assert strict.status_code == 400 and by_get.status_code == 400
    assert legacy.status_code == 200  # like a parse error under application/json
    for r in (strict, legacy, by_get):
        body = r.json()
        assert "data" not in body
        assert codes(body) == ["TRUSTED_DOCUMENT_NOT_FOUND"]
        assert unknown in body["errors"][0]["message"]


async def test_document_id_without_a_manifest_says_there_is_none() -> None:
    async with client(create_app(_query())) as c:
        r = await c.post("/graphql", json={"documentId": document_id(SESSIONS)})
    assert codes(r.json()) == ["TRUSTED_DOCUMENT_NOT_FOUND"]
    assert "no trusted documents" in r.json()["errors"][0]["message"]


@pytest.mark.parametrize(
    "params",
    [
        {"query": SESSIONS, "documentId": document_id(SESSIONS)},
        {"documentId": 42},
        {"documentId": None},
    ],
)
async def test_a_malformed_document_request_is_400(params: dict[str, Any]) -> None:
    async with client(_app()) as c:
        r = await c.post("/graphql", json=params)
    assert r.status_code == 400
    assert codes(r.json()) == ["BAD_REQUEST"]


async def test_a_trusted_only_token_may_run_only_trusted_documents(tmp_path: Path) -> None:
    async with issued_tokens(
        tmp_path / "t.db", ("reader", ["all"], False), ("kiosk", ["all"], True)
    ) as (auth, secret):
        kiosk, reader = bearer(secret["kiosk"]), bearer(secret["reader"])
        async with client(_app(authenticate=auth)) as c:
            adhoc = await c.post(
                "/graphql", json={"query": "{ sessions { totalCount } }"}, headers=kiosk
            )
            # even the very text of a trusted document is refused when sent as `query`
            same_text = await c.post("/graphql", json={"query": SESSIONS}, headers=kiosk)
            adhoc_get = await c.get("/graphql", params={"query": SESSIONS}, headers=kiosk)
            trusted = await c.post(
                "/graphql", json={"documentId": document_id(SESSIONS)}, headers=kiosk
            )
            reader_adhoc = await c.post("/graphql", json={"query": SESSIONS}, headers=reader)
    for refused in (adhoc, same_text, adhoc_get):
        assert refused.status_code == 403
        assert codes(refused.json()) == ["TRUSTED_DOCUMENT_REQUIRED"]
        assert "documentId" in refused.json()["errors"][0]["message"]
    assert trusted.status_code == 200 and trusted.json()["data"]["sessions"]["totalCount"] == 2
    assert reader_adhoc.status_code == 200 and reader_adhoc.json() == trusted.json()


def test_a_manifest_key_that_is_not_the_hash_of_its_document_is_refused_at_start() -> None:
    wrong = "sha256:" + "0" * 64
    with pytest.raises(ValueError, match=wrong):
        create_app(_query(), GatewayConfig(trusted_documents={**MANIFEST, wrong: SESSIONS}))


@pytest.mark.parametrize(
    "key",
    ["md5:abc", document_id(SESSIONS).upper(), document_id(SESSIONS)[:-1], "sha256:xyz"],
)
def test_a_manifest_key_that_is_not_a_sha256_id_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="is not a document id"):
        create_app(_query(), GatewayConfig(trusted_documents={key: SESSIONS}))


def test_a_manifest_document_that_does_not_parse_is_refused_at_start() -> None:
    broken = "query Broken { sessions { "
    with pytest.raises(ValueError, match=r"does not parse at line 1"):
        create_app(_query(), GatewayConfig(trusted_documents={document_id(broken): broken}))


def _serve(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--database",
         f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_serve_refuses_a_bad_manifest_with_one_line_naming_the_key(tmp_path: Path) -> None:
    wrong = "sha256:" + "1" * 64
    manifest = tmp_path / "docs.json"
    manifest.write_text(json.dumps({**MANIFEST, wrong: SESSIONS}))
    result = _serve(["--trusted-documents", str(manifest)], tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and wrong in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "x.db").exists()  # refused before anything started

    manifest.write_text("{not json")
    result = _serve(["--trusted-documents", str(manifest)], tmp_path)
    assert result.returncode == 2 and "not valid JSON" in result.stderr


def test_documents_hash_prints_a_manifest_keyed_like_sha256sum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = tmp_path / "sessions.graphql"
    two = tmp_path / "two.graphql"
    one.write_text(SESSIONS, encoding="utf-8")
    two.write_bytes("# ünïcode comment\r\n".encode() + TWO_OPS.encode())
    assert main(["documents", "hash", str(one), str(two), str(one)]) == 0
    out, err = capsys.readouterr()
    manifest = json.loads(out)
    expected = {
        "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest(): p.read_bytes().decode()
        for p in (one, two)
    }
    assert manifest == expected
    for key in expected:
        assert key in err
    # and the gateway accepts it as it is
    create_app(_query(), GatewayConfig(trusted_documents=manifest))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"query { sessions { ", "Syntax Error"),
        (b"type Query { x: Int }", "schema definitions"),
        (b"\xff\xfe{ x }", "not UTF-8"),
    ],
)
def test_documents_hash_refuses_a_file_that_is_not_an_operation_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, reason: str
) -> None:
    good = tmp_path / "good.graphql"
    good.write_text(SESSIONS)
    bad = tmp_path / "bad.graphql"
    bad.write_bytes(content)
    assert main(["documents", "hash", str(good), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert str(bad) in err and reason in err


async def test_trusted_document_errors_are_counted_under_their_own_code() -> None:
    from gateway.observability import GatewayMetrics

    metrics = GatewayMetrics()
    app = _app(metrics=metrics)
    async with client(app) as c:
        await c.post("/graphql", json={"documentId": document_id("{ x }")})
    assert metrics.value("graphql_errors_total", code="TRUSTED_DOCUMENT_NOT_FOUND") == 1
