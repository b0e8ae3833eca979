"""JSON in and out of the HTTP layer: bounded nesting in, always-encodable UTF-8 out.

In: `json.loads` recurses once per nesting level, so a body (or `variables`,
`extensions`) nested a thousand deep raised RecursionError, a 500 with a
traceback. Request JSON is parsed with that turned into `TooDeep`, and
anything nested deeper than `MAX_REQUEST_DEPTH` (no argument of this schema
needs more than a few levels) is refused the same way: 400, no traceback.

Out: `encode_answer` writes an answer within its byte budget. An answer whose
payloads came to little (the budget's charges, `gateway.server.budget`) is one
`json.dumps`, as fast as ever, then measured. A larger one is written piece by
piece: each payload's bytes as the budget encoded them, the rest of the result
walked here, the bytes counted as they are written (RESPONSE_TOO_LARGE at the
first piece past the budget, so no more than the budget is ever held), and the
loop given back between pieces (`gateway.server.yielding.checkpoint`), so a
large answer neither holds the event loop nor outlives the operation timeout:
a cancelled serialization stops at its next piece.

A stored payload may hold a lone surrogate (`gateway.core.ids`: payloads
are kept exactly), which UTF-8 cannot encode. Such characters are written as
their `\\uXXXX` escapes, as JavaScript's `JSON.stringify` does: the body stays
valid JSON and decodes to the same string.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

from .yielding import checkpoint

if TYPE_CHECKING:
    from .budget import ResponseBudget

MAX_REQUEST_DEPTH = 64
FAST_PATH_BYTES = 256 << 10
"""An answer whose payloads were charged at most this is encoded in one call."""
PIECE_ITEMS = 2_048
"""Values of walked (non-payload) JSON gathered into one written piece: the serializer
counts its bytes and may yield between pieces."""

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


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""What `json.dumps` with these options builds on every call (a few microseconds of a
small answer's writing), made once: `encode` keeps no state between calls."""


def _compact() -> Callable[[Any], str]:
    """`_ENCODER.encode` without what it still makes per call: its C encoder (the one
    `iterencode` builds each time, same options and `default`), made once here, with no
    circularity markers (a shared markers table would outlive a failed call): an answer
    is a tree built by the executor, and a cycle would be a bug that still fails, with
    RecursionError instead of ValueError."""
    if c_make_encoder is None:  # pragma: no cover - CPython has the accelerator
        return _ENCODER.encode
    encode = c_make_encoder(
        None, _ENCODER.default, encode_basestring, None, ":", ",", False, False, False
    )
    return lambda value: "".join(encode(value, 0))


dumps: Callable[[Any], str] = _compact()
"""Compact JSON text, non-ASCII kept (ValueError/TypeError when not JSON)."""


async def encode_answer(payload: Any, budget: ResponseBudget) -> bytes:
    """The UTF-8 JSON of `payload` (a GraphQL response), or GatewayError
    RESPONSE_TOO_LARGE (from `budget.too_large()`) once it passes `budget.max_bytes`.
    ValueError/TypeError when `payload` is not JSON (a bug)."""
    limit = budget.max_bytes
    if limit is None or budget.spent <= FAST_PATH_BYTES:
        body = encode_text(dumps(payload))
        if limit is not None and len(body) > limit:
            raise budget.too_large()
        return body
    pieces: list[bytes] = []
    total = 0
    for piece in _pieces(payload, budget.encoded):
        total += len(piece)
        if total > limit:
            pieces.clear()
            raise budget.too_large()
        pieces.append(piece)
        await checkpoint(budget.started)
    return b"".join(pieces)


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return encode_basestring(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"out of range float value {value!r} is not JSON")
        return float.__repr__(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _pieces(value: Any, encoded: dict[int, tuple[Any, bytes]]) -> Iterator[bytes]:
    """`value`'s JSON as pieces of bytes (one every `PIECE_ITEMS` values), iteratively
    (no recursion limit): a container found in `encoded` is written as its bytes
    there, any other one walked."""
    out: list[str] = []
    append = out.append
    count = 0
    # Open containers: (their items, whether a dict, the closing bracket). The root is
    # a pseudo-list of one value with no brackets.
    stack: list[tuple[Iterator[Any], bool, str]] = [(iter((value,)), False, "")]
    first = True
    while stack:
        items, is_dict, closer = stack[-1]
        descended = False
        for entry in items:
            if is_dict:
                key, item = entry
                if type(key) is not str and not isinstance(key, str):
                    raise TypeError(f"keys must be str, not {type(key).__name__}")
                append(
                    encode_basestring(key) + ":" if first else "," + encode_basestring(key) + ":"
                )
            else:
                item = entry
                if not first:
                    append(",")
            first = False
            kind = type(item)
            if kind is str:
                append(encode_basestring(item))
            elif kind is int:
                append(int.__repr__(item))
            elif kind is dict or kind is list or isinstance(item, dict | list | tuple):
                known = encoded.get(id(item))
                if known is not None and known[0] is item:
                    if out:
                        yield encode_text("".join(out))
                        out.clear()
                    yield known[1]
                    count = 0
                    continue
                if isinstance(item, dict):
                    append("{")
                    stack.append((iter(item.items()), True, "}"))
                else:
                    append("[")
                    stack.append((iter(item), False, "]"))
                first = True
                descended = True
                break
            else:
                append(_scalar(item))
            count += 1
            if count >= PIECE_ITEMS:
                yield encode_text("".join(out))
                out.clear()
                count = 0
        if descended:
            continue
        stack.pop()
        append(closer)
        first = False
    if out:
        yield encode_text("".join(out))
