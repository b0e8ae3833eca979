"""Operations support: Prometheus metrics, structured logs and request ids.

Metrics are `prometheus_client`'s, in a registry per app (`metrics.py`);
`metrics_extension` imports Strawberry lazily, when the GraphQL schema asks for
it. The names below are imported on first use, so a command that only needs
the logging options (`serve --help`) does not load the metrics library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .logging import (
        RequestIdMiddleware,
        add_logging_arguments,
        configure_logging,
        current_request_id,
        new_request_id,
        request_id_scope,
    )
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
    "RequestIdMiddleware": "logging",
    "add_logging_arguments": "logging",
    "configure_logging": "logging",
    "current_request_id": "logging",
    "new_request_id": "logging",
    "request_id_scope": "logging",
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
    "RequestIdMiddleware",
    "add_logging_arguments",
    "configure_logging",
    "current_request_id",
    "instrument_backend",
    "metrics_extension",
    "new_request_id",
    "request_id_scope",
    "unwrap_backend",
]
