"""Operations support: Prometheus metrics, structured logs and request ids.

Request ids are imported from `.request_id`, not from here: that module needs Starlette,
and this package loads whenever `--help` reads the logging options. `metrics_extension`
imports Strawberry lazily, when the GraphQL schema asks for it.
"""

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
