"""Operations support: Prometheus metrics, structured logs and request ids.

Dependency-free (the standard library only); `metrics_extension` imports
Strawberry lazily, when the GraphQL schema asks for it.
"""

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
