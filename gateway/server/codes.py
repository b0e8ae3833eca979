"""Every `extensions.code` the GraphQL/HTTP layer itself reports: the one list.

The core's contract codes are `gateway.core.ErrorCode` (SPEC §5); these are
the rest. Modules take their constants from here, and `create_app` hands this
list to the app's metrics, so `graphql_errors_total{code}` knows exactly the
codes the gateway can answer with (anything else counts as OTHER).
"""

from __future__ import annotations

from enum import StrEnum


class GatewayCode(StrEnum):
    INTERNAL_ERROR = "INTERNAL_ERROR"
    BAD_USER_INPUT = "BAD_USER_INPUT"
    BAD_REQUEST = "BAD_REQUEST"
    PARSE_FAILED = "GRAPHQL_PARSE_FAILED"
    VALIDATION_FAILED = "GRAPHQL_VALIDATION_FAILED"
    QUERY_TOO_COSTLY = "QUERY_TOO_COSTLY"
    OPERATION_TIMEOUT = "OPERATION_TIMEOUT"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    RESPONSE_TOO_LARGE = "RESPONSE_TOO_LARGE"
    """An answer past the per-request byte budget (`gateway.server.budget`)."""
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    MISDIRECTED_REQUEST = "MISDIRECTED_REQUEST"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FORBIDDEN = "FORBIDDEN"
    AUTH_UNAVAILABLE = "AUTH_UNAVAILABLE"
    RATE_LIMITED = "RATE_LIMITED"
    TRUSTED_DOCUMENT_NOT_FOUND = "TRUSTED_DOCUMENT_NOT_FOUND"
    TRUSTED_DOCUMENT_REQUIRED = "TRUSTED_DOCUMENT_REQUIRED"
    SUBSCRIPTION_LAGGED = "SUBSCRIPTION_LAGGED"
    TOO_MANY_SUBSCRIPTIONS = "TOO_MANY_SUBSCRIPTIONS"
    EXPORT_UNSUPPORTED = "EXPORT_UNSUPPORTED"
    """A log holding an event no artifact line can stand for (SPEC §15, `dsh_export`)."""
    SERVER_BUSY = "SERVER_BUSY"
    """503: the server is working on as many requests, or holds as many connections, as it
    may (`gateway.server.inflight`, `gateway.server.connections`); retry after `Retry-After`."""


GATEWAY_CODES: frozenset[str] = frozenset(code.value for code in GatewayCode)

__all__ = ["GATEWAY_CODES", "GatewayCode"]
