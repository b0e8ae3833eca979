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
* `Accept: text/event-stream` (GET or POST) streams the operation as GraphQL
  over SSE (`gateway.server.sse`), e.g. a `sessionEvents` subscription.

Every error body is `{"errors": [...]}` in the negotiated media type, and no
response carries a stack trace (see `gateway.server.errors`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import strawberry
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Receive, Scope, Send
from strawberry.exceptions import MissingQueryError
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types.execution import ExecutionResult, PreExecutionError
from strawberry.types.graphql import OperationType

from gateway.observability.metrics import GatewayMetrics

from .context import Context
from .documents import DocumentRefused, resolve_document
from .errors import (
    BAD_REQUEST,
    METHOD_NOT_ALLOWED,
    OPERATION_TIMEOUT,
    UNSUPPORTED_MEDIA_TYPE,
    VALIDATION_FAILED,
    format_error,
    masked_error,
    simple_error,
)
from .jsonwire import TooDeep, encode_text, loads_request
from .media import APPLICATION_JSON, GRAPHQL_RESPONSE, negotiate, wants_html
from .principal import principal_of
from .sse import EventStream, wants_event_stream

logger = logging.getLogger("gateway.server")

_QUERY_ONLY: tuple[OperationType, ...] = (OperationType.QUERY,)
# Subscriptions stream: over SSE (below) or graphql-transport-ws, never as one JSON answer.
_ANY_OPERATION: tuple[OperationType, ...] = (OperationType.QUERY, OperationType.MUTATION)


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


def _check_params(params: Any) -> tuple[str, str | None, dict[str, Any] | None, Any]:
    if not isinstance(params, dict):
        raise _bad("the request body must be a JSON object with a `query` string")
    query = params.get("query")
    if query is None:
        raise _bad("the request has no `query` (or `documentId`) parameter")
    if not isinstance(query, str):
        raise _bad("the `query` parameter must be a string")
    operation_name = params.get("operationName")
    if operation_name is not None and not isinstance(operation_name, str):
        raise _bad("the `operationName` parameter must be a string or null")
    variables = params.get("variables")
    if variables is not None and not isinstance(variables, dict):
        raise _bad("the `variables` parameter must be a JSON object or null")
    extensions = params.get("extensions")
    if extensions is not None and not isinstance(extensions, dict):
        raise _bad("the `extensions` parameter must be a JSON object or null")
    return query, operation_name, variables, extensions


def _is_request_error(result: ExecutionResult) -> bool:
    """No `data` at all: the operation never ran (parse, validation, coercion)."""
    if isinstance(result, PreExecutionError):
        return True
    return (
        result.data is None
        and bool(result.errors)
        and all(e.path is None for e in result.errors or ())
    )


class GraphQLHTTP:
    """The `/graphql` ASGI endpoint (see the module docstring)."""

    def __init__(
        self,
        schema: strawberry.Schema,
        make_context: Callable[[Request], Context],
        *,
        operation_timeout: float,
        graphiql_page: Callable[[Request], str] | None,
        metrics: GatewayMetrics | None = None,
        documents: Mapping[str, str] | None = None,
        event_stream: EventStream | None = None,
    ) -> None:
        self.metrics = metrics
        self.documents = documents
        self.event_stream = event_stream
        self.schema = schema
        self.make_context = make_context
        self.operation_timeout = operation_timeout
        self.graphiql_page = graphiql_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.handle(request)
        await response(scope, receive, send)

    async def handle(self, request: Request) -> Response:
        accept = request.headers.get("accept")
        media = negotiate(accept)
        method = request.method
        try:
            if method == "GET":
                if self.graphiql_page is not None and wants_html(accept):
                    return HTMLResponse(
                        self.graphiql_page(request), headers={"Cache-Control": "no-store"}
                    )
                q = request.query_params
                params: Any = {
                    "query": q.get("query"),
                    "documentId": q.get("documentId"),
                    "operationName": q.get("operationName"),
                    "variables": _json_param(q.get("variables"), "variables"),
                    "extensions": _json_param(q.get("extensions"), "extensions"),
                }
                allowed = _QUERY_ONLY
            elif method == "POST":
                params = await self._read_post(request)
                allowed = _ANY_OPERATION
            else:
                raise RequestError(
                    405, METHOD_NOT_ALLOWED, f"{method} is not supported: use GET or POST"
                )
            if isinstance(params, dict):
                params["query"] = resolve_document(
                    params,
                    self.documents,
                    principal_of(request),
                    document_error_status=400 if media == GRAPHQL_RESPONSE else 200,
                )
            query, operation_name, variables, extensions = _check_params(params)
        except (RequestError, DocumentRefused) as exc:
            return self._error(exc.status, media, simple_error(exc.code, exc.message), method)
        if self.event_stream is not None and wants_event_stream(accept):
            return await self.event_stream.respond(
                request,
                query,
                operation_name,
                variables,
                extensions,
                lambda errors: self._respond(400, media, {"errors": errors}),
            )
        return await self._execute(
            request, media, method, query, operation_name, variables, extensions, allowed
        )

    async def _read_post(self, request: Request) -> Any:
        content_type = request.headers.get("content-type", "")
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
        body = await request.body()
        if not body.strip():
            raise _bad("the request body is empty; send a JSON object with a `query` string")
        try:
            return loads_request(body.decode("utf-8"))
        except TooDeep as exc:
            raise _bad(f"the request body is {exc}") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise _bad("the request body is not valid JSON") from exc

    async def _execute(
        self,
        request: Request,
        media: str,
        method: str,
        query: str,
        operation_name: str | None,
        variables: dict[str, Any] | None,
        extensions: Any,
        allowed: tuple[OperationType, ...],
    ) -> Response:
        context = None
        try:
            context = self.make_context(request)
            result = await asyncio.wait_for(
                self.schema.execute(
                    query,
                    variable_values=variables,
                    context_value=context,
                    operation_name=operation_name,
                    allowed_operation_types=allowed,
                    operation_extensions=extensions,
                ),
                timeout=self.operation_timeout,
            )
        except InvalidOperationTypeError as exc:
            kind = exc.operation_type.value
            message = f"{kind} operations are not allowed over {method}"
            if exc.operation_type is OperationType.SUBSCRIPTION:
                message += (
                    ": subscribe over graphql-transport-ws (WebSocket) or with "
                    "Accept: text/event-stream (SSE)"
                )
            return self._error(405, media, simple_error(METHOD_NOT_ALLOWED, message), method)
        except MissingQueryError:
            return self._error(400, media, simple_error(BAD_REQUEST, "the query is empty"), method)
        except CannotGetOperationTypeError as exc:
            message = (
                f"the document has no operation named {exc.operation_name!r}"
                if exc.operation_name
                else "the document has several operations: choose one with `operationName`"
            )
            status = 400 if media == GRAPHQL_RESPONSE else 200
            return self._error(status, media, simple_error(VALIDATION_FAILED, message), method)
        except TimeoutError:
            return self._error(
                504,
                media,
                simple_error(
                    OPERATION_TIMEOUT,
                    f"the operation did not finish within {self.operation_timeout:g} s",
                ),
                method,
            )
        except Exception as exc:  # a bug: never a traceback to the client
            return self._error(500, media, masked_error(exc, "executing an operation"), method)
        finally:
            if context is not None:
                context.close()  # a timed-out operation leaves no backend work running
        payload: dict[str, Any] = {}
        request_error = _is_request_error(result)
        if not request_error:
            payload["data"] = result.data
        if result.errors:
            payload["errors"] = [format_error(e) for e in result.errors]
        status = 400 if request_error and media == GRAPHQL_RESPONSE else 200
        return self._respond(status, media, payload)

    def _error(self, status: int, media: str, error: dict[str, Any], method: str) -> Response:
        response = self._respond(status, media, {"errors": [error]})
        if status == 405:
            response.headers["Allow"] = "POST" if method == "GET" else "GET, POST"
        return response

    def _respond(self, status: int, media: str, payload: dict[str, Any]) -> Response:
        if self.metrics is not None:
            for error in payload.get("errors") or ():
                self.metrics.count_error(error.get("extensions", {}).get("code"))
        try:
            body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            status = 500
            body = json.dumps({"errors": [masked_error(exc, "serializing a response")]})
        return Response(
            encode_text(body),
            status_code=status,
            media_type=f"{media}; charset=utf-8",
            headers={"Cache-Control": "no-store"},
        )
