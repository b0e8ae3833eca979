"""Stored search (SPEC §13) on SQLite and PostgreSQL against an independent model.

For generated corpora (diacritics, CJK, emoji, every JavaScript whitespace,
NUL and U+FDD0, repeated words so match counts tie), `search_events` and
`search_sessions` walked page by page (`after` = the last key) equal the model
of `tests.search_store_model` (tokens from the stdlib SQLite's FTS5, ranking written
from the SPEC), with every filter; SQLite and PostgreSQL answer the same; a
write is searchable as soon as it commits (create, append, import, checkpoint),
and a deleted session is gone from the index.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from gateway import SessionStore
from gateway.core import SessionEvent, SessionHeader
from gateway.core.backend import ScopeFilter, StoredHit, StoredSearch
from gateway.core.filters import EventFilter, SessionFilter
from gateway.core.matching import RankKey, normalize_query, query_terms, text_spans
from gateway.persistence import SqlPersistence, checkpoint, migrate
from tests.search_store_model import (
    QUERIES,
    Fts5Tokens,
    corpora,
    docs_of,
    event_filters,
    model_hits,
    model_sessions,
    session_filters,
)
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

Corpus = list[tuple[SessionHeader, list[SessionEvent]]]
_prefix = itertools.count()


def keys(hits: list[StoredHit]) -> list[tuple[int, int, int, str, int]]:
    return [tuple(h.key) for h in hits]  # type: ignore[misc]


async def walk(db: SqlPersistence, search: StoredSearch, *, sessions: bool) -> list[StoredHit]:
    """Every hit, page after page (each page strictly after the last key of the one before)."""
    read = db.search_sessions if sessions else db.search_events
    out: list[StoredHit] = []
    after: RankKey | None = None
    for _ in range(200):
        page = await read(StoredSearch(**{**search_fields(search), "after": after}))
        assert len(page) <= search.limit
        out.extend(page)
        if len(page) < search.limit:
            return out
        after = page[-1].key
    raise AssertionError("the walk did not end")


def search_fields(search: StoredSearch) -> dict[str, Any]:
    return {name: getattr(search, name) for name in StoredSearch.__dataclass_fields__}


def make_search(query: str, limit: int, **filters: Any) -> StoredSearch:
    q = normalize_query(query)
    return StoredSearch(query_terms(q), q, limit, **filters)


async def write_corpus(db: SqlPersistence, corpus: Corpus, how: str) -> None:
    if how == "import_many":
        outcomes = await db.import_many(corpus)
        assert outcomes == ["created"] * len(corpus)
        return
    for header, events in corpus:
        if how == "create":
            await db.create(header, events)
        elif how == "import":
            assert await db.import_log(header, events) == "created"
        else:  # create empty, then append one event at a time
            await db.create(header)
            for event in events:
                await db.append(header.id, [event])


async def clear(db: SqlPersistence, corpus: Corpus) -> None:
    for header, _ in corpus:
        await db.delete(header.id)


async def check_against_model(db: SqlPersistence, corpus: Corpus, data: st.DataObject) -> None:
    docs = docs_of(corpus)
    tokens = Fts5Tokens([d.text for d in docs])
    for _ in range(3):
        query = data.draw(QUERIES)
        limit = data.draw(st.integers(1, 4))
        sessions = data.draw(session_filters())
        events = data.draw(event_filters())
        ids = [h.id for h, _ in corpus]
        shadowed = tuple(data.draw(st.lists(st.sampled_from(ids), max_size=1)))
        one = data.draw(st.none() | st.sampled_from(ids))
        filters = {"sessions": sessions, "events": events, "shadowed": shadowed}
        want = model_hits(docs, tokens, query, sessions, events, shadowed=shadowed)
        got = await walk(db, make_search(query, limit, **filters), sessions=False)
        assert keys(got) == want, (query, filters)
        got_sessions = await walk(db, make_search(query, limit, **filters), sessions=True)
        assert keys(got_sessions) == model_sessions(want), (query, filters)
        if one is not None:
            want_one = model_hits(docs, tokens, query, sessions, events, one, shadowed)
            got_one = await walk(
                db, make_search(query, limit, session_id=one, **filters), sessions=False
            )
            assert keys(got_one) == want_one
        by_key = {(d.header.id, d.event.seq): d for d in docs}
        for hit in got:
            doc = by_key[(hit.key.session_id, hit.key.seq)]
            assert (hit.text, hit.type) == (doc.text, doc.event.type)
            # the core's own match count over the returned text agrees with the SQL's
            assert len(text_spans(hit.text, query_terms(normalize_query(query)))) == hit.key[0]


def test_property_stored_search_pages_equal_the_model(db_url: str) -> None:
    with asyncio.Runner() as runner:
        runner.run(migrate(db_url))
        db = SqlPersistence(db_url)

        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(
            corpora(), st.sampled_from(["create", "import", "import_many", "appends"]), st.data()
        )
        def check(corpus: Corpus, how: str, data: st.DataObject) -> None:
            async def scenario() -> None:
                try:
                    await write_corpus(db, corpus, how)
                    await check_against_model(db, corpus, data)
                finally:
                    await clear(db, corpus)

            runner.run(scenario())

        try:
            check()
        finally:
            runner.run(db.close())


def test_property_sqlite_and_postgresql_give_the_same_answers(
    tmp_path: Any, postgres_url: str
) -> None:
    urls = [f"sqlite+aiosqlite:///{tmp_path / 'same.db'}", postgres_url]
    with asyncio.Runner() as runner:
        dbs = []
        for url in urls:
            runner.run(migrate(url))
            dbs.append(SqlPersistence(url))

        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(corpora(), QUERIES, st.integers(1, 5), session_filters(), event_filters())
        def check(
            corpus: Corpus,
            query: str,
            limit: int,
            sessions: SessionFilter | None,
            events: EventFilter | None,
        ) -> None:
            async def scenario() -> None:
                answers = []
                for db in dbs:
                    try:
                        await write_corpus(db, corpus, "create")
                        search = make_search(query, limit, sessions=sessions, events=events)
                        answers.append(
                            (
                                await walk(db, search, sessions=False),
                                await walk(db, search, sessions=True),
                            )
                        )
                    finally:
                        await clear(db, corpus)
                assert answers[0] == answers[1]

            runner.run(scenario())

        try:
            check()
        finally:
            for db in dbs:
                runner.run(db.close())


def _message(seq: int, text: str, time: int = 1) -> SessionEvent:
    data = {"content": [{"type": "text", "text": text}]}
    return SessionEvent("user/message", seq, time, data, "append")


async def _found(db: SqlPersistence, query: str) -> list[tuple[str, int]]:
    hits = await db.search_events(make_search(query, 100))
    return [(h.key.session_id, h.key.seq) for h in hits]


async def test_a_write_is_searchable_as_soon_as_it_commits(db: SqlPersistence) -> None:
    await db.create(SessionHeader("c", 1), [_message(0, "zebra one")])
    assert await _found(db, "zebra") == [("c", 0)]
    await db.append("c", [_message(1, "zebra zebra two")])
    assert await _found(db, "zebra") == [("c", 1), ("c", 0)]
    assert await db.import_log(SessionHeader("i", 1), [_message(0, "yak")]) == "created"
    assert await _found(db, "yak") == [("i", 0)]
    assert await db.import_many([(SessionHeader("m", 1), [_message(0, "gnu")])]) == ["created"]
    assert await _found(db, "gnu") == [("m", 0)]
    store = SessionStore()
    live = store.add(SessionHeader("live", 1), [_message(0, "okapi")])
    assert await checkpoint(live, db) == 1
    assert await _found(db, "okapi") == [("live", 0)]
    live.append(
        "user/message",
        {"content": [{"type": "text", "text": "okapi again"}]},
        surface_op="append",
        time=2,
    )
    assert await checkpoint(live, db) == 1
    assert await _found(db, "okapi") == [("live", 0), ("live", 1)]


async def test_replacing_or_deleting_a_session_replaces_or_removes_its_index_rows(
    db: SqlPersistence,
) -> None:
    await db.create(SessionHeader("d", 1), [_message(0, "lemur"), _message(1, "lemur")])
    other = SessionHeader("o", 1)
    await db.create(other, [_message(0, "lemur")])
    assert await db.import_log(SessionHeader("d", 1), [_message(0, "tapir")], replace=True) == (
        "replaced"
    )
    assert await _found(db, "lemur") == [("o", 0)]
    assert await _found(db, "tapir") == [("d", 0)]
    assert await db.delete("d")
    assert await _found(db, "tapir") == []
    async with db.engine.connect() as conn:
        rows = (await conn.execute(text("SELECT session_id, seq FROM event_texts"))).all()
    assert [tuple(r) for r in rows] == [("o", 0)]


async def test_an_event_without_text_has_no_row_and_operators_are_plain_text(
    db: SqlPersistence,
) -> None:
    events = [
        SessionEvent("turn/start", 0, 1, {"turn": 1}),
        _message(1, "   "),
        _message(2, 'say "OR" NEAR (x*) OR'),
        SessionEvent("tool/call", 3, 1, {"name": "grep", "arguments": "-r OR ."}),
    ]
    await db.create(SessionHeader("p", 1), events)
    async with db.engine.connect() as conn:
        rows = (await conn.execute(text("SELECT seq FROM event_texts ORDER BY seq"))).all()
    assert [r[0] for r in rows] == [2, 3]
    assert await _found(db, '"OR" NEAR') == [("p", 2)]
    assert await _found(db, "x*") == [("p", 2)]
    assert sorted(await _found(db, "or")) == [("p", 2), ("p", 3)]
    assert await db.search_events(make_search("...", 5)) == []  # no tokens: nothing


async def test_scope_limits_the_search_to_visible_sessions(db: SqlPersistence) -> None:
    await db.create(SessionHeader("root", 1, cwd="/srv/app"), [_message(0, "heron")])
    await db.create(SessionHeader("kid", 2, parent_session="root"), [_message(0, "heron")])
    await db.create(SessionHeader("else", 3, cwd="/srv/other"), [_message(0, "heron")])
    by_cwd = make_search("heron", 10, where=ScopeFilter(cwd_prefixes=("/srv/app",)))
    assert [h.key.session_id for h in await db.search_events(by_cwd)] == ["root"]
    by_tree = make_search("heron", 10, where=ScopeFilter(tree_seeds=("root",)))
    assert sorted(h.key.session_id for h in await db.search_sessions(by_tree)) == ["kid", "root"]


async def test_pages_walk_through_ties_of_every_key_but_seq(db: SqlPersistence) -> None:
    """Equal matchCount, length and time: session id ascending, then seq descending,
    and no page boundary loses or repeats a hit."""
    for sid in ("b", "a", "é"):
        await db.create(SessionHeader(sid, 1), [_message(i, "tie tie", time=5) for i in range(5)])
    want = [(sid, seq) for sid in ("a", "b", "é") for seq in range(4, -1, -1)]
    for limit in (1, 2, 3, 4):
        got = await walk(db, make_search("tie", limit), sessions=False)
        assert [(h.key.session_id, h.key.seq) for h in got] == want
        best = await walk(db, make_search("tie", limit), sessions=True)
        assert [(h.key.session_id, h.key.seq) for h in best] == [("a", 4), ("b", 4), ("é", 4)]
