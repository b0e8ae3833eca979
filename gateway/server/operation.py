"""The typed messages of the operation pipeline (`gateway.server.pipeline`).

A transport (HTTP JSON, SSE, graphql-transport-ws) turns its wire format into
an `OperationRequest`, hands it to the pipeline, and turns what comes back (a
`Refused`, an `Answer`, or a stream of `Frame`s) into its wire format again.
Nothing in here knows a wire format.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeAlias

from strawberry.types.graphql import OperationType

ErrorJSON: TypeAlias = dict[str, Any]
"""One client-facing GraphQL error: `{message, locations?, path?, extensions: {code, ...}}`."""


class Transport(StrEnum):
    """How an operation arrived (named in messages; no rule branches on it). An HTTP
    request is GET or POST whether its answer is one JSON body or an SSE stream."""

    GET = "GET"
    POST = "POST"
    WEBSOCKET = "WebSocket"


ALL_OPERATION_TYPES = frozenset(OperationType)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sends an operation, as the transport saw it: the `Authorization` value it
    carries (a header, or graphql-transport-ws's `connection_init` payload) and the
    client address (the key of its rate limits when it has no token)."""

    authorization: str | None
    address: str


@dataclass(frozen=True, slots=True)
class OperationRequest:
    """One GraphQL operation to run: what the client sent, and what the transport can
    deliver (`operation_types`: GET runs only queries; a JSON answer cannot carry a
    subscription)."""

    transport: Transport
    caller: Caller
    query: str | None = None
    document_id: str | None = None
    variables: dict[str, Any] | None = None
    operation_name: str | None = None
    extensions: dict[str, Any] | None = None
    operation_types: frozenset[OperationType] = ALL_OPERATION_TYPES


class MalformedRequest(ValueError):
    """The operation's parameters are not of the GraphQL-over-HTTP request's form."""


def operation_request(
    params: Mapping[str, Any],
    transport: Transport,
    caller: Caller,
    operation_types: frozenset[OperationType] = ALL_OPERATION_TYPES,
) -> OperationRequest:
    """An `OperationRequest` from the parameters of a request (a POST body, a GET query
    string, a graphql-transport-ws `subscribe` payload: the same fields in each), or
    MalformedRequest saying which parameter is wrong."""
    query = params.get("query")
    document_id = params.get("documentId")
    if query is not None and not isinstance(query, str):
        raise MalformedRequest("the `query` parameter must be a string")
    if document_id is not None and not isinstance(document_id, str):
        raise MalformedRequest("the `documentId` parameter must be a string")
    if query is None and document_id is None:
        raise MalformedRequest("the request has no `query` (or `documentId`) parameter")
    if query == "":
        raise MalformedRequest("the query is empty")
    operation_name = params.get("operationName")
    if operation_name is not None and not isinstance(operation_name, str):
        raise MalformedRequest("the `operationName` parameter must be a string or null")
    variables = params.get("variables")
    if variables is not None and not isinstance(variables, dict):
        raise MalformedRequest("the `variables` parameter must be a JSON object or null")
    extensions = params.get("extensions")
    if extensions is not None and not isinstance(extensions, dict):
        raise MalformedRequest("the `extensions` parameter must be a JSON object or null")
    return OperationRequest(
        transport,
        caller,
        query,
        document_id,
        variables,
        operation_name,
        extensions,
        operation_types,
    )


class Refused(Exception):
    """The pipeline will not run the operation: `errors` say why.

    `status` is the HTTP status a transport with statuses answers with; a
    `request_error` (the document does not parse or validate, or names no
    operation) is 400 or 200 by the negotiated media type, as the
    GraphQL-over-HTTP spec says. `headers` go with an HTTP answer
    (`WWW-Authenticate`, `Retry-After`, `Allow`).
    """

    def __init__(
        self,
        status: int,
        errors: list[ErrorJSON],
        *,
        headers: dict[str, str] | None = None,
        request_error: bool = False,
        operation_type: str | None = None,
        operation_name: str | None = None,
    ) -> None:
        super().__init__(errors[0]["message"] if errors else "refused")
        self.status = status
        self.errors = errors
        self.headers = headers or {}
        self.request_error = request_error
        self.operation_type = operation_type  # when the document was read far enough
        self.operation_name = operation_name

    @property
    def codes(self) -> list[str]:
        """The distinct codes of its errors, in order."""
        return list(dict.fromkeys(str(e["extensions"]["code"]) for e in self.errors))


@dataclass(frozen=True, slots=True)
class Answer:
    """The one result of a query or mutation, formatted for the client.

    `request_error`: the operation never ran (variables that do not coerce), so
    the payload has no `data`. `status` is 504 when it ran out of time, 422 when it
    passed the response budget. `body` is the payload's JSON as the pipeline wrote
    it within the budget (`gateway.server.jsonwire.encode_answer`): a transport
    sends these bytes rather than encoding the payload again.
    """

    payload: dict[str, Any]
    request_error: bool = False
    status: int = 200
    body: bytes | None = None


@dataclass(frozen=True, slots=True)
class Frame:
    """One message of a streamed operation: a result (`next`), or an `error` that ends
    the stream (a refusal after it started: revoked credentials, a lagging subscriber)."""

    kind: Literal["next", "error"]
    payload: dict[str, Any] = field(default_factory=dict)
    errors: list[ErrorJSON] = field(default_factory=list)
    body: bytes | None = None
    """A `next` frame's payload as JSON bytes, written within the budget (see `Answer`)."""


__all__ = [
    "ALL_OPERATION_TYPES",
    "Answer",
    "Caller",
    "ErrorJSON",
    "Frame",
    "MalformedRequest",
    "OperationRequest",
    "Refused",
    "Transport",
    "operation_request",
]
