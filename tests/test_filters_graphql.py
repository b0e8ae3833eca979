"""SPEC §12 over GraphQL and Python: `sessions(filter:)`, `events(filter:)` and
`Session.events(filter:)` walked by their cursors equal `filter_sessions` /
`filter_events`; a cursor is bound to its filter; every bad input is
`SESSION_QUERY_INVALID_FILTER` naming the argument (never a 500); a `text` filter
costs more than its page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import (
    Availability,
    EventFilter,
    SeqRange,
    SessionFilter,
    SessionQuery,
    SessionQueryError,
    SessionStore,
    TimeRange,
    create_app,
)
from gateway.core import ErrorCode, EventSurface, SessionHeader
from gateway.core.filters import MAX_FILTER_VALUES, MAX_TEXT_LENGTH
from gateway.persistence import SqlPersistence
from gateway.server.config import GatewayConfig, Limits
from gateway.server.cost import TEXT_FILTER_COST
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import codes, gql, simple_log

SESSIONS = """query($first: Int, $after: String, $filter: SessionFilter) {
  sessions(first: $first, after: $after, filter: $filter) {
    totalCount edges { cursor node { id live persisted } }
    pageInfo { hasNextPage hasPreviousPage endCursor } } }"""

EVENTS = """query($sid: ID!, $first: Int, $after: String, $filter: EventFilter,
                  $surface: [EventSurface!]) {
  events(sessionId: $sid, first: $first, after: $after, filter: $filter, surface: $surface) {
    totalCount nodes { seq type surface } pageInfo { hasNextPage endCursor } } }"""

NESTED = """query($sid: ID!, $first: Int, $after: String, $filter: EventFilter) {
  session(id: $sid) { events(first: $first, after: $after, filter: $filter) {
    totalCount nodes { seq } pageInfo { hasNextPage endCursor } } } }"""


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqlPersistence]:
    async with sql_backend(tmp_path / "f.db") as backend:
        yield backend


async def corpus(db: SqlPersistence) -> tuple[SessionQuery, Any]:
    for i in range(9):
        header = SessionHeader(f"s{i}", 10 + i % 5, cwd=[None, "/a", "/b"][i % 3],
                               parent_session=None if i < 3 else f"s{i % 3}")  # fmt: skip
        await db.create(header, simple_log(12 + i, t0=100))
    store = SessionStore()
    store.add(SessionHeader("s4", 14, cwd="/a", parent_session="s1"))  # a live twin
    store.create("live", created_at=12, cwd="/a", seed=simple_log(5))
    query = SessionQuery(live=[store], persistence=db)
    return query, create_app(query)


async def walk(app: Any, query: str, field: Any, variables: dict[str, Any], size: int) -> Any:
    """Every page by `endCursor`: the items and the totals the pages gave."""
    items: list[Any] = []
    totals = set()
    after = None
    while True:
        body = await gql(app, query, {**variables, "first": size, "after": after})
        assert "errors" not in body, body
        page = field(body["data"])
        totals.add(page["totalCount"])
        items.extend(page["edges"] if "edges" in page else page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            return items, totals
        after = page["pageInfo"]["endCursor"]


SESSION_FILTERS: list[tuple[dict[str, Any], SessionFilter]] = [
    ({"cwd": ["/a"]}, SessionFilter(cwd=("/a",))),
    ({"cwd": [None, "/b"], "ids": None}, SessionFilter(cwd=(None, "/b"))),
    ({"parent": ["s1", None]}, SessionFilter(parent=("s1", None))),
    ({"createdAt": {"from": 11, "to": 13}}, SessionFilter(created_at=TimeRange(11, 13))),
    ({"availability": ["LIVE"]}, SessionFilter(availability=(Availability.LIVE,))),
    (
        {"availability": ["PERSISTED"], "cwd": ["/a"]},
        SessionFilter(cwd=("/a",), availability=(Availability.PERSISTED,)),
    ),
    ({"ids": ["s2", "s4", "live", "nope"]}, SessionFilter(ids=("s2", "s4", "live", "nope"))),
    ({"ids": []}, SessionFilter(ids=())),
]


@pytest.mark.parametrize(("given", "core"), SESSION_FILTERS, ids=lambda v: repr(v)[:40])
async def test_sessions_filter_walked_by_cursors_equals_filter_sessions(
    db: SqlPersistence, given: dict[str, Any], core: SessionFilter
) -> None:
    query, app = await corpus(db)
    expected = await query.filter_sessions(core)
    items, totals = await walk(app, SESSIONS, lambda d: d["sessions"], {"filter": given}, 2)
    assert [(e["node"]["id"], e["node"]["live"], e["node"]["persisted"]) for e in items] == [
        (r.id, r.live, r.persisted) for r in expected
    ]
    assert totals == {len(expected)}


EVENT_FILTERS: list[tuple[dict[str, Any], EventFilter]] = [
    ({"seq": {"from": 3, "to": 9}}, EventFilter(seq=SeqRange(3, 9))),
    (
        {"time": {"from": 104}, "types": ["user/message", "turn/start"]},
        EventFilter(time=TimeRange(104, None), types=("user/message", "turn/start")),
    ),
    ({"surface": ["LOG_ONLY"]}, EventFilter(surface=(EventSurface.LOG_ONLY,))),
    ({"text": "  M1 "}, EventFilter(text="  M1 ")),
    ({"text": "m1", "seq": {"to": 10}}, EventFilter(text="m1", seq=SeqRange(None, 10))),
    ({"types": []}, EventFilter(types=())),
]


@pytest.mark.parametrize(("given", "core"), EVENT_FILTERS, ids=lambda v: repr(v)[:40])
@pytest.mark.parametrize("sid", ["s8", "live"])
async def test_events_filter_walked_by_cursors_equals_filter_events(
    db: SqlPersistence, given: dict[str, Any], core: EventFilter, sid: str
) -> None:
    query, app = await corpus(db)
    expected = [(r.seq, r.type) for r in await query.filter_events(sid, core)]
    for text, field in (
        (EVENTS, lambda d: d["events"]),
        (NESTED, lambda d: d["session"]["events"]),
    ):
        items, totals = await walk(app, text, field, {"sid": sid, "filter": given}, 2)
        assert [n["seq"] for n in items] == [s for s, _ in expected]
        assert totals == {len(expected)}


async def test_the_surface_argument_and_the_filter_are_anded(db: SqlPersistence) -> None:
    _, app = await corpus(db)
    variables = {"sid": "s8", "surface": ["CURRENT"], "filter": {"types": ["turn/start"]}}
    body = await gql(app, EVENTS, variables)
    assert body["data"]["events"]["nodes"] == []  # turn/start is log-only
    variables["filter"] = {"surface": ["LOG_ONLY", "CURRENT"], "seq": {"to": 4}}
    body = await gql(app, EVENTS, variables)
    assert [n["seq"] for n in body["data"]["events"]["nodes"]] == [1, 2, 4]


# -- cursors are bound to their filter ------------------------------------------------


async def first_cursor(app: Any, query: str, variables: dict[str, Any], field: Any) -> str:
    body = await gql(app, query, {**variables, "first": 1})
    cursor: str = field(body["data"])["pageInfo"]["endCursor"]
    assert cursor
    return cursor


@pytest.mark.parametrize(
    ("made_under", "used_under"),
    [
        ({"cwd": ["/a"]}, {"cwd": ["/b"]}),
        ({"cwd": ["/a"]}, None),
        (None, {"cwd": ["/a"]}),
        ({"createdAt": {"from": 1}}, {"createdAt": {"from": 2}}),
    ],
)
async def test_a_sessions_cursor_made_under_another_filter_is_refused(
    db: SqlPersistence, made_under: Any, used_under: Any
) -> None:
    _, app = await corpus(db)
    cursor = await first_cursor(app, SESSIONS, {"filter": made_under}, lambda d: d["sessions"])
    body = await gql(app, SESSIONS, {"filter": used_under, "after": cursor})
    assert codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["argument"] == "after"
    assert "another filter" in body["errors"][0]["message"]


async def test_a_cursor_is_bound_to_the_normalized_filter(db: SqlPersistence) -> None:
    _, app = await corpus(db)
    made = {"cwd": ["/a", None], "ids": None, "createdAt": {"from": None, "to": None}}
    cursor = await first_cursor(app, SESSIONS, {"filter": made}, lambda d: d["sessions"])
    same = {"cwd": [None, "/a", "/a"]}  # list values as a set, null and open fields left out
    assert "errors" not in await gql(app, SESSIONS, {"filter": same, "after": cursor})
    unfiltered = await first_cursor(app, SESSIONS, {}, lambda d: d["sessions"])
    assert "errors" not in await gql(app, SESSIONS, {"filter": {}, "after": unfiltered})


@pytest.mark.parametrize(
    ("made_under", "used_under"),
    [
        ({"text": "m1"}, {"text": "m2"}),
        ({"types": ["user/message"]}, None),
        (None, {"seq": {"from": 0}}),
    ],
)
async def test_an_events_cursor_made_under_another_filter_is_refused(
    db: SqlPersistence, made_under: Any, used_under: Any
) -> None:
    _, app = await corpus(db)
    field = lambda d: d["events"]  # noqa: E731
    cursor = await first_cursor(app, EVENTS, {"sid": "s8", "filter": made_under}, field)
    body = await gql(app, EVENTS, {"sid": "s8", "filter": used_under, "after": cursor})
    assert codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["argument"] == "after"
    same = await gql(app, EVENTS, {"sid": "s8", "filter": made_under, "after": cursor})
    assert "errors" not in same


# -- bad input: SESSION_QUERY_INVALID_FILTER naming the argument ------------------------

LONG = [f"x{i}" for i in range(MAX_FILTER_VALUES + 1)]

BAD_SESSION_FILTERS = {
    "created_at_from_after_to": ({"createdAt": {"from": 5, "to": 4}}, "filter.createdAt"),
    "too_many_ids": ({"ids": LONG}, "filter.ids"),
    "too_many_cwds": ({"cwd": LONG}, "filter.cwd"),
    "too_many_parents": ({"parent": LONG}, "filter.parent"),
    "nul_in_an_id": ({"ids": ["a\x00b"]}, "filter.ids"),
    "nul_in_a_cwd": ({"cwd": ["/a\x00"]}, "filter.cwd"),
    "nul_in_a_parent": ({"parent": ["\x00"]}, "filter.parent"),
}
BAD_EVENT_FILTERS = {
    "seq_from_after_to": ({"seq": {"from": 3, "to": 2}}, "filter.seq"),
    "time_from_after_to": ({"time": {"from": 3, "to": 2}}, "filter.time"),
    "too_many_types": ({"types": LONG}, "filter.types"),
    "nul_in_a_type": ({"types": ["a\x00"]}, "filter.types"),
    "nul_in_text": ({"text": "a\x00b"}, "filter.text"),
    "empty_text": ({"text": ""}, "filter.text"),
    "text_of_whitespace_only": ({"text": " \u3000\t\ufeff"}, "filter.text"),
    "text_too_long": ({"text": "x" * (MAX_TEXT_LENGTH + 1)}, "filter.text"),
}


def _core_session(given: dict[str, Any]) -> SessionFilter:
    created = given.get("createdAt")
    return SessionFilter(
        ids=None if "ids" not in given else tuple(given["ids"]),
        cwd=None if "cwd" not in given else tuple(given["cwd"]),
        parent=None if "parent" not in given else tuple(given["parent"]),
        created_at=None if created is None else TimeRange(created["from"], created["to"]),
    )


def _core_event(given: dict[str, Any]) -> EventFilter:
    seq, time = given.get("seq"), given.get("time")
    return EventFilter(
        seq=None if seq is None else SeqRange(seq["from"], seq["to"]),
        time=None if time is None else TimeRange(time["from"], time["to"]),
        types=None if "types" not in given else tuple(given["types"]),
        text=given.get("text"),
    )


@pytest.mark.parametrize("rule", BAD_SESSION_FILTERS)
async def test_a_bad_session_filter_is_invalid_filter_over_graphql(
    db: SqlPersistence, rule: str
) -> None:
    given, argument = BAD_SESSION_FILTERS[rule]
    _, app = await corpus(db)
    body = await gql(app, SESSIONS, {"filter": given})
    assert codes(body) == ["SESSION_QUERY_INVALID_FILTER"]
    assert argument in body["errors"][0]["message"]


@pytest.mark.parametrize("rule", BAD_SESSION_FILTERS)
async def test_a_bad_session_filter_is_invalid_filter_in_python(
    db: SqlPersistence, rule: str
) -> None:
    given, argument = BAD_SESSION_FILTERS[rule]
    query, _ = await corpus(db)
    with pytest.raises(SessionQueryError) as info:
        await query.filter_sessions(_core_session(given))
    assert info.value.code is ErrorCode.INVALID_FILTER and argument in str(info.value)


@pytest.mark.parametrize("rule", BAD_EVENT_FILTERS)
@pytest.mark.parametrize("text", [EVENTS, NESTED], ids=["events", "Session.events"])
async def test_a_bad_event_filter_is_invalid_filter_over_graphql(
    db: SqlPersistence, rule: str, text: str
) -> None:
    given, argument = BAD_EVENT_FILTERS[rule]
    _, app = await corpus(db)
    body = await gql(app, text, {"sid": "s8", "filter": given})
    assert codes(body) == ["SESSION_QUERY_INVALID_FILTER"]
    assert argument in body["errors"][0]["message"]


@pytest.mark.parametrize("rule", BAD_EVENT_FILTERS)
async def test_a_bad_event_filter_is_invalid_filter_in_python(
    db: SqlPersistence, rule: str
) -> None:
    given, argument = BAD_EVENT_FILTERS[rule]
    query, _ = await corpus(db)
    with pytest.raises(SessionQueryError) as info:
        await query.filter_events("s8", _core_event(given))
    assert info.value.code is ErrorCode.INVALID_FILTER and argument in str(info.value)


async def test_a_filter_that_is_not_a_filter_value_is_invalid_filter_in_python(
    db: SqlPersistence,
) -> None:
    query, _ = await corpus(db)
    with pytest.raises(SessionQueryError) as info:
        await query.filter_sessions({"cwd": ["/a"]})  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_FILTER


# -- cost --------------------------------------------------------------------------------


async def test_a_text_filter_costs_a_scan_more_than_its_page(db: SqlPersistence) -> None:
    query, _ = await corpus(db)
    page = 'events(sessionId: "s8", first: 5, filter: {FILTER}) { nodes { seq } }'
    plain = "{ " + page.replace("FILTER", 'types: ["user/message"]') + " }"
    texted = "{ " + page.replace("FILTER", 'text: "m1"') + " }"
    by_variable = (
        'query($f: EventFilter) { events(sessionId: "s8", first: 5, filter: $f) { nodes { seq } } }'
    )
    limit = GatewayConfig(limits=Limits(max_cost=6 + TEXT_FILTER_COST - 1))
    app = create_app(query, limit)
    assert "errors" not in await gql(app, plain)
    refused = await gql(app, texted, status=None)
    assert codes(refused) == ["QUERY_TOO_COSTLY"]
    assert f"{6 + TEXT_FILTER_COST:,} objects" in refused["errors"][0]["message"]
    assert codes(await gql(app, by_variable, {"f": {"text": "m1"}}, status=None)) == [
        "QUERY_TOO_COSTLY"
    ]
    assert "errors" not in await gql(app, by_variable, {"f": {"text": None}})
