"""The `text` clause of an event filter (SPEC §12): a literal scan, not search.

The clause is trimmed (`event_text.js_trim`); each run of JavaScript
whitespace in it (`event_text.JS_WHITESPACE`) matches one or more such
characters; every other character matches itself under simple case folding,
anywhere in the event's §13 text as extracted (`event_text.event_text`,
before `words.indexable`). An event with no text never matches.

Simple case folding (CaseFolding.txt, statuses C and S) maps one code point to
one code point. Python has no table of it: `str.casefold()` is the full folding
(C and F: `ß` -> `ss`), and `re.IGNORECASE` matches by `lower()` and a few
extra pairs, which is close but not the same (`ẞ`/`ß`, the Greek iota-subscript
capitals, Cherokee). So the fold of a code point `c` is derived here from
`unicodedata` (Unicode 14.0 in Python 3.11):

* `c.casefold()` when it is one code point: the C mapping (or `c` itself);
* else (c has an F mapping) `c.lower()` when it is one code point: the S mapping
  where there is one (`ẞ` -> `ß`, `ᾈ` -> `ᾀ`, `ᾼ` -> `ᾳ`; F-only code points
  such as `ß`, `ŉ`, `ﬁ` are their own lowercase);
* else `c` itself (`İ`: F and T only).

`tests/test_text_filter.py` checks this derivation against CaseFolding 14.0's S
entries listed there, for every code point. Two code points are equal for the
clause when their folds are; the compiled pattern lists each character's whole
class (`[Kk\u212a]`), so texts are scanned as they are, without folding a copy.
"""

from __future__ import annotations

import re
from functools import cache

from .event_text import JS_WHITESPACE, event_text

_WS_CLASS = f"[{re.escape(JS_WHITESPACE)}]"
_WS_SPLIT = re.compile(f"({_WS_CLASS}+)")
_MAX_CODE_POINT = 0x10FFFF


def simple_fold(c: str) -> str:
    """The simple case folding of one code point (see the module docstring)."""
    folded = c.casefold()
    if len(folded) == 1:
        return folded
    lower = c.lower()
    return lower if len(lower) == 1 else c


@cache
def _classes() -> dict[str, str]:
    """Every code point that folds with another, to all code points of its fold class
    (made once per process: a static table of Unicode, not data)."""
    members: dict[str, set[str]] = {}
    for cp in range(_MAX_CODE_POINT + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        f = simple_fold(c)
        if f != c:
            members.setdefault(f, {f}).add(c)
    out: dict[str, str] = {}
    for group in members.values():
        joined = "".join(sorted(group))
        for c in group:
            out[c] = joined
    return out


def _char(c: str) -> str:
    group = _classes().get(c)
    if group is None:
        return re.escape(c)
    return "[" + "".join(re.escape(m) for m in group) + "]"


def compile_text(text: str) -> re.Pattern[str]:
    """The pattern of a trimmed, non-empty `text` clause (see the module docstring)."""
    parts = []
    for piece in _WS_SPLIT.split(text):
        if not piece:
            continue
        if piece[0] in JS_WHITESPACE:
            parts.append(_WS_CLASS + "+")
        else:
            parts.append("".join(_char(c) for c in piece))
    return re.compile("".join(parts))


class TextMatcher:
    """Whether an event's §13 text holds the clause (an event with no text never does)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._search = compile_text(text).search

    def matches(self, event_type: str, data: object) -> bool:
        body = event_text(event_type, data)
        return bool(body) and self._search(body) is not None


__all__ = ["TextMatcher", "compile_text", "simple_fold"]
