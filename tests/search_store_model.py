"""An independent model of SPEC §13's stored search, for the search tests.

Tokens come from SQLite's own FTS5 (`unicode61`) through the stdlib `sqlite3`
(not apsw, which the gateway uses): every text is a row of an in-memory FTS5
table, and `fts5vocab(..., instance)` lists each token with its position. The
phrase matches, their merging, the ranking and the best event per session are
written here from the SPEC, over Python lists.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from gateway.core import SessionEvent, SessionHeader, SessionQueryError, fold_surface
from gateway.core.event_text import JS_WHITESPACE, event_text
from gateway.core.filters import EventFilter, SessionFilter, TimeRange
from gateway.core.fold import EventSurface

UNSTORABLE = {"\x00": "\ufffd", "\ufdd0": "\ufffd", "\ufdd1": "\ufffd"}


def indexed_text(text: str) -> str:
    """SPEC §13: NUL, U+FDD0 and U+FDD1 replaced by U+FFFD before indexing."""
    return "".join(UNSTORABLE.get(c, c) for c in text)


class Fts5Tokens:
    """Tokens of texts as the stdlib SQLite's FTS5 unicode61 makes them."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute("CREATE VIRTUAL TABLE m USING fts5(t, tokenize='unicode61')")
        self.conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(m, instance)")
        self.conn.executemany(
            "INSERT INTO m (rowid, t) VALUES (?, ?)", [(i + 1, t) for i, t in enumerate(texts)]
        )
        self.tokens: dict[int, list[str]] = {}
        for term, doc, _col, _offset in self.conn.execute(
            "SELECT term, doc, col, offset FROM v ORDER BY doc, offset"
        ):
            self.tokens.setdefault(doc - 1, []).append(term)

    def of(self, i: int) -> list[str]:
        return self.tokens.get(i, [])

    def query(self, text: str) -> list[str]:
        self.conn.execute("DELETE FROM m WHERE rowid = 0")
        self.conn.execute("INSERT INTO m (rowid, t) VALUES (0, ?)", (text,))
        found = [
            term
            for term, _o in self.conn.execute(
                "SELECT term, offset FROM v WHERE doc = 0 ORDER BY offset"
            )
        ]
        self.conn.execute("DELETE FROM m WHERE rowid = 0")
        return found


def merged_matches(tokens: list[str], phrase: list[str]) -> int:
    """Phrase occurrences, overlapping ones (sharing a token) counted once."""
    n = len(phrase)
    if n == 0:
        return 0
    count, last = 0, -1
    for i in range(len(tokens) - n + 1):
        if tokens[i : i + n] == phrase:
            if i > last:
                count += 1
            last = i + n - 1
    return count


@dataclass(frozen=True)
class Doc:
    header: SessionHeader
    event: SessionEvent
    surface: EventSurface
    text: str


def docs_of(corpus: Sequence[tuple[SessionHeader, list[SessionEvent]]]) -> list[Doc]:
    out = []
    for header, events in corpus:
        classes = fold_surface(events).classes()
        for event, surface in zip(events, classes, strict=True):
            text = indexed_text(event_text(event.type, event.data))
            if text:
                out.append(Doc(header, event, surface, text))
    return out


def _in_range(r: Any, value: int) -> bool:
    return (r.from_ is None or value >= r.from_) and (r.to is None or value <= r.to)


def model_hits(
    docs: list[Doc],
    tokens: Fts5Tokens,
    query: str,
    sessions: SessionFilter | None = None,
    events: EventFilter | None = None,
    session_id: str | None = None,
    shadowed: tuple[str, ...] = (),
) -> list[tuple[int, int, int, str, int]]:
    """Every matching event as (matchCount, length, time, session id, seq), ranked."""
    phrase = tokens.query(query)
    out = []
    for i, doc in enumerate(docs):
        h, e = doc.header, doc.event
        if session_id is not None and h.id != session_id:
            continue
        if h.id in shadowed:
            continue
        if sessions is not None:
            if sessions.ids is not None and h.id not in sessions.ids:
                continue
            if sessions.cwd is not None and h.cwd not in sessions.cwd:
                continue
            if sessions.created_at is not None and not _in_range(sessions.created_at, h.created_at):
                continue
            if sessions.parent is not None and h.parent_session not in sessions.parent:
                continue
        if events is not None:
            if events.seq is not None and not _in_range(events.seq, e.seq):
                continue
            if events.time is not None and not _in_range(events.time, e.time):
                continue
            if events.types is not None and e.type not in events.types:
                continue
            if events.surface is not None and doc.surface not in events.surface:
                continue
        count = merged_matches(tokens.of(i), phrase)
        if count:
            out.append((count, len(doc.text), e.time, h.id, e.seq))
    out.sort(key=lambda k: (-k[0], k[1], -k[2], k[3], -k[4]))
    return out


def model_sessions(
    hits: list[tuple[int, int, int, str, int]],
) -> list[tuple[int, int, int, str, int]]:
    """Each session's best hit (hits are ranked, so its first), sessions in that order."""
    seen: set[str] = set()
    out = []
    for hit in hits:
        if hit[3] not in seen:
            seen.add(hit[3])
            out.append(hit)
    return out


# -- generated corpora ------------------------------------------------------------

WORDS = [
    "a", "b", "a", "café", "CAFE", "cafe\u0301", "Ünïcödé", "straße", "日本語", "東京",
    "🙂", "x1", "OR", "NEAR", "*", '"q"', "(", "a-b", "Δέλτα", "\ue000pua",
]  # fmt: skip
SEPARATORS = [*JS_WHITESPACE, "\x00", "\ufdd0", "\ufdd1", ",", ".", "\u200b", "\x1c", "\u0085"]
TYPES = ["user/message", "assistant/message", "tool/call", "turn/end", "session/title"]
CWDS = [None, "/w", "/w/x", "/srv/é"]
SESSION_IDS = ["s", "S", "é", "s-2", "ß", "日"]


REPEATED = ["a a a", "a b a b", "café\u3000CAFE", "日本語 a", "a\x00a", "b"]
"""Texts that recur across events, so match counts, lengths and times tie."""


@st.composite
def texts(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.sampled_from(REPEATED))
    words = draw(st.lists(st.sampled_from(WORDS), min_size=0, max_size=12))
    out = []
    for word in words:
        out.append(word)
        out.append(draw(st.sampled_from(SEPARATORS)) * draw(st.integers(1, 2)))
    return "".join(out)


def _data(etype: str, text: str) -> Any:
    if etype == "user/message":
        return {"content": [{"type": "text", "text": text}]}
    if etype == "assistant/message":
        return {"message": {"content": [{"type": "text", "text": text}]}}
    if etype == "tool/call":
        return {"name": "bash", "arguments": text}
    if etype == "turn/end":
        return {"reason": {"kind": "error", "error": {"message": text}}}
    return {"title": text, "messageSeqs": [], "source": {"kind": "user"}}


@st.composite
def logs(draw: st.DrawFn) -> list[SessionEvent]:
    n = draw(st.integers(0, 6))
    events = []
    for seq in range(n):
        etype = draw(st.sampled_from(TYPES))
        op: Any = None
        if etype in ("user/message", "assistant/message"):
            op = draw(st.sampled_from(["append", "replace"]))  # surface types need one
            if op == "replace":
                start = draw(st.integers(0, max(0, seq - 1)))
                op = {"op": "replace", "start": start, "end": start}
        time = draw(st.sampled_from([10, 20]))
        events.append(SessionEvent(etype, seq, time, _data(etype, draw(texts())), op))
    try:
        fold_surface(events)
    except SessionQueryError:  # a drawn replace broke a rule: append instead
        events = [
            SessionEvent(e.type, e.seq, e.time, e.data, "append" if e.surface_op else None)
            for e in events
        ]
        fold_surface(events)
    return events


@st.composite
def corpora(draw: st.DrawFn) -> list[tuple[SessionHeader, list[SessionEvent]]]:
    ids = draw(st.lists(st.sampled_from(SESSION_IDS), min_size=1, max_size=4, unique=True))
    out = []
    for sid in ids:
        header = SessionHeader(
            sid,
            draw(st.sampled_from([1, 2, 3])),
            cwd=draw(st.sampled_from(CWDS)),
            parent_session=draw(st.sampled_from([None, *SESSION_IDS[:2]])),
        )
        out.append((header, draw(logs())))
    return out


QUERIES = st.sampled_from(
    ["a", "a a", "A  b", "café", "cafe", "日本語", "🙂", "b a b", "OR", '"q"', "a-b", "x1 a", "*"]
)


@st.composite
def session_filters(draw: st.DrawFn) -> SessionFilter | None:
    clause = draw(st.sampled_from([None, "ids", "cwd", "created_at", "parent", "several"]))
    if clause is None:
        return None
    several = clause == "several"

    def pick(name: str, values: st.SearchStrategy[Any]) -> Any:
        if clause == name or (several and draw(st.booleans())):
            return draw(values)
        return None

    return SessionFilter(
        ids=pick("ids", st.lists(st.sampled_from(SESSION_IDS), max_size=4).map(tuple)),
        cwd=pick("cwd", st.lists(st.sampled_from(CWDS), min_size=1, max_size=2).map(tuple)),
        created_at=pick(
            "created_at", st.builds(TimeRange, st.none() | st.just(2), st.none() | st.just(2))
        ),
        parent=pick(
            "parent", st.lists(st.sampled_from([None, "s"]), min_size=1, max_size=2).map(tuple)
        ),
    )


@st.composite
def event_filters(draw: st.DrawFn) -> EventFilter | None:
    from gateway.core.filters import SeqRange

    clause = draw(st.sampled_from([None, "seq", "time", "types", "surface", "several"]))
    if clause is None:
        return None
    several = clause == "several"

    def pick(name: str, values: st.SearchStrategy[Any]) -> Any:
        if clause == name or (several and draw(st.booleans())):
            return draw(values)
        return None

    return EventFilter(
        seq=pick("seq", st.builds(SeqRange, st.none() | st.just(1), st.none() | st.just(3))),
        time=pick("time", st.builds(TimeRange, st.none() | st.just(20), st.none() | st.just(20))),
        types=pick("types", st.lists(st.sampled_from(TYPES), max_size=3).map(tuple)),
        surface=pick(
            "surface", st.lists(st.sampled_from(list(EventSurface)), max_size=2).map(tuple)
        ),
    )
