"""Browser-facing pieces of the gateway: the offline GraphiQL page and its assets."""

from gateway.web.graphiql import STATIC_DIR, graphiql_html

__all__ = ["STATIC_DIR", "graphiql_html"]
