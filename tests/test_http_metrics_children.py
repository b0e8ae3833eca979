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
