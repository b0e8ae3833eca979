"""SPEC §13's event text, tokens and phrase matches, against SQLite's own FTS5 as the model.

The model is the stdlib `sqlite3` FTS5 (`unicode61`, defaults) in an in-memory
table: its `fts5vocab` instance table gives the tokens, and `highlight()` marks
the merged phrase matches. `gateway.core.words` tokenizes with apsw's copy of
the same tokenizer, so these tests are what keeps the live index and the
PostgreSQL tokens equal to the SQLite engine's FTS5.
"""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.event_text import JS_WHITESPACE, collapse_whitespace, event_text, js_trim
from gateway.core.matching import normalize_query, query_terms, text_spans
from gateway.core.words import indexable, terms, words

OPEN, CLOSE = "\ufdd0", "\ufdd1"  # `indexable` removes both, so they can only be markers


@pytest.fixture(scope="module")
def fts() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    return db


def model_terms(db: sqlite3.Connection, text: str) -> list[str]:
    db.execute("DELETE FROM t")
    db.execute("INSERT INTO t(rowid, body) VALUES (1, ?)", (text,))
    return [term for (term,) in db.execute("SELECT term FROM v ORDER BY offset")]


def model_spans(db: sqlite3.Connection, text: str, phrase: str) -> list[tuple[int, int]]:
    """Merged matches as `highlight()` marks them, in code points of `text`."""
    db.execute("DELETE FROM t")
    db.execute("INSERT INTO t(rowid, body) VALUES (1, ?)", (text,))
    quoted = '"' + phrase.replace('"', '""') + '"'
    row = db.execute(
        "SELECT highlight(t, 0, ?, ?) FROM t WHERE t MATCH ?", (OPEN, CLOSE, quoted)
    ).fetchone()
    if row is None:
        return []
    spans, pos, start = [], 0, -1
    for ch in row[0]:
        if ch == OPEN:
            start = pos
        elif ch == CLOSE:
            spans.append((start, pos))
        else:
            pos += 1
    return spans


# Letters with diacritics, CJK, emoji, digits, private use, every JS whitespace, a few
# non-whitespace separators Python calls space (U+001C-U+001F, U+0085), NUL and U+FDD0.
LETTERS = "aAbBéÉüÜßİ\u0131ǅ東京한글0٣\ue000😀\u0301"  # U+0131: dotless i
OTHERS = "\x1c\x1f\x85\x00\ufdd0-'*\""
ALPHABET = [*LETTERS, *JS_WHITESPACE, *OTHERS]
texts = st.lists(st.sampled_from(ALPHABET), max_size=60).map("".join)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts)
def test_words_are_the_tokens_of_sqlite_fts5_unicode61(fts: sqlite3.Connection, text: str) -> None:
    found = words(text)
    assert [w.term for w in found] == model_terms(fts, indexable(text))
    for w in found:  # each span is exactly one token, folding to its term
        assert terms(text[w.start : w.end]) == [w.term]
    assert terms(text) == [w.term for w in found]


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    unit=st.lists(st.sampled_from(["a", "b", "é", "東京", "😀x", "A"]), min_size=1, max_size=3),
    gaps=st.lists(st.sampled_from([" ", "\u3000", "-", "\n\t", "\ufeff", "!"]), min_size=1),
    repeat=st.integers(0, 6),
    noise=texts,
    phrase_len=st.integers(1, 3),
)
def test_phrase_matches_are_the_spans_fts5_highlight_merges(
    fts: sqlite3.Connection,
    unit: list[str],
    gaps: list[str],
    repeat: int,
    noise: str,
    phrase_len: int,
) -> None:
    """Repeated, self-overlapping phrases ("a a" in "a a a") tie and merge like FTS5's."""
    pieces = []
    for i in range(repeat):
        pieces.extend(unit)
        pieces.append(gaps[i % len(gaps)])
    text = noise + " " + " ".join(pieces) + noise
    query = " ".join(unit[:phrase_len])
    phrase = query_terms(normalize_query(query))
    if not phrase:
        return
    spans = [tuple(s) for s in text_spans(text, phrase)]
    assert spans == model_spans(fts, indexable(text), normalize_query(query))


def test_a_query_with_no_tokens_has_no_phrase() -> None:
    assert query_terms(normalize_query(' * "" ( ) - ')) == ()
    assert text_spans("anything at all", ()) == []


def test_query_operators_are_plain_text() -> None:
    phrase = query_terms(normalize_query('"error" OR NEAR(a b)*'))
    assert phrase == ("error", "or", "near", "a", "b")
    assert len(text_spans("Error or near A-B!", phrase)) == 1
    assert text_spans("error near a b", phrase) == []


# -- the event text table of SPEC §13 --------------------------------------------------


def test_event_text_of_a_user_message_is_its_content_blocks() -> None:
    data = {
        "content": [
            {"type": "text", "text": "  hello  "},
            {"type": "reasoning", "text": "hidden"},
            {"type": "image", "data": "xx"},
            {"type": "text", "text": "\u3000\ufeff"},
            {"type": "tool-call", "name": "read", "arguments": '{"path":"a"}'},
            {"type": "tool-result", "content": [{"type": "text", "text": "nested"}]},
            {"type": "mystery", "text": "unknown block"},
        ]
    }
    assert event_text("user/message", data) == 'hello\nread\n{"path":"a"}\nnested'


def test_event_text_of_an_assistant_message_is_its_message_content() -> None:
    data = {"message": {"content": [{"type": "text", "text": "answer"}]}}
    assert event_text("assistant/message", data) == "answer"
    assert event_text("assistant/message", {"content": [{"type": "text", "text": "x"}]}) == ""


def test_event_text_of_a_tool_call_is_its_name_then_arguments() -> None:
    assert event_text("tool/call", {"name": "bash", "arguments": " ls -la "}) == "bash\nls -la"


def test_event_text_of_a_tool_result_is_content_then_error_name_and_code() -> None:
    data = {
        "message": {"content": [{"type": "text", "text": "connect failed"}]},
        "error": {"name": "NetworkError", "code": "ECONNREFUSED"},
    }
    assert event_text("tool/result", data) == "connect failed\nNetworkError\nECONNREFUSED"


def test_event_text_of_todos_is_each_status_then_content() -> None:
    data = {"todos": [{"status": "done", "content": "a"}, {"status": "open", "content": " "}]}
    assert event_text("todo/write", data) == "done\na\nopen"


def test_event_text_of_turn_end_names_only_abnormal_endings() -> None:
    error = {"reason": {"kind": "error", "error": {"message": "boom"}}}
    assert event_text("turn/end", error) == "error\nboom"
    for kind in ("aborted", "max-tokens", "interrupted"):
        assert event_text("turn/end", {"reason": {"kind": kind}}) == kind
    assert event_text("turn/end", {"reason": {"kind": "completed"}}) == ""


def test_event_text_of_every_other_type_is_empty() -> None:
    for kind in ("assistant/chunk", "turn/start", "session/title", "step/start", "x/y"):
        assert event_text(kind, {"content": [{"type": "text", "text": "t"}]}) == ""


def test_event_text_of_a_malformed_payload_is_empty_not_an_error() -> None:
    assert event_text("user/message", {"content": "not a list"}) == ""
    assert event_text("tool/call", {"name": 3, "arguments": {"a": 1}}) == ""
    assert event_text("todo/write", {"todos": [None, 3, {"status": 1}]}) == ""
    assert event_text("turn/end", None) == ""


def test_trimming_and_whitespace_are_javascripts() -> None:
    assert js_trim("\ufeff x \u3000") == "x"
    assert js_trim("\x1cx\x85") == "\x1cx\x85"  # Python's isspace() would strip these
    assert collapse_whitespace("\t a \u2028\u2029 b\ufeff") == "a b"


def test_nul_and_noncharacters_are_replaced_before_indexing() -> None:
    assert indexable("a\x00b\ufdd0c\ufdd1d\ud800") == "a\ufffdb\ufffdc\ufffdd\ufffd"
    assert [w.term for w in words("a\x00b")] == ["a", "b"]
