"""Retryable snapshots on PostgreSQL (`gateway.persistence.pg_readers.PgSnapshot`,
`retryable=True`): a query's reads run outside any transaction, each checked against
the first one's snapshot, and a query that a commit landed in the middle of is run
again in one strict snapshot (`gateway.server.pipeline.OperationPipeline.execute`).
Against the real server: its own `pg_current_snapshot()` is the model of "the same
committed state"."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.util import await_

from gateway import SessionQuery, create_app
from gateway.core import SessionHeader
from gateway.observability.metrics import GatewayMetrics
from gateway.persistence import SqlPersistence, migrate
from gateway.persistence.pg_readers import PgReaders, SnapshotMoved, watched
from gateway.persistence.tokens import TokenStore
from gateway.server.auth import token_authenticator
from tests.test_pg_readers import ended_in_their_tasks

pytestmark = pytest.mark.postgres

RETRIED = "graphql_retried_observations_total"
KEY = b"k" * 32


def _dsn(url: str) -> str:
    return url.replace("+asyncpg", "")


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[SqlPersistence]:
    await migrate(postgres_url)
    found = SqlPersistence(postgres_url, connect_timeout=2, statement_timeout=5)
    await found.create(SessionHeader("s1", 1, cwd="/a"))
    await found.create(SessionHeader("s2", 2, cwd="/b"))
    try:
        yield found
    finally:
        await found.close()


@pytest.fixture
async def raw(postgres_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(_dsn(postgres_url))
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS probe (n int)")
        yield conn
    finally:
        await conn.close()


def _moved(exc: BaseException | None) -> bool:
    """Whether `SnapshotMoved` is `exc` or what it was raised from (the backend's read
    may wrap it)."""
    while exc is not None:
        if isinstance(exc, SnapshotMoved):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


async def test_watched_keeps_the_order_and_tells_the_snapshot_of_an_empty_answer(
    raw: asyncpg.Connection,
) -> None:
    statements = [
        "SELECT g, -g AS g, 'x' AS hit FROM generate_series(1, 300) AS g ORDER BY 1 DESC",
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 40) "
        "SELECT n, n % 7 AS m FROM t ORDER BY n % 7, n DESC",
        "SELECT g FROM generate_series(1, 300) AS g ORDER BY md5(g::text) LIMIT 17",
    ]
    for sql in statements:
        plain = [tuple(r) for r in await raw.fetch(sql)]
        forms = watched(sql)
        assert forms is not None
        for form, skip in zip(forms, (1, 2), strict=True):
            rows = await raw.fetch(form)
            assert [tuple(r[skip:]) for r in rows] == plain, (form, sql)
            assert len({r[0] for r in rows}) == 1
        assert all(r[1] is True for r in await raw.fetch(forms[1]))
    assert watched("SHOW jit") is None
    forms = watched("SELECT 1 AS one WHERE false")
    assert forms is not None
    assert await raw.fetch(forms[0]) == []  # no row to carry the snapshot: the second form
    empty = await raw.fetch(forms[1])
    assert len(empty) == 1 and empty[0][1] is None and empty[0][0].count(":") == 2


async def test_two_statements_see_the_same_snapshot_until_a_commit_lands_between(
    raw: asyncpg.Connection, postgres_url: str
) -> None:
    """The premise of `Watch`: equal snapshot texts mean no transaction ended between the
    statements; a commit between them changes the text."""
    writer = await asyncpg.connect(_dsn(postgres_url))
    try:
        sql = (watched("SELECT count(*) FROM probe") or ("",))[0]
        first = (await raw.fetch(sql))[0][0]
        assert (await raw.fetch(sql))[0][0] == first
        await writer.execute("INSERT INTO probe VALUES (1)")
        assert (await raw.fetch(sql))[0][0] != first
    finally:
        await writer.close()


async def test_a_retryable_read_holds_no_transaction(db: SqlPersistence) -> None:
    """One read of a retryable snapshot: its connection is back outside any transaction
    as soon as it answered (no BEGIN, no ROLLBACK), and the snapshot has not moved."""
    readers: Any = db._pg_readers
    snapshot = db.read_snapshot(retryable=True)
    assert snapshot is not None and snapshot.moved is not None
    view: Any = snapshot.backend
    assert set(await view.load_headers(["s1", "s2"])) == {"s1", "s2"}
    assert readers._idle and not any(c.is_in_transaction() for c in readers._idle)
    assert not readers._tasks  # nothing left to end
    assert set(await view.load_headers(["s1"])) == {"s1"}
    assert not snapshot.moved()
    snapshot.close()


async def test_a_commit_between_two_reads_of_a_retryable_snapshot_moves_it(
    db: SqlPersistence,
) -> None:
    snapshot = db.read_snapshot(retryable=True)
    assert snapshot is not None and snapshot.moved is not None
    view: Any = snapshot.backend
    assert set(await view.load_headers(["s1", "s3"])) == {"s1"}
    await db.create(SessionHeader("s3", 3, cwd="/c"))
    with pytest.raises(Exception) as caught:
        await view.load_headers(["s1", "s3"])
    assert _moved(caught.value)
    assert snapshot.moved()
    snapshot.close()
    strict = db.read_snapshot()
    assert strict is not None and strict.moved is None
    assert set(await strict.backend.load_headers(["s1", "s3"])) == {"s1", "s3"}
    strict.close()


async def test_a_question_a_commit_lands_in_runs_again_in_a_transaction(
    db: SqlPersistence, raw: asyncpg.Connection, postgres_url: str
) -> None:
    """`PgReaders.read`: a question's statements checked against its first; when a commit
    came between two, the question again, in one REPEATABLE READ transaction, whose
    statements all see one state."""
    readers: Any = db._pg_readers
    writer = await asyncpg.connect(_dsn(postgres_url))
    runs: list[bool] = []

    def question(conn: Any) -> tuple[int, int]:
        runs.append(conn._conn.is_in_transaction())
        first = conn.scalar(text("SELECT count(*) FROM probe"))
        if len(runs) == 1:
            await_(writer.execute("INSERT INTO probe VALUES (1)"))
        return first, conn.scalar(text("SELECT count(*) FROM probe"))

    try:
        assert await readers.read(question) == (1, 1)
        assert runs == [False, True]
        runs.clear()
        runs.append(False)  # no write this time: one run, outside a transaction
        assert await readers.read(question) == (1, 1)
        assert runs == [False, False]
    finally:
        await writer.close()


def _counting_writes(monkeypatch: pytest.MonkeyPatch, db: SqlPersistence) -> dict[str, int]:
    """After the first read of the first request, another session is committed."""
    original = PgReaders.run
    state = {"reads": 0}

    async def run(self: PgReaders, fn: Any, conn: Any, memo: Any = None, watch: Any = None) -> Any:
        found = await original(self, fn, conn, memo, watch)
        state["reads"] += 1
        if state["reads"] == 1:
            await db.create(SessionHeader("s3", 3, cwd="/c"))
        return found

    monkeypatch.setattr(PgReaders, "run", run)
    return state


QUERY = '{ one: session(id: "s3") { id } sessions(first: 10) { nodes { id } } }'


async def _post(app: Any, query: str, token: str | None = None) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.post("/graphql", json={"query": query}, headers=headers)
    body: dict[str, Any] = response.json()
    return body


def _consistent_after_the_write(body: dict[str, Any]) -> None:
    assert "errors" not in body, body
    assert body["data"]["one"] == {"id": "s3"}
    assert {n["id"] for n in body["data"]["sessions"]["nodes"]} == {"s1", "s2", "s3"}


async def test_a_query_a_commit_lands_in_is_answered_again_in_one_state(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the rerun, the answer would say s3 is not found and list it: two states."""
    metrics = GatewayMetrics()
    app = create_app(SessionQuery(persistence=db), metrics=metrics)
    state = _counting_writes(monkeypatch, db)
    _consistent_after_the_write(await _post(app, QUERY))
    assert metrics.value(RETRIED) == 1
    reads = state["reads"]
    _consistent_after_the_write(await _post(app, QUERY))  # no write: no rerun
    assert metrics.value(RETRIED) == 1
    assert state["reads"] - reads < reads


async def test_a_query_whose_token_read_a_commit_follows_is_answered_again_in_one_state(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With auth, the token is the first read (admission's retryable snapshot): a commit
    after it moves the observation, and the rerun reads the data in one state."""
    tokens = TokenStore(db, KEY)
    _, secret = await tokens.create("reader", ["all"])
    metrics = GatewayMetrics()
    app = create_app(
        SessionQuery(persistence=db), metrics=metrics, authenticate=token_authenticator(tokens)
    )
    _counting_writes(monkeypatch, db)
    _consistent_after_the_write(await _post(app, QUERY, secret))
    assert metrics.value(RETRIED) == 1


async def test_a_query_of_one_read_a_commit_follows_is_not_run_again(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    metrics = GatewayMetrics()
    app = create_app(SessionQuery(persistence=db), metrics=metrics)
    _counting_writes(monkeypatch, db)
    body = await _post(app, '{ session(id: "s1") { id header { cwd } } }')
    assert body == {"data": {"session": {"id": "s1", "header": {"cwd": "/a"}}}}
    assert metrics.value(RETRIED) == 0


async def test_every_answer_is_one_state_while_commits_land(
    db: SqlPersistence,
) -> None:
    """Queries whose count and page are separate reads, asked while another task keeps
    committing sessions: every answer's `totalCount` is its page's length (one state),
    however the commits fall between the reads."""
    metrics = GatewayMetrics()
    app = create_app(SessionQuery(persistence=db), metrics=metrics)
    query = "{ sessions(first: 200) { totalCount nodes { id } } }"
    stop = asyncio.Event()

    async def writer() -> None:
        n = 10
        while not stop.is_set() and n < 100:
            await db.create(SessionHeader(f"w{n}", n, cwd="/w"))
            n += 1
            await asyncio.sleep(0)

    transport = httpx.ASGITransport(app=app)
    answers: list[dict[str, Any]] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:

        async def reader() -> None:
            while not stop.is_set():
                answer = (await client.post("/graphql", json={"query": query})).json()
                answers.append(answer)

        writing = asyncio.create_task(writer())
        readers = [asyncio.create_task(reader()) for _ in range(4)]
        await writing
        stop.set()
        await asyncio.gather(*readers)
    assert len(answers) > 20
    for answer in answers:
        assert "errors" not in answer, answer
        page = answer["data"]["sessions"]
        assert page["totalCount"] == len(page["nodes"]), page
    assert metrics.value(RETRIED) > 0  # commits did land between reads: the rule ran


async def test_a_rerun_query_closes_both_of_its_snapshots(
    db: SqlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moved observation's snapshot and the rerun's strict one are both closed, and
    the read connections are all given back (none left in a transaction)."""
    from gateway.persistence.pg_readers import PgSnapshot

    made: list[PgSnapshot] = []
    original = PgSnapshot.__init__

    def init(self: PgSnapshot, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(PgSnapshot, "__init__", init)
    metrics = GatewayMetrics()
    app = create_app(SessionQuery(persistence=db), metrics=metrics)
    _counting_writes(monkeypatch, db)
    _consistent_after_the_write(await _post(app, QUERY))
    assert metrics.value(RETRIED) == 1
    assert len(made) == 2 and [s.moved() for s in made] == [True, False]
    assert all(s._closed for s in made)
    readers: Any = db._pg_readers
    await ended_in_their_tasks(readers)  # the strict one's ROLLBACK runs in a task
    assert not any(c.is_in_transaction() for c in readers._idle)
    assert len(readers._idle) == readers._open


async def test_an_empty_answer_is_checked_against_its_own_snapshot(db: SqlPersistence) -> None:
    """A first read that finds nothing still tells its snapshot (`watched`'s second
    form): a commit after it moves the observation like after any read."""
    snapshot = db.read_snapshot(retryable=True)
    assert snapshot is not None and snapshot.moved is not None
    view: Any = snapshot.backend
    assert await view.load_headers(["s3"]) == {}
    await db.create(SessionHeader("s3", 3, cwd="/c"))
    with pytest.raises(Exception) as caught:
        await view.load_headers(["s1"])
    assert _moved(caught.value)
    assert snapshot.moved()
    snapshot.close()
