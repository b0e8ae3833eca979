"""SPEC §12 filters in the core, on SQLite and PostgreSQL and live stores: every filtered
page walked by keyset equals a brute-force model (the unfiltered full listing, filtered
here by the contract's rules written out in this file), and so do `totalCount`,
`filter_sessions` and `filter_events`.

The same pages are asked of three backends: `SqlPersistence` (every clause pushed
down), the same database seen through `list()`/`load()` only, and through its corpus
and derived reads without `FilterReads` (the core filters what the unfiltered reads
return). Live sessions shadow their stored twins, and `availability` tells them apart.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import SessionQuery, SessionStore
from gateway.core import EventSurface, SessionEvent, SessionHeader
from gateway.core.event_filter import all_matching, and_surface, filtered_page
from gateway.core.event_text import event_text
from gateway.core.filters import (
    Availability,
    EventFilter,
    SeqRange,
    SessionFilter,
    TimeRange,
    check_event_filter,
)
from gateway.core.observation import Observation, corpus_key
from gateway.core.results import EventRecord, SessionRecord
from gateway.persistence import SqlPersistence
from tests.backends import Counting
from tests.test_derived_properties import valid
from tests.test_fold_properties import logs
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)
from tests.test_pushdown import ListOnly, clear

SLOW = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CWDS = [None, "/a", "/b", "/a/x"]


class NoFilterReads:
    """The same backend without `FilterReads`: corpus and derived reads only."""

    def __init__(self, inner: SqlPersistence) -> None:
        for name in (
            "list",
            "load",
            "load_headers",
            "count_sessions",
            "headers_page",
            "load_children",
            "load_ancestry",
            "load_descendancy",
            "load_sessions",
            "read_events",
            "read_events_at",
            "read_surfaces",
            "read_traces",
        ):
            setattr(self, name, getattr(inner, name))


def backends(db: SqlPersistence) -> list[Any]:
    return [db, ListOnly(db), NoFilterReads(db)]


# -- the model: the contract's rules, written out here ----------------------------------


def one_of(value: object, values: tuple[object, ...] | None) -> bool:
    return values is None or value in values


def in_range(value: int, r: TimeRange | SeqRange | None) -> bool:
    if r is None:
        return True
    return (r.from_ is None or r.from_ <= value) and (r.to is None or value <= r.to)


def session_model(f: SessionFilter, rec: SessionRecord) -> bool:
    h = rec.header
    kept = (
        one_of(h.id, f.ids)
        and one_of(h.cwd, f.cwd)
        and one_of(h.parent_session, f.parent)
        and in_range(h.created_at, f.created_at)
    )
    if f.availability is None:
        return kept
    live = Availability.LIVE in f.availability and rec.live
    persisted = Availability.PERSISTED in f.availability and rec.persisted
    return kept and (live or persisted)


JS_WS = "\t\n\x0b\x0c\r \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
JS_WS += "\u2028\u2029\u202f\u205f\u3000\ufeff"
"""JavaScript's `\\s` as SPEC §12 lists it (written out here, not imported)."""

S_ENTRIES = {0x1E9E: 0xDF, 0x1FBC: 0x1FB3, 0x1FCC: 0x1FC3, 0x1FFC: 0x1FF3}
S_ENTRIES.update({b + i: b - 8 + i for b in (0x1F88, 0x1F98, 0x1FA8) for i in range(8)})
"""CaseFolding-14.0.0.txt's status S entries (simple foldings where the full one differs)."""


def fold_model(c: str) -> str:
    """Simple case folding: the C entry (Python's full casefold where it is one code
    point), else the S entry, else the code point itself."""
    if ord(c) in S_ENTRIES:
        return chr(S_ENTRIES[ord(c)])
    full = c.casefold()
    return full if len(full) == 1 else c


def text_model(clause: str, text: str) -> bool:
    """Whether the trimmed clause occurs in the text: both folded, whitespace runs of
    the clause matching one or more JS whitespace characters."""
    clause = clause.strip(JS_WS)
    if not text:
        return False
    folded_clause = "".join(fold_model(c) for c in clause)
    folded_text = "".join(fold_model(c) for c in text)
    ws = "[" + re.escape(JS_WS) + "]"
    pieces = re.split(f"{ws}+", folded_clause)
    pattern = f"{ws}+".join(re.escape(p) for p in pieces)
    return re.search(pattern, folded_text) is not None


def event_model(f: EventFilter, raw: SessionEvent, surface: EventSurface) -> bool:
    kept = (
        in_range(raw.seq, f.seq)
        and in_range(raw.time, f.time)
        and one_of(raw.type, f.types)
        and one_of(surface, f.surface)
    )
    if not kept or f.text is None:
        return kept
    return text_model(f.text, event_text(raw.type, raw.data))


# -- corpora and filters ----------------------------------------------------------------

_ids = itertools.count()


@st.composite
def corpora(draw: Any) -> tuple[list[SessionHeader], list[SessionHeader]]:
    """(persisted headers, live headers): ids shared by both, equal creation times, cwds
    with and without a value, parents inside and outside the corpus."""
    n = draw(st.integers(0, 12))
    ids = [f"s{i:02d}" for i in range(n)]
    headers = []
    for i, sid in enumerate(ids):
        headers.append(
            SessionHeader(
                sid,
                draw(st.integers(1, 5)),
                cwd=draw(st.sampled_from(CWDS)),
                parent_session=draw(st.sampled_from([None, "gone", *ids[:i]])),
            )
        )
    where = [draw(st.sampled_from(["db", "live", "both"])) for _ in headers]
    persisted = [h for h, w in zip(headers, where, strict=True) if w != "live"]
    live = [h for h, w in zip(headers, where, strict=True) if w != "db"]
    return persisted, live


def maybe(strategy: Any) -> Any:
    return st.one_of(st.none(), strategy)


def ranges(kind: Any, lo: int, hi: int) -> Any:
    bound = maybe(st.integers(lo, hi))
    return st.builds(kind, bound, bound).filter(
        lambda r: r.from_ is None or r.to is None or r.from_ <= r.to
    )


def session_filters() -> Any:
    ids = [f"s{i:02d}" for i in range(12)]
    return st.builds(
        SessionFilter,
        ids=maybe(st.lists(st.sampled_from([*ids, "nope"]), max_size=4).map(tuple)),
        cwd=maybe(st.lists(st.sampled_from([*CWDS, "/c"]), max_size=3).map(tuple)),
        created_at=maybe(ranges(TimeRange, 0, 6)),
        parent=maybe(st.lists(st.sampled_from([None, "gone", *ids[:4]]), max_size=3).map(tuple)),
        availability=maybe(st.lists(st.sampled_from(list(Availability)), max_size=2).map(tuple)),
    )


async def build(
    db: SqlPersistence, persisted: list[SessionHeader], live: list[SessionHeader]
) -> SessionStore:
    await clear(db)
    for header in persisted:
        await db.create(header)
    store = SessionStore()
    for header in live:
        store.add(header)
    return store


async def walk_sessions(
    obs: Observation, f: SessionFilter, size: int
) -> tuple[list[SessionRecord], set[int], list[bool]]:
    """Every page of the filtered list: records, totals, and each page's hasPrevious."""
    got: list[SessionRecord] = []
    totals: set[int] = set()
    previous: list[bool] = []
    after = None
    while True:
        page = await obs.filtered_sessions_page(f, after, size)
        totals.add(page.total)
        previous.append(page.has_previous)
        got.extend(page.records)
        if not page.has_next:
            return got, totals, previous
        after = corpus_key(page.records[-1].header)


# -- sessions -----------------------------------------------------------------------------


@SLOW
@given(corpus=corpora(), f=session_filters(), size=st.sampled_from([1, 3]))
async def test_filtered_session_pages_walked_by_keyset_equal_the_filtered_full_listing(
    db: SqlPersistence, corpus: Any, f: SessionFilter, size: int
) -> None:
    persisted, live = corpus
    store = await build(db, persisted, live)
    every = await SessionQuery(live=[store], persistence=ListOnly(db)).list_sessions()
    expected = [r for r in every if session_model(f, r)]
    for backend in backends(db):
        obs = Observation([store], backend)
        got, totals, previous = await walk_sessions(obs, f, size)
        assert got == expected, type(backend).__name__
        assert totals == {len(expected)}
        assert previous[0] is False and all(previous[1:])
        assert await obs.filtered_sessions_total(f) == len(expected)
        query = SessionQuery(live=[store], persistence=backend)
        assert await query.filter_sessions(f) == expected


EVERY_CLAUSE = [
    SessionFilter(ids=("s01", "s03", "nope")),
    SessionFilter(cwd=(None,)),
    SessionFilter(cwd=("/a", None)),
    SessionFilter(cwd=("/a",)),
    SessionFilter(parent=(None,)),
    SessionFilter(parent=("s00", "gone")),
    SessionFilter(created_at=TimeRange(2, None)),
    SessionFilter(created_at=TimeRange(None, 2)),
    SessionFilter(created_at=TimeRange(2, 3), cwd=("/b", None)),
    SessionFilter(availability=(Availability.PERSISTED,), parent=(None, "s00")),
    SessionFilter(ids=()),
    SessionFilter(cwd=()),
]


@pytest.mark.parametrize("f", EVERY_CLAUSE, ids=repr)
async def test_each_session_clause_on_every_backend_equals_the_model(
    db: SqlPersistence, f: SessionFilter
) -> None:
    headers = [
        SessionHeader(f"s{i:02d}", 1 + i % 4, cwd=CWDS[i % 4], parent_session=p)
        for i, p in enumerate([None, "s00", "gone", None, "s00", "s01", None, "s03"])
    ]
    store = await build(db, headers[:6], [headers[0], headers[6], headers[7]])
    every = await SessionQuery(live=[store], persistence=ListOnly(db)).list_sessions()
    expected = [r for r in every if session_model(f, r)]
    assert expected or f in EVERY_CLAUSE[-2:]  # each clause keeps something
    for backend in backends(db):
        got, totals, _ = await walk_sessions(Observation([store], backend), f, 2)
        assert got == expected and totals == {len(expected)}, type(backend).__name__


async def test_a_live_session_shadows_its_stored_twin_and_availability_tells_them_apart(
    db: SqlPersistence,
) -> None:
    await build(db, [SessionHeader("both", 2, cwd="/a"), SessionHeader("db", 1, cwd="/a")], [])
    store = SessionStore()
    store.add(SessionHeader("both", 2, cwd="/a"))
    store.add(SessionHeader("live", 3, cwd="/a"))
    query = SessionQuery(live=[store], persistence=db)

    async def ids(*available: Availability) -> list[tuple[str, bool, bool]]:
        f = SessionFilter(cwd=("/a",), availability=available or None)
        return [(r.id, r.live, r.persisted) for r in await query.filter_sessions(f)]

    assert await ids() == [("live", True, False), ("both", True, True), ("db", False, True)]
    assert await ids(Availability.LIVE) == [("live", True, False), ("both", True, True)]
    assert await ids(Availability.PERSISTED) == [("both", True, True), ("db", False, True)]
    assert await query.filter_sessions(SessionFilter(availability=())) == []


async def test_scope_applies_before_the_filter(db: SqlPersistence) -> None:
    await build(
        db,
        [SessionHeader("a1", 1, cwd="/a"), SessionHeader("b1", 2, cwd="/b")],
        [],
    )
    store = SessionStore()
    store.add(SessionHeader("a2", 3, cwd="/a"))
    store.add(SessionHeader("b2", 4, cwd="/b"))
    scoped = SessionQuery(live=[store], persistence=db).scoped(["cwd:/a"])
    assert [r.id for r in await scoped.filter_sessions(SessionFilter())] == ["a2", "a1"]
    assert await scoped.filter_sessions(SessionFilter(cwd=("/b",))) == []
    assert [r.id for r in await scoped.filter_sessions(SessionFilter(ids=("b1", "a1")))] == ["a1"]
    obs = scoped.observe()
    assert await obs.filtered_sessions_total(SessionFilter(cwd=("/a", "/b"))) == 2


async def test_a_filtered_session_page_asks_the_backend_one_page_and_no_listing(
    db: SqlPersistence,
) -> None:
    headers = [SessionHeader(f"s{i:03d}", i, cwd=f"/c{i % 3}") for i in range(60)]
    await build(db, headers, [])
    store = SessionStore()
    store.add(SessionHeader("live", 30, cwd="/c0"))
    counting = Counting(db)
    f = SessionFilter(cwd=("/c0",), created_at=TimeRange(10, 50))
    obs = Observation([store], counting)
    page = await obs.filtered_sessions_page(f, None, 5, with_total=False)
    assert [r.id for r in page.records] == ["s048", "s045", "s042", "s039", "s036"]
    assert counting.calls["filtered_headers_page"] == 1
    assert not {"list", "load", "headers_page", "read_events"} & set(counting.calls)
    counting.reset()
    assert await obs.filtered_sessions_total(f) == 14  # 13 stored + the live-only one
    assert counting.calls["count_filtered_sessions"] == 1
    assert not {"list", "load", "headers_page"} & set(counting.calls)
    counting.reset()
    live_only = SessionFilter(availability=(Availability.LIVE,))
    page = await Observation([store], counting).filtered_sessions_page(live_only, None, 5)
    assert [r.id for r in page.records] == ["live"] and page.total == 1
    assert not {"filtered_headers_page", "headers_page", "list"} & set(counting.calls)


# -- events -------------------------------------------------------------------------------

ALPHABET = st.sampled_from(
    [*"abcKkßẞσςΣİıéE\u0301中文字😀x", *JS_WS[:6], "\u3000", "\u0085", "\u200b"]  # noqa: RUF001
)
TYPES = ["user/message", "assistant/message", "tool/result", "assistant/chunk", "turn/start"]


def message(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


@st.composite
def texted_logs(draw: Any) -> tuple[list[SessionEvent], list[str]]:
    """A valid log (appends, replacements, log-only events) whose user messages carry
    texts with diacritics, CJK, emoji, case pairs and (non-)whitespace; and the texts."""
    raw = valid(draw(logs(max_size=30)))
    words = draw(st.lists(st.text(ALPHABET, min_size=1, max_size=6), min_size=1, max_size=4))
    out, texts = [], []
    for e in raw:
        data: Any = e.data
        if e.type == "user/message":
            text = " ".join(draw(st.lists(st.sampled_from(words), max_size=4)))
            texts.append(text)
            data = message(text)
        out.append(SessionEvent(e.type, e.seq, draw(st.integers(0, 9)), data, e.surface_op,
                                e.source_event_seqs))  # fmt: skip
    return valid(out), words


def event_filters(words: list[str]) -> Any:
    return st.builds(
        EventFilter,
        seq=maybe(ranges(SeqRange, -1, 32)),
        time=maybe(ranges(TimeRange, 0, 9)),
        types=maybe(st.lists(st.sampled_from(TYPES), max_size=3).map(tuple)),
        surface=maybe(st.lists(st.sampled_from(list(EventSurface)), max_size=2).map(tuple)),
        text=maybe(
            st.sampled_from(words).map(lambda w: w.swapcase())
            | st.sampled_from(words)
            | st.text(ALPHABET, min_size=1, max_size=3)
        ).filter(lambda t: t is None or t.strip(JS_WS) != ""),
    )


async def walk_events(view: Any, f: EventFilter, size: int) -> tuple[list[Any], set[int]]:
    text = check_event_filter(f)
    got: list[Any] = []
    totals: set[int] = set()
    after = None
    first = True
    while True:
        page = await filtered_page(view, after, size, f, text)
        totals.add(await page.total())
        assert page.has_previous is (not first and bool(got))
        first = False
        got.extend((c.event.seq, c.surface) for c in page.items)
        if not page.has_next:
            return got, totals
        after = page.items[-1].event.seq


@SLOW
@given(data=st.data(), log=texted_logs(), size=st.sampled_from([1, 4]))
async def test_filtered_event_pages_walked_by_keyset_equal_the_filtered_full_log(
    db: SqlPersistence, data: Any, log: Any, size: int
) -> None:
    events, words = log
    f = data.draw(event_filters(words))
    sid = f"e{next(_ids)}"
    await db.create(SessionHeader(sid, 1), events)
    store = SessionStore()
    store.add(SessionHeader("live", 1), events)
    reference = await SessionQuery(persistence=ListOnly(db)).list_events(sid)
    expected = [(r.seq, r.surface) for r in reference if event_model(f, events[r.seq], r.surface)]
    for backend in backends(db):
        obs = Observation([], backend)
        got, totals = await walk_events(await obs.view(sid), f, size)
        assert got == expected, type(backend).__name__
        assert totals == {len(expected)}
        records = await SessionQuery(persistence=backend).filter_events(sid, f)
        assert records == [EventRecord(sid, s, events[s].type, events[s].time, c) for s, c in got]
    live_view = await Observation([store], None).view("live")
    assert (await walk_events(live_view, f, size))[0] == expected


EVERY_EVENT_CLAUSE = [
    EventFilter(seq=SeqRange(2, 5)),
    EventFilter(seq=SeqRange(None, 3)),
    EventFilter(time=TimeRange(3, None)),
    EventFilter(time=TimeRange(None, 4)),
    EventFilter(types=("turn/start", "assistant/message")),
    EventFilter(surface=(EventSurface.SHADOWED,)),
    EventFilter(surface=(EventSurface.CURRENT, EventSurface.LOG_ONLY), time=TimeRange(1, 6)),
    EventFilter(text="STRASSE"),
    EventFilter(text="straße"),
    EventFilter(text="hello world"),
    EventFilter(text="Hello\u3000WORLD", types=("user/message",)),
    EventFilter(types=()),
]


@pytest.mark.parametrize("f", EVERY_EVENT_CLAUSE, ids=repr)
async def test_each_event_clause_on_every_backend_and_live_equals_the_model(
    db: SqlPersistence, f: EventFilter
) -> None:
    texts = ["hello   world", "Hello\u3000World", "STRAẞE", "helloworld", "straße x"]
    events = [
        SessionEvent("user/message", 0, 5, message(texts[0]), "append"),
        SessionEvent("turn/start", 1, 1, {}),
        SessionEvent("assistant/message", 2, 2, {"message": message(texts[1])}, "append"),
        SessionEvent("user/message", 3, 7, message(texts[2]), "append"),
        SessionEvent(
            "user/message", 4, 3, message(texts[3]), {"op": "replace", "start": 0, "end": 2}, (0, 2)
        ),
        SessionEvent("user/message", 5, 4, message(texts[4]), "append"),
        SessionEvent("turn/start", 6, 6, {}),
    ]
    sid = f"c{next(_ids)}"
    await db.create(SessionHeader(sid, 1), events)
    store = SessionStore()
    store.add(SessionHeader("live", 1), events)
    reference = await SessionQuery(persistence=ListOnly(db)).list_events(sid)
    expected = [(r.seq, r.surface) for r in reference if event_model(f, events[r.seq], r.surface)]
    # simple folding: ẞ is ß, not "SS", so STRASSE is in none of them
    assert bool(expected) is not (f.types == () or f.text == "STRASSE")
    for backend in backends(db):
        got, totals = await walk_events(await Observation([], backend).view(sid), f, 2)
        assert got == expected and totals == {len(expected)}, type(backend).__name__
    live_view = await Observation([store], None).view("live")
    assert (await walk_events(live_view, f, 2))[0] == expected


async def test_the_surface_argument_and_filter_surface_are_anded(db: SqlPersistence) -> None:
    current, log_only = EventSurface.CURRENT, EventSurface.LOG_ONLY
    f = EventFilter(surface=(current, log_only))
    assert and_surface(f, frozenset({current})).surface == (current,)
    assert and_surface(f, frozenset()).surface == ()
    assert and_surface(None, frozenset({log_only})).surface == (log_only,)
    events = [
        SessionEvent("user/message", 0, 1, message("hi"), "append"),
        SessionEvent("assistant/chunk", 1, 2, {}),
    ]
    await db.create(SessionHeader("s", 1), events)
    view = await Observation([], db).view("s")
    page = await filtered_page(view, None, 10, and_surface(f, frozenset({log_only})), None)
    assert [c.event.seq for c in page.items] == [1] and await page.total() == 1
    assert await all_matching(view, and_surface(f, frozenset()), None) == []


async def test_an_event_filter_page_asks_ranged_reads_not_the_whole_log(
    db: SqlPersistence,
) -> None:
    events = [
        SessionEvent("user/message", s, s, message(f"m{s}"), "append")
        if s % 10 == 0
        else SessionEvent("turn/start", s, s, {})
        for s in range(2_000)
    ]
    await db.create(SessionHeader("big", 1), events)
    counting = Counting(db)
    view = await Observation([], counting).view("big")
    f = EventFilter(types=("user/message",), time=TimeRange(500, None))
    page = await filtered_page(view, None, 3, f, None)
    assert [c.event.seq for c in page.items] == [500, 510, 520] and page.has_next
    assert not {"load", "list", "read_events_at"} & set(counting.calls)
    assert counting.calls["read_events"] <= 2
    assert await page.total() == 150 and counting.calls["count_events"] == 1


@pytest.mark.parametrize("text", ["M1999", "m 19"])
async def test_a_text_page_reads_the_session_in_bounded_chunks(
    db: SqlPersistence, text: str
) -> None:
    events = [SessionEvent("user/message", s, s, message(f"m{s}"), "append") for s in range(2_500)]
    await db.create(SessionHeader("big", 1), events)
    counting = Counting(db)
    view = await Observation([], counting).view("big")
    f = EventFilter(text=text)
    page = await filtered_page(view, None, 5, f, check_event_filter(f))
    want = [1999] if text == "M1999" else []
    assert [c.event.seq for c in page.items] == want
    assert not {"load", "list"} & set(counting.calls)
    assert counting.calls["read_events"] >= 3  # 2,500 events, 1,000 at a time


@pytest.mark.parametrize("cwd", ["/wide", "/narrow"])
async def test_a_cwd_page_is_the_same_whichever_index_the_page_walks(
    db: SqlPersistence, cwd: str
) -> None:
    """SQLite pages a wide cwd by the newest-first index and a narrow one by the cwd
    index (`gateway.persistence.filters._page_cwd`): the same pages either way."""
    headers = [
        SessionHeader(f"s{i:02d}", i % 7, cwd="/narrow" if i % 10 == 3 else "/wide")
        for i in range(40)
    ]
    store = await build(db, headers, [])
    f = SessionFilter(cwd=(cwd,), created_at=TimeRange(1, 5))
    every = await SessionQuery(persistence=ListOnly(db)).list_sessions()
    expected = [r for r in every if session_model(f, r)]
    for size in (1, 2, 5):
        got, totals, _ = await walk_sessions(Observation([store], db), f, size)
        assert got == expected and totals == {len(expected)}
