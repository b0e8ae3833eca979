"""What the writer derives for search and titles (SPEC §13, §14), and the index DDL.

Pure functions shared by the writer (`writes.py`), the migration that builds
the index for existing databases (`migrations/versions/0005_...`) and
`session-gateway verify`, so all three derive one and the same row.

One `event_texts` row per event whose §13 text is not empty: the text as it is
indexed (`gateway.core.words.indexable` of `gateway.core.event_text.event_text`),
its length in code points, and the event's type and time. Type and time never
change once written, and the ranking needs time and length for every candidate:
keeping them here means a search reads the text rows alone and joins `events`
(by primary key) only for a `surface` clause, the one mutable derivation, which
stays in one place.

SQLite indexes the text with FTS5 (`tokenize='unicode61'`, the contract's own
tokenizer) as an external-content table over `event_texts` (so `highlight()`
reads the text from there and the text is stored once), kept in step by
triggers on `event_texts`: an insert, update or delete of a text row (the
cascade from `sessions` included) updates the index in the same statement.

PostgreSQL has no unicode61, so the writer tokenizes with SQLite's own
tokenizer in Python (`gateway.core.words`, through apsw) and stores each text's
folded tokens in order as `terms text[]`, with a GIN index (`array_ops`) for
candidates: `terms @> phrase` holds every event that has all the phrase's
tokens. `gateway_phrase_count(terms, phrase)` then counts the merged phrase
occurrences exactly as `gateway.core.matching.phrase_spans` does (an occurrence
starting at or before the last token of the previous one extends it): it
intersects the positions of each phrase token (`array_positions`, one linear C
pass per token, giving int arrays with O(1) access), shifted by the token's
place in the phrase, then merges the starts. A token longer than
`LONG_TERM_BYTES` bytes of UTF-8 (a hex blob, say) is stored as its first
characters, U+0001 (never a token character) and the SHA-256 of the whole
token: GIN refuses entries above ~2.7 kB, and equal tokens still give equal
stored terms (the query's phrase goes through the same function). Both
engines thus match the same tokens; the tests compare them on generated texts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, NamedTuple

from gateway.core.event_text import TEXT_EVENT_TYPES, event_text
from gateway.core.words import indexable, terms

TITLE_TYPE = "session/title"
LONG_TERM_BYTES = 256
HIGHLIGHT_OPEN = "\ufdd0"
HIGHLIGHT_CLOSE = "\ufdd1"
"""FTS5 `highlight()` markers: `indexable` replaces both, so neither occurs in a text
and counting the open markers counts the merged matches."""


class TextRow(NamedTuple):
    """One `event_texts` row (`terms` only for PostgreSQL: None on SQLite)."""

    session_id: str
    seq: int
    type: str
    time: int
    length: int
    text: str
    terms: list[str] | None


def stored_term(term: str) -> str:
    """A token as the PostgreSQL index stores it (see the module docstring)."""
    if len(term) * 4 <= LONG_TERM_BYTES or len(term.encode("utf-8")) <= LONG_TERM_BYTES:
        return term
    digest = hashlib.sha256(term.encode("utf-8")).hexdigest()
    return term[:32] + "\x01" + digest


def stored_terms(text: str) -> list[str]:
    """The folded unicode61 tokens of an indexable text, in order, as stored.

    `terms` tokenizes in FTS5's query mode: for unicode61 it makes exactly the
    document mode's tokens (the modes differ only for synonym tokenizers)."""
    return [stored_term(t) for t in terms(text)]


def text_row(
    session_id: str, seq: int, etype: str, time: int, data: Any, *, with_terms: bool
) -> TextRow | None:
    """The text row of one event, or None when its text is empty."""
    if etype not in TEXT_EVENT_TYPES:
        return None
    raw = event_text(etype, data)
    if not raw:
        return None
    text = indexable(raw)
    return TextRow(
        session_id, seq, etype, time, len(text), text, stored_terms(text) if with_terms else None
    )


class _EventLike(NamedTuple):
    type: str
    seq: int
    time: int
    data: Any


def text_rows(session_id: str, events: Iterable[Any], *, with_terms: bool) -> list[TextRow]:
    """The text rows of a batch of events (anything with type, seq, time and data)."""
    out: list[TextRow] = []
    for event in events:
        etype = event.type
        if etype in TEXT_EVENT_TYPES:
            row = text_row(
                session_id, event.seq, etype, event.time, event.data, with_terms=with_terms
            )
            if row is not None:
                out.append(row)
    return out


def title_seq(events: Iterable[Any]) -> int | None:
    """The seq of the last `session/title` event of a batch, if any."""
    found = None
    for event in events:
        if event.type == TITLE_TYPE:
            found = event.seq
    return found


# -- DDL (migration 0005) -----------------------------------------------------------

SQLITE_DDL = (
    "CREATE TABLE event_texts ("
    "id INTEGER PRIMARY KEY, "
    "session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE, "
    "seq BIGINT NOT NULL, type TEXT NOT NULL, time BIGINT NOT NULL, "
    "length BIGINT NOT NULL, text TEXT NOT NULL)",
    "CREATE UNIQUE INDEX ux_event_texts_key ON event_texts (session_id, seq)",
    "CREATE VIRTUAL TABLE event_fts USING fts5("
    "text, content='event_texts', content_rowid='id', tokenize='unicode61')",
    "CREATE TRIGGER tr_event_texts_insert AFTER INSERT ON event_texts BEGIN "
    "INSERT INTO event_fts (rowid, text) VALUES (NEW.id, NEW.text); END",
    "CREATE TRIGGER tr_event_texts_delete AFTER DELETE ON event_texts BEGIN "
    "INSERT INTO event_fts (event_fts, rowid, text) VALUES ('delete', OLD.id, OLD.text); END",
    "CREATE TRIGGER tr_event_texts_update AFTER UPDATE OF text ON event_texts BEGIN "
    "INSERT INTO event_fts (event_fts, rowid, text) VALUES ('delete', OLD.id, OLD.text); "
    "INSERT INTO event_fts (rowid, text) VALUES (NEW.id, NEW.text); END",
)
SQLITE_INDEX_TABLES = (
    "event_fts",
    "event_fts_config",
    "event_fts_data",
    "event_fts_docsize",
    "event_fts_idx",
)
"""The FTS5 table and the shadow tables SQLite makes for it (not in `tables.metadata`)."""
SQLITE_DROP = (
    "DROP TRIGGER IF EXISTS tr_event_texts_update",
    "DROP TRIGGER IF EXISTS tr_event_texts_delete",
    "DROP TRIGGER IF EXISTS tr_event_texts_insert",
    "DROP TABLE IF EXISTS event_fts",
    "DROP TABLE IF EXISTS event_texts",
)

PG_PHRASE_COUNT = """
CREATE FUNCTION gateway_phrase_count(terms text[], phrase text[]) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  n integer := cardinality(phrase);
  starts integer[];
  nxt integer[];
  kept integer[];
  m integer;
  j integer;
  k integer;
  s integer;
  found integer := 0;
  last_end integer := 0;
BEGIN
  IF n = 0 THEN
    RETURN 0;
  END IF;
  starts := array_positions(terms, phrase[1]);
  FOR k IN 2 .. n LOOP
    EXIT WHEN cardinality(starts) = 0;
    nxt := array_positions(terms, phrase[k]);
    m := cardinality(nxt);
    kept := '{}';
    j := 1;
    FOREACH s IN ARRAY starts LOOP
      WHILE j <= m AND nxt[j] < s + k - 1 LOOP
        j := j + 1;
      END LOOP;
      IF j <= m AND nxt[j] = s + k - 1 THEN
        kept := kept || s;
      END IF;
    END LOOP;
    starts := kept;
  END LOOP;
  FOREACH s IN ARRAY starts LOOP
    IF s > last_end THEN
      found := found + 1;
    END IF;
    last_end := s + n - 1;
  END LOOP;
  RETURN found;
END $$
"""
PG_DDL = (
    "CREATE TABLE event_texts ("
    "session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE, "
    "seq BIGINT NOT NULL, type TEXT NOT NULL, time BIGINT NOT NULL, "
    "length BIGINT NOT NULL, text TEXT NOT NULL, terms TEXT[] NOT NULL, "
    "CONSTRAINT pk_event_texts PRIMARY KEY (session_id, seq))",
    "CREATE INDEX ix_event_texts_terms ON event_texts USING gin (terms)",
    PG_PHRASE_COUNT,
)
PG_DROP = (
    "DROP TABLE IF EXISTS event_texts",
    "DROP FUNCTION IF EXISTS gateway_phrase_count(text[], text[])",
)
