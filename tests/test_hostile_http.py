"""Hostile requests at the HTTP edge (issue 9): bodies, stored text, hosts, headers.

Every request error is a 400 GraphQL-over-HTTP error without a traceback; a
stored payload holding a lone surrogate is served (escaped), never a bare 500;
a Host outside the allow-list is refused (DNS rebinding); HTML carries a CSP
that still lets the offline GraphiQL page run; backend text never reaches a
client.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import httpx
import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.commands.serve import allowed_hosts
from gateway.core import SessionEvent, SessionHeader
from gateway.persistence import SqlPersistence
from gateway.server.config import GatewayConfig
from gateway.server.host_check import LOOPBACK_HOSTS, host_name
from gateway.server.security_headers import inline_script_hashes
from tests.backends import Broken
from tests.support.attack import healthz_while
from tests.support.server import running_server
from tests.test_graphql_helpers import codes
from tests.test_persistence_fixtures import db_fixture, db_url_fixture, engine_name_fixture

__all__ = ["db_fixture", "db_url_fixture", "engine_name_fixture"]

LEAKS = ("Traceback", 'File "', "SELECT", "INSERT", "sqlalchemy", "asyncpg", "5432")


def no_leak(text: str) -> None:
    assert not any(leak in text for leak in LEAKS), text[:500]


def live_query() -> SessionQuery:
    store = SessionStore()
    store.create("s1", created_at=1)
    return SessionQuery(live=[store])


async def post(
    app: Any, body: bytes | str, host: str = "localhost", **headers: str
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}") as c:
        content = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        return await c.post(
            "/graphql",
            content=content,
            headers={"Content-Type": "application/json", **headers},
        )


# -- request bodies -------------------------------------------------------------------

NEST = 1000


@pytest.mark.parametrize(
    "body",
    [
        "[" * NEST + "]" * NEST,
        '{"query": "{ __typename }", "variables": {"x": ' + "[" * NEST + "]" * NEST + "}}",
        '{"query": "{ __typename }", "extensions": {"x": '
        + '{"a":' * NEST
        + "1"
        + "}" * NEST
        + "}}",
        '{"query": "{ __typename }", "variables": {"x": ' + "[" * 70 + "]" * 70 + "}}",
    ],
    ids=["body", "variables", "extensions", "variables-70"],
)
@pytest.mark.parametrize("accept", ["application/json", "application/graphql-response+json"])
async def test_deeply_nested_json_is_a_400_without_traceback(body: str, accept: str) -> None:
    r = await post(create_app(live_query()), body, Accept=accept)
    assert r.status_code == 400, r.text
    assert codes(r.json()) == ["BAD_REQUEST"] and "nested more than 64" in r.text
    no_leak(r.text)


async def test_deeply_nested_get_variables_are_a_400() -> None:
    transport = httpx.ASGITransport(app=create_app(live_query()))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        r = await c.get(
            "/graphql", params={"query": "{ __typename }", "variables": "[" * NEST + "]" * NEST}
        )
    assert r.status_code == 400 and codes(r.json()) == ["BAD_REQUEST"]
    no_leak(r.text)


def test_healthz_answers_during_a_flood_of_deep_bodies() -> None:
    body = '{"query": "{ __typename }", "variables": {"x": ' + "[" * NEST + "]" * NEST + "}}"
    with running_server(create_app(live_query())) as base:

        def attack(client: httpx.Client) -> set[int]:
            headers = {"Content-Type": "application/json"}
            return {
                client.post("/graphql", content=body, headers=headers).status_code
                for _ in range(200)
            }

        statuses, slowest = healthz_while(base, attack)
    assert statuses == {400} and slowest < 1.0


# -- stored text that UTF-8 cannot encode ---------------------------------------------

LONE = "cut inside an emoji \ud83d"


async def test_a_stored_lone_surrogate_is_served_escaped_on_both_engines(
    db: SqlPersistence,
) -> None:
    await db.create(
        SessionHeader("lone", 1),
        [SessionEvent("user/message", 0, 1, {"text": LONE, "k\udc00": 1}, surface_op="append")],
    )
    app = create_app(SessionQuery(persistence=db))
    for query in (
        '{ session(id: "lone") { surface { data } } }',
        '{ events(sessionId: "lone") { nodes { data } } }',
        '{ readEvent(sessionId: "lone", seq: 0) { target { data } } }',
    ):
        r = await post(app, json.dumps({"query": query}))
        assert r.status_code == 200, r.text
        assert "\\ud83d" in r.text and "\\udc00" in r.text  # escaped, as JSON.stringify does
        r.content.decode("utf-8")  # the body is valid UTF-8
        assert json.dumps(r.json()).count("\\ud83d") == 1  # and decodes to the same string
    data = (
        await post(app, json.dumps({"query": '{ event(sessionId: "lone", seq: 0) { data } }'}))
    ).json()
    assert data["data"]["event"]["data"] == {"text": LONE, "k\udc00": 1}


async def test_a_live_payload_with_a_lone_surrogate_is_served_escaped() -> None:
    store = SessionStore()
    store.create("live", created_at=1).append("note", {"t": LONE})
    r = await post(
        create_app(SessionQuery(live=[store])),
        json.dumps({"query": '{ events(sessionId: "live") { nodes { data } } }'}),
    )
    assert r.status_code == 200 and r.json()["data"]["events"]["nodes"][0]["data"] == {"t": LONE}
    assert "X-Request-Id" in r.headers


# -- backend text stays in the log ------------------------------------------------------


async def test_backend_failures_name_what_failed_not_the_drivers_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = 'connect to db.internal:5432 failed: SELECT * FROM sessions WHERE id = $1 ("s")'
    app = create_app(SessionQuery(persistence=Broken(OSError(secret))))
    r = await post(
        app,
        json.dumps({"query": '{ sessions { totalCount } session(id: "x") { id } }'}),
        **{"X-Request-Id": "req-123"},
    )
    body = r.json()
    assert codes(body) == ["SESSION_QUERY_PERSISTENCE_FAILED"] * len(body["errors"])
    for error in body["errors"]:
        assert "OSError" in error["message"] and "db.internal" not in error["message"]
        assert error["extensions"]["requestId"] == "req-123"
        assert error["extensions"]["correlationId"] in error["message"]
    no_leak(r.text)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert (
        "db.internal:5432" in logged and body["errors"][0]["extensions"]["correlationId"] in logged
    )


# -- the Host allow-list ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("localhost", 200),
        ("localhost:8000", 200),
        ("127.0.0.1:1234", 200),
        ("[::1]:8000", 200),
        ("LOCALHOST", 200),
        ("attacker.example", 421),
        ("attacker.example:8000", 421),
        ("localhost.attacker.example", 421),
        ("127.0.0.1.nip.io", 421),
        ("[::2]", 421),
        ("", 421),
        ("local host", 421),
    ],
)
async def test_only_loopback_names_are_served_on_a_loopback_allow_list(
    host: str, status: int
) -> None:
    app = create_app(live_query(), GatewayConfig(allowed_hosts=LOOPBACK_HOSTS))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        r = await c.post(
            "/graphql", json={"query": "{ sessions { nodes { id } } }"}, headers={"Host": host}
        )
    assert r.status_code == status, r.text
    if status == 421:
        assert codes(r.json()) == ["MISDIRECTED_REQUEST"] and "--allowed-host" in r.text
        assert "s1" not in r.text


async def test_allowed_hosts_add_names_and_wildcards() -> None:
    app = create_app(
        live_query(), GatewayConfig(allowed_hosts=(*LOOPBACK_HOSTS, "gw.example", "*.corp.example"))
    )
    for host, status in (("gw.example:443", 200), ("a.corp.example", 200), ("corp.example", 421)):
        r = await post(app, json.dumps({"query": "{ __typename }"}), host=host)
        assert r.status_code == status, host


def test_serve_allows_loopback_names_on_a_loopback_bind_and_extra_hosts() -> None:
    assert allowed_hosts("127.0.0.1", []) == ("localhost", "127.0.0.1", "[::1]")
    assert allowed_hosts("127.0.0.2", ["gw.example"]) == (
        "localhost",
        "127.0.0.1",
        "[::1]",
        "127.0.0.2",
        "gw.example",
    )
    assert allowed_hosts("::1", []) == ("localhost", "127.0.0.1", "[::1]")
    assert allowed_hosts("0.0.0.0", []) is None  # a remote bind without names: any Host
    assert "gw.example" in (allowed_hosts("0.0.0.0", ["gw.example"]) or ())


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:80", "localhost"),
        ("[::1]:8000", "[::1]"),
        ("Example.COM.", "example.com"),
        ("a:b", None),
        ("[::1", None),
    ],
)
def test_host_names_are_parsed_without_port(header: str, name: str | None) -> None:
    assert host_name(header) == name


def test_a_rebound_page_gets_nothing_from_a_real_server() -> None:
    app = create_app(live_query(), GatewayConfig(allowed_hosts=LOOPBACK_HOSTS))
    with running_server(app) as base:
        r = httpx.post(
            base + "/graphql",
            json={"query": "{ sessions { nodes { id } } }"},
            headers={"Host": "attacker.example"},
        )
        assert r.status_code == 421 and "s1" not in r.text
        assert httpx.get(base + "/healthz").status_code == 200  # as 127.0.0.1


# -- security headers ---------------------------------------------------------------------


async def test_graphiql_html_carries_csp_with_the_hash_of_its_inline_script() -> None:
    app = create_app(live_query())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        r = await c.get("/graphql", headers={"Accept": "text/html"})
        api = await c.post("/graphql", json={"query": "{ __typename }"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    scripts = re.findall(r"<script>(.*?)</script>", r.text, re.DOTALL)
    assert scripts, "the page has its inline bootstrap script"
    for script in scripts:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp
    assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert (
        api.headers["x-content-type-options"] == "nosniff"
        and "content-security-policy" not in api.headers
    )


def test_inline_script_hashes_skip_external_and_data_scripts() -> None:
    page = (
        b'<script src="/a.js"></script><script type="application/json">{"a":1}</script>'
        b"<script>run()</script><script type='module'>go()</script>"
    )
    hashes = inline_script_hashes(page)
    assert len(hashes) == 2
    assert (
        hashes[0] == "'sha256-" + base64.b64encode(hashlib.sha256(b"run()").digest()).decode() + "'"
    )
