"""`GatewayConfig`: everything `create_app` is told, in one frozen, validated object.

Built once (by `serve` from its flags and environment, or by an embedding
host) and validated once, here: origins are normalised, the trusted-documents
manifest is checked against the token limit every request is parsed with,
the rate is parsed, numbers are range-checked. Every part of the app reads
its settings from this object; nothing is handed around through `app.state`.

This module imports nothing beyond the standard library at import time, so
`session-gateway serve --help` can show the defaults without loading the
GraphQL layer; the checks that need a library import it when a config is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.core.tail import DEFAULT_TAIL_BUFFER

if TYPE_CHECKING:
    from limits import RateLimitItem

DEFAULT_MAX_DEPTH = 15
DEFAULT_MAX_ALIASES = 30
DEFAULT_MAX_TOKENS = 5_000
DEFAULT_MAX_BODY_BYTES = 1 << 20
DEFAULT_OPERATION_TIMEOUT = 30.0
DEFAULT_MAX_FIELDS = 2_000
DEFAULT_MAX_SELECTIONS = 1_000
DEFAULT_MAX_SAME_NAME = 20
DEFAULT_MAX_COST = 50_000
DEFAULT_MAX_RESPONSE_BYTES = 64 << 20
"""Bytes one answer may hold (`gateway.server.budget`): a full page of 500 events of
64 KB payloads is 32 MiB, so twice that passes, while eight such answers at once stay
well under a gigabyte."""
DEFAULT_READINESS_TIMEOUT = 5.0
DEFAULT_INIT_TIMEOUT = 10.0
DEFAULT_MAX_SUBSCRIPTIONS = 10
DEFAULT_SUBSCRIPTION_BUFFER = DEFAULT_TAIL_BUFFER
DEFAULT_MAX_SUBSCRIPTIONS_SERVER = 1_000
"""Subscriptions that may run at once on one server (every transport together)."""
DEFAULT_MAX_SUBSCRIPTIONS_PER_TOKEN = 100
"""Subscriptions that may run at once for one token (one client address with auth off)."""
DEFAULT_REAUTH_INTERVAL = 2.0
"""Seconds between the re-checks of a running subscription's credentials: a revoked or
expired token stops its streams within this (plus one token read)."""
DEFAULT_MAX_IN_FLIGHT = 64
"""HTTP requests worked on at once (`/healthz` not counted); past it 503 SERVER_BUSY. One
process on a few cores answers no faster with more, and each holds its answer's memory."""
DEFAULT_HEADER_TIMEOUT = 10.0
"""Seconds a connection has to send complete request headers (slowloris)."""
DEFAULT_KEEP_ALIVE_TIMEOUT = 5.0
"""Seconds an idle keep-alive connection is kept after a response (uvicorn's default)."""
DEFAULT_MAX_CONNECTIONS = 4_096
"""Open connections (HTTP and WebSocket); `serve` lowers it below the file-descriptor limit."""
DEFAULT_LIMIT_LOG_INTERVAL = 10.0
"""Seconds between two log lines about the same connection limit (with a count between)."""

DEFAULT_QUERY = """\
# Welcome to the session-query gateway. Run this with the ▶ button (Ctrl-Enter).
query Sessions {
  sessions(first: 20) {
    totalCount
    nodes {
      id
      live
      persisted
      header { createdAt parentSessionId origin }
      events(first: 1) { totalCount }
    }
  }
}
"""


def _positive_int(name: str, value: object) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _positive_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may ask (see `gateway.server.limits` for what each refusal says)."""

    max_depth: int = DEFAULT_MAX_DEPTH
    max_aliases: int = DEFAULT_MAX_ALIASES
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    operation_timeout: float = DEFAULT_OPERATION_TIMEOUT
    max_cost: int = DEFAULT_MAX_COST
    max_fields: int = DEFAULT_MAX_FIELDS
    max_selections: int = DEFAULT_MAX_SELECTIONS
    max_same_name: int = DEFAULT_MAX_SAME_NAME
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES

    def __post_init__(self) -> None:
        for name in (
            "max_depth",
            "max_aliases",
            "max_tokens",
            "max_body_bytes",
            "max_cost",
            "max_fields",
            "max_selections",
            "max_same_name",
            "max_response_bytes",
        ):
            _positive_int(name, getattr(self, name))
        _positive_seconds("operation_timeout", self.operation_timeout)


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayConfig:
    """The settings of one app (see the module docstring; every field has a default).

    * `limits`: document, cost, body, time and response-size limits of every operation.
    * `graphiql` / `default_query`: the GraphiQL page and the viewer, and the query
      GraphiQL opens with.
    * `readiness_timeout`: how long `/readyz` waits for the database.
    * `cursor_secret`: the cursors' HMAC key (random per process when None).
    * `expose_metrics`: serve `/metrics`.
    * `cors_origins`: browser origins allowed to call from other pages (and to open
      WebSockets); `*` allows every origin.
    * `trusted_documents`: the manifest requests may name by `documentId`.
    * `rate_limit`: requests per token (or client address), e.g. "100/second";
      every operation on every transport counts, WebSocket `subscribe`s included.
    * `subscription_buffer`: how far a subscriber may fall behind before
      SUBSCRIPTION_LAGGED.
    * `connection_init_timeout` / `max_subscriptions_per_connection`: bounds of one
      graphql-transport-ws connection.
    * `reauth_interval`: how often a running subscription's credentials are checked.
    * `max_subscriptions` / `max_subscriptions_per_token`: subscriptions running at once
      on the server, and per token (per client address with auth off), every transport
      together (past either: TOO_MANY_SUBSCRIPTIONS).
    * `allowed_hosts`: Host names served (None: any; see `gateway.server.host_check`).
    * `max_requests_in_flight`: HTTP requests worked on at once; past it 503
      SERVER_BUSY with `Retry-After` (`gateway.server.inflight`; `/healthz` is never
      refused, an SSE stream counts until it starts).
    """

    limits: Limits = field(default_factory=Limits)
    graphiql: bool = True
    default_query: str | None = DEFAULT_QUERY
    readiness_timeout: float = DEFAULT_READINESS_TIMEOUT
    cursor_secret: bytes | str | None = None
    debug: bool = False
    expose_metrics: bool = True
    cors_origins: tuple[str, ...] = ()
    trusted_documents: Mapping[str, str] | None = None
    rate_limit: str | None = None
    subscription_buffer: int = DEFAULT_SUBSCRIPTION_BUFFER
    connection_init_timeout: float = DEFAULT_INIT_TIMEOUT
    max_subscriptions_per_connection: int = DEFAULT_MAX_SUBSCRIPTIONS
    reauth_interval: float = DEFAULT_REAUTH_INTERVAL
    allowed_hosts: tuple[str, ...] | None = None
    max_requests_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS_SERVER
    max_subscriptions_per_token: int = DEFAULT_MAX_SUBSCRIPTIONS_PER_TOKEN
    rate: tuple[RateLimitItem, ...] = field(init=False, default=(), repr=False, compare=False)
    """`rate_limit` parsed (empty when there is no limit)."""

    def __post_init__(self) -> None:
        from .cors import check_origins
        from .documents import check_manifest
        from .ratelimit import parse_rate

        if not isinstance(self.limits, Limits):
            raise ValueError(f"limits must be a Limits, got {type(self.limits).__name__}")
        _positive_seconds("readiness_timeout", self.readiness_timeout)
        _positive_seconds("connection_init_timeout", self.connection_init_timeout)
        _positive_seconds("reauth_interval", self.reauth_interval)
        _positive_int("subscription_buffer", self.subscription_buffer)
        _positive_int("max_subscriptions_per_connection", self.max_subscriptions_per_connection)
        _positive_int("max_requests_in_flight", self.max_requests_in_flight)
        _positive_int("max_subscriptions", self.max_subscriptions)
        _positive_int("max_subscriptions_per_token", self.max_subscriptions_per_token)
        if isinstance(self.cors_origins, str):  # type: ignore[unreachable]
            raise ValueError("cors_origins must be a list of origins, not one string")
        self._set("cors_origins", check_origins(self.cors_origins))
        if self.trusted_documents is not None:
            self._set(
                "trusted_documents",
                check_manifest(self.trusted_documents, max_tokens=self.limits.max_tokens),
            )
        if self.rate_limit is not None:
            self._set("rate", parse_rate(self.rate_limit))
        if self.allowed_hosts is not None:
            if isinstance(self.allowed_hosts, str):  # type: ignore[unreachable]
                raise ValueError("allowed_hosts must be a list of host names, not one string")
            self._set("allowed_hosts", tuple(self.allowed_hosts))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # normalising a frozen instance once, here


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimits:
    """What one connection may hold, below the app (`serve` gives them to uvicorn through
    `gateway.server.connections`; an embedding host runs its own server).

    * `header_timeout`: seconds from a connection's first byte (or its opening) to the end
      of its request headers; past it the connection is closed.
    * `keep_alive_timeout`: seconds an idle connection is kept after a response.
    * `max_connections`: open connections; one more is answered 503 and closed at once.
    * `log_interval`: at most one log line per interval for each limit, with a count.
    """

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    log_interval: float = DEFAULT_LIMIT_LOG_INTERVAL

    def __post_init__(self) -> None:
        _positive_seconds("header_timeout", self.header_timeout)
        _positive_seconds("keep_alive_timeout", self.keep_alive_timeout)
        _positive_seconds("log_interval", self.log_interval)
        _positive_int("max_connections", self.max_connections)


__all__ = [
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_INIT_TIMEOUT",
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_LIMIT_LOG_INTERVAL",
    "DEFAULT_MAX_ALIASES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_COST",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_SUBSCRIPTIONS",
    "DEFAULT_MAX_SUBSCRIPTIONS_PER_TOKEN",
    "DEFAULT_MAX_SUBSCRIPTIONS_SERVER",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_OPERATION_TIMEOUT",
    "DEFAULT_QUERY",
    "DEFAULT_READINESS_TIMEOUT",
    "DEFAULT_REAUTH_INTERVAL",
    "DEFAULT_SUBSCRIPTION_BUFFER",
    "ConnectionLimits",
    "GatewayConfig",
    "Limits",
]
