"""JSON in and out of the HTTP layer: bounded nesting in, always-encodable UTF-8 out.

In: `json.loads` recurses once per nesting level, so a body (or `variables`,
`extensions`) nested a thousand deep raised RecursionError, a 500 with a
traceback. Request JSON is parsed with that turned into `TooDeep`, and
anything nested deeper than `MAX_REQUEST_DEPTH` (no argument of this schema
needs more than a few levels) is refused the same way: 400, no traceback.

Out: a stored payload may hold a lone surrogate (`gateway.core.ids`: payloads
are kept exactly), which UTF-8 cannot encode. Such characters are written as
their `\\uXXXX` escapes, as JavaScript's `JSON.stringify` does: the body stays
valid JSON and decodes to the same string.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_REQUEST_DEPTH = 64

_SURROGATE = re.compile("[\ud800-\udfff]")


class TooDeep(ValueError):
    """Request JSON nested deeper than `MAX_REQUEST_DEPTH`."""


def loads_request(text: str) -> Any:
    """Parse request JSON (ValueError when not JSON, TooDeep when nested too deeply)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(f"nested more than {MAX_REQUEST_DEPTH} levels deep") from None
    check_depth(value)
    return value


def check_depth(value: Any) -> None:
    """TooDeep when `value` nests lists/objects deeper than `MAX_REQUEST_DEPTH` (iterative)."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= MAX_REQUEST_DEPTH:
            raise TooDeep(f"nested more than {MAX_REQUEST_DEPTH} levels deep")
        pending.extend((child, depth + 1) for child in children)


def encode_text(text: str) -> bytes:
    """UTF-8 of JSON text, lone surrogates written as `\\uXXXX` escapes."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")
