"""The persisted read path (issue 21): one hop per backend question, one snapshot per
request's reads, failures still PERSISTENCE_FAILED, scoped pages on their indexes.

Real parts: a SQLite file and the run's PostgreSQL, the app over httpx's ASGI
transport. Questions are counted by a `BackendProxy` (the kind `serve` mounts for
metrics), hops by the SQLite reader pool's own counter.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from gateway import SessionQuery, create_app
from gateway.core import ErrorCode, SessionHeader, SessionQueryError
from gateway.core.backend import EventQuery, ScopeFilter
from gateway.observability.backend_proxy import BackendProxy
from gateway.persistence import SqlPersistence
from gateway.persistence.corpus import _FIRST_PAGE, _filter_clause
from gateway.persistence.derived import _SELECT_EXTENTS, _SELECT_SESSIONS_IN
from gateway.persistence.pg_readers import AsyncpgReadConn
from gateway.persistence.readers import SqliteReadConn, SqliteReaders, sqlite_sql
from gateway.persistence.tokens import _SELECT_TOKEN
from gateway.server.config import GatewayConfig
from tests.core_helpers import ev
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)


class Questions(BackendProxy):
    """The backend, each coroutine call counted by name (snapshot views included)."""

    label = "counted"

    def __init__(self, inner: object, calls: Counter[str]) -> None:
        super().__init__(inner, _counting(calls))


def _counting(calls: Counter[str]) -> Callable[[object, str], Callable[..., Any]]:
    def wrap(inner: object, name: str) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return await getattr(inner, name)(*args, **kwargs)

        return call

    return wrap


async def _seed(db: SqlPersistence, n: int = 3, events: int = 30) -> None:
    for i in range(n):
        header = SessionHeader(f"s{i}", 1_000 + i, cwd=f"/w/{i}")
        await db.create(header, [ev(seq, data={"n": seq}) for seq in range(events)])


async def _post(app: Any, query: str) -> dict[str, Any]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.post("/graphql", json={"query": query})
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
async def sqlite_db(tmp_path: Any) -> AsyncIterator[SqlPersistence]:
    db = SqlPersistence(f"sqlite:///{tmp_path / 'reads.db'}")
    await db.ensure_schema()
    try:
        yield db
    finally:
        await db.close()


DOCUMENTS = [
    '{ session(id: "s1") { id header { cwd } } }',
    '{ session(id: "s1") { id events(first: 20) { nodes { seq type surface } '
    "pageInfo { hasNextPage endCursor } } } }",
    "{ sessions(first: 2) { totalCount nodes { id header { cwd } } } }",
]


@pytest.mark.parametrize("document", DOCUMENTS)
async def test_each_backend_question_of_a_request_is_one_hop(
    sqlite_db: SqlPersistence, document: str
) -> None:
    await _seed(sqlite_db)
    calls: Counter[str] = Counter()
    app = create_app(SessionQuery(persistence=Questions(sqlite_db, calls)), GatewayConfig())
    await _post(app, document)  # warm: schema checked, statements compiled
    calls.clear()
    readers = sqlite_db._readers
    assert readers is not None
    before = readers.hops + readers.inline
    body = await _post(app, document)
    assert "errors" not in body, body
    hops = readers.hops + readers.inline - before
    questions = sum(calls.values())
    assert questions >= 1, calls
    assert hops == questions, (hops, calls)


async def test_a_point_question_is_answered_on_the_loop_without_a_hop(
    sqlite_db: SqlPersistence,
) -> None:
    """`session(id)` (a header by id) is a few indexed rows: SQLite answers it on the
    event loop, no reader thread; the answer is the same."""
    await _seed(sqlite_db)
    app = create_app(SessionQuery(persistence=sqlite_db), GatewayConfig())
    document = '{ session(id: "s1") { id header { cwd } } }'
    await _post(app, document)
    readers = sqlite_db._readers
    assert readers is not None
    hops, inline = readers.hops, readers.inline
    body = await _post(app, document)
    assert body == {"data": {"session": {"id": "s1", "header": {"cwd": "/w/1"}}}}
    assert readers.hops == hops, "a point read went to a reader thread"
    assert readers.inline > inline


async def test_a_corpus_count_is_a_point_read_on_the_loop(sqlite_db: SqlPersistence) -> None:
    """`totalCount` of the corpus reads one row (`corpus_stats`), a `cwd:` scope's a few
    (`cwd_stats`): answered on the loop, no reader thread, the counts unchanged."""
    await _seed(sqlite_db, n=5)
    readers = sqlite_db._readers
    assert readers is not None
    await sqlite_db.count_sessions()
    hops, inline = readers.hops, readers.inline
    assert await sqlite_db.count_sessions() == 5
    assert await sqlite_db.count_sessions(ScopeFilter(cwd_prefixes=("/w/1",))) == 1
    assert readers.hops == hops, "a count went to a reader thread"
    assert readers.inline == inline + 2


async def test_an_inline_question_past_its_budget_runs_again_in_a_thread(
    sqlite_db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past INLINE_STEPS SQLite steps the question is interrupted on the loop and run
    again whole in a reader thread: the same rows, one hop, nothing inline counted."""
    from gateway.persistence import readers as module

    await _seed(sqlite_db, n=60, events=1)
    ids = [f"s{i}" for i in range(60)]
    expected = await sqlite_db.load_headers(ids)
    assert len(expected) == 60
    readers = sqlite_db._readers
    assert readers is not None
    monkeypatch.setattr(module, "INLINE_STEPS", 1)
    monkeypatch.setattr(module, "_PROGRESS_EVERY", 1)
    hops, inline = readers.hops, readers.inline
    assert await sqlite_db.load_headers(ids) == expected
    assert (readers.hops - hops, readers.inline - inline) == (1, 0)


async def test_an_interrupted_inline_read_keeps_its_snapshot(
    sqlite_db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inline read interrupted mid-observation leaves the observation's snapshot
    open: the thread's rerun and every later read still see the state of the first
    read (SPEC §7), not a write committed in between."""
    from gateway.persistence import readers as module

    await _seed(sqlite_db, n=2, events=1)
    query = SessionQuery(persistence=sqlite_db)
    obs = query.observe()
    try:
        assert (await obs.persisted_header("s0")).id == "s0"  # inline: opens the snapshot
        await sqlite_db.create(SessionHeader("late", 5_000), [ev(0)])
        monkeypatch.setattr(module, "INLINE_STEPS", 1)
        monkeypatch.setattr(module, "_PROGRESS_EVERY", 1)
        readers = sqlite_db._readers
        assert readers is not None
        hops = readers.hops
        with pytest.raises(SessionQueryError) as caught:
            await obs.persisted_header("late")
        assert caught.value.code is ErrorCode.SESSION_NOT_FOUND
        assert readers.hops > hops  # it was interrupted and moved to a thread
        monkeypatch.setattr(module, "INLINE_STEPS", 20_000)
        monkeypatch.setattr(module, "_PROGRESS_EVERY", 1_000)
        with pytest.raises(SessionQueryError):
            await obs.persisted_header("late")  # inline again, same snapshot
    finally:
        obs.close()
    after = query.observe()
    try:
        assert (await after.persisted_header("late")).id == "late"
    finally:
        after.close()


def test_an_inline_read_does_not_wait_for_a_connection_a_thread_holds(tmp_path: Any) -> None:
    """On the loop a read never blocks on a lock a reader thread holds: the snapshot's
    connection busy in a thread sends the question to a thread too."""
    path = tmp_path / "held.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    from sqlalchemy import literal, select

    from gateway.persistence.readers import SqliteSnapshot

    readers = SqliteReaders(str(path), busy_timeout=1.0, on_connect=())

    async def main() -> None:
        snapshot = SqliteSnapshot(readers)
        try:
            snapshot._lock.acquire()
            task = asyncio.ensure_future(
                snapshot.read(lambda conn: conn.scalar(select(literal(7))), inline=True)
            )
            await asyncio.sleep(0.05)
            assert not task.done()  # queued for the thread, the loop still runs
            snapshot._lock.release()
            assert await task == 7
            assert (readers.hops, readers.inline) == (1, 0)
        finally:
            snapshot.close()
            readers.close()

    asyncio.run(main())


async def test_one_request_reads_one_snapshot(db: SqlPersistence) -> None:
    """A write committed between two reads of one observation is not seen by the
    second; the next observation sees it (SPEC §7), on both engines."""
    await _seed(db, n=1)
    query = SessionQuery(persistence=db)
    obs = query.observe()
    try:
        assert (await obs.persisted_header("s0")).id == "s0"
        await db.create(SessionHeader("late", 5_000), [ev(0)])
        with pytest.raises(SessionQueryError) as caught:
            await obs.persisted_header("late")
        assert caught.value.code is ErrorCode.SESSION_NOT_FOUND
        assert await obs.sessions_total() == 1
    finally:
        obs.close()
    after = query.observe()
    try:
        assert (await after.persisted_header("late")).id == "late"
        assert await after.sessions_total() == 2
    finally:
        after.close()


async def test_a_released_snapshot_leaves_the_reads_consistent_per_question(
    db: SqlPersistence,
) -> None:
    """After `close()`, a leftover read still answers (a question of its own), and the
    snapshot's connection is back: many observations do not exhaust a pool."""
    await _seed(db, n=1)
    query = SessionQuery(persistence=db)
    for _ in range(40):  # more than any pool holds: each observation gives its own back
        obs = query.observe()
        assert (await obs.persisted_header("s0")).id == "s0"
        obs.close()
    obs = query.observe()
    obs.close()
    assert (await obs.persisted_header("s0")).id == "s0"


async def test_a_backend_failure_mid_request_is_persistence_failed_on_sqlite(
    sqlite_db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header reads succeed, the events read fails in the driver: the request's
    answer carries PERSISTENCE_FAILED for the events, and the next request, the
    failing connection dropped, reads normally."""
    await _seed(sqlite_db, n=1)
    app = create_app(SessionQuery(persistence=sqlite_db), GatewayConfig())
    await _post(app, '{ session(id: "s0") { id } }')
    await asyncio.sleep(0.1)  # the request's snapshot goes back to the pool off the loop
    sqlite_db._readers.close()  # type: ignore[union-attr]  # reopen with the authorizer
    opened = SqliteReaders._open

    def deny_events(action: int, table: str | None, *_: Any) -> int:
        return sqlite3.SQLITE_DENY if table == "events" else sqlite3.SQLITE_OK

    def open_denying(self: SqliteReaders) -> sqlite3.Connection:
        conn = opened(self)
        conn.set_authorizer(deny_events)
        return conn

    monkeypatch.setattr(SqliteReaders, "_open", open_denying)
    body = await _post(app, '{ session(id: "s0") { id events(first: 5) { nodes { seq } } } }')
    codes = [e["extensions"]["code"] for e in body.get("errors", [])]
    assert codes and set(codes) == {"SESSION_QUERY_PERSISTENCE_FAILED"}, body
    monkeypatch.setattr(SqliteReaders, "_open", opened)
    sqlite_db._readers.close()  # type: ignore[union-attr]
    body = await _post(app, '{ session(id: "s0") { id events(first: 5) { nodes { seq } } } }')
    assert "errors" not in body, body
    assert [n["seq"] for n in body["data"]["session"]["events"]["nodes"]] == [0, 1, 2, 3, 4]


async def test_a_backend_failure_mid_request_is_persistence_failed_on_postgres(
    postgres_url: str,
) -> None:
    """The snapshot's connection is terminated between two reads of one observation:
    the second read is PERSISTENCE_FAILED, and the next observation reads normally."""
    db = SqlPersistence(postgres_url, auto_migrate=True)
    try:
        await db.ensure_schema()
        await _seed(db, n=2)
        query = SessionQuery(persistence=db)
        obs = query.observe()
        try:
            assert (await obs.persisted_header("s0")).id == "s0"
            async with db.engine.connect() as conn:
                await conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND state LIKE 'idle in transaction%'"
                    )
                )
            with pytest.raises(SessionQueryError) as caught:
                await obs.persisted_header("s1")
            assert caught.value.code is ErrorCode.PERSISTENCE_FAILED
        finally:
            obs.close()
        await asyncio.sleep(0)
        again = query.observe()
        try:
            assert (await again.persisted_header("s1")).id == "s1"
        finally:
            again.close()
    finally:
        await db.close()


def _plan(conn: sqlite3.Connection, statement: Any, params: dict[str, Any]) -> str:
    sql, args = sqlite_sql(statement, params)
    return " | ".join(str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args))


async def test_scoped_pages_and_the_token_lookup_keep_their_indexed_plans(
    sqlite_db: SqlPersistence, tmp_path: Any
) -> None:
    """The SQL the read path sends (compiled by `sqlite_sql`) walks the newest-first
    index for a scoped page and reads the token by its key: no scan of a table."""
    await _seed(sqlite_db, n=3, events=1)
    conn = sqlite3.connect(tmp_path / "reads.db")
    try:
        where = ScopeFilter(cwd_prefixes=("/w",), id_globs=("s*",))
        statement = _FIRST_PAGE.where(_filter_clause(where, "sqlite", paging=True))
        plan = _plan(conn, statement, {"limit": 50})
        assert "ix_sessions_newest_first" in plan, plan
        assert "TEMP B-TREE" not in plan, plan
        plan = _plan(conn, _SELECT_TOKEN, {"tid": "abc"})
        assert "SEARCH access_tokens USING" in plan and "INDEX" in plan, plan
    finally:
        conn.close()


async def test_the_read_path_answers_what_sqlalchemy_answers(sqlite_db: SqlPersistence) -> None:
    """The compiled SQL text with its positional arguments, IN lists expanded, reads the
    same rows as SQLAlchemy's own execution of the statement."""
    await _seed(sqlite_db, n=3, events=2)
    where = ScopeFilter(cwd_prefixes=("/w/1", "/w/2"), ids=("s0",))
    statement = _FIRST_PAGE.where(_filter_clause(where, "sqlite", paging=True))
    async with sqlite_db.engine.connect() as conn:
        expected = [tuple(r) for r in (await conn.execute(statement, {"limit": 10})).all()]
    got = await sqlite_db._read(lambda c: c.rows(statement, {"limit": 10}))
    assert [tuple(r) for r in got] == expected and len(expected) == 3


async def test_expanded_in_lists_read_what_sqlalchemy_reads_whatever_the_lengths(
    sqlite_db: SqlPersistence,
) -> None:
    """The SQL of an IN-list statement is made once per tuple of list lengths and reused
    with other values: each call, in any order of lengths, reads SQLAlchemy's rows."""
    from gateway.persistence.derived import _SELECT_SESSIONS_IN

    await _seed(sqlite_db, n=6, events=1)
    asks = [["s1"], ["s2", "s0"], ["s5"], ["s3", "s4"], ["nope", "s2", "s1"], ["s0"]]
    for ids in asks + asks[::-1]:
        async with sqlite_db.engine.connect() as conn:
            result = await conn.execute(_SELECT_SESSIONS_IN, {"ids": ids})
            expected = sorted(tuple(r) for r in result.all())
        got = await sqlite_db._read(lambda c, ids=ids: c.rows(_SELECT_SESSIONS_IN, {"ids": ids}))
        assert sorted(tuple(r) for r in got) == expected
        assert len(expected) == len([i for i in ids if i != "nope"])
    sql, args = sqlite_sql(_SELECT_SESSIONS_IN, {"ids": ["a", "b"]})
    assert sql.endswith("IN (?, ?)") and args == ["a", "b"]


async def test_a_scoped_page_statement_is_built_once_per_scope(sqlite_db: SqlPersistence) -> None:
    """A token's scope is the same on each of its requests: its page statement is built
    once and reused (then compiled once), and each scope still reads its own rows."""
    from gateway.persistence import corpus

    await _seed(sqlite_db, n=4, events=1)
    one, two = ScopeFilter(cwd_prefixes=("/w/1",)), ScopeFilter(cwd_prefixes=("/w/2", "/w/3"))
    first = corpus._scoped_page(corpus._FIRST_PAGE, one, "sqlite")
    assert corpus._scoped_page(corpus._FIRST_PAGE, one, "sqlite") is first
    assert corpus._scoped_page(corpus._FIRST_PAGE, two, "sqlite") is not first
    for _ in range(2):
        assert [h.id for h in await sqlite_db.headers_page(None, 10, one)] == ["s1"]
        assert [h.id for h in await sqlite_db.headers_page(None, 10, two)] == ["s3", "s2"]


async def test_a_small_page_of_events_is_read_inline_and_a_heavy_one_in_a_thread(
    sqlite_db: SqlPersistence,
) -> None:
    """A page of a few small events is answered on the loop; a page whose stored
    payloads pass INLINE_BYTES is moved whole to a reader thread: the same events
    either way (SQLite's steps do not count the bytes it hands back)."""
    from gateway.persistence.readers import INLINE_BYTES

    big = "x" * (INLINE_BYTES // 8)
    await sqlite_db.create(SessionHeader("light", 1), [ev(s, data={"n": s}) for s in range(30)])
    await sqlite_db.create(SessionHeader("heavy", 2), [ev(s, data={"t": big}) for s in range(30)])
    app = create_app(SessionQuery(persistence=sqlite_db), GatewayConfig())
    readers = sqlite_db._readers
    assert readers is not None
    for sid, payload, threaded in (("light", {"n": 3}, False), ("heavy", {"t": big}, True)):
        document = f'{{ events(sessionId: "{sid}", first: 20) {{ nodes {{ seq data }} }} }}'
        await _post(app, document)
        hops = readers.hops
        body = await _post(app, document)
        nodes = body["data"]["events"]["nodes"]
        assert [n["seq"] for n in nodes] == list(range(20))
        assert nodes[3]["data"] == payload
        assert (readers.hops > hops) is threaded, (sid, readers.hops - hops)


@pytest.mark.parametrize(
    ("selection", "wanted"),
    [
        ("nodes { seq type surface } pageInfo { hasNextPage endCursor }", False),
        ("edges { cursor node { seq time } }", False),
        ("nodes { seq data }", True),
        ("edges { node { ...P } }", True),
        ("nodes { ... on Event { seq data } }", True),
    ],
)
async def test_a_page_reads_payloads_only_when_data_is_selected(
    sqlite_db: SqlPersistence, monkeypatch: pytest.MonkeyPatch, selection: str, wanted: bool
) -> None:
    """`data` is read and decoded only when the selection names it (through fragments
    too); the other fields answer the same either way, on `events` and
    `Session.events` alike."""
    from gateway.persistence.derived import SqlDerivedReads

    await _seed(sqlite_db, n=1, events=30)
    asked: list[bool] = []
    real = SqlDerivedReads.read_events

    async def spying(self: SqlDerivedReads, queries: Any) -> Any:
        asked.extend(q.with_data for q in queries)
        return await real(self, queries)

    monkeypatch.setattr(SqlDerivedReads, "read_events", spying)
    app = create_app(SessionQuery(persistence=sqlite_db), GatewayConfig())
    fragment = " fragment P on Event { seq data }" if "...P" in selection else ""
    for document in (
        f'{{ events(sessionId: "s0", first: 5) {{ {selection} }} }}{fragment}',
        f'{{ session(id: "s0") {{ events(first: 5) {{ {selection} }} }} }}{fragment}',
    ):
        asked.clear()
        body = await _post(app, document)
        assert "errors" not in body, body
        assert asked == [wanted], (document, asked)
        page = body["data"]["events"] if "events" in body["data"] else body["data"]["session"]
        page = page["events"] if "session" in body["data"] else page
        nodes = page.get("nodes") or [edge["node"] for edge in page["edges"]]
        assert len(nodes) == 5
        if wanted:
            assert [n["data"] for n in nodes] == [{"n": s} for s in range(5)]


async def test_each_engine_reads_what_sqlalchemy_reads_through_its_read_conn(
    db: SqlPersistence,
) -> None:
    """On both engines the read path's connection (stdlib `sqlite3` / raw asyncpg, with
    SQL compiled once) reads SQLAlchemy's rows, IN lists and scoped clauses included, on
    first and later uses of a statement."""
    from gateway.persistence.derived import _SELECT_SESSIONS_IN
    from gateway.persistence.pg_readers import AsyncpgReadConn
    from gateway.persistence.readers import SqliteReadConn

    await _seed(db, n=5, events=2)
    where = ScopeFilter(cwd_prefixes=("/w/1", "/w/3"), ids=("s0",))
    page = _FIRST_PAGE.where(_filter_clause(where, db.engine.dialect.name, paging=True))
    kinds: list[type] = []
    for _ in range(3):
        for statement, params in (
            (page, {"limit": 10}),
            (_SELECT_SESSIONS_IN, {"ids": ["s4", "s1", "nope"]}),
            (_SELECT_TOKEN, {"tid": "none"}),
        ):
            async with db.engine.connect() as conn:
                expected = sorted(tuple(r) for r in (await conn.execute(statement, params)).all())

            def read(c: Any, statement: Any = statement, params: Any = params) -> Any:
                kinds.append(type(c))
                return c.rows(statement, params)

            got = sorted(tuple(r) for r in await db._read(read))
            assert got == expected
    assert set(kinds) == {
        AsyncpgReadConn if db.engine.dialect.name == "postgresql" else SqliteReadConn
    }


async def test_a_page_read_in_the_snapshot_that_read_its_session_does_not_read_its_row_again(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An events request reads the session's row once: the page's integrity check takes
    the extent its header read saw in the same snapshot (`ReadConn.memo`), on both
    engines; a page read with no header read before it still reads the row."""
    await _seed(db, n=1)
    seen: list[Any] = []
    for conn_type in (SqliteReadConn, AsyncpgReadConn):
        rows = conn_type.rows

        def counting(self: Any, statement: Any, params: Any = None, _rows: Any = rows) -> Any:
            seen.append(statement)
            return _rows(self, statement, params)

        monkeypatch.setattr(conn_type, "rows", counting)
    app = create_app(SessionQuery(persistence=db), GatewayConfig())
    page = '{ events(sessionId: "s0", first: 5) { nodes { seq surface } } }'
    body = await _post(app, page)
    assert [n["seq"] for n in body["data"]["events"]["nodes"]] == [0, 1, 2, 3, 4], body
    assert seen.count(_SELECT_SESSIONS_IN) == 1
    assert seen.count(_SELECT_EXTENTS) == 0, "the row was read a second time"

    seen.clear()
    snapshot = db.read_snapshot()
    assert snapshot is not None
    try:
        query = EventQuery("s0", 0, 29, 30, limit=5)
        found = await snapshot.backend.read_events([query])
    finally:
        snapshot.close()
    assert [r.event.seq for r in found[query]] == [0, 1, 2, 3, 4]
    assert seen.count(_SELECT_EXTENTS) == 1, "no header read before: the row is read"


async def test_a_transactions_memo_is_not_seen_by_the_next_transaction(
    db: SqlPersistence,
) -> None:
    """`ReadConn.memo` is one transaction's: questions of one snapshot share it; a read
    after the snapshot's release (a new transaction) starts empty, as does a question
    in a transaction of its own."""

    def put(conn: Any) -> int:
        conn.memo["k"] = conn.memo.get("k", 0) + 1
        return int(conn.memo["k"])

    await db.ensure_schema()
    snapshot = db.read_snapshot()
    assert snapshot is not None
    view: Any = snapshot.backend
    try:
        assert [await view._read(put), await view._read(put, inline=True)] == [1, 2]
        view._snapshot.release()  # what SNAPSHOT_IDLE without a read does
        assert await view._read(put) == 1, "a new transaction saw the last one's memo"
    finally:
        snapshot.close()
    assert [await db._read(put), await db._read(put)] == [1, 1]
