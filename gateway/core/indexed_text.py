"""An event's text as search reads it (SPEC §13): extracted and tokenized once.

A live session indexes each event when it is committed (`LiveSession`), the
way it keeps its fold: a search over a live log then matches against what was
computed at append time and never re-extracts or re-tokenizes. A stored log
read by a backend without an index (`list()`/`load()` only) is indexed the same
way when it is searched, so both paths match with the same code.

The words are kept compact: the folded terms (interned, so a log's repeated
words share one string) and their code-point bounds in one array, instead of a
`Word` tuple per token (~120 bytes each); `words()` rebuilds the `Word`s only
for an event that holds every term of the phrase.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import NamedTuple

from .event_text import event_text
from .matching import Span, phrase_spans
from .words import Word, indexable, tokens


class IndexedText(NamedTuple):
    """One event's indexable text (`words.indexable` of its §13 text) and its tokens."""

    text: str
    terms: tuple[str, ...]
    """The folded tokens in order (unicode61, as `words()` gives them)."""
    bounds: array[int]
    """Code-point `start, end` of each token, flattened: token i is `bounds[2i:2i+2]`."""

    @property
    def length(self) -> int:
        """The text's length in code points (the ranking's second key)."""
        return len(self.text)

    def words(self) -> list[Word]:
        """The tokens as `words.words(text)` gives them."""
        b = self.bounds
        return [Word(b[2 * i], b[2 * i + 1], t) for i, t in enumerate(self.terms)]

    def spans(self, phrase: Sequence[str]) -> list[Span]:
        """The merged phrase matches (`matching.phrase_spans`); `len()` is matchCount.
        An event lacking one of the phrase's terms is passed over at C speed."""
        terms = self.terms
        if not phrase or any(t not in terms for t in phrase):
            return []
        return phrase_spans(self.words(), phrase)


def index_text(text: str) -> IndexedText | None:
    """`text` made indexable and tokenized (None when it is empty)."""
    if not text:
        return None
    clean = indexable(text)
    found = tokens(clean)
    intern = sys.intern
    terms = tuple([intern(t) for _, _, t in found])
    bounds = array("I", [b for s, e, _ in found for b in (s, e)])
    return IndexedText(clean, terms, bounds)


def index_event(event_type: str, data: object) -> IndexedText | None:
    """The indexed §13 text of an event (None when it has no text)."""
    return index_text(event_text(event_type, data))
