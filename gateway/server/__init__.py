"""The GraphQL-over-HTTP gateway: Strawberry schema over the query core, Starlette app.

`create_app(query, config)` is the entry point (`config.GatewayConfig` its
settings); `schema.build_schema()` the schema. `create_app` is imported on
first use, so that `gateway.server.config` (the defaults `serve --help`
shows) loads without the GraphQL layer.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["create_app"]
