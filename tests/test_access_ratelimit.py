"""Rate limits per token (issue 10): 429 with Retry-After past the rate, on /graphql and
/metrics only, counted per principal (per client address with auth off)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.server.config import GatewayConfig
from gateway.server.ratelimit import parse_rate
from tests.support.tokens import bearer, issued_tokens
from tests.test_graphql_helpers import client, codes

QUERY = {"query": "{ sessions(first: 1) { totalCount } }"}
GR = "application/graphql-response+json"


def _app(rate: str = "3/second", cors_origins: tuple[str, ...] = (), **options: Any) -> Any:
    config = GatewayConfig(rate_limit=rate, cors_origins=cors_origins)
    return create_app(SessionQuery(live=[SessionStore()]), config, **options)


async def _burst(c: httpx.AsyncClient, n: int, **kwargs: Any) -> list[httpx.Response]:
    return [await c.post("/graphql", json=QUERY, **kwargs) for _ in range(n)]


async def test_past_the_rate_a_caller_gets_429_with_retry_after_then_recovers() -> None:
    async with client(_app("3 per 2 seconds")) as c:
        first = await _burst(c, 5, headers={"Accept": GR})
        assert [r.status_code for r in first] == [200, 200, 200, 429, 429]
        refused = first[-1]
        retry_after = int(refused.headers["retry-after"])
        assert 1 <= retry_after <= 2
        assert refused.headers["content-type"].startswith(GR)
        body = refused.json()
        assert codes(body) == ["RATE_LIMITED"] and "data" not in body
        assert body["errors"][0]["extensions"]["retryAfter"] == retry_after
        assert "3 per 2 seconds" in body["errors"][0]["message"]
        await asyncio.sleep(retry_after + 0.05)
        again = await _burst(c, 3)
    assert [r.status_code for r in again] == [200, 200, 200]


async def test_each_token_has_its_own_count(tmp_path: Path) -> None:
    specs = [("one", ["all"], False), ("two", ["all"], False)]
    async with (
        issued_tokens(tmp_path / "t.db", *specs) as (auth, secret),
        client(_app("2/minute", authenticate=auth)) as c,
    ):
        one = await _burst(c, 3, headers=bearer(secret["one"]))
        two = await _burst(c, 2, headers=bearer(secret["two"]))
    assert [r.status_code for r in one] == [200, 200, 429]
    assert [r.status_code for r in two] == [200, 200]
    assert "this token" in one[-1].json()["errors"][0]["message"]
    assert 1 <= int(one[-1].headers["retry-after"]) <= 60


async def test_with_auth_off_each_client_address_has_its_own_count() -> None:
    app = _app("1/minute")
    transports = [
        httpx.ASGITransport(app=app, client=(ip, 1234)) for ip in ("10.0.0.1", "10.0.0.2")
    ]
    results = []
    for transport in transports:
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
            results.append([r.status_code for r in await _burst(c, 2)])
    assert results == [[200, 429], [200, 429]]


async def test_health_readiness_static_files_and_preflights_are_never_limited() -> None:
    origin = "http://tools.example"
    app = _app("1/minute", cors_origins=(origin,))
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    async with client(app) as c:
        for _ in range(3):
            assert (await c.get("/healthz")).status_code == 200
            assert (await c.get("/readyz")).status_code == 200
            assert (await c.get("/static/graphiql/graphiql.min.css")).status_code == 200
            assert (await c.options("/graphql", headers=preflight)).status_code == 200
        assert [r.status_code for r in await _burst(c, 2)] == [200, 429]


async def test_metrics_is_limited_and_a_429_to_a_cross_origin_call_is_readable() -> None:
    origin = "http://tools.example"
    async with client(_app("1/minute", cors_origins=(origin,))) as c:
        assert (await c.get("/metrics")).status_code == 200
        refused = await c.post("/graphql", json=QUERY, headers={"Origin": origin})
    assert refused.status_code == 429
    assert refused.headers["access-control-allow-origin"] == origin
    assert "retry-after" in refused.headers["access-control-expose-headers"].lower()


@pytest.mark.parametrize("bad", ["100", "100/fortnight", "fast", "0/second", ""])
def test_a_rate_that_is_not_understood_is_refused_at_start(bad: str) -> None:
    with pytest.raises(ValueError, match="rate limit"):
        _app(bad)


def test_rates_in_the_limits_notation_are_understood() -> None:
    assert [i.amount for i in parse_rate("10/second;1000/hour")] == [10, 1000]
    assert parse_rate("100 per minute")[0].get_expiry() == 60


def test_serve_refuses_a_bad_rate_and_a_bad_origin_before_starting(tmp_path: Path) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    for args, needle in (
        (["--rate-limit", "lots"], "rate limit 'lots'"),
        (["--cors-origin", "https://tools.example/"], "not an origin"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "gateway", "serve", "--database", db, *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.db").exists()


def test_serve_help_names_the_access_options_and_their_env_vars(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gateway.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for text in (
        "--cors-origin",
        "SESSION_GATEWAY_CORS_ORIGINS",
        "--trusted-documents",
        "--rate-limit",
        "100/second",
    ):
        assert text in out, text


def test_cors_origins_come_from_the_env_var_unless_given_as_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.cli import build_parser
    from gateway.commands.serve import gateway_config

    monkeypatch.setenv("SESSION_GATEWAY_CORS_ORIGINS", "https://a.example, https://B.example:8443,")
    monkeypatch.delenv("SESSION_GATEWAY_RATE_LIMIT", raising=False)
    monkeypatch.delenv("SESSION_GATEWAY_TRUSTED_DOCUMENTS", raising=False)
    from_env = gateway_config(build_parser().parse_args(["serve"]))
    assert from_env.cors_origins == ("https://a.example", "https://b.example:8443")
    assert from_env.rate_limit is None and from_env.trusted_documents is None
    from_flags = gateway_config(
        build_parser().parse_args(
            ["serve", "--cors-origin", "http://x.example", "--cors-origin", "http://y.example"]
        )
    )
    assert from_flags.cors_origins == ("http://x.example", "http://y.example")


async def test_failed_authentications_count_per_address_and_stop_reaching_the_token_store() -> None:
    """A bad token is a 401 that the per-token limit never sees: such failures count per
    client address at the same rate, and past it the token store is not asked again."""
    from gateway.server.principal import Principal, Unauthenticated

    asked: list[str | None] = []

    async def authenticate(authorization: str | None) -> Principal:
        asked.append(authorization)
        if authorization == "Bearer good":
            return Principal("good", ("all",))
        raise Unauthenticated("unknown token")

    async with client(_app("3/minute", authenticate=authenticate)) as c:
        good = await _burst(c, 3, headers={"Authorization": "Bearer good"})
        bad = await _burst(c, 4, headers={"Authorization": "Bearer guess"})
    assert [r.status_code for r in good] == [200, 200, 200]  # valid tokens never count
    assert [r.status_code for r in bad] == [401, 401, 401, 429]
    assert asked.count("Bearer guess") == 3  # the fourth guess cost no token read
    refused = bad[-1]
    assert codes(refused.json()) == ["RATE_LIMITED"]
    assert "fail authentication 3 per minute" in refused.json()["errors"][0]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
