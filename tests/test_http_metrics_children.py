"""`record_http_request` keeps the labelled children it made (per route and status label):
each request still lands on its own series, folded labels share one."""

from __future__ import annotations

from gateway.observability.metrics import GatewayMetrics


def test_http_metrics_children_are_kept_per_route_and_status_label():
    metrics = GatewayMetrics()
    for path, status in [
        ("/graphql", 200),
        ("/graphql", 200),
        ("/graphql", 500),
        ("/healthz", 200),
        ("/nope", 200),
        ("/elsewhere", 200),  # folds into route "other" with /nope
        ("/graphql", 1000),  # folds into status "other"
        ("/graphql", 99),
    ]:
        metrics.record_http_request(path, status, 0.001)
    count = "http_requests_total"
    assert metrics.value(count, route="/graphql", status="200") == 2
    assert metrics.value(count, route="/graphql", status="500") == 1
    assert metrics.value(count, route="/healthz", status="200") == 1
    assert metrics.value(count, route="other", status="200") == 2
    assert metrics.value(count, route="/graphql", status="other") == 2
    assert metrics.value("http_request_duration_seconds_count", route="/graphql") == 5
    assert metrics.value("http_request_duration_seconds_count", route="other") == 2
    assert len(metrics._http_children) == 5


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_operation_metrics_children_are_kept_per_name_and_type_and_dropped_with_the_name():
    clock = _Clock()
    metrics = GatewayMetrics(max_operation_names=1, operation_name_idle=10.0, clock=clock)
    count, timed = "graphql_operations_total", "graphql_operation_duration_seconds_count"
    for name, kind in [("A", "query"), ("A", "query"), ("A", "mutation"), (None, "query")]:
        metrics.record_operation(name, kind, 0.001)
    assert metrics.value(count, operation_name="A", operation_type="query") == 2
    assert metrics.value(timed, operation_name="A", operation_type="query") == 2
    assert metrics.value(count, operation_name="A", operation_type="mutation") == 1
    assert metrics.value(count, operation_name="__anonymous__", operation_type="query") == 1
    assert len(metrics._operation_children) == 3
    clock.now = 20.0
    metrics.record_operation("B", "query", 0.001)  # A was idle: B takes its slot
    assert metrics.value(count, operation_name="A", operation_type="query") == 0
    assert ("A", "query") not in metrics._operation_children
    clock.now = 40.0
    metrics.record_operation("A", "query", 0.001)  # A back: a live series of its own again
    assert metrics.value(count, operation_name="A", operation_type="query") == 1
    assert metrics.value(count, operation_name="B", operation_type="query") == 0
