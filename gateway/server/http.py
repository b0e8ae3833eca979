"""GraphQL over HTTP (the graphql-over-http spec), with GraphiQL for browsers.

* `POST /graphql` with an `application/json` body `{query, operationName?,
  variables?, extensions?}`; `GET /graphql?query=...` for queries only (a
  mutation or subscription over GET is 405).
* Responses are `application/graphql-response+json` when the client accepts it
  (listed explicitly, at a q not below application/json's), else
  `application/json`. With `application/graphql-response+json` a request error
  (parse, validation, variable coercion, no operation: the response has no
  `data`) is 400; with `application/json` it is 200, as the spec says.
* A request that is not well-formed GraphQL-over-HTTP (unreadable JSON, a body
  that is not an object, parameters of the wrong type, no query) is 400; a POST
  whose body is not JSON is 415; other methods are 405.
* An operation running past its time limit is 504 with a GraphQL error body.
* A browser (`Accept: text/html`) asking GET gets the offline GraphiQL page.
* `documentId` in place of `query` runs a trusted document (see
  `gateway.server.documents`): an unknown id is answered like a parse error.
* A subscription whose request accepts `text/event-stream`, or a query whose
  request prefers it, streams as GraphQL over SSE (`gateway.server.sse`).
* A client that goes away before its body ends (or while its answer is written) is
  one INFO line, no traceback: nobody is left to answer, and nothing failed here.

This module is wire framing only: it reads the request into an
`OperationRequest` and writes the pipeline's answer back
(`gateway.server.pipeline` applies every rule, the same for every transport).
Every error body is `{"errors": [...]}` in the negotiated media type, and no
response carries a stack trace (see `gateway.server.errors`).

A POST is read without Starlette's `Request`: its headers are looked up in the scope's
list and its body read from `receive` as `Request.body()` reads it, and an answer with
no headers of its own is written as `Response` would write it (`_JsonAnswer`). Those
objects were a sixth of a small request's CPU in this module; a GET still builds a
`Request` (its query string, the GraphiQL page's URL).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Receive, Scope, Send
from strawberry.types.graphql import OperationType

from .access import caller_of
from .errors import (
    BAD_REQUEST,
    METHOD_NOT_ALLOWED,
    UNSUPPORTED_MEDIA_TYPE,
    masked_error,
    simple_error,
)
from .headers import header
from .jsonwire import TooDeep, encode_text, loads_request
from .media import (
    APPLICATION_JSON,
    MEDIA_TYPES,
    event_stream_choice,
    negotiate,
    request_error_status,
    wants_html,
)
from .operation import MalformedRequest, Refused, Transport, operation_request
from .pipeline import OperationPipeline
from .sse import DEFAULT_KEEPALIVE, event_stream

_GET_TYPES = frozenset({OperationType.QUERY})
_POST_TYPES = frozenset({OperationType.QUERY, OperationType.MUTATION})
_STREAMED = frozenset({OperationType.SUBSCRIPTION})

logger = logging.getLogger("gateway.server")


class RequestError(Exception):
    """A request that is not well-formed GraphQL over HTTP: answered with `status`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _bad(message: str) -> RequestError:
    return RequestError(400, BAD_REQUEST, message)


def _json_param(value: str | None, name: str) -> Any:
    if value is None or value == "":
        return None
    try:
        return loads_request(value)
    except TooDeep as exc:
        raise _bad(f"the `{name}` parameter is {exc}") from None
    except ValueError as exc:
        raise _bad(f"the `{name}` parameter is not valid JSON") from exc


async def read_body(receive: Receive) -> bytes:
    """The whole request body, read as Starlette's `Request.body()` reads it (chunks until
    one says no more body; ClientDisconnect when the client goes away first), without
    its `Request` and stream generator."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
        elif kind == "http.disconnect":
            raise ClientDisconnect()


_CONTENT_TYPES = {m: f"{m}; charset=utf-8".encode("latin-1") for m in MEDIA_TYPES}


class _JsonAnswer(Response):
    """A GraphQL answer with no headers of its own: the status, body and header list
    (`cache-control`, `content-length`, `content-type`, in that order) Starlette's
    `Response(body, status, {"Cache-Control": "no-store"}, media_type)` makes, without its
    generic rendering and header handling (a tenth of a small answer's HTTP work)."""

    def __init__(self, body: bytes, status: int, media: str) -> None:
        self.status_code = status
        self.body = body
        self.background = None
        content_type = _CONTENT_TYPES.get(media) or f"{media}; charset=utf-8".encode("latin-1")
        raw = [(b"cache-control", b"no-store")]
        if not (status < 200 or status in (204, 304)):
            raw.append((b"content-length", str(len(body)).encode("latin-1")))
        raw.append((b"content-type", content_type))
        self.raw_headers = raw


class GraphQLHTTP:
    """The `/graphql` ASGI endpoint (see the module docstring)."""

    def __init__(
        self,
        pipeline: OperationPipeline,
        *,
        graphiql_page: Callable[[Request], str] | None,
        keepalive: float = DEFAULT_KEEPALIVE,
    ) -> None:
        self.pipeline = pipeline
        self.graphiql_page = graphiql_page
        self.keepalive = keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await self.handle(scope, receive)
            await response(scope, receive, send)
        except ClientDisconnect:
            logger.info(
                "client disconnected before its %s request was answered", scope.get("method")
            )

    async def handle(self, scope: Scope, receive: Receive) -> Response:
        accept = header(scope, b"accept")
        media = negotiate(accept)
        method = scope["method"]
        streamable, stream_first = event_stream_choice(accept)
        try:
            if method == "GET":
                request = Request(scope, receive)
                q = request.query_params
                if self.graphiql_page is not None and wants_html(accept):
                    return await self._page(request, "query" in q or "documentId" in q, media)
                params: Any = {
                    "query": q.get("query"),
                    "documentId": q.get("documentId"),
                    "operationName": q.get("operationName"),
                    "variables": _json_param(q.get("variables"), "variables"),
                    "extensions": _json_param(q.get("extensions"), "extensions"),
                }
                transport, types = Transport.GET, _GET_TYPES
            elif method == "POST":
                params = await self._read_post(scope, receive)
                transport, types = Transport.POST, _POST_TYPES
            else:
                raise RequestError(
                    405, METHOD_NOT_ALLOWED, f"{method} is not supported: use GET or POST"
                )
            if not isinstance(params, dict):
                raise _bad("the request body must be a JSON object with a `query` string")
            try:
                if streamable:
                    types = types | _STREAMED
                operation = operation_request(params, transport, caller_of(scope), types)
            except MalformedRequest as exc:
                raise _bad(str(exc)) from None
        except RequestError as exc:
            errors = [simple_error(exc.code, exc.message)]
            self.pipeline.count(errors)
            return self._respond(exc.status, media, {"errors": errors}, method)
        try:
            admitted = await self.pipeline.admit(operation)
        except Refused as refused:
            status = request_error_status(accept) if refused.request_error else refused.status
            return self._respond(status, media, {"errors": refused.errors}, method, refused.headers)
        if admitted.is_subscription or stream_first:
            return event_stream(self.pipeline.stream(admitted), self.keepalive)
        answer = await self.pipeline.execute(admitted)
        status = request_error_status(accept) if answer.request_error else answer.status
        return self._respond(
            status, media, answer.payload, method, answer.headers, body=answer.body
        )

    async def _page(self, request: Request, names_operation: bool, media: str) -> Response:
        """The GraphiQL page (no data in it, so no token needed), unless the URL names an
        operation: then the caller must authenticate first, as for running it."""
        if names_operation:
            try:
                await self.pipeline.access.authenticate(caller_of(request.scope))
            except Refused as refused:
                self.pipeline.count(refused.errors)
                body = {"errors": refused.errors}
                return self._respond(refused.status, media, body, "GET", refused.headers)
        assert self.graphiql_page is not None
        return HTMLResponse(self.graphiql_page(request), headers={"Cache-Control": "no-store"})

    async def _read_post(self, scope: Scope, receive: Receive) -> Any:
        content_type = header(scope, b"content-type") or ""
        media, _, rest = content_type.partition(";")
        if media.strip().lower() != APPLICATION_JSON:
            raise RequestError(
                415,
                UNSUPPORTED_MEDIA_TYPE,
                "POST bodies must be application/json (a {query, variables, ...} object)",
            )
        charset = "utf-8"
        for param in rest.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset":
                charset = value.strip().strip('"').lower()
        if charset not in ("utf-8", "utf8"):
            raise RequestError(415, UNSUPPORTED_MEDIA_TYPE, "request bodies must be UTF-8")
        body = await read_body(receive)
        if not body.strip():
            raise _bad("the request body is empty; send a JSON object with a `query` string")
        try:
            return loads_request(body.decode("utf-8"))
        except TooDeep as exc:
            raise _bad(f"the request body is {exc}") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise _bad("the request body is not valid JSON") from exc

    def _respond(
        self,
        status: int,
        media: str,
        payload: dict[str, Any],
        method: str,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> Response:
        """The response; `body` is the payload already written by the pipeline."""
        if body is None:
            try:
                text = json.dumps(
                    payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False
                )
            except (TypeError, ValueError) as exc:
                status = 500
                text = json.dumps({"errors": [masked_error(exc, "serializing a response")]})
            body = encode_text(text)
        response: Response
        if headers:
            response = Response(
                body,
                status_code=status,
                media_type=f"{media}; charset=utf-8",
                headers={"Cache-Control": "no-store", **headers},
            )
        else:
            response = _JsonAnswer(body, status, media)
        if status == 405:
            response.headers["Allow"] = "POST" if method == "GET" else "GET, POST"
        return response
