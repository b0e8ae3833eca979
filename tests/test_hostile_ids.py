"""Ids that cannot exist, and the text policy, the same on SQLite and PostgreSQL (issue 9).

An id with NUL, with a lone surrogate, or longer than `MAX_ID_LENGTH` is
SESSION_QUERY_SESSION_NOT_FOUND on every entry point, without asking the
backend (so nobody can trigger persistence alerts with one); writers refuse
such ids and header or type text on both engines alike.
"""

from __future__ import annotations

import json

import httpx
import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.core import ErrorCode, SessionEvent, SessionHeader, SessionQueryError
from gateway.core.ids import MAX_ID_LENGTH, can_exist, id_problem
from gateway.persistence import SqlPersistence
from gateway.persistence.errors import InvalidEventError, UnknownSessionError
from tests.backends import Broken
from tests.test_graphql_helpers import codes
from tests.test_persistence_fixtures import db_fixture, db_url_fixture, engine_name_fixture

__all__ = ["db_fixture", "db_url_fixture", "engine_name_fixture"]

IMPOSSIBLE = {
    "nul": "a\x00b",
    "surrogate": "a\ud800b",
    "low-surrogate": "\udfff",
    "too-long": "x" * (MAX_ID_LENGTH + 1),
}
ENTRY_POINTS = [
    "query($id: ID!) { session(id: $id) { id } }",
    "query($id: ID!) { events(sessionId: $id) { totalCount } }",
    "query($id: ID!) { event(sessionId: $id, seq: 0) { seq } }",
    "query($id: ID!) { readEvent(sessionId: $id, seq: 0) { startSeq } }",
    "query($id: ID!) { traceSession(sessionId: $id) { complete } }",
    "query($id: ID!) { traceEvent(sessionId: $id, seq: 0) { derivedEventSeqs } }",
]


async def ask(app: object, query: str, session_id: str) -> httpx.Response:
    body = json.dumps({"query": query, "variables": {"id": session_id}})  # escapes surrogates
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        return await c.post("/graphql", content=body, headers={"Content-Type": "application/json"})


def test_the_rule_for_ids() -> None:
    for name, value in IMPOSSIBLE.items():
        assert not can_exist(value), name
    assert can_exist("x" * MAX_ID_LENGTH) and can_exist("a\u2028b 😀") and can_exist("é")
    assert id_problem("") == "is not a non-empty string"
    assert "NUL" in (id_problem("\x00") or "") and "U+D800" in (id_problem("\ud800") or "")


@pytest.mark.parametrize("kind", sorted(IMPOSSIBLE))
async def test_an_impossible_id_is_session_not_found_everywhere(
    db: SqlPersistence, kind: str
) -> None:
    await db.create(SessionHeader("real", 1), [SessionEvent("turn/start", 0, 1, {})])
    app = create_app(SessionQuery(persistence=db))
    for query in ENTRY_POINTS:
        r = await ask(app, query, IMPOSSIBLE[kind])
        assert r.status_code == 200, r.text
        assert codes(r.json()) == ["SESSION_QUERY_SESSION_NOT_FOUND"], (query, r.text[:300])
        assert len(r.content) < 2_000  # an over-long id is not echoed back whole
        assert "SELECT" not in r.text and "asyncpg" not in r.text


@pytest.mark.parametrize("kind", sorted(IMPOSSIBLE))
async def test_an_impossible_id_never_reaches_the_backend(kind: str) -> None:
    broken = Broken(OSError("would page the on-call"))
    query = SessionQuery(persistence=broken)
    for call in (
        query.list_events(IMPOSSIBLE[kind]),
        query.read_event(IMPOSSIBLE[kind], 0),
        query.trace_event(IMPOSSIBLE[kind], 0),
    ):
        with pytest.raises(SessionQueryError) as info:
            await call
        assert info.value.code is ErrorCode.SESSION_NOT_FOUND
    assert broken.calls == 0


@pytest.mark.parametrize("kind", ["nul", "surrogate", "too-long"])
async def test_writers_refuse_an_impossible_id_on_both_engines(
    db: SqlPersistence, kind: str
) -> None:
    with pytest.raises(InvalidEventError, match="session id"):
        await db.create(SessionHeader(IMPOSSIBLE[kind], 1))
    with pytest.raises(UnknownSessionError):
        await db.append(IMPOSSIBLE[kind], [SessionEvent("turn/start", 0, 1, {})])
    assert await db.list() == []


@pytest.mark.parametrize("field", ["cwd", "parent_session", "origin", "agent_preset"])
@pytest.mark.parametrize("bad", ["a\x00b", "a\udc80b"])
async def test_writers_refuse_header_text_outside_the_policy(
    db: SqlPersistence, field: str, bad: str
) -> None:
    with pytest.raises(InvalidEventError, match=field):
        await db.create(SessionHeader("h", 1, **{field: bad}))
    assert await db.list() == []


@pytest.mark.parametrize("bad", ["turn\x00start", "turn/\ud800"])
async def test_writers_refuse_an_event_type_outside_the_policy(
    db: SqlPersistence, bad: str
) -> None:
    with pytest.raises(InvalidEventError, match="type"):
        await db.create(SessionHeader("t", 1), [SessionEvent(bad, 0, 1, {})])
    await db.create(SessionHeader("t", 1))
    with pytest.raises(InvalidEventError, match="type"):
        await db.append("t", [SessionEvent(bad, 0, 1, {})])
    assert await db.count("t") == 0


async def test_payloads_keep_nul_and_lone_surrogates_on_both_engines(db: SqlPersistence) -> None:
    data = {"nul": "a\x00b", "lone": "x\ud800y", "k\udfff": [1]}
    await db.create(SessionHeader("p", 1), [SessionEvent("note", 0, 1, data)])
    _, events = await db.load("p")
    assert events[0].data == data


def test_live_stores_refuse_an_impossible_id() -> None:
    store = SessionStore()
    for value in IMPOSSIBLE.values():
        with pytest.raises(ValueError, match="session id"):
            store.create(value, created_at=1)
    assert store.list() == []
