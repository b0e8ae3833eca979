"""What CORS, trusted documents and the rate limit add to a request. Prints figures:

    .venv/bin/python -m benchmarks.bench_access_layers [--requests 2000] [--rounds 9]

One app per variant over the same live corpus (50 sessions), driven in-process
through httpx's ASGI transport (no sockets, so the middleware is a larger share
of what is timed than over HTTP): `sessions(first: 1) { totalCount }`, a cheap
query so the layers are a large share, sent as `query` by a client with no
Origin, against the same with

* CORS on and an allowed `Origin` header on every request;
* a rate limit high enough never to refuse (`1000000/second`), so every request
  is counted;
* the document sent by `documentId` from a trusted-documents manifest;
* all three.

The client runs in the same process, so its own work is in these figures too
(with CORS it parses four more response headers). Then each layer alone around
an empty ASGI app (the server-side cost of the layer itself, which the first
figures may hide in the noise of a shared machine): the rate limit counting a
request, and CORS answering a request with an allowed Origin.

Variants are interleaved round by round (in a rotated order each round) and
each figure is the median of the rounds' mean CPU time (`time.process_time`,
which other processes on a shared machine disturb less than wall time) per
request. No target of its own: these layers sit inside
the <= 10 % budget issue 10 sets for auth + scope.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx

from gateway import SessionQuery, SessionStore, create_app
from gateway.server.config import GatewayConfig
from gateway.server.documents import document_id

QUERY = "{ sessions(first: 1) { totalCount } }"
ORIGIN = "http://tools.example"


def corpus() -> SessionQuery:
    store = SessionStore()
    for i in range(50):
        store.create(f"s{i:03d}", created_at=1_000 + i)
    return SessionQuery(live=[store])


def variants() -> dict[str, tuple[Any, dict[str, Any], dict[str, str]]]:
    manifest = {document_id(QUERY): QUERY}
    plain = {"query": QUERY}
    by_id = {"documentId": document_id(QUERY)}
    origin = {"Origin": ORIGIN}
    return {
        "plain": (create_app(corpus()), plain, {}),
        "cors": (create_app(corpus(), GatewayConfig(cors_origins=[ORIGIN])), plain, origin),
        "rate limit": (create_app(corpus(), GatewayConfig(rate_limit="1000000/second")), plain, {}),
        "documentId": (create_app(corpus(), GatewayConfig(trusted_documents=manifest)), by_id, {}),
        "all three": (
            create_app(
                corpus(),
                GatewayConfig(
                    cors_origins=[ORIGIN], rate_limit="1000000/second", trusted_documents=manifest
                ),
            ),
            by_id,
            origin,
        ),
    }


async def mean_request(app: Any, body: dict[str, Any], headers: dict[str, str], n: int) -> float:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        r = await c.post("/graphql", json=body, headers=headers)
        assert r.status_code == 200 and "errors" not in r.json(), r.text
        start = time.process_time()
        for _ in range(n):
            await c.post("/graphql", json=body, headers=headers)
        return (time.process_time() - start) / n


async def _empty(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def layer_alone(app: Any, n: int) -> float:
    """Mean CPU time of one POST /graphql (with an allowed Origin) through `app`."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        return None

    def scope() -> dict[str, Any]:
        headers = [(b"content-type", b"application/json"), (b"origin", ORIGIN.encode())]
        return {"type": "http", "method": "POST", "path": "/graphql", "headers": headers,
                "client": ("127.0.0.1", 1), "state": {}}  # fmt: skip

    for _ in range(100):
        await app(scope(), receive, send)
    start = time.process_time()
    for _ in range(n):
        await app(scope(), receive, send)
    return (time.process_time() - start) / n


async def layers(n: int, rounds: int) -> None:
    from starlette.middleware.cors import CORSMiddleware

    from gateway.server.access import Access, AccessMiddleware
    from gateway.server.cors import cors_middleware
    from gateway.server.ratelimit import parse_rate

    (cors,) = cors_middleware((ORIGIN,))
    # The rate limit as every operation meets it (the pipeline's `Access.admit`), here
    # behind the middleware that applies the same object to /metrics.
    access = Access(None, parse_rate("1000000/second"))
    apps = {
        "empty app": _empty,
        "rate limit": AccessMiddleware(_empty, access, ["/graphql"]),
        "cors": CORSMiddleware(_empty, *cors.args, **cors.kwargs),
    }
    samples: dict[str, list[float]] = {name: [] for name in apps}
    for _ in range(rounds):
        for name, app in apps.items():
            samples[name].append(await layer_alone(app, n))
    print(f"each layer alone, {n} requests x {rounds} rounds (CPU time)")
    for name, values in samples.items():
        print(f"  {name:<11} {statistics.median(values) * 1e6:8.1f} us/request")


async def main(requests: int, rounds: int) -> None:
    apps = variants()
    samples: dict[str, list[float]] = {name: [] for name in apps}
    names = list(apps)
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            app, body, headers = apps[name]
            samples[name].append(await mean_request(app, body, headers, requests))
    base = statistics.median(samples["plain"])
    print(f"{requests} requests x {rounds} rounds, median of round means (CPU time)")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"  {name:<11} {med * 1e6:8.1f} us/request  {100 * (med / base - 1):+6.1f} %")
    await layers(20 * requests, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds))
