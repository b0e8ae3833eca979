"""The text of an event (SPEC §13): what search indexes and the `text` filter scans.

One document per event whose text is not empty. Only values of the expected
JSON type count: a malformed payload (a `content` that is not a list, a
non-string `arguments`) contributes nothing rather than failing a whole import
or search. Trimming and "whitespace" are JavaScript's (`\\s`, SPEC §12), not
Python's `str.strip()`/`isspace()`, which differ on U+001C-U+001F, U+0085 and
U+FEFF.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

JS_WHITESPACE = (
    "\t\n\x0b\x0c\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""JavaScript's `\\s`: U+0009-U+000D, U+0020, U+00A0, U+1680, U+2000-U+200A,
U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF."""

WHITESPACE_RUN = re.compile(f"[{re.escape(JS_WHITESPACE)}]+")

TEXT_EVENT_TYPES = frozenset(
    {"user/message", "assistant/message", "tool/call", "tool/result", "todo/write", "turn/end"}
)
"""The only event types that can have a text; every other type has none."""


def js_trim(text: str) -> str:
    """`text` without leading and trailing JavaScript whitespace."""
    return text.strip(JS_WHITESPACE)


def collapse_whitespace(text: str) -> str:
    """Every whitespace run made one space, leading and trailing space dropped
    (the `clean` text of a snippet, and a normalized query)."""
    return WHITESPACE_RUN.sub(" ", text).strip(" ")


def _join(parts: Iterable[object]) -> str:
    kept = (js_trim(p) for p in parts if isinstance(p, str))
    return "\n".join(p for p in kept if p)


def _block_parts(block: object) -> Iterator[object]:
    if not isinstance(block, dict):
        return
    kind = block.get("type")
    if kind == "text":
        yield block.get("text")
    elif kind == "tool-call":
        yield block.get("name")
        yield block.get("arguments")
    elif kind == "tool-result":
        content = block.get("content")
        if isinstance(content, list):
            for nested in content:
                yield from _block_parts(nested)


def _content(content: object) -> str:
    if not isinstance(content, list):
        return ""
    return _join(part for block in content for part in _block_parts(block))


def _get(data: object, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def event_text(event_type: str, data: object) -> str:
    """The text of an event of `event_type` with payload `data` ("" when it has none).

    Not yet made indexable: `gateway.core.words.indexable` replaces NUL and the
    other unstorable characters; the `text` filter scans this text as it is.
    """
    if event_type not in TEXT_EVENT_TYPES:
        return ""
    if event_type == "user/message":
        return _content(_get(data, "content"))
    if event_type == "assistant/message":
        return _content(_get(data, "message", "content"))
    if event_type == "tool/call":
        return _join((_get(data, "name"), _get(data, "arguments")))
    if event_type == "tool/result":
        return _join(
            (
                _content(_get(data, "message", "content")),
                _get(data, "error", "name"),
                _get(data, "error", "code"),
            )
        )
    if event_type == "todo/write":
        todos = _get(data, "todos")
        if not isinstance(todos, list):
            return ""
        return _join(p for todo in todos for p in (_get(todo, "status"), _get(todo, "content")))
    # turn/end
    kind = _get(data, "reason", "kind")
    if kind == "error":
        return _join(("error", _get(data, "reason", "error", "message")))
    if kind in ("aborted", "max-tokens", "interrupted"):
        return str(kind)
    return ""
