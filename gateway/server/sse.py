"""GraphQL over Server-Sent Events, "distinct connections" mode: the wire framing.

A GET or POST to `/graphql` whose `Accept` makes the stream the answer
(`gateway.server.media.event_stream_choice`: a subscription whenever
`text/event-stream` is acceptable, a query when it is the first choice) gets
the operation's frames from the pipeline as an event stream: `event: next`
with `data: {"data": ..., "errors"?: ...}` per result, then `event: complete`.
Everything that refuses an operation (credentials, rate limits, trusted
documents, document limits, validation) has run before the stream starts, in
the pipeline, and is answered like any other HTTP refusal; an `error` frame
that ends a running stream (revoked credentials) is sent as a `next` event
with its errors, then `complete`. Subscriptions are allowed over GET here
(unlike the JSON answers), since a browser's `EventSource` can only GET.

A comment line is sent every `keepalive` seconds so idle proxies keep the
stream open. A client that goes away ends the stream (Starlette cancels it on
`http.disconnect`), and with it the operation.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse

from .media import EVENT_STREAM
from .operation import Frame
from .ticks import with_ticks

DEFAULT_KEEPALIVE = 15.0


def _event(event: str, payload: Any) -> bytes:
    data = "" if payload is None else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event}\ndata: {data}\n\n".encode()


def event_stream(
    frames: AsyncIterator[Frame], keepalive: float = DEFAULT_KEEPALIVE
) -> StreamingResponse:
    """The HTTP response streaming `frames` as GraphQL-over-SSE events."""
    return StreamingResponse(
        _body(frames, keepalive),
        media_type=EVENT_STREAM,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _body(frames: AsyncIterator[Frame], keepalive: float) -> AsyncIterator[bytes]:
    yield b":\n\n"  # headers out now, before the first event
    async with contextlib.aclosing(frames):  # type: ignore[type-var]
        ticking = with_ticks(frames, keepalive)
        try:
            async for frame in ticking:
                if frame is None:
                    yield b":\n\n"
                    continue
                ended = frame.kind == "error"
                if frame.body is not None and not ended:  # written by the pipeline
                    yield b"event: next\ndata: " + frame.body + b"\n\n"
                    continue
                yield _event("next", {"errors": frame.errors} if ended else frame.payload)
                if ended:
                    break
        finally:
            await ticking.aclose()
    yield _event("complete", None)


__all__ = ["DEFAULT_KEEPALIVE", "event_stream"]
