"""The app over HTTP: masking, readable request errors, limits, methods, health and readiness."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.core import SessionHeader
from gateway.server.config import GatewayConfig, Limits
from tests.backends import Broken
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import ACCEPT_BOTH, client, codes, gql, simple_log

GR = "application/graphql-response+json"


@pytest.fixture
def query() -> SessionQuery:
    store = SessionStore()
    store.create("a", created_at=1, seed=simple_log(6))
    store.create("b", created_at=2, parent_session="a")
    return SessionQuery(live=[store])


async def test_unexpected_exception_is_masked_with_a_logged_correlation_id(
    query: SessionQuery, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from gateway.server.types import sessions

    def boom(*args: Any) -> Any:
        raise RuntimeError("secret detail: password=hunter2 at /srv/internal.py")

    monkeypatch.setattr(sessions.SessionHeader, "of", classmethod(boom))
    with caplog.at_level(logging.ERROR, logger="gateway.server"):
        async with client(create_app(query)) as c:
            r = await c.post(
                "/graphql", json={"query": '{ session(id: "a") { id header { id } } }'}
            )
    assert r.status_code == 200
    body = r.json()
    assert body["data"] == {"session": None}
    (error,) = body["errors"]
    cid = error["extensions"]["correlationId"]
    assert error["extensions"]["code"] == "INTERNAL_ERROR"
    assert error["message"] == f"Internal error (correlation id {cid})"
    assert error["path"] == ["session", "header"]
    assert "hunter2" not in r.text and "Traceback" not in r.text and ".py" not in r.text
    logged = [rec for rec in caplog.records if cid in rec.getMessage()]
    assert logged and logged[0].exc_info is not None
    assert "hunter2" in caplog.text and "Traceback" in caplog.text


async def test_parse_and_validation_errors_stay_readable(query: SessionQuery) -> None:
    app = create_app(query)
    body = await gql(app, "{ sessions {", status=200)
    assert "data" not in body
    assert codes(body) == ["GRAPHQL_PARSE_FAILED"]
    assert body["errors"][0]["message"].startswith("Syntax Error")
    body = await gql(app, "{ sessions { nope } }", accept=GR, status=400)
    assert "data" not in body and codes(body) == ["GRAPHQL_VALIDATION_FAILED"]
    assert "nope" in body["errors"][0]["message"]
    body = await gql(
        app, "query($id: ID!) { session(id: $id) { id } }", {"id": None}, accept=GR, status=400
    )
    assert codes(body) == ["BAD_USER_INPUT"] and "$id" in body["errors"][0]["message"]
    # a field error is not a request error: 200 with data, even with graphql-response+json
    body = await gql(app, '{ session(id: "zz") { id } }', accept=GR, status=200)
    assert body["data"] == {"session": None}


async def test_media_types_are_negotiated(query: SessionQuery) -> None:
    async with client(create_app(query)) as c:
        for accept, media in [
            (ACCEPT_BOTH, GR),
            (GR, GR),
            ("application/json", "application/json"),
            ("*/*", "application/json"),
            (None, "application/json"),
            ("application/json;q=1, application/graphql-response+json;q=0.5", "application/json"),
        ]:
            headers = {"Accept": accept} if accept else {}
            r = await c.post("/graphql", json={"query": "{ __typename }"}, headers=headers)
            assert r.status_code == 200
            assert r.headers["content-type"] == f"{media}; charset=utf-8", accept
            assert r.json() == {"data": {"__typename": "Query"}}


async def test_get_runs_queries_only(query: SessionQuery) -> None:
    async with client(create_app(query)) as c:
        r = await c.get("/graphql", params={"query": '{ session(id: "a") { id } }'})
        assert r.status_code == 200 and r.json() == {"data": {"session": {"id": "a"}}}
        r = await c.get(
            "/graphql",
            params={
                "query": "query Q($id: ID!) { session(id: $id) { id } }",
                "variables": json.dumps({"id": "b"}),
                "operationName": "Q",
            },
        )
        assert r.json() == {"data": {"session": {"id": "b"}}}
        r = await c.get("/graphql", params={"query": "mutation { x }"}, headers={"Accept": GR})
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        assert codes(r.json()) == ["METHOD_NOT_ALLOWED"]
        r = await c.get("/graphql", params={"query": "subscription { x }"})
        assert r.status_code == 405
        r = await c.put("/graphql", json={"query": "{ __typename }"})
        assert r.status_code == 405 and "GET" in r.headers["allow"]
        r = await c.get("/graphql", headers={"Accept": "text/html"})
        assert r.status_code == 200 and "graphiql" in r.text.lower()
        assert "https://" not in r.text and "/static/graphiql/graphiql.min.js" in r.text
        assert (await c.get("/static/graphiql/graphiql.min.js")).status_code == 200


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b'{ "not a JSON', "application/json", 400),
        (b"", "application/json", 400),
        (b'{"qeury": "{ __typename }"}', "application/json", 400),
        (b'{"query": 1}', "application/json", 400),
        (b'{"query": "{ __typename }", "variables": "x"}', "application/json", 400),
        (b'{"query": "{ __typename }", "operationName": 0}', "application/json", 400),
        (b'["{ __typename }"]', "application/json", 400),
        (b'{"query": "{ __typename }"}', "text/plain", 415),
        (b'{"query": "{ __typename }"}', "application/json; charset=latin-1", 415),
    ],
)
async def test_malformed_requests(query, body: bytes, content_type: str, status: int) -> None:
    async with client(create_app(query)) as c:
        r = await c.post("/graphql", content=body, headers={"Content-Type": content_type})
    assert r.status_code == status, r.text
    assert "data" not in r.json() and r.json()["errors"][0]["message"]


async def test_depth_alias_and_token_limits(query: SessionQuery) -> None:
    app = create_app(
        query, GatewayConfig(limits=Limits(max_depth=6, max_aliases=3, max_tokens=300))
    )
    deep = (
        '{ traceSession(sessionId: "a") { descendants { descendants { descendants { '
        "descendants { descendants { session { id } } } } } } } }"
    )
    body = await gql(app, deep)
    assert codes(body) == ["GRAPHQL_VALIDATION_FAILED"]
    assert "maximum operation depth of 6" in body["errors"][0]["message"]
    flat = '{ traceSession(sessionId: "a") { graph { nodes { id } edges { parentId } } } }'
    assert "errors" not in await gql(app, flat)
    aliases = "{ " + " ".join(f'a{i}: session(id: "a") {{ id }}' for i in range(4)) + " }"
    body = await gql(app, aliases)
    assert (
        codes(body) == ["GRAPHQL_VALIDATION_FAILED"] and "aliases" in body["errors"][0]["message"]
    )
    many = "{ " + " ".join("__typename" for _ in range(400)) + " }"
    body = await gql(app, many, accept=GR, status=400)
    assert codes(body) == ["GRAPHQL_PARSE_FAILED"] and "tokens" in body["errors"][0]["message"]


async def test_introspection_is_not_limited_by_depth(query: SessionQuery) -> None:
    from graphql import get_introspection_query

    body = await gql(
        create_app(query, GatewayConfig(limits=Limits(max_depth=3))), get_introspection_query()
    )
    assert "errors" not in body


async def test_body_size_limit(query: SessionQuery) -> None:
    app = create_app(query, GatewayConfig(limits=Limits(max_body_bytes=1024)))
    padding = " " * 2000
    async with client(app) as c:
        r = await c.post(
            "/graphql",
            content=f'{{"query": "{{ __typename }}{padding}"}}',
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 413 and codes(r.json()) == ["PAYLOAD_TOO_LARGE"]

        async def chunks():  # no Content-Length: counted while streaming
            yield b'{"query": "{ __typename }'
            for _ in range(10):
                yield b" " * 200
            yield b'"}'

        r = await c.post("/graphql", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        r = await c.post("/graphql", json={"query": "{ __typename }"})
        assert r.status_code == 200


class SlowBackend:
    """A failure double: a database that hangs, which a real backend cannot do on cue."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def list(self) -> list[SessionHeader]:
        await asyncio.sleep(self.delay)
        return []

    async def load(self, session_id: str) -> Any:
        raise KeyError(session_id)


async def test_operation_timeout_is_504(query: SessionQuery) -> None:
    slow = SessionQuery(persistence=SlowBackend(5))
    app = create_app(slow, GatewayConfig(limits=Limits(operation_timeout=0.2)))
    for accept in ("application/json", GR):
        body = await gql(app, "{ sessions { totalCount } }", accept=accept, status=504)
        assert codes(body) == ["OPERATION_TIMEOUT"]
        assert "0.2 s" in body["errors"][0]["message"]


async def test_healthz_and_readyz(tmp_path: Path) -> None:
    async with sql_backend(tmp_path / "x.db") as db:
        await db.ensure_schema()  # migrate now: the 0.2 s probe is for reachability only
        refused = Broken(OSError("connection refused (db:5432)"))  # a failure double
        cases = [
            (SessionQuery(), 200, "no persistence"),
            (SessionQuery(persistence=db), 200, "reachable"),
            (SessionQuery(persistence=refused), 503, "unreachable (OSError; correlation id"),
            (SessionQuery(persistence=SlowBackend(5)), 503, "did not answer"),
        ]
        for q, status, reason in cases:
            async with client(create_app(q, GatewayConfig(readiness_timeout=0.2))) as c:
                assert (await c.get("/healthz")).status_code == 200
                r = await c.get("/readyz")
                assert r.status_code == status
                assert reason in r.json()["reason"]
                assert "db:5432" not in r.text  # the driver's text stays in the log


class HangingBackend:
    """A failure double: every read hangs until cancelled, and says what happened to it."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.finished = 0

    async def _hang(self) -> Any:
        self.started += 1
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        return []

    async def list(self) -> list[SessionHeader]:
        return await self._hang()

    async def load(self, session_id: str) -> Any:
        return await self._hang()


async def test_a_timed_out_request_leaves_no_backend_work_running() -> None:
    hanging = HangingBackend()
    app = create_app(
        SessionQuery(persistence=hanging), GatewayConfig(limits=Limits(operation_timeout=0.2))
    )
    # several fields that each start backend work (listing and whole-log loads)
    query = '{ a: sessions { totalCount } b: events(sessionId: "x") { totalCount } }'
    body = await gql(app, query, status=504)
    assert codes(body) == ["OPERATION_TIMEOUT"]
    await asyncio.sleep(0.05)  # let cancellations land
    assert hanging.started >= 1
    assert hanging.cancelled == hanging.started and hanging.finished == 0
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


@pytest.mark.parametrize("accept", ["application/graphql-response+json", "application/json", None])
async def test_middleware_refusals_answer_in_the_media_type_the_view_would_choose(
    accept: str | None,
) -> None:
    """421 (host), 413 (body), 401 (auth) and 429 (rate) are written before the GraphQL view
    runs; they still negotiate the response type as it does, and are never cached."""
    from gateway.server.media import negotiate
    from gateway.server.principal import Unauthenticated

    async def refuse_all(authorization: str | None) -> Any:
        raise Unauthenticated("a bearer token is required")

    query = SessionQuery(live=[SessionStore()])
    headers = {"Accept": accept} if accept else {}
    expected = negotiate(accept)
    small = create_app(
        query, GatewayConfig(limits=Limits(max_body_bytes=64), rate_limit="1/minute")
    )
    cases = [
        (
            create_app(query, GatewayConfig(allowed_hosts=["localhost"])),
            {},
            421,
            "MISDIRECTED_REQUEST",
        ),
        (small, {"query": "{ __typename }" + " " * 100}, 413, "PAYLOAD_TOO_LARGE"),
        (create_app(query, authenticate=refuse_all), {}, 401, "UNAUTHENTICATED"),
    ]
    async with client(small) as c:
        await c.post("/graphql", json={"query": "{ __typename }"}, headers=headers)
        limited = await c.post("/graphql", json={"query": "{ __typename }"}, headers=headers)
    answers = [(limited, 429, "RATE_LIMITED")]
    for app, body, status, code in cases:
        async with client(app) as c:
            answer = await c.post("/graphql", json=body or {"query": "{ __typename }"},
                                  headers=headers)  # fmt: skip
        answers.append((answer, status, code))
    for answer, status, code in answers:
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"] == f"{expected}; charset=utf-8", code
        assert answer.headers["cache-control"] == "no-store", code
        assert answer.json()["errors"][0]["extensions"]["code"] == code
