"""The `text` clause of SPEC §12 against a model written here: simple case folding from
CaseFolding 14.0 (Python's one-code-point casefold for the C entries, the S entries
listed in `tests.test_filters`), whitespace runs over JavaScript's `\\s` as the SPEC
lists it, everything else literal, in the event's text before the U+FFFD replacement."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.filters import EventFilter, check_event_filter
from gateway.core.text_filter import TextMatcher, simple_fold
from tests.test_filters import ALPHABET, JS_WS, fold_model, message, text_model

NOT_JS_WHITESPACE = ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u180e", "\u200b", "\u2060"]
"""Whitespace to Python (`str.isspace`) or lookalikes, but not JavaScript's `\\s`."""


def matches(clause: str, text: str, event_type: str = "user/message") -> bool:
    trimmed = check_event_filter(EventFilter(text=clause))
    assert trimmed is not None
    return TextMatcher(trimmed).matches(event_type, message(text))


def test_simple_folding_equals_casefolding_14_for_every_code_point() -> None:
    wrong = [
        cp
        for cp in range(0x110000)
        if not 0xD800 <= cp <= 0xDFFF and simple_fold(chr(cp)) != fold_model(chr(cp))
    ]
    assert wrong == []


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(ALPHABET, max_size=12),
    clause=st.text(ALPHABET, min_size=1, max_size=4).filter(lambda t: t.strip(JS_WS) != ""),
)
def test_the_text_clause_equals_the_model(text: str, clause: str) -> None:
    assert matches(clause, text) is text_model(clause, text)


@settings(max_examples=100, deadline=None)
@given(text=st.text(ALPHABET, min_size=1, max_size=12), data=st.data())
def test_any_piece_of_a_text_case_swapped_is_found_in_it(text: str, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(text) - 1))
    j = data.draw(st.integers(i + 1, len(text)))
    piece = text[i:j]
    if piece.strip(JS_WS) == "":
        return
    assert matches(piece, text) is text_model(piece, text) is True
    assert matches(piece.swapcase(), text) is text_model(piece.swapcase(), text)


@pytest.mark.parametrize("ws", list(JS_WS), ids=lambda c: f"U+{ord(c):04X}")
def test_every_javascript_whitespace_character_matches_a_whitespace_run(ws: str) -> None:
    assert matches("a b", f"xa{ws}by")
    assert matches(f"a{ws}b", "a b")
    assert matches("a b", f"a{ws}{ws} \t{ws}b")
    assert not matches("a b", "ab")


@pytest.mark.parametrize("other", NOT_JS_WHITESPACE, ids=lambda c: f"U+{ord(c):04X}")
def test_characters_that_are_not_javascript_whitespace_match_only_themselves(other: str) -> None:
    assert not matches("a b", f"a{other}b")
    assert matches(f"a{other}b", f"a{other}b")
    assert not matches(f"a{other}b", "a b")


@pytest.mark.parametrize(
    ("clause", "text", "found"),
    [
        ("STRASSE", "straße", False),  # full folding would match: ß is not "ss"
        ("ss", "ß", False),
        ("ẞ", "ß", True),  # the S entry
        ("ß", "ẞ", True),
        ("k", "\u212a", True),  # KELVIN SIGN folds to k
        ("σ", "ς", True),  # noqa: RUF001 - final sigma folds to sigma
        ("Σ", "ς", True),
        ("i", "İ", False),  # İ has only F and T foldings
        ("ı", "I", False),  # noqa: RUF001
        ("ᾈ", "ᾀ", True),  # the S entry of the Greek iota-subscript capitals
        ("\u13a0", "\uab70", True),  # Cherokee: lowercase folds to uppercase
        ("É", "é", True),
        ("e\u0301", "é", False),  # literal: no normalization
        ("中文", "中文字", True),
        ("😀", "a😀b", True),
        ("a.*b", "axxb", False),  # literal, not a regex
        ("a.*b", "A.*B", True),
        ("[x]", "[X]", True),
    ],
)
def test_simple_case_folding_and_literal_matching(clause: str, text: str, found: bool) -> None:
    assert matches(clause, text) is found is text_model(clause, text)


def test_an_event_without_text_never_matches() -> None:
    matcher = TextMatcher("abc")
    assert not matcher.matches("turn/start", {"content": [{"type": "text", "text": "abc"}]})
    assert not matcher.matches("user/message", {"content": []})
    assert not matcher.matches("user/message", {"content": "abc"})  # not a list: no text
    assert matcher.matches("tool/call", {"name": "abc"})


def test_the_text_is_scanned_as_extracted_before_the_replacement_character() -> None:
    assert matches("a\ufdd0b", "a\ufdd0b")
    assert not matches("a\ufffdb", "a\ufdd0b")
    assert matches("x\ud800", "x\ud800y")  # a lone surrogate, as extracted


def test_the_clause_is_trimmed_of_javascript_whitespace_only() -> None:
    assert check_event_filter(EventFilter(text="\ufeff\u3000 ab \u2028")) == "ab"
    assert check_event_filter(EventFilter(text="\x85ab")) == "\x85ab"
    assert not matches("\x85ab", "ab")
