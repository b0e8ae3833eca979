"""The HTTP endpoint reads a POST and writes a plain answer without Starlette's `Request`
and generic `Response` (`gateway.server.http`): what it reads and writes must be what
those objects read and write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.server.access import caller_of
from gateway.server.headers import header
from gateway.server.http import _JsonAnswer, read_body
from gateway.server.media import MEDIA_TYPES, event_stream_choice

HEADERS = [
    (b"host", b"gateway"),
    (b"accept", b"application/json"),
    (b"x-dup", b"first"),
    (b"x-dup", b"second"),
    (b"authorization", b"Bearer t\xe9"),  # latin-1, as Starlette decodes it
    (b"content-type", b"application/json; charset=utf-8"),
]


@pytest.mark.parametrize(
    "name", ["host", "accept", "x-dup", "authorization", "content-type", "missing"]
)
def test_a_header_is_read_as_starlettes_headers_read_it(name: str) -> None:
    scope = {"type": "http", "headers": list(HEADERS)}
    assert header(scope, name.encode()) == Headers(scope=dict(scope)).get(name)


def test_the_caller_is_read_as_before() -> None:
    scope = {"type": "http", "headers": list(HEADERS), "client": ("10.0.0.1", 5)}
    caller = caller_of(scope)
    assert caller.authorization == Headers(scope=dict(scope)).get("authorization")
    assert caller.address == "10.0.0.1"
    bare = caller_of({"type": "http", "headers": []})
    assert bare.authorization is None and bare.address == "unknown"


def _receiver(messages: list[dict[str, Any]]) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


BODIES = [
    [{"type": "http.request", "body": b'{"query": "{ a }"}'}],
    [{"type": "http.request", "body": b"", "more_body": False}],
    [{"type": "http.request"}],
    [
        {"type": "http.request", "body": b'{"que', "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b'ry": 1}', "more_body": False},
    ],
]


@pytest.mark.parametrize("messages", BODIES)
def test_a_body_is_read_as_starlettes_request_reads_it(messages: list[dict[str, Any]]) -> None:
    async def both() -> tuple[bytes, bytes]:
        ours = await read_body(_receiver(messages))
        theirs = await Request({"type": "http"}, _receiver(messages)).body()
        return ours, theirs

    ours, theirs = asyncio.run(both())
    assert ours == theirs


def test_a_client_gone_before_its_body_ends_is_client_disconnect() -> None:
    messages = [
        {"type": "http.request", "body": b"{", "more_body": True},
        {"type": "http.disconnect"},
    ]
    with pytest.raises(ClientDisconnect):
        asyncio.run(read_body(_receiver(messages)))


@pytest.mark.parametrize("status", [200, 400, 405, 415, 422, 500, 504])
@pytest.mark.parametrize("media", [*MEDIA_TYPES, "application/other"])
def test_a_plain_answer_is_written_as_starlettes_response_writes_it(
    status: int, media: str
) -> None:
    body = b'{"data":{"__typename":"Query"}}'
    ours = _JsonAnswer(body, status, media)
    theirs = Response(
        body,
        status_code=status,
        media_type=f"{media}; charset=utf-8",
        headers={"Cache-Control": "no-store"},
    )
    assert (ours.status_code, ours.body, ours.raw_headers, ours.background) == (
        theirs.status_code,
        theirs.body,
        theirs.raw_headers,
        theirs.background,
    )
    ours.headers["Allow"] = "GET, POST"  # what the endpoint adds to a 405
    theirs.headers["Allow"] = "GET, POST"
    assert ours.raw_headers == theirs.raw_headers


@pytest.mark.parametrize(
    "accept",
    [None, "", "text/event-stream", "application/json, text/event-stream", "*/*;q=0"],
)
def test_no_accept_header_never_streams(accept: str | None) -> None:
    streamable, first = event_stream_choice(accept)
    if not accept:
        assert (streamable, first) == (False, False)
    else:
        assert streamable == ("text/event-stream" in accept)
