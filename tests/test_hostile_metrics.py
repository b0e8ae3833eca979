"""Operation-name label slots (issue 9): a flood of names cannot keep later names out for good."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.metrics import GatewayMetrics


def operation_names(metrics: GatewayMetrics) -> set[str]:
    """The operation names with series in the exposition (counter and histogram alike)."""
    text = metrics.render().decode()
    return {
        s.labels["operation_name"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if "operation_name" in s.labels
    }


class Clock:
    """Time the test sets (the slots' idle rule is about time)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_flood_of_names_yields_its_slots_once_idle() -> None:
    clock = Clock()
    metrics = GatewayMetrics(max_operation_names=3, operation_name_idle=60.0, clock=clock)
    for name in ("Flood1", "Flood2", "Flood3"):
        metrics.record_operation(name, "query", 0.01, [])
    assert metrics.operation_name_label("Later") == "__other__"  # all slots busy
    clock.now = 30.0
    metrics.record_operation("Flood2", "query", 0.01, [])  # still in use
    clock.now = 61.0
    assert metrics.operation_name_label("Later") == "Later"  # Flood1 idle: its slot
    assert metrics.operation_name_label("Other") == "Other"  # Flood3 was idle too
    assert operation_names(metrics) == {"Flood2"}  # the idle names' series are gone
    assert metrics.operation_name_label("Flood2") == "Flood2"
    assert metrics.operation_name_label("Flood1") == "__other__"  # no slot is idle now


def test_the_exposition_stays_bounded_while_names_rotate() -> None:
    clock = Clock()
    metrics = GatewayMetrics(max_operation_names=10, operation_name_idle=1.0, clock=clock)
    for n in range(1000):
        clock.now = float(n)
        metrics.record_operation(f"Op{n}", "query", 0.001, [])
    names = operation_names(metrics)
    assert len(names) <= 11 and "Op999" in names
