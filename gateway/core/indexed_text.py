"""An event's text as search reads it (SPEC §13): extracted and tokenized once.

A live session indexes each event when it is committed (`LiveSession`), the
way it keeps its fold: a search over a live log then matches against what was
computed at append time and never re-extracts or re-tokenizes. A stored log
read by a backend without an index (`list()`/`load()` only) is indexed the same
way when it is searched, so both paths match with the same code.

The words are kept compact: the folded terms (interned, so a log's repeated
words share one string) and their code-point bounds in two arrays, instead of a
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
    starts: array[int]
    """Where each token starts (code points)."""
    ends: array[int]
    """Where each token ends (code points, exclusive)."""

    @property
    def length(self) -> int:
        """The text's length in code points (the ranking's second key)."""
        return len(self.text)

    def words(self) -> list[Word]:
        """The tokens as `words.words(text)` gives them."""
        return [Word(s, e, t) for s, e, t in zip(self.starts, self.ends, self.terms, strict=True)]

    def match_count(self, phrase: Sequence[str]) -> int:
        """`len(self.spans(phrase))` without making the spans: C-speed scans of the terms
        (a search ranks every match but makes spans for the page only). An occurrence
        starting at or before the end of the previous one is merged into it, as
        `matching.phrase_spans` merges them."""
        terms, n = self.terms, len(phrase)
        if n == 0:
            return 0
        first = phrase[0]
        if n == 1:  # one-token occurrences never overlap
            return terms.count(first)
        if any(t not in terms for t in phrase):
            return 0
        target = tuple(phrase)
        count, end, i = 0, -1, 0
        while True:
            try:
                i = terms.index(first, i)
            except ValueError:
                return count
            if terms[i : i + n] == target:
                if i > end:
                    count += 1
                end = i + n - 1
            i += 1

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
    if not found:
        return IndexedText(clean, (), array("I"), array("I"))
    starts, ends, terms = zip(*found, strict=True)
    return IndexedText(clean, tuple(map(sys.intern, terms)), array("I", starts), array("I", ends))


def index_event(event_type: str, data: object) -> IndexedText | None:
    """The indexed §13 text of an event (None when it has no text)."""
    return index_text(event_text(event_type, data))
