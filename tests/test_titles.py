"""Titles (SPEC §14): a session's title is its last `session/title` event, or none.

Checked live, stored on SQLite and PostgreSQL (the log-reading fallback and a
backend with `TitleReads`), through the Python API and GraphQL, against a model
that reads the log as a Python list: the last event of type `session/title`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import SessionQuery, SessionStore, create_app
from gateway.core import SessionEvent, SessionHeader, SessionQueryError
from gateway.core.backend import capabilities_of
from gateway.core.titles import SessionTitle, TitleSource, title_of
from gateway.persistence import SqlPersistence
from tests.backends import Broken, Counting, persist
from tests.test_graphql_helpers import gql
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

TITLE = "session/title"


def title_data(title: Any = "Fix the parser", seqs: Any = (1,), **source: Any) -> dict[str, Any]:
    return {"title": title, "messageSeqs": list(seqs), "source": {"kind": "fallback", **source}}


def user(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def log_with(titles: Sequence[Any], t0: int = 1_000) -> list[SessionEvent]:
    """A valid log: a user message, then for each entry a title event (its data) and
    a bookkeeping event after it."""
    events = [SessionEvent("user/message", 0, t0, user("hello"), "append")]
    for data in titles:
        events.append(SessionEvent(TITLE, len(events), t0 + len(events), data))
        events.append(SessionEvent("turn/start", len(events), t0 + len(events), {"turn": 1}))
    return events


def model_title(events: Sequence[SessionEvent]) -> SessionTitle | None:
    """The brute-force model: scan the list for the last title event, read it by hand."""
    last = [e for e in events if e.type == TITLE]
    if not last:
        return None
    e = last[-1]
    d = e.data
    if not isinstance(d, dict) or not isinstance(d.get("title"), str):
        return None
    seqs, src = d.get("messageSeqs"), d.get("source")
    if not isinstance(seqs, list) or not all(type(s) is int and 0 <= s < 2**31 for s in seqs):
        return None
    if not isinstance(src, dict) or src.get("kind") not in ("fallback", "provider", "user"):
        return None
    provider, model = src.get("provider"), src.get("model")
    if any(v is not None and not isinstance(v, str) for v in (provider, model)):
        return None
    kind = {"fallback": TitleSource.FALLBACK, "provider": TitleSource.PROVIDER}.get(
        src["kind"], TitleSource.USER
    )
    return SessionTitle(d["title"], kind, provider, model, tuple(seqs), e.seq, e.time)


class WithTitles:
    """A real SqlPersistence plus `TitleReads`, answered by reading each log (the writer's
    stored `title_seq` is another task's): what matters here is that the core asks it
    once per page and believes its answer."""

    def __init__(self, inner: SqlPersistence) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def list(self) -> list[SessionHeader]:
        return await self._inner.list()

    async def load(self, session_id: str) -> tuple[SessionHeader, list[SessionEvent]]:
        return await self._inner.load(session_id)

    async def load_titles(self, session_ids: Sequence[str]) -> dict[str, SessionEvent]:
        out = {}
        for sid in session_ids:
            try:
                _, events = await self._inner.load(sid)
            except KeyError:
                continue
            found = [e for e in events if e.type == TITLE]
            if found:
                out[sid] = found[-1]
        return out


# -- the rule of one event ---------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        None,
        "a title",
        {"messageSeqs": [1], "source": {"kind": "user"}},  # no title
        title_data(title=7),
        title_data(seqs=("1",)),
        title_data(seqs=(-1,)),
        title_data(seqs=(True,)),
        title_data(seqs=(2**31,)),
        {"title": "t", "messageSeqs": [1]},  # no source
        {"title": "t", "messageSeqs": [1], "source": {"kind": "model"}},
        {"title": "t", "messageSeqs": [1], "source": "user"},
        {"title": "t", "source": {"kind": "user"}},  # no messageSeqs
        title_data(provider=3),
        title_data(model=["m"]),
    ],
)
def test_a_malformed_title_event_sets_no_title(data: Any) -> None:
    assert title_of(SessionEvent(TITLE, 3, 10, data)) is None


def test_a_well_formed_title_event_reads_every_field() -> None:
    data = {
        "title": "Rename the flag",
        "messageSeqs": [1, 4],
        "source": {"kind": "provider", "provider": "acme", "model": "m-1"},
        "extra": "ignored",
    }
    got = title_of(SessionEvent(TITLE, 9, 1234, data))
    assert got == SessionTitle(
        "Rename the flag", TitleSource.PROVIDER, "acme", "m-1", (1, 4), 9, 1234
    )


# -- live sessions ---------------------------------------------------------------------------


async def test_live_title_is_the_last_title_event_and_a_malformed_last_one_is_none() -> None:
    store = SessionStore()
    s = store.create("s", created_at=1)
    query = SessionQuery(live=[store])
    assert await query.session_title("s") is None
    s.append("user/message", user("hi"), surface_op="append")
    s.append(TITLE, title_data("First"), time=50)
    assert (await query.session_title("s")).title == "First"
    s.append(TITLE, title_data("Second", seqs=(0,), kind="user"), time=60)
    got = await query.session_title("s")
    assert (got.title, got.source_kind, got.event_seq, got.updated_at) == (
        "Second",
        TitleSource.USER,
        2,
        60,
    )
    s.append(TITLE, {"title": None}, time=70)  # the last one is malformed: no title at all
    assert await query.session_title("s") is None
    assert await query.session_title("s") == model_title(s.events())


async def test_live_title_is_as_of_the_observation_while_appends_go_on() -> None:
    store = SessionStore()
    s = store.create("s", created_at=1)
    s.append(TITLE, title_data("Before"))
    query = SessionQuery(live=[store])
    obs = query.observe()
    try:
        await obs.view("s")  # the observation's moment
        s.append(TITLE, title_data("After"))
        assert (await obs.title("s")).title == "Before"
    finally:
        obs.close()
    assert (await query.session_title("s")).title == "After"


async def test_live_title_never_touches_persistence() -> None:
    store = SessionStore()
    store.create("s", created_at=1).append(TITLE, title_data("Live"))
    broken = Broken()
    app = create_app(SessionQuery(live=[store], persistence=broken))
    body = await gql(app, '{ session(id: "s") { title { title sourceKind eventSeq } } }')
    assert body == {
        "data": {"session": {"title": {"title": "Live", "sourceKind": "FALLBACK", "eventSeq": 0}}}
    }
    assert broken.calls == 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(
                title_data,
                st.text(max_size=8),
                st.lists(st.integers(0, 5), max_size=3),
                kind=st.sampled_from(["fallback", "provider", "user"]),
            ),
            st.sampled_from([None, {"title": 1}, title_data(seqs=("x",))]),
        ),
        max_size=6,
    )
)
def test_live_title_equals_the_last_event_model(titles: list[Any]) -> None:
    import asyncio

    store = SessionStore()
    s = store.add(SessionHeader("s", 1), log_with(titles))
    got = asyncio.run(SessionQuery(live=[store]).session_title("s"))
    assert got == model_title(s.events())


async def test_the_title_of_an_absent_or_invisible_session_is_session_not_found() -> None:
    store = SessionStore()
    store.create("hidden", created_at=1, cwd="/b").append(TITLE, title_data())
    query = SessionQuery(live=[store])
    for q, sid in ((query, "absent"), (query.scoped(["cwd:/a"]), "hidden")):
        with pytest.raises(SessionQueryError) as err:
            await q.session_title(sid)
        assert err.value.code.value == "SESSION_QUERY_SESSION_NOT_FOUND"


# -- stored sessions (SQLite and PostgreSQL) -----------------------------------------------------

STORED = {
    "none": [],
    "one": [title_data("Only one")],
    "two": [title_data("Old"), title_data("New", (0,), kind="provider", provider="acme")],
    "bad-last": [title_data("Good"), {"title": "t", "messageSeqs": [0], "source": {}}],
}


async def _stored_corpus(db: Any) -> dict[str, list[SessionEvent]]:
    logs = {}
    for i, (sid, titles) in enumerate(STORED.items()):
        logs[sid] = log_with(titles, t0=10_000 * (i + 1))
        await persist(db, SessionHeader(sid, 100 + i), logs[sid])
    return logs


TITLE_QUERY = """{ sessions(first: 100) { nodes { id title {
    title sourceKind provider messageSeqs eventSeq updatedAt } } } }"""


def graphql_title(title: SessionTitle | None) -> dict[str, Any] | None:
    if title is None:
        return None
    return {
        "title": title.title,
        "sourceKind": title.source_kind.name,
        "provider": title.provider,
        "messageSeqs": list(title.message_seqs),
        "eventSeq": title.event_seq,
        "updatedAt": title.updated_at,
    }


@pytest.mark.parametrize("with_title_reads", [False, True], ids=["log-fallback", "title-reads"])
async def test_stored_titles_equal_the_log_model_on_both_engines(
    db: SqlPersistence, with_title_reads: bool
) -> None:
    logs = await _stored_corpus(db)
    backend = WithTitles(db) if with_title_reads else db
    query = SessionQuery(persistence=backend)
    for sid, events in logs.items():
        assert await query.session_title(sid) == model_title(events), sid
    body = await gql(create_app(query), TITLE_QUERY)
    got = {n["id"]: n["title"] for n in body["data"]["sessions"]["nodes"]}
    assert got == {sid: graphql_title(model_title(events)) for sid, events in logs.items()}
    assert got["two"]["sourceKind"] == "PROVIDER" and got["two"]["provider"] == "acme"
    assert got["bad-last"] is None and got["none"] is None


async def test_a_page_of_titles_costs_one_backend_call(db: SqlPersistence) -> None:
    for i in range(100):
        await persist(db, SessionHeader(f"s{i:03d}", i), log_with([title_data(f"T{i}")]))
    counting = Counting(WithTitles(db))
    assert capabilities_of(counting).titles is not None  # seen as TitleReads
    app = create_app(SessionQuery(persistence=counting))
    body = await gql(app, "{ sessions(first: 100) { nodes { id title { title } } } }")
    nodes = body["data"]["sessions"]["nodes"]
    assert {n["id"]: n["title"]["title"] for n in nodes} == {
        f"s{i:03d}": f"T{i}" for i in range(100)
    }
    assert counting.calls["load_titles"] == 1
    assert counting.calls["load"] == 0 and counting.calls["read_events"] == 0


async def test_the_live_copy_shadows_the_stored_title(db: SqlPersistence) -> None:
    await persist(db, SessionHeader("s", 1), log_with([title_data("Stored")]))
    store = SessionStore()
    store.add(SessionHeader("s", 1), log_with([title_data("Stored"), title_data("Live now")]))
    counting = Counting(WithTitles(db))
    query = SessionQuery(live=[store], persistence=counting)
    body = await gql(create_app(query), TITLE_QUERY)
    assert [n["title"]["title"] for n in body["data"]["sessions"]["nodes"]] == ["Live now"]
    assert counting.calls["load_titles"] == 0
