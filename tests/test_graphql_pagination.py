"""Relay connections: defaults, the 500 cap, tamper-evident keyset cursors, stable paging."""

from __future__ import annotations

import base64

import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.server.config import GatewayConfig
from tests.test_graphql_helpers import codes, gql, simple_log

PAGE = """query($first: Int, $after: String) { sessions(first: $first, after: $after) {
  totalCount edges { cursor node { id } }
  pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"""


def corpus(n: int) -> tuple[SessionStore, SessionQuery]:
    store = SessionStore()
    for i in range(n):
        # pairs share a createdAt so ties are ordered by id
        store.create(f"s{i:04d}", created_at=1_000 + i // 2)
    return store, SessionQuery(live=[store])


async def test_first_defaults_to_50_and_walks_every_session_once() -> None:
    _, query = corpus(120)
    app = create_app(query)
    first = (await gql(app, PAGE))["data"]["sessions"]
    assert len(first["edges"]) == 50 and first["totalCount"] == 120
    assert first["pageInfo"]["hasNextPage"] and not first["pageInfo"]["hasPreviousPage"]
    seen, after = [], None
    while True:
        page = (await gql(app, PAGE, {"first": 35, "after": after}))["data"]["sessions"]
        seen += [e["node"]["id"] for e in page["edges"]]
        assert page["pageInfo"]["endCursor"] == (
            page["edges"][-1]["cursor"] if page["edges"] else None
        )
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
        assert page["pageInfo"]["startCursor"] == page["edges"][0]["cursor"]
    assert seen == [r.header.id for r in await query.list_sessions()]


@pytest.mark.parametrize("first", [501, 10_000, -1])
async def test_page_size_out_of_range_is_refused(first: int) -> None:
    _, query = corpus(3)
    body = await gql(create_app(query), PAGE, {"first": first})
    assert body["data"] is None
    assert codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["argument"] == "first"
    assert ("at most 500" if first > 0 else "negative") in body["errors"][0]["message"]


async def test_first_500_and_zero_are_allowed() -> None:
    _, query = corpus(3)
    app = create_app(query)
    assert len((await gql(app, PAGE, {"first": 500}))["data"]["sessions"]["edges"]) == 3
    zero = (await gql(app, PAGE, {"first": 0}))["data"]["sessions"]
    assert zero["edges"] == [] and zero["pageInfo"]["hasNextPage"] and zero["totalCount"] == 3


def _tamper(cursor: str) -> str:
    body, mac = cursor.split(".")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    forged = raw.replace(b'"s00', b'"t00')
    assert forged != raw
    return base64.urlsafe_b64encode(forged).rstrip(b"=").decode() + "." + mac


@pytest.mark.parametrize("bad", ["tampered", "garbage", "other-server", "event-cursor"])
async def test_bad_cursors_get_a_clear_error(bad: str) -> None:
    store, query = corpus(10)
    app = create_app(query)
    page = (await gql(app, PAGE, {"first": 7}))["data"]["sessions"]
    cursor = page["edges"][-1]["cursor"]
    if bad == "tampered":
        cursor = _tamper(cursor)
    elif bad == "garbage":
        cursor = "not-a-cursor"
    elif bad == "other-server":
        other = (await gql(create_app(query), PAGE, {"first": 7}))["data"]["sessions"]
        cursor = other["edges"][-1]["cursor"]
    else:
        store.create("e", created_at=1, seed=simple_log(3))
        ev = await gql(app, '{ events(sessionId: "e", first: 1) { pageInfo { endCursor } } }')
        cursor = ev["data"]["events"]["pageInfo"]["endCursor"]
    body = await gql(app, PAGE, {"after": cursor})
    assert body["data"] is None
    assert codes(body) == ["BAD_USER_INPUT"]
    assert "not a valid cursor" in body["errors"][0]["message"]


async def test_a_shared_cursor_secret_makes_cursors_portable() -> None:
    _, query = corpus(10)
    one, two = (
        create_app(query, GatewayConfig(cursor_secret="s3cret")),
        create_app(query, GatewayConfig(cursor_secret="s3cret")),
    )
    cursor = (await gql(one, PAGE, {"first": 4}))["data"]["sessions"]["pageInfo"]["endCursor"]
    page = (await gql(two, PAGE, {"first": 4, "after": cursor}))["data"]["sessions"]
    assert [e["node"]["id"] for e in page["edges"]] == ["s0004", "s0005", "s0002", "s0003"]


async def test_sessions_added_between_pages_neither_skip_nor_repeat() -> None:
    store, query = corpus(20)
    app = create_app(query)
    page1 = (await gql(app, PAGE, {"first": 8}))["data"]["sessions"]
    ids1 = [e["node"]["id"] for e in page1["edges"]]
    store.create("newest", created_at=999_999)  # sorts before the cursor: not on later pages
    store.create("s0008x", created_at=1_004)  # same createdAt as the boundary, id after it
    store.create("oldest", created_at=1)  # sorts after: appears on a later page
    rest, after = [], page1["pageInfo"]["endCursor"]
    while after:
        page = (await gql(app, PAGE, {"first": 8, "after": after}))["data"]["sessions"]
        rest += [e["node"]["id"] for e in page["edges"]]
        after = page["pageInfo"]["endCursor"] if page["pageInfo"]["hasNextPage"] else None
    everything = [r.header.id for r in await query.list_sessions()]
    assert not set(ids1) & set(rest)
    assert ids1 + rest == [i for i in everything if i != "newest"]
    assert "oldest" in rest and "s0008x" in rest
    # a removed boundary session still places the next page correctly
    store.remove(ids1[-1])
    page = await gql(app, PAGE, {"first": 3, "after": page1["pageInfo"]["endCursor"]})
    assert [e["node"]["id"] for e in page["data"]["sessions"]["edges"]] == rest[:3]


EVENTS = """query($after: String, $surface: [EventSurface!]) {
  events(sessionId: "e", first: 4, after: $after, surface: $surface) {
    totalCount nodes { seq surface } pageInfo { hasNextPage hasPreviousPage endCursor } } }"""


async def test_events_page_by_seq_with_and_without_filter_while_the_log_grows() -> None:
    store = SessionStore()
    live = store.create("e", created_at=1, seed=simple_log(10))
    app = create_app(SessionQuery(live=[store]))
    first = (await gql(app, EVENTS))["data"]["events"]
    assert [n["seq"] for n in first["nodes"]] == [0, 1, 2, 3] and first["totalCount"] == 10
    live.append("turn/start", {"turn": 99})  # appended between pages
    second = (await gql(app, EVENTS, {"after": first["pageInfo"]["endCursor"]}))["data"]["events"]
    assert [n["seq"] for n in second["nodes"]] == [4, 5, 6, 7]
    assert second["totalCount"] == 11 and second["pageInfo"]["hasPreviousPage"]
    seqs, after = [], None
    while True:
        page = (await gql(app, EVENTS, {"after": after, "surface": ["CURRENT"]}))["data"]["events"]
        seqs += [n["seq"] for n in page["nodes"]]
        assert {n["surface"] for n in page["nodes"]} <= {"CURRENT"}
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seqs == [s for s in range(11) if s % 3 != 0 and s < 10]


async def test_event_cursor_of_another_session_is_refused() -> None:
    store = SessionStore()
    store.create("e", created_at=1, seed=simple_log(6))
    store.create("f", created_at=2, seed=simple_log(6))
    app = create_app(SessionQuery(live=[store]))
    page = await gql(app, '{ events(sessionId: "f", first: 2) { pageInfo { endCursor } } }')
    cursor = page["data"]["events"]["pageInfo"]["endCursor"]
    body = await gql(app, EVENTS, {"after": cursor})
    assert codes(body) == ["BAD_USER_INPUT"]
    assert "'f'" in body["errors"][0]["message"]
