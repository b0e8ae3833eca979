"""Which media type a response takes: the GraphQL-over-HTTP choice between
`application/graphql-response+json` and `application/json`, by the request's Accept.

Its own module so that answers written outside the GraphQL view (the ASGI
middlewares' refusals, see `errors.send_error`) negotiate exactly as the view does.
"""

from __future__ import annotations

GRAPHQL_RESPONSE = "application/graphql-response+json"
APPLICATION_JSON = "application/json"
MEDIA_TYPES = (GRAPHQL_RESPONSE, APPLICATION_JSON)
"""What `negotiate` answers."""


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


EVENT_STREAM = "text/event-stream"


def event_stream_choice(accept: str | None) -> tuple[bool, bool]:
    """Whether `Accept` lists text/event-stream (at a q above 0), and whether it is the
    client's first choice (the highest q, the earliest of equal q's).

    A subscription streams whenever the stream is acceptable; a query streams only
    when it is the first choice: urql's default `Accept` lists the JSON types
    first and `text/event-stream` after them, and wants JSON for a query.
    """
    if not accept:
        return False, False
    best: tuple[float, int] | None = None
    stream: tuple[float, int] | None = None
    for index, (media, q) in enumerate(_media_ranges(accept)):
        if q <= 0:
            continue
        rank = (q, -index)
        if best is None or rank > best:
            best = rank
        if media == EVENT_STREAM and (stream is None or rank > stream):
            stream = rank
    return stream is not None, stream is not None and stream == best


def request_error_status(accept: str | None) -> int:
    """The status of a request error (a document that does not parse or validate): 400
    with application/graphql-response+json, 200 with plain application/json (the
    GraphQL-over-HTTP spec's rule for legacy clients), and 400 for a client that
    accepts no JSON at all (an SSE client: the graphql-sse protocol says 400)."""
    if negotiate(accept) == GRAPHQL_RESPONSE:
        return 400
    if not accept or not accept.strip():
        return 200
    json_types = (APPLICATION_JSON, "application/*", "*/*")
    accepted = any(media in json_types and q > 0 for media, q in _media_ranges(accept))
    return 200 if accepted else 400
