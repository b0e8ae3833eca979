"""Operations support: Prometheus metrics, structured logs and request ids.

Metrics are `prometheus_client`'s, in a registry per app (`metrics.py`). The
names below are imported on first use: this package loads whenever `--help`
reads the logging options, which must not load the metrics library. Request ids
are imported from `.request_id`, not from here (that module needs Starlette).
`metrics_extension` imports Strawberry lazily, when the GraphQL schema asks for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .logging import add_logging_arguments, configure_logging
    from .metrics import (
        CONTENT_TYPE,
        GatewayMetrics,
        HttpMetricsMiddleware,
        MetricsEndpoint,
        instrument_backend,
        metrics_extension,
        unwrap_backend,
    )

_SOURCES = {
    "add_logging_arguments": "logging",
    "configure_logging": "logging",
    "CONTENT_TYPE": "metrics",
    "GatewayMetrics": "metrics",
    "HttpMetricsMiddleware": "metrics",
    "MetricsEndpoint": "metrics",
    "instrument_backend": "metrics",
    "metrics_extension": "metrics",
    "unwrap_backend": "metrics",
}


def __getattr__(name: str) -> Any:
    module = _SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCES})


__all__ = [
    "CONTENT_TYPE",
    "GatewayMetrics",
    "HttpMetricsMiddleware",
    "MetricsEndpoint",
    "add_logging_arguments",
    "configure_logging",
    "instrument_backend",
    "metrics_extension",
    "unwrap_backend",
]
