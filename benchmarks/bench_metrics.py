"""What the gateway's metrics cost: the bookkeeping per operation, backend call and HTTP
request, and rendering `/metrics` with every bounded label in use. One command:

    .venv/bin/python -m benchmarks.bench_metrics [--calls 50000]

Targets: the bookkeeping of one small GraphQL request (one operation, one HTTP
request, three backend calls) <= 60 us, 1 % of the ~6 ms such a request takes
(`bench_graphql`); a full exposition (all 100 operation-name slots taken by
queries, every backend method x 3 outcomes, every route x 10 statuses) rendered
in <= 50 ms. Also reported: the worst a client can force (each name used as
query, mutation, subscription and with no document). `/metrics` renders in a
worker thread, so this is CPU taken from the process, not an event-loop stall.
Only the public `GatewayMetrics` API is used, so the same file times another
checkout of the gateway too (run it from that checkout's directory).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from gateway.observability.metrics import DEFAULT_ROUTES, GatewayMetrics

METHODS = ("list", "load", "load_headers", "count_sessions", "headers_page", "read_events")
STATUSES = (200, 201, 204, 301, 400, 401, 403, 404, 429, 500)


def per_call(fn: Callable[[int], object], calls: int, repeats: int = 5) -> float:
    """Median over `repeats` of the mean seconds per call of `fn(i)`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(calls):
            fn(i)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def full(metrics: GatewayMetrics, kinds: tuple[str, ...] = ("query",)) -> None:
    """Every bounded label value in use at least once (operation names with `kinds`)."""
    for n in range(metrics.max_operation_names):
        for kind in kinds:
            metrics.record_operation(f"Op{n}", kind, 0.01, ["INTERNAL_ERROR"])
    for method in getattr(metrics, "backend_methods", METHODS):
        for outcome in ("ok", "error", "cancelled"):
            metrics.record_backend_call(method, outcome, 0.001)
    for route in DEFAULT_ROUTES:
        for status in STATUSES:
            metrics.record_http_request(route, status, 0.001)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50_000)
    args = parser.parse_args()

    metrics = GatewayMetrics()
    names = [f"Op{i}" for i in range(50)]
    op = per_call(lambda i: metrics.record_operation(names[i % 50], "query", 0.002), args.calls)
    backend = per_call(
        lambda i: metrics.record_backend_call(METHODS[i % len(METHODS)], "ok", 0.0005),
        args.calls,
    )
    http = per_call(lambda i: metrics.record_http_request("/graphql", 200, 0.003), args.calls)
    request = op + http + 3 * backend

    def render_time(kinds: tuple[str, ...]) -> tuple[float, int, int]:
        loaded = GatewayMetrics()
        full(loaded, kinds)
        renders = []
        for _ in range(11):
            start = time.perf_counter()
            text = loaded.render()
            renders.append(time.perf_counter() - start)
        return statistics.median(renders), len(text.splitlines()), len(text)

    render, lines, size = render_time(("query",))
    worst, worst_lines, _ = render_time(("query", "mutation", "subscription", None))  # type: ignore[arg-type]

    print(f"record_operation:      {op * 1e6:6.2f} us per call")
    print(f"record_backend_call:   {backend * 1e6:6.2f} us per call")
    print(f"record_http_request:   {http * 1e6:6.2f} us per call")
    verdict = "OK" if request <= 60e-6 else "over"
    print(f"one small request (1 op + 1 http + 3 backend): {request * 1e6:.1f} us")
    print(f"  (target <= 60 us: {verdict})")
    verdict = "OK" if render <= 0.05 else "over"
    print(f"full exposition ({lines} lines, {size} bytes): {render * 1e3:.1f} ms")
    print(f"  median of 11 (target <= 50 ms: {verdict})")
    print(f"worst a client can force ({worst_lines} lines): {worst * 1e3:.1f} ms (report)")


if __name__ == "__main__":
    main()
