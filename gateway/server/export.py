"""`GET /sessions/{id}/export`: a session as a dsh JSONL artifact (SPEC §15), or with
`?descendants=true` a zip of it and its visible descendants (`gateway.dsh_export`).

The route applies the same caller rules as every GraphQL operation, through the
same `Access` the pipeline uses (authentication checked afresh, the caller's
rate limit counted, `gateway.server.access`), and reads through the same kind of
request context (`OperationPipeline.context`): one observation of the corpus,
scoped to the caller's grants. So an invisible id is answered exactly like an
absent one: 404 with `SESSION_QUERY_SESSION_NOT_FOUND`.

Errors are `{"errors": [{message, extensions: {code}}]}` like the GraphQL
layer's, sent before any byte of the artifact: what the export sends is proved
first (the session, its descendants, their log lengths) and the first page is
read and encoded, all within the operation timeout. The body then streams a
page at a time; the observation is closed when it ends or the client leaves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.core import ErrorCode, SessionQueryError
from gateway.dsh_export import UnexportableLog, open_export

from .access import caller_of
from .codes import GatewayCode
from .context import Context
from .errors import masked_error, send_error, simple_error
from .operation import ErrorJSON, Refused
from .pipeline import OperationPipeline

logger = logging.getLogger("gateway.server")

EXPORT_PATH = "/sessions/{session_id:path}/export"
BAD_REQUEST = GatewayCode.BAD_REQUEST
EXPORT_UNSUPPORTED = GatewayCode.EXPORT_UNSUPPORTED
OPERATION_TIMEOUT = GatewayCode.OPERATION_TIMEOUT

STATUS_OF: dict[ErrorCode, int] = {
    ErrorCode.SESSION_NOT_FOUND: 404,
    ErrorCode.SOURCE_CONFLICT: 409,
    ErrorCode.INVALID_LINEAGE: 422,
    ErrorCode.PERSISTENCE_FAILED: 503,
}
"""The HTTP status of a contract error answered before the artifact (others: 500)."""

_TRUE, _FALSE = frozenset({"true", "1"}), frozenset({"false", "0", ""})


class _Failed(Exception):
    def __init__(self, status: int, error: ErrorJSON) -> None:
        self.status = status
        self.error = error


class ExportEndpoint:
    """The export route's ASGI app (see the module docstring). One per app."""

    def __init__(self, pipeline: OperationPipeline) -> None:
        self.pipeline = pipeline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        pipeline = self.pipeline
        try:
            principal = await pipeline.access.admit(caller_of(scope))
        except Refused as refused:
            pipeline.count(refused.errors)
            await send_error(scope, send, refused.status, refused.errors[0], refused.headers)
            return
        context = pipeline.context(principal)
        try:
            response = await self._open(request, context)
        except _Failed as failed:
            context.close()
            pipeline.count([failed.error])
            await send_error(scope, send, failed.status, failed.error)
            return
        except BaseException:
            context.close()
            raise
        await response(scope, receive, send)

    async def _open(self, request: Request, context: Context) -> StreamingResponse:
        session_id = request.path_params["session_id"]
        flag = request.query_params.get("descendants", "false").lower()
        if flag not in _TRUE | _FALSE:
            message = f"descendants must be true or false, got {flag!r}"
            raise _Failed(400, simple_error(BAD_REQUEST, message))
        timeout = self.pipeline.config.limits.operation_timeout
        try:
            export = await asyncio.wait_for(
                open_export(context.obs, session_id, descendants=flag in _TRUE), timeout
            )
            body = export.chunks()
            first = await asyncio.wait_for(anext(body), timeout)
        except SessionQueryError as exc:
            error = simple_error(exc.code.value, exc.message)
            raise _Failed(STATUS_OF.get(exc.code, 500), error) from None
        except UnexportableLog as exc:
            message = f"session {session_id!r} cannot be exported as an artifact: {exc}"
            raise _Failed(422, simple_error(EXPORT_UNSUPPORTED, message)) from None
        except TimeoutError:
            message = f"the export did not start within {timeout:g} s"
            raise _Failed(504, simple_error(OPERATION_TIMEOUT, message)) from None
        except StopAsyncIteration:  # pragma: no cover - the first chunk always exists
            first = b""
        except Exception as exc:  # a bug: never a traceback to the client
            raise _Failed(500, masked_error(exc, "opening an export")) from None

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield first
                async for chunk in body:
                    yield chunk
            except Exception:  # headers are sent: all that is left is to cut the stream
                logger.exception("export of %r stopped mid-stream", session_id)
                raise
            finally:
                await body.aclose()
                context.close()

        disposition = f'attachment; filename="{export.filename}"'
        return StreamingResponse(
            stream(),
            media_type=export.media_type,
            headers={"Content-Disposition": disposition, "Cache-Control": "no-store"},
        )


__all__ = ["EXPORT_PATH", "ExportEndpoint"]
