"""The GraphQL-over-HTTP gateway: Strawberry schema over the query core, Starlette app.

`create_app(query, ...)` is the entry point; `schema.build_schema()` the schema.
"""

from .app import create_app

__all__ = ["create_app"]
