"""SPEC §13 over GraphQL: `searchSessions` / `searchEvents` answer what the Python API
answers, page by their cursors, refuse every bad input with its code and a message
naming the argument (never a 500), refuse cursors of another query, filter, session
or token, and cost what their `first` can return."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.core import SessionEvent, SessionHeader
from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import TokenStore
from gateway.server.auth import token_authenticator
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import client, codes, gql


def msg(text: str) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def user(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


LONG = " ".join(["lorem"] * 60) + " needle in the haystack " + " ".join(["ipsum"] * 60)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqlPersistence]:
    async with sql_backend(tmp_path / "x.db") as backend:
        yield backend


@pytest.fixture
async def query(db: SqlPersistence) -> SessionQuery:
    """Stored sessions, live ones and a live one shadowing its stored copy."""
    for i, cwd in enumerate(["/srv/app", "/home/me", "/srv/app/sub"]):
        header = SessionHeader(f"p{i}", 10 + i, cwd=cwd)
        events = [
            SessionEvent("assistant/message", 0, 1, msg(f"needle {i} in stored"), "append"),
            SessionEvent("turn/start", 1, 2, {}),
            SessionEvent("user/message", 2, 3, user("needle needle " * (i + 1)), "append"),
        ]
        await db.create(header, events)
    await db.create(SessionHeader("twin", 5, cwd="/srv/app"), [
        SessionEvent("assistant/message", 0, 1, msg("needle stored twin"), "append")])  # fmt: skip
    store = SessionStore()
    for i in range(3):
        live = store.create(f"l{i}", created_at=20 + i, cwd="/srv/app" if i else "/home/me")
        live.append("user/message", user(LONG if i == 1 else f"a needle, live {i}"), "append")
        live.append("tool/call", {"name": "grep", "arguments": "needle\tneedle"}, time=7)
    twin = store.add(SessionHeader("twin", 5, cwd="/srv/app"))
    twin.append("assistant/message", msg("live twin: NEEDLE"), "append", time=9)
    return SessionQuery(live=[store], persistence=db)


@pytest.fixture
def app(query: SessionQuery) -> Any:
    return create_app(query)


SESSIONS = """query($q: String!, $f: SessionFilter, $ef: EventFilter, $first: Int, $after: String) {
  searchSessions(query: $q, filter: $f, eventFilter: $ef, first: $first, after: $after) {
    edges { cursor node { session { id live persisted } bestMatch {
      snippet highlights { start length } matchCount event { sessionId seq type surface data } } } }
    nodes { session { id } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"""

EVENTS = """query($id: ID!, $q: String!, $f: EventFilter, $first: Int, $after: String) {
  searchEvents(sessionId: $id, query: $q, filter: $f, first: $first, after: $after) {
    edges { cursor node { snippet highlights { start length } matchCount event { seq surface } } }
    nodes { matchCount }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"""


async def walk(app: Any, document: str, field: str, **variables: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = None
    while True:
        body = await gql(app, document, {**variables, "after": after})
        assert "errors" not in body, body
        conn = body["data"][field]
        info = conn["pageInfo"]
        assert info["hasPreviousPage"] == (after is not None)
        assert len(conn["nodes"]) == len(conn["edges"])
        if conn["edges"]:
            assert info["startCursor"] == conn["edges"][0]["cursor"]
            assert info["endCursor"] == conn["edges"][-1]["cursor"]
        out.extend(e["node"] for e in conn["edges"])
        if not info["hasNextPage"]:
            return out
        after = info["endCursor"]


def highlights(hit: Any) -> list[dict[str, int]]:
    return [{"start": r.start, "length": r.length} for r in hit.highlights]


async def python_walk(call: Any) -> list[Any]:
    out, after = [], None
    while True:
        page = await call(after)
        out.extend(page.hits)
        if not page.has_next:
            return out
        after = page.next_after


async def test_search_sessions_pages_equal_the_python_answer(app: Any, query: SessionQuery) -> None:
    got = await walk(app, SESSIONS, "searchSessions", q="needle", first=2)
    want = await python_walk(lambda after: query.search_sessions("needle", limit=2, after=after))
    assert [
        (
            n["session"]["id"],
            n["session"]["live"],
            n["session"]["persisted"],
            n["bestMatch"]["event"]["seq"],
            n["bestMatch"]["snippet"],
            n["bestMatch"]["highlights"],
            n["bestMatch"]["matchCount"],
            n["bestMatch"]["event"]["surface"],
            n["bestMatch"]["event"]["data"],
        )
        for n in got
    ] == [
        (
            h.session.id,
            h.session.live,
            h.session.persisted,
            h.best_match.record.seq,
            h.best_match.snippet,
            highlights(h.best_match),
            h.best_match.match_count,
            str(h.best_match.record.surface),
            h.best_match.event.data,
        )
        for h in want
    ]
    assert [n["session"]["id"] for n in got][:1] == ["p2"]  # "needle" six times
    twin = next(n for n in got if n["session"]["id"] == "twin")
    assert twin["bestMatch"]["snippet"] == "live twin: NEEDLE"  # the live log shadows
    body = await gql(app, EVENTS, {"id": "l1", "q": "needle", "f": {"types": ["user/message"]}})
    (long,) = [e["node"] for e in body["data"]["searchEvents"]["edges"]]
    assert long["snippet"].startswith("\u2026") and len(long["snippet"]) <= 240
    (mark,) = long["highlights"]
    assert long["snippet"][mark["start"] : mark["start"] + mark["length"]] == "needle"


async def test_search_events_pages_equal_the_python_answer(app: Any, query: SessionQuery) -> None:
    for sid in ("p1", "l0", "twin"):
        got = await walk(app, EVENTS, "searchEvents", id=sid, q="needle", first=1)
        want = await python_walk(
            lambda after, sid=sid: query.search_events(sid, "needle", limit=1, after=after)
        )
        assert [
            (n["event"]["seq"], n["snippet"], n["highlights"], n["matchCount"]) for n in got
        ] == [(h.record.seq, h.snippet, highlights(h), h.match_count) for h in want]
        assert got


async def test_search_filters_narrow_sessions_and_events(app: Any) -> None:
    got = await walk(
        app,
        SESSIONS,
        "searchSessions",
        q="needle",
        f={"cwd": ["/srv/app"], "availability": ["PERSISTED"]},
        ef={"types": ["user/message", "assistant/message"]},
    )
    assert sorted(n["session"]["id"] for n in got) == ["p0", "twin"]
    got = await walk(app, EVENTS, "searchEvents", id="p0", q="needle", f={"seq": {"to": 1}})
    assert [n["event"]["seq"] for n in got] == [0]


# -- bad input: each its code, naming the argument, never a 500 ----------------------------


async def refused(app: Any, document: str, **variables: Any) -> dict[str, Any]:
    body = await gql(app, document, variables)
    assert body["data"] is None and len(body["errors"]) == 1, body
    error: dict[str, Any] = body["errors"][0]
    assert "Traceback" not in error["message"] and error["extensions"]["code"] != "INTERNAL_ERROR"
    return error


async def test_search_query_longer_than_the_bound_is_invalid_query_naming_query(app: Any) -> None:
    error = await refused(app, SESSIONS, q="n" * 1001)
    assert error["extensions"]["code"] == "SESSION_QUERY_INVALID_QUERY"
    assert error["message"] == "query is 1001 characters long; at most 1000 are allowed"
    assert "errors" not in await gql(app, SESSIONS, {"q": "n" * 1000})


async def test_search_query_holding_nul_is_invalid_query_naming_query(app: Any) -> None:
    for document, extra in ((SESSIONS, {}), (EVENTS, {"id": "p0"})):
        error = await refused(app, document, q="need\x00le", **extra)
        assert error["extensions"]["code"] == "SESSION_QUERY_INVALID_QUERY"
        assert error["message"] == "query holds a NUL character"


async def test_search_empty_query_is_invalid_query_naming_query(app: Any) -> None:
    error = await refused(app, SESSIONS, q=" \t\u3000\ufeff ")
    assert error["extensions"]["code"] == "SESSION_QUERY_INVALID_QUERY"
    assert error["message"] == "query is empty after trimming"


async def test_search_sessions_event_filter_text_is_invalid_filter_naming_event_filter(
    app: Any,
) -> None:
    error = await refused(app, SESSIONS, q="needle", ef={"text": "needle"})
    assert error["extensions"]["code"] == "SESSION_QUERY_INVALID_FILTER"
    assert error["message"].startswith("eventFilter.text is not allowed here")


async def test_search_events_filter_text_is_invalid_filter_naming_filter(app: Any) -> None:
    error = await refused(app, EVENTS, id="p0", q="needle", f={"text": "needle"})
    assert error["extensions"]["code"] == "SESSION_QUERY_INVALID_FILTER"
    assert error["message"].startswith("filter.text is not allowed here")


@pytest.mark.parametrize(
    ("document", "variables", "message"),
    [
        (SESSIONS, {"f": {"createdAt": {"from": 9, "to": 8}}}, "filter.createdAt: from (9)"),
        (SESSIONS, {"ef": {"time": {"from": 9, "to": 8}}}, "eventFilter.time: from (9)"),
        (SESSIONS, {"ef": {"seq": {"from": 2, "to": 1}}}, "eventFilter.seq: from (2)"),
        (EVENTS, {"id": "p0", "f": {"seq": {"from": 2, "to": 1}}}, "filter.seq: from (2)"),
        (EVENTS, {"id": "p0", "f": {"time": {"from": 2, "to": 1}}}, "filter.time: from (2)"),
    ],
)
async def test_search_filter_range_from_greater_than_to_is_invalid_filter_naming_it(
    app: Any, document: str, variables: dict[str, Any], message: str
) -> None:
    error = await refused(app, document, q="needle", **variables)
    assert error["extensions"]["code"] == "SESSION_QUERY_INVALID_FILTER"
    assert error["message"].startswith(message) and "is greater than to" in error["message"]


@pytest.mark.parametrize(
    ("document", "variables", "name"),
    [
        (SESSIONS, {"f": {"ids": ["x"] * 101}}, "filter.ids"),
        (SESSIONS, {"f": {"cwd": ["/x"] * 101}}, "filter.cwd"),
        (SESSIONS, {"ef": {"types": ["t"] * 101}}, "eventFilter.types"),
        (EVENTS, {"id": "p0", "f": {"types": ["t"] * 101}}, "filter.types"),
    ],
)
async def test_search_filter_list_longer_than_the_bound_is_invalid_filter_naming_it(
    app: Any, document: str, variables: dict[str, Any], name: str
) -> None:
    error = await refused(app, document, q="needle", **variables)
    assert error["extensions"]["code"] == "SESSION_QUERY_INVALID_FILTER"
    assert error["message"] == f"{name} lists 101 values; at most 100 are allowed"


@pytest.mark.parametrize("first", [0, -1, 101, 500])
async def test_search_first_outside_1_to_100_is_bad_user_input_naming_first(
    app: Any, first: int
) -> None:
    for document, extra in ((SESSIONS, {}), (EVENTS, {"id": "p0"})):
        error = await refused(app, document, q="needle", first=first, **extra)
        assert error["extensions"] == {"code": "BAD_USER_INPUT", "argument": "first"}
        assert "`first` must be from 1 to 100" in error["message"]


async def test_search_events_of_an_absent_session_is_session_not_found(app: Any) -> None:
    error = await refused(app, EVENTS, id="nowhere", q="needle")
    assert error["extensions"]["code"] == "SESSION_QUERY_SESSION_NOT_FOUND"
    assert "'nowhere'" in error["message"]


async def test_search_defaults_to_twenty_hits(app: Any, query: SessionQuery) -> None:
    store = query.live_stores[0]
    big = store.create("many", created_at=1)
    for i in range(30):
        big.append("user/message", user(f"needle {i}"), "append")
    body = await gql(app, EVENTS, {"id": "many", "q": "needle"})
    assert len(body["data"]["searchEvents"]["nodes"]) == 20
    assert body["data"]["searchEvents"]["pageInfo"]["hasNextPage"] is True


# -- cursors ----------------------------------------------------------------------------------


async def end_cursor(app: Any, document: str, **variables: Any) -> str:
    body = await gql(app, document, {"first": 1, **variables})
    field = "searchSessions" if document is SESSIONS else "searchEvents"
    cursor: str = body["data"][field]["pageInfo"]["endCursor"]
    return cursor


async def assert_cursor_refused(app: Any, document: str, cursor: str, **variables: Any) -> str:
    error = await refused(app, document, first=1, after=cursor, **variables)
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "argument": "after"}
    message: str = error["message"]
    return message


async def test_search_cursor_pages_the_same_search_normalized(app: Any) -> None:
    cursor = await end_cursor(app, SESSIONS, q="needle")
    body = await gql(app, SESSIONS, {"q": "  needle\u3000", "first": 1, "after": cursor})
    assert "errors" not in body and body["data"]["searchSessions"]["pageInfo"]["hasPreviousPage"]


async def test_search_cursor_of_another_query_is_refused(app: Any) -> None:
    cursor = await end_cursor(app, SESSIONS, q="needle")
    message = await assert_cursor_refused(app, SESSIONS, cursor, q="needle in")
    assert "cursor of another search" in message


async def test_search_cursor_of_another_filter_is_refused(app: Any) -> None:
    cursor = await end_cursor(app, SESSIONS, q="needle")
    await assert_cursor_refused(app, SESSIONS, cursor, q="needle", f={"cwd": ["/srv/app"]})
    cursor = await end_cursor(app, SESSIONS, q="needle", f={"cwd": ["/srv/app"]})
    await assert_cursor_refused(app, SESSIONS, cursor, q="needle", f={"cwd": ["/home/me"]})
    await assert_cursor_refused(app, SESSIONS, cursor, q="needle")


async def test_search_cursor_of_another_event_filter_is_refused(app: Any) -> None:
    cursor = await end_cursor(app, SESSIONS, q="needle", ef={"types": ["user/message"]})
    await assert_cursor_refused(app, SESSIONS, cursor, q="needle", ef={"types": ["tool/call"]})
    cursor = await end_cursor(app, EVENTS, id="p2", q="needle", f={"seq": {"from": 0}})
    await assert_cursor_refused(app, EVENTS, cursor, id="p2", q="needle")


async def test_search_events_cursor_of_another_session_is_refused(app: Any) -> None:
    cursor = await end_cursor(app, EVENTS, id="p2", q="needle")
    await assert_cursor_refused(app, EVENTS, cursor, id="p1", q="needle")


async def test_search_cursor_of_another_kind_or_altered_is_refused(app: Any) -> None:
    cursor = await end_cursor(app, EVENTS, id="p2", q="needle")
    message = await assert_cursor_refused(app, SESSIONS, cursor, q="needle")
    assert "not a cursor into a session search" in message
    body, mac = cursor.split(".")
    await assert_cursor_refused(app, EVENTS, f"{body}.{mac[::-1]}", id="p2", q="needle")
    page = await gql(app, "{ sessions(first: 1) { pageInfo { endCursor } } }")
    listing = page["data"]["sessions"]["pageInfo"]["endCursor"]
    await assert_cursor_refused(app, SESSIONS, listing, q="needle")


async def test_search_cursor_issued_to_one_token_is_refused_for_another(
    db: SqlPersistence, query: SessionQuery
) -> None:
    tokens = TokenStore(db, b"k" * 40)
    _, first = await tokens.create("first", ["all"])
    _, second = await tokens.create("second", ["all"])
    app = create_app(query, authenticate=token_authenticator(tokens))

    async def post(token: str, after: str | None) -> dict[str, Any]:
        async with client(app) as c:
            r = await c.post(
                "/graphql",
                json={"query": SESSIONS, "variables": {"q": "needle", "first": 1, "after": after}},
                headers={"Authorization": f"Bearer {token}"},
            )
        body: dict[str, Any] = r.json()
        return body

    cursor = (await post(first, None))["data"]["searchSessions"]["pageInfo"]["endCursor"]
    assert "errors" not in await post(first, cursor)
    error = (await post(second, cursor))["errors"][0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and "another token" in error["message"]


async def test_scoped_search_sees_only_visible_sessions_and_hides_the_rest_as_absent(
    db: SqlPersistence, query: SessionQuery
) -> None:
    tokens = TokenStore(db, b"k" * 40)
    _, secret = await tokens.create("app", ["cwd:/srv/app"])
    app = create_app(query, authenticate=token_authenticator(tokens))

    async def post(document: str, **variables: Any) -> dict[str, Any]:
        async with client(app) as c:
            r = await c.post(
                "/graphql",
                json={"query": document, "variables": variables},
                headers={"Authorization": f"Bearer {secret}"},
            )
        body: dict[str, Any] = r.json()
        return body

    body = await post(SESSIONS, q="needle", first=100)
    ids = sorted(e["node"]["session"]["id"] for e in body["data"]["searchSessions"]["edges"])
    assert ids == ["l1", "l2", "p0", "p2", "twin"]
    hidden = (await post(EVENTS, id="p1", q="needle"))["errors"][0]
    absent = (await post(EVENTS, id="p9", q="needle"))["errors"][0]
    assert hidden["extensions"]["code"] == absent["extensions"]["code"]
    assert hidden["message"].replace("'p1'", "'p9'") == absent["message"]


# -- cost ---------------------------------------------------------------------------------------


async def test_search_page_costs_what_its_first_can_return(app: Any) -> None:
    nested = (
        '{ searchSessions(query: "needle", first: %d) { nodes { session { '
        "events(first: 500) { nodes { seq } } } bestMatch { snippet highlights { start } } } } }"
    )
    assert codes(await gql(app, nested % 100)) == ["QUERY_TOO_COSTLY"]
    assert "errors" not in await gql(app, nested % 10)
    body = await gql(app, '{ searchSessions(query: "needle") { nodes { session { id } } } }')
    assert "errors" not in body
