"""An independent model of SPEC §13 for the search tests (no tests here).

Written from the contract's text, not from `gateway.core.matching`:

* tokens and matches are SQLite's own: the texts go into an FTS5 `unicode61` table
  of the standard library's `sqlite3` (another SQLite build than the apsw one
  the gateway tokenizes with), the query is one quoted phrase, and `highlight()`
  marks the merged matches, whose number is matchCount;
* the text of an event, the whitespace set, the ranking and the snippet window
  are transcribed from SPEC §12-§13;
* filters and scope are brute force over the corpus as Python lists.

`Corpus` is a generated logical corpus (sessions live, stored or both) that the
tests write into live stores and backends, then ask the model about.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from gateway.core import SessionEvent, SessionHeader, fold_surface

JS_WS = (
    "\t\n\x0b\x0c\r \u00a0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""JavaScript's `\\s` as SPEC §12 lists it."""

ELLIPSIS = "\u2026"


def js_trim(s: str) -> str:
    start, end = 0, len(s)
    while start < end and s[start] in JS_WS:
        start += 1
    while end > start and s[end - 1] in JS_WS:
        end -= 1
    return s[start:end]


def unstorable_replaced(s: str) -> str:
    """NUL, U+FDD0 and U+FDD1 replaced by U+FFFD (SPEC §13)."""
    return "".join("\ufffd" if c in "\x00\ufdd0\ufdd1" else c for c in s)


# -- the text of an event (the shapes the generator writes) ------------------------------


def _join(parts: list[Any]) -> str:
    kept = [js_trim(p) for p in parts if isinstance(p, str)]
    return "\n".join(p for p in kept if p)


def _blocks(content: list[dict[str, Any]]) -> list[Any]:
    out: list[Any] = []
    for b in content:
        if b.get("type") == "text":
            out.append(b.get("text"))
        elif b.get("type") == "tool-call":
            out += [b.get("name"), b.get("arguments")]
    return out


def model_text(event_type: str, data: Any) -> str:
    """SPEC §13's table for the event shapes of `events()` below."""
    if event_type == "user/message":
        return _join(_blocks(data["content"]))
    if event_type == "assistant/message":
        return _join(_blocks(data["message"]["content"]))
    if event_type == "tool/call":
        return _join([data.get("name"), data.get("arguments")])
    return ""


# -- matches: SQLite's FTS5 ------------------------------------------------------------


class Fts5:
    """An in-memory FTS5 `unicode61` table of texts, asked one phrase at a time."""

    def __init__(self, texts: dict[int, str]) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61')")
        self.db.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", list(texts.items()))

    def matches(self, query: str) -> dict[int, list[tuple[int, int]]]:
        """rowid -> the merged matches of the phrase `query` as code-point spans."""
        phrase = '"' + query.replace('"', '""') + '"'
        rows = self.db.execute(
            "SELECT rowid, highlight(t, 0, char(64976), char(64977)) FROM t WHERE t MATCH ?",
            (phrase,),
        ).fetchall()
        out = {}
        for rowid, marked in rows:
            spans, pos, start = [], 0, 0
            for ch in marked:
                if ch == "\ufdd0":
                    start = pos
                elif ch == "\ufdd1":
                    spans.append((start, pos))
                else:
                    pos += 1
            out[rowid] = spans
        return out

    def close(self) -> None:
        self.db.close()


# -- the snippet, transcribed from SPEC §13 ------------------------------------------------


def model_snippet(text: str, spans: list[tuple[int, int]]) -> tuple[str, list[tuple[int, int]]]:
    """(snippet, [(start, length)]) of `text` whose matches are `spans` (code points)."""
    out: list[str] = []
    where: dict[int, int] = {}  # position in text -> position in clean (non-whitespace)
    space = False
    for i, ch in enumerate(text):
        if ch in JS_WS:
            space = bool(out)
            continue
        if space:
            out.append(" ")
            space = False
        where[i] = len(out)
        out.append(ch)
    clean = "".join(out)
    mapped = [(where[s], where[e - 1] + 1) for s, e in spans]
    n = len(clean)
    if n <= 240:
        shown, lo, hi, prefix = clean, 0, n, ""
    else:
        m = mapped[0][0]
        start = max(0, m - 80)
        prefix = ELLIPSIS if start > 0 else ""
        if start + 239 - len(prefix) >= n:
            lo, hi = n - (240 - len(prefix)), n
            shown = prefix + clean[lo:]
        else:
            lo, hi = start, start + 239 - len(prefix)
            shown = prefix + clean[lo:hi] + ELLIPSIS
    ranges = []
    for s, e in mapped:
        s, e = max(s, lo), min(e, hi)
        if s < e:
            ranges.append((len(prefix) + s - lo, e - s))
    return shown, ranges


# -- the corpus --------------------------------------------------------------------------


@dataclass
class Session:
    header: SessionHeader
    events: list[SessionEvent]


@dataclass
class Corpus:
    """Sessions by id: `live` (in a live store), `stored` (in the backend), or both
    (then with different logs: the live one is what is searched)."""

    live: dict[str, Session] = field(default_factory=dict)
    stored: dict[str, Session] = field(default_factory=dict)

    def logical(self) -> dict[str, tuple[Session, bool, bool]]:
        """id -> (the session searched, live, persisted)."""
        out = {sid: (s, True, sid in self.stored) for sid, s in self.live.items()}
        for sid, s in self.stored.items():
            out.setdefault(sid, (s, False, True))
        return out


@dataclass(frozen=True)
class Hit:
    session_id: str
    seq: int
    match_count: int
    snippet: str
    highlights: tuple[tuple[int, int], ...]
    surface: str
    order: tuple[Any, ...]


def _in_range(r: Any, value: int) -> bool:
    return r is None or ((r.from_ is None or value >= r.from_) and (r.to is None or value <= r.to))


def session_kept(f: Any, header: SessionHeader, live: bool, persisted: bool) -> bool:
    if f is None:
        return True
    if f.ids is not None and header.id not in f.ids:
        return False
    if f.cwd is not None and header.cwd not in f.cwd:
        return False
    if not _in_range(f.created_at, header.created_at):
        return False
    if f.parent is not None and header.parent_session not in f.parent:
        return False
    if f.availability is not None:
        wanted = {str(a) for a in f.availability}
        if not (("LIVE" in wanted and live) or ("PERSISTED" in wanted and persisted)):
            return False
    return True


def event_kept(f: Any, event: SessionEvent, surface: str) -> bool:
    if f is None:
        return True
    if not _in_range(f.seq, event.seq) or not _in_range(f.time, event.time):
        return False
    if f.types is not None and event.type not in f.types:
        return False
    return f.surface is None or surface in {str(s) for s in f.surface}


def model_hits(
    corpus: Corpus,
    query: str,
    session_filter: Any = None,
    event_filter: Any = None,
    visible: Any = None,
) -> dict[str, list[Hit]]:
    """session id -> its matching events, best first (SPEC §13), over the sessions the
    scope (`visible(header) -> bool`) and the session filter keep."""
    sessions = {
        sid: s
        for sid, (s, live, persisted) in corpus.logical().items()
        if (visible is None or visible(s.header))
        and session_kept(session_filter, s.header, live, persisted)
    }
    texts: dict[int, str] = {}
    where: dict[int, tuple[str, SessionEvent]] = {}
    for sid, s in sessions.items():
        for e in s.events:
            text = unstorable_replaced(model_text(e.type, e.data))
            if text:
                rowid = len(where) + 1
                texts[rowid] = text
                where[rowid] = (sid, e)
    fts = Fts5(texts)
    try:
        found = fts.matches(" ".join(query.split()))  # collapsed; FTS5 tokenizes it
    finally:
        fts.close()
    folds = {sid: fold_surface(s.events) for sid, s in sessions.items()}
    out: dict[str, list[Hit]] = {}
    for rowid, spans in found.items():
        sid, e = where[rowid]
        surface = str(folds[sid].surface_of(e.seq))
        if not event_kept(event_filter, e, surface):
            continue
        text = texts[rowid]
        shown, ranges = model_snippet(text, spans)
        order = (-len(spans), len(text), -e.time, sid, -e.seq)
        out.setdefault(sid, []).append(
            Hit(sid, e.seq, len(spans), shown, tuple(ranges), surface, order)
        )
    for hits in out.values():
        hits.sort(key=lambda h: h.order)
    return out


def model_session_ranking(hits: dict[str, list[Hit]]) -> list[Hit]:
    """Each session's best hit, sessions ranked by it."""
    return sorted((h[0] for h in hits.values()), key=lambda h: h.order)


# -- generators ----------------------------------------------------------------------------

VOCAB = ["alpha", "Alpha", "ÁLPHA", "alphä", "beta", "café", "CAFE", "日本", "語", "🎉", "x1"]
FILLER = ["lorem", "ipsumdolor", "sit", "amet"]
SEPARATORS = [
    *JS_WS,
    "  ",
    " \u3000 ",
    ",",
    "-",
    "/",
    ".",
    "\u0085",  # Python's isspace(), not JavaScript's \s
    "\u001c",
    "\u180e",
    "\x00",
    "\ufdd0",
]
SESSION_IDS = ["a", "B", "é", "s1", "s10", "s2"]
CWDS = [None, "/srv/app", "/srv/app/sub", "/home/me"]


@st.composite
def texts(draw: st.DrawFn) -> str:
    words = st.sampled_from(VOCAB) | st.sampled_from(FILLER)
    n = draw(st.integers(0, 8) | st.integers(40, 90))
    parts = [draw(st.sampled_from(SEPARATORS)) if draw(st.booleans()) else ""]
    for i in range(n):
        if i:
            parts.append(draw(st.sampled_from(SEPARATORS)))
        parts.append(draw(words))
    if draw(st.booleans()):
        parts.append(draw(st.sampled_from(SEPARATORS)))
    return "".join(parts)


@st.composite
def queries(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=3))
    glue = draw(st.sampled_from([" ", "  ", "\t", "\u3000", " \n "]))
    q = glue.join(words)
    return draw(
        st.sampled_from([q, f"  {q} ", f"{q} OR beta", f'"{q}"', f"{q}*", f"({q})", "-- ,"])
    )


def _data(kind: str, text: str, draw: st.DrawFn) -> Any:
    if kind == "user/message":
        extra = draw(st.sampled_from([[], [{"type": "image"}], [{"type": "text", "text": "beta"}]]))
        return {"content": [{"type": "text", "text": text}, *extra]}
    if kind == "assistant/message":
        blocks = [{"type": "reasoning", "text": "alpha hidden"}, {"type": "text", "text": text}]
        return {"message": {"role": "assistant", "content": blocks}}
    if kind == "tool/call":
        return {"name": draw(st.sampled_from(["alpha", "grep"])), "arguments": text}
    return {"turn": 1, "text": text}  # a type with no text: never matches


@st.composite
def logs(draw: st.DrawFn) -> list[SessionEvent]:
    """A valid log: messages appended or replacing a current node, tool calls and
    bookkeeping, times drawn from a few values so that the ranking ties."""
    events: list[SessionEvent] = []
    surface: list[int] = []
    for seq in range(draw(st.integers(0, 10))):
        kind = draw(
            st.sampled_from(["user/message", "assistant/message", "tool/call", "turn/start"])
        )
        data = _data(kind, draw(texts()), draw)
        time = draw(st.integers(0, 4))
        op: Any = None
        src: Any = None
        if kind in ("user/message", "assistant/message"):
            if kind == "assistant/message" and surface and draw(st.booleans()):
                target = draw(st.sampled_from(surface))
                op, src = {"op": "replace", "start": target, "end": target}, (target,)
                surface[surface.index(target)] = seq
            else:
                op = "append"
                surface.append(seq)
        events.append(SessionEvent(kind, seq, time, data, op, src))
    return events


@st.composite
def headers(draw: st.DrawFn, sid: str) -> SessionHeader:
    return SessionHeader(
        sid, draw(st.integers(1, 3)), cwd=draw(st.sampled_from(CWDS)), parent_session=None
    )


@st.composite
def corpora(draw: st.DrawFn, *, stored: bool = True) -> Corpus:
    """Sessions live only, stored only, or both (same header, different logs)."""
    ids = draw(st.lists(st.sampled_from(SESSION_IDS), min_size=1, max_size=5, unique=True))
    corpus = Corpus()
    for sid in ids:
        header = draw(headers(sid))
        where = draw(st.sampled_from(["live", "stored", "both"])) if stored else "live"
        if where in ("live", "both"):
            corpus.live[sid] = Session(header, draw(logs()))
        if where in ("stored", "both"):
            corpus.stored[sid] = Session(header, draw(logs()))
    return corpus
