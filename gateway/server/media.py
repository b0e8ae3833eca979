"""Which media type a response takes: the GraphQL-over-HTTP choice between
`application/graphql-response+json` and `application/json`, by the request's Accept.

Its own module so that answers written outside the GraphQL view (the ASGI
middlewares' refusals, see `errors.send_error`) negotiate exactly as the view does.
"""

from __future__ import annotations

GRAPHQL_RESPONSE = "application/graphql-response+json"
APPLICATION_JSON = "application/json"


def _media_ranges(accept: str) -> list[tuple[str, float]]:
    ranges = []
    for part in accept.split(","):
        pieces = [p.strip() for p in part.split(";")]
        media = pieces[0].lower()
        if not media:
            continue
        q = 1.0
        for param in pieces[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        ranges.append((media, q))
    return ranges


def negotiate(accept: str | None) -> str:
    """The response media type for an Accept header (application/json when in doubt)."""
    if not accept or not accept.strip():
        return APPLICATION_JSON
    q_graphql: float | None = None
    q_json: float | None = None
    for media, q in _media_ranges(accept):
        if media == GRAPHQL_RESPONSE:
            q_graphql = max(q, q_graphql or 0.0)
        elif media in (APPLICATION_JSON, "application/*", "*/*"):
            q_json = max(q, q_json or 0.0)
    if q_graphql and (q_json is None or q_graphql >= q_json):
        return GRAPHQL_RESPONSE
    return APPLICATION_JSON


def wants_html(accept: str | None) -> bool:
    return bool(accept) and any(
        media == "text/html" and q > 0 for media, q in _media_ranges(accept or "")
    )
