"""What each middleware of `create_app` costs per request, alone around an empty app.

    .venv/bin/python -m benchmarks.bench_middleware [--requests 20000] [--rounds 5]

Each layer (with the arguments `create_app` gives it) wraps an ASGI app that answers
200 with a 2-byte body; a POST /graphql scope with the headers a client sends is
driven through it in-process, and the figure is the median over rounds of the CPU
time per request (`time.process_time`) less that of the bare app. Issue 21.3: no
middleware may cost more than its job; an outlier shows here first.

`create_app stack` is the whole of it as `create_app` builds it (default config: no CORS,
no host list, no access rules), Starlette's own error and exception layers and router
included, with the `/graphql` route's endpoint swapped for the bare app: what a request
pays before and after its endpoint (target <= 50 us, issue 21).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from starlette.routing import Route

from gateway.core import SessionQuery, SessionStore
from gateway.observability.metrics import GatewayMetrics, HttpMetricsMiddleware
from gateway.observability.request_id import RequestIdMiddleware
from gateway.server.app import create_app
from gateway.server.host_check import HostAllowList
from gateway.server.inflight import InFlightLimit
from gateway.server.limits import BodySizeLimit
from gateway.server.security_headers import SecurityHeaders

BODY = b'{"query":"{ session(id: \\"s\\") { id } }"}'
SCOPE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "POST",
    "scheme": "http",
    "path": "/graphql",
    "raw_path": b"/graphql",
    "query_string": b"",
    "root_path": "",
    "server": ("127.0.0.1", 8000),
    "client": ("127.0.0.1", 50000),
    "headers": [
        (b"host", b"127.0.0.1:8000"),
        (b"user-agent", b"bench"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
    ],
}


async def bare(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def layers() -> dict[str, Callable[[Any], Any]]:
    metrics = GatewayMetrics()
    metrics.know_routes(["/graphql"])
    return {
        "bare app": lambda app: app,
        "RequestIdMiddleware": lambda app: RequestIdMiddleware(app),
        "HttpMetricsMiddleware": lambda app: HttpMetricsMiddleware(app, metrics=metrics),
        "SecurityHeaders": lambda app: SecurityHeaders(app),
        "InFlightLimit": lambda app: InFlightLimit(app, max_in_flight=64),
        "HostAllowList": lambda app: HostAllowList(app, allowed=["127.0.0.1"]),
        "BodySizeLimit": lambda app: BodySizeLimit(app, max_bytes=1 << 20),
        "create_app stack": app_stack,
    }


def app_stack(endpoint: Any) -> Any:
    """`create_app`'s whole stack with `endpoint` as the `/graphql` route's app."""
    app = create_app(SessionQuery(live=[SessionStore()]), metrics=GatewayMetrics())
    for route in app.routes:
        if isinstance(route, Route) and route.path == "/graphql":
            route.app = endpoint
    return app


async def drive(app: Any, n: int) -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    start = time.process_time()
    for _ in range(n):
        await app(dict(SCOPE, headers=list(SCOPE["headers"])), receive, send)
    return (time.process_time() - start) / n * 1e6


async def main(requests: int, rounds: int) -> None:
    made = {name: wrap(bare) for name, wrap in layers().items()}
    per: dict[str, list[float]] = {name: [] for name in made}
    for r in range(rounds):
        names = list(made)
        names = names[r % len(names) :] + names[: r % len(names)]
        for name in names:
            per[name].append(await drive(made[name], requests))
    base = statistics.median(per["bare app"])
    print(f"bare app: {base:.2f} us/request (CPU)")
    for name, figures in per.items():
        if name != "bare app":
            print(f"{name:24s} +{statistics.median(figures) - base:6.2f} us/request (CPU)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds))
