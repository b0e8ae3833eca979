"""Session-query gateway: exact inspection of AI-agent session history.

The query core (`gateway.core`) is importable on its own; `create_app` builds
the GraphQL-over-HTTP service around it.
"""

from typing import TYPE_CHECKING, Any

from .core import (
    Availability,
    ErrorCode,
    EventFilter,
    EventHit,
    EventSearchPage,
    EventSurface,
    LiveSession,
    RankKey,
    SeqRange,
    SessionEvent,
    SessionFilter,
    SessionHeader,
    SessionHit,
    SessionQuery,
    SessionQueryError,
    SessionSearchPage,
    SessionStore,
    TextRange,
    TimeRange,
    fold_surface,
)

if TYPE_CHECKING:
    from starlette.applications import Starlette


def create_app(query: SessionQuery, *args: Any, **options: Any) -> "Starlette":
    """The Starlette ASGI app serving `query` over GraphQL (imported lazily; see
    `gateway.server.app.create_app` and `gateway.server.config.GatewayConfig`)."""
    from .server.app import create_app as _create_app

    app: Starlette = _create_app(query, *args, **options)
    return app


__all__ = [
    "Availability",
    "ErrorCode",
    "EventFilter",
    "EventHit",
    "EventSearchPage",
    "EventSurface",
    "LiveSession",
    "RankKey",
    "SeqRange",
    "SessionEvent",
    "SessionFilter",
    "SessionHeader",
    "SessionHit",
    "SessionQuery",
    "SessionQueryError",
    "SessionSearchPage",
    "SessionStore",
    "TextRange",
    "TimeRange",
    "create_app",
    "fold_surface",
]
