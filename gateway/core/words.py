"""Words of a text as SQLite FTS5's `unicode61` tokenizer makes them (SPEC §13).

The tokens are not reimplemented: `apsw` exposes SQLite's own FTS5 tokenizers
to Python, so the live index and the PostgreSQL token index tokenize with the
very code (`unicode61`, default options: letters, numbers and private-use
characters; case folded; diacritics removed) that the SQLite engine's FTS5
index runs. apsw bundles its own SQLite; its `unicode61` tables were checked
equal to the stdlib `sqlite3` FTS5 on every code point (and the property tests
compare the two on generated texts).

apsw reports byte offsets into UTF-8; `words()` turns them into code-point
offsets of the Python string, since every position the contract speaks of
(snippets, highlights, lengths) is in code points.
"""

from __future__ import annotations

import re
import threading
from itertools import accumulate
from typing import NamedTuple, cast

import apsw


class Word(NamedTuple):
    """One token: `text[start:end]` (code points) folds to `term`."""

    start: int
    end: int
    term: str


_local = threading.local()

_STARTS = bytes(0 if 0x80 <= b <= 0xBF else 1 for b in range(256))
"""UTF-8 bytes that start a character map to 1, continuation bytes to 0."""

_UNSTORABLE = re.compile("[\x00\ufdd0\ufdd1\ud800-\udfff]")
"""What `indexable` replaces; one C-speed pass (a Python loop over the code points cost
~25 us for a 150-character text, twice per append of a live event)."""


def _tokenizer() -> apsw.FTS5Tokenizer:
    """One in-memory connection's `unicode61` per thread (a connection serialises its calls)."""
    tok: apsw.FTS5Tokenizer | None = getattr(_local, "tokenizer", None)
    if tok is None:
        connection = apsw.Connection(":memory:")
        tok = connection.fts5_tokenizer("unicode61", [])
        _local.connection = connection
        _local.tokenizer = tok
    return tok


def indexable(text: str) -> str:
    """`text` as it is indexed: NUL, U+FDD0, U+FDD1 (SPEC §13) and lone surrogates
    (not Unicode, so not storable as UTF-8) replaced by U+FFFD. Lengths and tokens
    are unchanged: none of these is a token character."""
    if text.isascii():
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    return _UNSTORABLE.sub("\ufffd", text)


def tokens(text: str) -> list[tuple[int, int, str]]:
    """The tokens of `text` in order as plain `(start, end, term)` tuples, in code points
    (what `words` wraps; a search index keeps them without a `Word` per token)."""
    clean = indexable(text)
    data = clean.encode("utf-8")
    found = cast(list[tuple[int, int, str]], _tokenizer()(data, apsw.FTS5_TOKENIZE_DOCUMENT, None))
    if len(data) == len(clean):  # ASCII: byte offsets are code-point offsets
        return found
    # The code point at byte b is the number of characters before it, i.e. of the bytes
    # in data[:b] that start a character: one C-speed pass over the text.
    before = [0, *accumulate(data.translate(_STARTS))]
    return [(before[s], before[e], t) for s, e, t in found]


def words(text: str) -> list[Word]:
    """The tokens of `text` in order, with their code-point spans."""
    return [Word(s, e, t) for s, e, t in tokens(text)]


def terms(text: str) -> list[str]:
    """Only the folded tokens of `text`, in order (a query's phrase)."""
    data = indexable(text).encode("utf-8")
    found = _tokenizer()(data, apsw.FTS5_TOKENIZE_QUERY, None, include_offsets=False)
    return [row[0] for row in cast(list[tuple[str]], found)]
