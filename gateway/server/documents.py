"""Trusted documents (SPEC §10): a manifest of known operations, run by `documentId`.

The manifest is a JSON object `{"sha256:<hex>": "<document>"}` where each key
is the graphql-over-http persisted-document identifier of its value: `sha256:`
and the lower-case hex SHA-256 of the document's UTF-8 bytes. It is checked
once, when the app is built (`check_manifest`), so a key that does not match
its document, or a document that does not parse, stops the gateway at start
instead of failing one client at run time.

A request sends either `query` (ad-hoc) or `documentId` (from the manifest),
never both. A principal with `trusted_documents_only` may send only
`documentId`: an ad-hoc `query` is refused even when its text happens to be a
trusted document, so the rule is one a client can read off its own request.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from .codes import GatewayCode
from .errors import BAD_REQUEST, simple_error
from .operation import Refused
from .principal import Principal

PREFIX = "sha256:"
_ID = re.compile(r"sha256:[0-9a-f]{64}")

TRUSTED_DOCUMENT_NOT_FOUND = GatewayCode.TRUSTED_DOCUMENT_NOT_FOUND
TRUSTED_DOCUMENT_REQUIRED = GatewayCode.TRUSTED_DOCUMENT_REQUIRED


def document_id(document: str) -> str:
    """The SHA-256 hex document identifier of `document` (graphql-over-http, appendix A)."""
    return PREFIX + hashlib.sha256(document.encode("utf-8")).hexdigest()


class ManifestError(ValueError):
    """A trusted-documents manifest the gateway refuses to start with (one-line message)."""


def _short(key: str) -> str:
    return key if len(key) <= 80 else key[:77] + "..."


def check_manifest(
    manifest: Mapping[str, str], *, max_tokens: int | None = None
) -> Mapping[str, str]:
    """A read-only copy of `manifest` once every entry is sound; else ManifestError.

    Each key must be `document_id(value)`, and each document must parse as
    GraphQL (within `max_tokens`, the limit every request is parsed with).
    """
    from graphql import GraphQLError, parse

    if not isinstance(manifest, Mapping):
        raise ManifestError("the trusted documents must be a JSON object of id -> document")
    checked: dict[str, str] = {}
    for key, document in manifest.items():
        if not isinstance(key, str) or not isinstance(document, str):
            raise ManifestError(f"entry {_short(str(key))!r}: the document must be a string")
        if not _ID.fullmatch(key):
            raise ManifestError(
                f"key {_short(key)!r} is not a document id: expected 'sha256:' and 64 "
                "lower-case hex digits"
            )
        expected = document_id(document)
        if key != expected:
            raise ManifestError(
                f"key {key!r} is not the SHA-256 of its document (which is {expected})"
            )
        try:
            parse(document, max_tokens=max_tokens)
        except GraphQLError as exc:
            where = ""
            if exc.locations:
                where = f" at line {exc.locations[0].line}, column {exc.locations[0].column}"
            first = exc.message.splitlines()[0] if exc.message else "does not parse"
            raise ManifestError(f"document {key!r} does not parse{where}: {first}") from None
        checked[key] = document
    return MappingProxyType(checked)


def load_manifest(path: str | Path) -> dict[str, str]:
    """Read a manifest file (not yet checked: see `check_manifest`); ManifestError if unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ManifestError(f"cannot read {path}: {reason}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path} must hold a JSON object of id -> document")
    return data


def document_text(
    query: str | None,
    document_id: str | None,
    manifest: Mapping[str, str] | None,
    principal: Principal | None,
) -> str:
    """The text an operation runs: its `query`, or the trusted document it names.

    Refused: both sent (400), an ad-hoc `query` from a principal
    restricted to trusted documents (403 TRUSTED_DOCUMENT_REQUIRED), an unknown
    id (TRUSTED_DOCUMENT_NOT_FOUND, answered like a parse error).
    """
    if document_id is None:
        if principal is not None and principal.trusted_documents_only:
            message = (
                "this token may run only trusted documents: send `documentId` instead of `query`"
            )
            raise Refused(403, [simple_error(TRUSTED_DOCUMENT_REQUIRED, message)])
        assert query is not None  # `operation_request` refuses a request that sends neither
        return query
    if query is not None:
        message = "send either `query` or `documentId`, not both"
        raise Refused(400, [simple_error(BAD_REQUEST, message)])
    document = manifest.get(document_id) if manifest else None
    if document is None:
        message = (
            f"no trusted document has the id {_short(document_id)!r}"
            if manifest
            else "this gateway has no trusted documents; send `query` instead"
        )
        error = simple_error(TRUSTED_DOCUMENT_NOT_FOUND, message)
        raise Refused(400, [error], request_error=True)
    return document


__all__ = [
    "TRUSTED_DOCUMENT_NOT_FOUND",
    "TRUSTED_DOCUMENT_REQUIRED",
    "ManifestError",
    "check_manifest",
    "document_id",
    "document_text",
    "load_manifest",
]
