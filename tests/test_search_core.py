"""SPEC §13 search in the core and the Python API, against the independent model of
`tests.search_model` (SQLite's own FTS5 for tokens and matches; ranking, snippet and
filters transcribed from the SPEC): over live sessions, over stored ones (a SQL
backend, a `list()`/`load()` backend, and a backend with a search index), live
sessions shadowing their persisted copies, scope first, availability."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import (
    Availability,
    EventFilter,
    RankKey,
    SeqRange,
    SessionFilter,
    SessionQuery,
    SessionQueryError,
    SessionStore,
    TimeRange,
)
from gateway.core import EventSurface, SessionEvent, SessionHeader, fold_surface, search
from gateway.core.backend import StoredHit, StoredSearch
from gateway.core.matching import Span, phrase_spans, query_terms, snippet, text_spans
from gateway.persistence import SqlPersistence, migrate
from tests.backends import Scripted
from tests.search_model import (
    SESSION_IDS,
    Corpus,
    Fts5,
    Session,
    corpora,
    event_kept,
    model_hits,
    model_session_ranking,
    model_snippet,
    model_text,
    queries,
    session_kept,
    texts,
    unstorable_replaced,
)
from tests.support.sqlite_backend import sql_backend
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_url_fixture,
    engine_name_fixture,
)

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def msg(text: str) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def live_store(corpus: Corpus) -> SessionStore:
    """The corpus's live sessions, half seeded and half appended one event at a time."""
    store = SessionStore()
    for i, (_, s) in enumerate(sorted(corpus.live.items())):
        if i % 2:
            store.add(s.header, s.events)
            continue
        live = store.add(s.header)
        for e in s.events:
            live.append(e.type, e.data, e.surface_op, e.source_event_seqs, e.time)
    return store


@st.composite
def session_filters(draw: st.DrawFn) -> SessionFilter | None:
    if draw(st.booleans()):
        return None
    some = st.none() | st.just(True)
    lo, hi = sorted([draw(st.integers(0, 4)), draw(st.integers(0, 4))])
    return SessionFilter(
        ids=tuple(draw(st.lists(st.sampled_from(SESSION_IDS), max_size=3))) if draw(some) else None,
        cwd=tuple(draw(st.lists(st.sampled_from([None, "/srv/app", "/home/me"]), max_size=2)))
        if draw(some)
        else None,
        created_at=TimeRange(draw(st.none() | st.just(lo)), draw(st.none() | st.just(hi)))
        if draw(some)
        else None,
        availability=tuple(draw(st.lists(st.sampled_from(list(Availability)), max_size=2)))
        if draw(some)
        else None,
    )


@st.composite
def event_filters(draw: st.DrawFn) -> EventFilter | None:
    if draw(st.booleans()):
        return None
    some = st.none() | st.just(True)
    lo, hi = sorted([draw(st.integers(0, 9)), draw(st.integers(0, 9))])
    tlo, thi = sorted([draw(st.integers(0, 4)), draw(st.integers(0, 4))])
    kinds = ["user/message", "assistant/message", "tool/call", "turn/start"]
    return EventFilter(
        seq=SeqRange(draw(st.none() | st.just(lo)), draw(st.none() | st.just(hi)))
        if draw(some)
        else None,
        time=TimeRange(draw(st.none() | st.just(tlo)), draw(st.none() | st.just(thi)))
        if draw(some)
        else None,
        types=tuple(draw(st.lists(st.sampled_from(kinds), max_size=2))) if draw(some) else None,
        surface=tuple(draw(st.lists(st.sampled_from(list(EventSurface)), max_size=2)))
        if draw(some)
        else None,
    )


def as_model(hit: Any) -> tuple[Any, ...]:
    """An `EventHit` in the model's terms."""
    return (
        hit.session_id,
        hit.record.seq,
        hit.match_count,
        hit.snippet,
        tuple((r.start, r.length) for r in hit.highlights),
        str(hit.record.surface),
    )


def expected(h: Any) -> tuple[Any, ...]:
    return (h.session_id, h.seq, h.match_count, h.snippet, h.highlights, h.surface)


async def walk_sessions(query: Any, text: str, sf: Any, ef: Any, limit: int) -> list[Any]:
    """Every session hit, page after page by `next_after`."""
    out, after = [], None
    while True:
        page = await query.search_sessions(text, sf, ef, limit=limit, after=after)
        assert page.has_previous == (after is not None)
        out.extend(page.hits)
        if not page.has_next:
            assert page.next_after is None
            return out
        assert len(page.hits) == limit
        after = page.next_after
        assert len(out) <= 1000, "paging does not end"


async def walk_events(query: Any, sid: str, text: str, ef: Any, limit: int) -> list[Any]:
    out, after = [], None
    while True:
        page = await query.search_events(sid, text, ef, limit=limit, after=after)
        assert page.has_previous == (after is not None)
        out.extend(page.hits)
        if not page.has_next:
            return out
        assert len(page.hits) == limit
        after = page.next_after
        assert len(out) <= 200, "paging does not end"


async def assert_search_equals_the_model(
    query: Any,
    corpus: Corpus,
    text: str,
    sf: SessionFilter | None,
    ef: EventFilter | None,
    limit: int,
    visible: Callable[[SessionHeader], bool] | None = None,
) -> None:
    hits = model_hits(corpus, text, sf, ef, visible)
    got = await walk_sessions(query, text, sf, ef, limit)
    assert [as_model(h.best_match) for h in got] == [
        expected(h) for h in model_session_ranking(hits)
    ]
    logical = corpus.logical()
    for h in got:
        _, live, persisted = logical[h.session.id]
        assert (h.session.live, h.session.persisted) == (live, persisted)
        assert h.best_match.event.data == next(
            e.data for e in logical[h.session.id][0].events if e.seq == h.best_match.record.seq
        )
    for sid, (s, _, _) in logical.items():
        if visible is not None and not visible(s.header):
            continue
        events = await walk_events(query, sid, text, ef, limit)
        per_session = model_hits(corpus, text, SessionFilter(ids=(sid,)), ef, visible)
        assert [as_model(h) for h in events] == [expected(h) for h in per_session.get(sid, [])]


# -- live sessions ----------------------------------------------------------------------


@SETTINGS
@given(corpora(stored=False), queries(), session_filters(), event_filters(), st.integers(1, 4))
def test_search_over_live_sessions_equals_the_model_across_pages(
    corpus: Corpus, text: str, sf: Any, ef: Any, limit: int
) -> None:
    query = SessionQuery(live=[live_store(corpus)])
    asyncio.run(assert_search_equals_the_model(query, corpus, text, sf, ef, limit))


def test_search_of_a_big_live_log_runs_off_the_event_loop_with_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SessionStore()
    live = store.create("big", created_at=1)
    for i in range(search.INLINE_SCAN_EVENTS + 50):
        live.append("assistant/message", msg(f"alpha beta {i % 7} " * (i % 3 + 1)), "append")
    query = SessionQuery(live=[store])
    threads: list[int] = []
    inner = search._match_logs

    def recorded(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return inner(*args)

    monkeypatch.setattr(search, "_match_logs", recorded)

    async def scenario() -> None:
        page = await query.search_events("big", "alpha beta", limit=5)
        assert threads and threads[-1] != threading.get_ident()
        monkeypatch.setattr(search, "INLINE_SCAN_EVENTS", 10**9)
        again = await query.search_events("big", "alpha beta", limit=5)
        assert threads[-1] == threading.get_ident()
        assert page == again and page.hits[0].match_count == 3

    asyncio.run(scenario())


def test_live_search_reads_the_index_made_at_commit_without_retokenizing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SessionStore()
    live = store.create("s", created_at=1)
    live.append("user/message", {"content": [{"type": "text", "text": "Café  au\tlait"}]}, "append")
    from gateway.core import indexed_text

    def refuse(*args: Any) -> Any:
        raise AssertionError("a live search tokenized an event again")

    monkeypatch.setattr(indexed_text, "tokens", refuse)
    page = asyncio.run(SessionQuery(live=[store]).search_events("s", "cafe AU"))
    assert [(h.snippet, h.highlights) for h in page.hits] == [("Café au lait", ((0, 7),))]


def test_a_live_append_is_searchable_the_moment_it_is_committed() -> None:
    store = SessionStore()
    live = store.create("s", created_at=1)
    query = SessionQuery(live=[store])

    async def scenario() -> None:
        assert (await query.search_sessions("econnrefused")).hits == ()
        live.append("tool/call", {"name": "curl", "arguments": "ECONNREFUSED 127.0.0.1"})
        (hit,) = (await query.search_sessions("econnrefused")).hits
        assert (hit.session.id, hit.best_match.record.seq, hit.best_match.snippet) == (
            "s",
            0,
            "curl ECONNREFUSED 127.0.0.1",
        )

    asyncio.run(scenario())


def test_a_query_without_tokens_matches_nothing() -> None:
    store = SessionStore()
    store.create("s", created_at=1).append("user/message", {"content": [{"type": "text",
                                            "text": "-- , ** ()"}]}, "append")  # fmt: skip
    query = SessionQuery(live=[store])
    for text in ["--", "*", '""', "( )", "\u3000,"]:
        assert asyncio.run(query.search_sessions(text)).hits == ()
        assert asyncio.run(query.search_events("s", text)).hits == ()


# -- stored sessions --------------------------------------------------------------------

_examples = itertools.count()


async def write_stored(db: Any, corpus: Corpus) -> None:
    for s in corpus.stored.values():
        await db.create(s.header, s.events)


async def clear_stored(db: Any, corpus: Corpus) -> None:
    for sid in corpus.stored:
        await db.delete(sid)


def test_search_over_live_and_sql_stored_sessions_equals_the_model(db_url: str) -> None:
    """Live sessions, SQL-stored ones and both (the live log is searched): the backend's
    index when it has one, else its logs loaded and matched by the core."""
    with asyncio.Runner() as runner:
        runner.run(migrate(db_url))
        db = SqlPersistence(db_url)
        examples = 40 if db_url.startswith("sqlite") else 15

        @settings(SETTINGS, max_examples=examples)
        @given(corpora(), queries(), session_filters(), event_filters(), st.integers(1, 3))
        def check(corpus: Corpus, text: str, sf: Any, ef: Any, limit: int) -> None:
            async def scenario() -> None:
                await write_stored(db, corpus)
                try:
                    query = SessionQuery(live=[live_store(corpus)], persistence=db)
                    await assert_search_equals_the_model(query, corpus, text, sf, ef, limit)
                finally:
                    await clear_stored(db, corpus)

            runner.run(scenario())

        try:
            check()
        finally:
            runner.run(db.close())


def scripted(corpus: Corpus) -> Scripted:
    return Scripted(
        [s.header for s in corpus.stored.values()],
        {sid: (s.header, s.events) for sid, s in corpus.stored.items()},
    )


@SETTINGS
@given(corpora(), queries(), session_filters(), event_filters(), st.integers(1, 3))
def test_search_through_a_list_and_load_backend_equals_the_model(
    corpus: Corpus, text: str, sf: Any, ef: Any, limit: int
) -> None:
    query = SessionQuery(live=[live_store(corpus)], persistence=scripted(corpus))
    asyncio.run(assert_search_equals_the_model(query, corpus, text, sf, ef, limit))


class IndexedBackend(Scripted):
    """A `list()`/`load()` backend with `SearchReads` answered by brute force over SQLite's
    FTS5 (the model): the core's merge of live hits with a backend's ranked page,
    `limit + 1`, `after` and `shadowed` are tested before the SQL index exists."""

    def __init__(self, corpus: Corpus) -> None:
        plain = scripted(corpus)
        super().__init__(plain.listed, plain.logs)
        self.corpus = Corpus(stored=corpus.stored)
        self.searches: list[StoredSearch] = []

    def _ranked(self, search: StoredSearch) -> list[Any]:
        self.searches.append(search)
        where = search.where
        stored = {
            sid: s
            for sid, s in self.corpus.stored.items()
            if sid not in search.shadowed
            and (search.session_id is None or sid == search.session_id)
            and (
                where is None
                or any(
                    s.header.cwd is not None
                    and (s.header.cwd == p or s.header.cwd.startswith(p + "/"))
                    for p in where.cwd_prefixes
                )
            )
            and session_kept(search.sessions, s.header, False, True)
        }
        hits = model_hits(Corpus(stored=stored), search.query, None, search.events)
        return [h for per in hits.values() for h in per]

    def _stored_hit(self, h: Any) -> StoredHit:
        s = self.corpus.stored[h.session_id]
        e = s.events[h.seq]
        text = unstorable_replaced(model_text(e.type, e.data))
        return StoredHit(
            RankKey(h.match_count, len(text), e.time, h.session_id, h.seq), e.type, text
        )

    def _page(self, hits: list[Any], search: StoredSearch) -> list[StoredHit]:
        keyed = sorted((self._stored_hit(h) for h in hits), key=lambda x: x.key.order())
        if search.after is not None:
            keyed = [x for x in keyed if x.key.order() > search.after.order()]
        return keyed[: search.limit]

    async def search_events(self, search: StoredSearch) -> list[StoredHit]:
        return self._page(self._ranked(search), search)

    async def search_sessions(self, search: StoredSearch) -> list[StoredHit]:
        best: dict[str, Any] = {}
        for h in self._ranked(search):
            if h.session_id not in best or h.order < best[h.session_id].order:
                best[h.session_id] = h
        return self._page(list(best.values()), search)


@SETTINGS
@given(corpora(), queries(), session_filters(), event_filters(), st.integers(1, 3))
def test_search_merges_live_hits_with_a_search_index_backend_like_the_model(
    corpus: Corpus, text: str, sf: Any, ef: Any, limit: int
) -> None:
    backend = IndexedBackend(corpus)
    query = SessionQuery(live=[live_store(corpus)], persistence=backend)
    asyncio.run(assert_search_equals_the_model(query, corpus, text, sf, ef, limit))
    for s in backend.searches:  # stored sessions went to the index, live ids left out of it
        assert s.limit == limit + 1
        assert (
            s.session_id in corpus.stored if s.session_id else set(s.shadowed) == set(corpus.live)
        )
        assert s.sessions is None or s.sessions.availability is None


# -- the overlay, scope, availability ---------------------------------------------------


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqlPersistence]:
    async with sql_backend(tmp_path / "x.db") as backend:
        yield backend


HEADER = SessionHeader("twin", 5, cwd="/srv/app")


async def test_a_live_session_shadows_its_persisted_copy_and_unregistering_reveals_it(
    db: SqlPersistence,
) -> None:
    await db.create(
        HEADER, [SessionEvent("assistant/message", 0, 1, msg("stored alpha"), "append")]
    )
    store = SessionStore()
    store.add(HEADER).append("assistant/message", msg("live beta"), "append", time=2)
    query = SessionQuery(live=[store], persistence=db)
    assert (await query.search_sessions("alpha")).hits == ()
    assert (await query.search_events("twin", "alpha")).hits == ()
    (hit,) = (await query.search_sessions("beta")).hits
    assert (hit.session.live, hit.session.persisted, hit.best_match.snippet) == (
        True,
        True,
        "live beta",
    )
    query.unregister_live(store)
    assert (await query.search_sessions("beta")).hits == ()
    (hit,) = (await query.search_sessions("alpha")).hits
    assert (hit.session.live, hit.session.persisted, hit.best_match.snippet) == (
        False,
        True,
        "stored alpha",
    )


async def test_a_live_session_whose_stored_header_differs_is_a_source_conflict(
    db: SqlPersistence,
) -> None:
    await db.create(HEADER)
    store = SessionStore()
    store.add(SessionHeader("twin", 6, cwd="/srv/app")).append(
        "assistant/message", msg("alpha"), "append"
    )
    with pytest.raises(SessionQueryError) as err:
        await SessionQuery(live=[store], persistence=db).search_sessions("alpha")
    assert err.value.code.value == "SESSION_QUERY_SOURCE_CONFLICT"


def mixed() -> Corpus:
    corpus = Corpus()
    for i, (sid, cwd) in enumerate([("p1", "/srv/app"), ("p2", "/home/me"), ("b1", "/srv/app")]):
        events = [SessionEvent("assistant/message", 0, i, msg(f"alpha {sid}"), "append")]
        corpus.stored[sid] = Session(SessionHeader(sid, 1 + i, cwd=cwd), events)
    for i, (sid, cwd) in enumerate([("l1", "/srv/app/x"), ("l2", "/home/me"), ("b1", "/srv/app")]):
        events = [SessionEvent("user/message", 0, i, {"content": [{"type": "text",
                  "text": f"alpha alpha {sid}"}]}, "append")]  # fmt: skip
        header = corpus.stored["b1"].header if sid == "b1" else SessionHeader(sid, 10 + i, cwd=cwd)
        corpus.live[sid] = Session(header, events)
    return corpus


@pytest.mark.parametrize("backend", ["sql", "list-load", "indexed"])
async def test_scope_applies_first_and_an_invisible_id_is_not_found_like_an_absent_one(
    db: SqlPersistence, backend: str
) -> None:
    corpus = mixed()
    if backend == "sql":
        await write_stored(db, corpus)
        persistence: Any = db
    else:
        persistence = scripted(corpus) if backend == "list-load" else IndexedBackend(corpus)
    query = SessionQuery(live=[live_store(corpus)], persistence=persistence)
    scoped = query.scoped(["cwd:/srv/app"])
    visible = lambda h: h.cwd is not None and (h.cwd + "/").startswith("/srv/app/")  # noqa: E731
    await assert_search_equals_the_model(scoped, corpus, "alpha", None, None, 2, visible)
    got = {h.session.id for h in (await scoped.search_sessions("alpha")).hits}
    assert got == {"p1", "b1", "l1"}
    for sid in ("p2", "l2", "nowhere"):
        with pytest.raises(SessionQueryError) as err:
            await scoped.search_events(sid, "alpha")
        assert err.value.code.value == "SESSION_QUERY_SESSION_NOT_FOUND"
        assert err.value.message == f"session {sid!r} was not found: " + (
            "it is in no live store and not in persistence"
        )


@pytest.mark.parametrize("backend", ["sql", "list-load", "indexed"])
async def test_availability_keeps_sessions_live_now_or_in_the_backend_now(
    db: SqlPersistence, backend: str
) -> None:
    corpus = mixed()
    if backend == "sql":
        await write_stored(db, corpus)
        persistence: Any = db
    else:
        persistence = scripted(corpus) if backend == "list-load" else IndexedBackend(corpus)
    query = SessionQuery(live=[live_store(corpus)], persistence=persistence)

    async def ids(*wanted: Availability) -> set[str]:
        page = await query.search_sessions("alpha", SessionFilter(availability=wanted))
        return {h.session.id for h in page.hits}

    assert await ids(Availability.LIVE) == {"l1", "l2", "b1"}
    assert await ids(Availability.PERSISTED) == {"p1", "p2", "b1"}
    assert await ids(Availability.LIVE, Availability.PERSISTED) == {"p1", "p2", "b1", "l1", "l2"}
    assert await ids() == set()
    (hit,) = [h for h in (await query.search_sessions("alpha")).hits if h.session.id == "b1"]
    assert hit.best_match.snippet == "alpha alpha b1"  # the live log, not the stored one


# -- the Python API's arguments -----------------------------------------------------------


def live_query() -> SessionQuery:
    store = SessionStore()
    store.create("s", created_at=1).append("assistant/message", msg("alpha"), "append")
    return SessionQuery(live=[store])


@pytest.mark.parametrize("limit", [0, 101, -1, True, 2.0, "5"])
async def test_python_limit_must_be_an_integer_from_1_to_100(limit: Any) -> None:
    with pytest.raises(ValueError, match="limit must be an integer from 1 to 100"):
        await live_query().search_sessions("alpha", limit=limit)
    with pytest.raises(ValueError, match="limit"):
        await live_query().search_events("s", "alpha", limit=limit)


async def test_python_after_must_be_a_key_of_a_previous_page() -> None:
    with pytest.raises(TypeError, match="RankKey"):
        await live_query().search_sessions("alpha", after=(1, 2, 3, "s", 0))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "code", "names"),
    [
        (lambda q: q.search_sessions("a\x00"), "INVALID_QUERY", "text holds a NUL"),
        (lambda q: q.search_sessions(" \u3000 "), "INVALID_QUERY", "text is empty"),
        (lambda q: q.search_sessions("a" * 1001), "INVALID_QUERY", "text is 1001 characters"),
        (
            lambda q: q.search_sessions("a", event_filter=EventFilter(text="a")),
            "INVALID_FILTER",
            "event_filter.text is not allowed",
        ),
        (
            lambda q: q.search_events("s", "a", EventFilter(text="a")),
            "INVALID_FILTER",
            "event_filter.text is not allowed",
        ),
        (
            lambda q: q.search_sessions("a", SessionFilter(created_at=TimeRange(3, 2))),
            "INVALID_FILTER",
            "session_filter.createdAt: from (3) is greater than to (2)",
        ),
        (
            lambda q: q.search_events("s", "a", EventFilter(seq=SeqRange(3, 2))),
            "INVALID_FILTER",
            "event_filter.seq: from (3)",
        ),
        (
            lambda q: q.search_sessions("a", SessionFilter(ids=("x",) * 101)),
            "INVALID_FILTER",
            "session_filter.ids lists 101 values",
        ),
        (lambda q: q.search_events("nope", "a"), "SESSION_NOT_FOUND", "session 'nope'"),
    ],
)
async def test_python_bad_input_is_its_code_naming_the_argument(
    call: Any, code: str, names: str
) -> None:
    with pytest.raises(SessionQueryError) as err:
        await call(live_query())
    assert err.value.code.value == f"SESSION_QUERY_{code}"
    assert names in err.value.message


# -- the contract's own pieces against the model ------------------------------------------


@settings(max_examples=300, deadline=None)
@given(texts(), queries())
def test_matching_and_snippet_of_the_core_equal_sqlite_fts5_and_the_spec(
    text: str, query: str
) -> None:
    clean = unstorable_replaced(text)
    fts = Fts5({1: clean})
    try:
        spans = fts.matches(query).get(1, [])
    finally:
        fts.close()
    phrase = query_terms(" ".join(query.split()))
    assert [tuple(s) for s in text_spans(clean, phrase)] == spans
    if spans:
        shown, ranges = snippet(clean, [Span(s, e) for s, e in spans])
        assert (shown, [tuple(r) for r in ranges]) == model_snippet(clean, spans)
        assert len(shown) <= 240


def test_snippet_window_rules_of_the_spec_on_long_texts() -> None:
    """Matches at the start, around the 80-code-point lead, in the middle and near the
    end of a 499-code-point text (whose clean text is itself)."""
    base = ("x " * 250).strip()
    for at in (0, 78, 80, 82, 300, 480, 496, 498):
        text = base[:at] + "A" + base[at + 1 :]
        shown, ranges = snippet(text, [Span(at, at + 1)])
        assert (shown, [tuple(r) for r in ranges]) == model_snippet(text, [(at, at + 1)])
        assert len(shown) == 240 and shown[ranges[0][0]] == "A"
        assert shown.startswith("\u2026") == (at > 80)
        assert shown.endswith("\u2026") == (max(0, at - 80) + 239 - (at > 80) < len(text))


def test_model_is_independent_of_event_text_for_the_generated_shapes() -> None:
    """The model's §13 table agrees with the contract's extraction on the shapes it writes
    (so the search properties compare search, not two readings of the table)."""
    from gateway.core.event_text import event_text

    @settings(max_examples=200, deadline=None)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        from tests.search_model import logs

        for e in data.draw(logs()):
            assert model_text(e.type, e.data) == event_text(e.type, e.data)
        fold_surface(data.draw(logs()))  # the generator writes valid logs

    check()


def test_event_kept_model_sanity() -> None:
    e = SessionEvent("user/message", 3, 7, {}, "append")
    assert event_kept(EventFilter(seq=SeqRange(3, 3), types=("user/message",)), e, "CURRENT")
    assert not event_kept(EventFilter(surface=(EventSurface.SHADOWED,)), e, "CURRENT")


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_live_index_made_at_commit_equals_the_text_and_words_of_each_event(
    data: st.DataObject,
) -> None:
    from gateway.core.event_text import event_text
    from gateway.core.words import indexable, words
    from tests.search_model import logs

    events = data.draw(logs())
    store = SessionStore()
    live = store.create("s", created_at=1)
    for e in events:
        live.append(e.type, e.data, e.surface_op, e.source_event_seqs, e.time)
    for e, indexed in zip(events, live.indexed_texts(len(events)), strict=True):
        text = event_text(e.type, e.data)
        if not text:
            assert indexed is None
            continue
        assert indexed is not None and indexed.text == indexable(text)
        assert indexed.words() == words(text) and len(indexed.text) == len(text)
        for size in (1, 2, 3):
            for start in range(len(indexed.terms)):
                phrase = indexed.terms[start : start + size]
                assert indexed.match_count(phrase) == len(phrase_spans(words(text), phrase))


def test_search_on_the_real_artifacts_finds_words_known_to_be_in_them() -> None:
    """Each of the 120 real dsh artifacts, live: a word of its first text is found in it."""
    import re

    from gateway.core.event_text import event_text
    from gateway.dsh_jsonl import read_artifact
    from tests.conftest import DATA_DIR

    store = SessionStore()
    known: dict[str, tuple[str, int]] = {}
    for path in sorted((DATA_DIR / "dsh-jsonl").glob("*.jsonl")):
        artifact = read_artifact(path)
        store.add(artifact.header, artifact.events)
        for e in artifact.events:
            found = re.findall(r"[A-Za-z]{6,}", event_text(e.type, e.data))
            if found:
                known[artifact.header.id] = (max(found, key=len), e.seq)
                break
    assert len(known) >= 100
    query = SessionQuery(live=[store])

    async def scenario() -> None:
        for sid, (word, seq) in known.items():
            hits = await walk_events(query, sid, word.upper(), None, 100)
            assert seq in {h.record.seq for h in hits}, (sid, word)
            assert all(word.lower() in h.snippet.lower() for h in hits[:1])
            ids = {h.session.id for h in await walk_sessions(query, word, None, None, 100)}
            assert sid in ids

    asyncio.run(scenario())
