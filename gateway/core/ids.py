"""Which strings can be session ids and header text: one rule for every engine.

The text policy. Identifiers and the short text fields of headers and events
(`id`, `parentSession`, `cwd`, `origin`, `agentPreset`, an event's `type`) are
stored in text columns. PostgreSQL cannot hold NUL in text at all, and neither
engine can encode a lone surrogate (half of a UTF-16 pair, as a JavaScript
writer leaves when it cuts a string inside an emoji) as UTF-8. So these fields
must be Unicode text without NUL, and ids at most `MAX_ID_LENGTH` characters:
writers refuse anything else on SQLite and PostgreSQL alike (import names the
file and line), and an id that breaks the rule cannot exist, so every read of
one is SESSION_QUERY_SESSION_NOT_FOUND without asking any backend.

Payloads (`data`) are JSON values, not columns: NUL and lone surrogates in
them are stored exactly (as `\\u0000` / `\\ud800` escapes in the JSON text, on
both engines) and served the same way, escaped, as JavaScript's
`JSON.stringify` does.
"""

from __future__ import annotations

import re

MAX_ID_LENGTH = 1024
"""Longest session id, in characters (real ids are UUIDs or short slugs)."""

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored as identifier or header text, or None if it can."""
    found = _BAD_TEXT.search(value)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "contains a NUL character"
    return f"contains a lone surrogate (U+{ord(char):04X}), which is not Unicode text"


def id_problem(session_id: object) -> str | None:
    """Why `session_id` cannot be a session id, or None if it can."""
    if not isinstance(session_id, str) or not session_id:
        return "is not a non-empty string"
    if len(session_id) > MAX_ID_LENGTH:
        return f"is longer than {MAX_ID_LENGTH} characters"
    return text_problem(session_id)


def can_exist(session_id: object) -> bool:
    """Whether a session could have this id (the readers' cheap first check)."""
    return id_problem(session_id) is None


def shown(session_id: object, limit: int = 80) -> str:
    """The id as messages quote it: its repr, cut short when long."""
    text = repr(session_id)
    return text if len(text) <= limit else f"{text[: limit - 5]}...'"
