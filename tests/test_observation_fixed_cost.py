"""A request pays for what it asks: the per-request parts are made on first use.

An observation is built for every request, and most requests ask one or two
questions of it. These tests hold the rules that keep that cheap without
changing what it answers: a memo table joins the observation's lifetime on its
first entry (and is still emptied when the observation closes), the corpus-wide
parts (pages, filters, lineage walks) are made only when asked, the backend's
capabilities are checked once per mount rather than per observation, and each
request still observes the corpus afresh (nothing is carried across).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway import SessionQuery, SessionStore
from gateway.core import SessionHeader
from gateway.core import backend as backend_module
from gateway.core import query as query_module
from gateway.core.batching import Lifetime, Loader, Once, PerKey
from gateway.server.budget import ResponseBudget
from gateway.server.context import Context
from gateway.server.cursors import CursorCodec
from tests.backends import persist
from tests.core_helpers import ev


@pytest.fixture
async def db(tmp_path: Any) -> Any:
    from gateway.persistence import SqlPersistence

    backend = SqlPersistence(f"sqlite+aiosqlite:///{tmp_path / 'fixed.db'}")
    await persist(backend, SessionHeader("s1", 1), [ev(0, "user/message", {"i": 1}, "append")])
    yield backend
    await backend.close()


async def test_an_unasked_memo_table_costs_its_lifetime_nothing() -> None:
    lifetime = Lifetime()

    async def make(*_: Any) -> int:
        return 1

    async def batch(keys: Any) -> dict[Any, int]:
        return {k: 1 for k in keys}

    once, per_key, loader = Once(lifetime, make), PerKey(lifetime, make), Loader(lifetime, batch)
    assert lifetime._forget == []  # made, never asked: nothing to empty at close
    assert await once.get() == await per_key.get("k") == await loader.load("k") == 1
    assert len(lifetime._forget) == 3


async def test_a_memo_table_first_used_is_still_emptied_when_its_lifetime_closes() -> None:
    lifetime = Lifetime()
    calls: list[str] = []

    async def make(key: str) -> str:
        calls.append(key)
        return key

    per_key = PerKey(lifetime, make)
    assert await per_key.get("a") == await per_key.get("a") == "a"
    assert calls == ["a"]  # remembered within the lifetime
    lifetime.close()
    assert per_key._memo == {}  # and forgotten when it ends


async def test_a_loader_batches_the_keys_asked_before_its_task_starts_in_one_loop_turn() -> None:
    """Keys asked in one turn share one fetch, answered the turn after (the batch's task
    is started by the first key: no callback turn before it); a key asked after the
    batch started goes in the next batch."""
    lifetime = Lifetime()
    fetched: list[list[str]] = []
    turns = 0

    async def batch(keys: Any) -> dict[Any, str]:
        fetched.append(list(keys))
        return {k: k.upper() for k in keys}

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    counter = asyncio.ensure_future(count_turns())
    loader = Loader(lifetime, batch)
    first = [loader.load("a"), loader.load("b"), loader.load("a")]
    assert await asyncio.gather(*first) == ["A", "B", "A"]
    answered_in = turns
    assert await loader.load("c") == "C"
    counter.cancel()
    assert fetched == [["a", "b"], ["c"]]
    assert answered_in <= 3, answered_in


async def test_a_loader_askers_cancellation_leaves_the_shared_answer_to_the_others() -> None:
    """One asker of a key cancelled while its batch runs: the others of the same key get
    the answer, the batch still answers once, and a later asker gets the remembered one;
    a batch that fails gives each asker its error."""
    lifetime = Lifetime()
    release = asyncio.Event()
    fetched: list[list[str]] = []

    async def batch(keys: Any) -> dict[Any, str]:
        fetched.append(list(keys))
        await release.wait()
        if "bad" in keys:
            raise RuntimeError("the backend failed")
        return {k: k * 2 for k in keys}

    loader = Loader(lifetime, batch)

    async def ask(key: str) -> str | None:
        return await loader.load(key)

    first, second = asyncio.ensure_future(ask("a")), asyncio.ensure_future(ask("a"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the batch is running, both askers wait
    first.cancel()
    release.set()
    assert await second == "aa"
    assert first.cancelled()
    assert await loader.load("a") == "aa"
    assert fetched == [["a"]]
    failing = [asyncio.ensure_future(ask("bad")), asyncio.ensure_future(ask("bad"))]
    for outcome in await asyncio.gather(*failing, return_exceptions=True):
        assert isinstance(outcome, RuntimeError)


async def test_a_loader_batch_whose_lifetime_closes_before_it_starts_is_cancelled() -> None:
    """Closing the lifetime before the batch's first step cancels its keys (nobody waits
    for an answer that will not come), and a key asked later starts a batch of its own."""
    lifetime = Lifetime()
    fetched: list[list[str]] = []

    async def batch(keys: Any) -> dict[Any, str]:
        fetched.append(list(keys))
        return {k: k for k in keys}

    loader = Loader(lifetime, batch)
    waiting = loader.load("a")
    lifetime.close()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert fetched == []
    assert await Loader(Lifetime(), batch).load("b") == "b"
    assert await loader.load("z") == "z"  # not stuck behind the cancelled batch
    assert fetched == [["b"], ["z"]]


async def test_a_stored_session_keeps_its_row_reads_answer_once_the_listing_is_read(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored session is looked up through its row's loader directly (no task of its
    own in between); once the listing has been read, asking again still answers what
    the row read answered (the same object, even where the listing, read later, no
    longer holds it), with no second read of the row."""
    rows: list[list[str]] = []
    load_sessions = db.load_sessions

    async def counted(ids: Any) -> Any:
        rows.append(list(ids))
        return await load_sessions(ids)

    async def listed_without_it() -> list[Any]:  # as if removed since (no snapshot)
        return []

    monkeypatch.setattr(db, "load_sessions", counted)
    monkeypatch.setattr(db, "list", listed_without_it)
    obs = SessionQuery(persistence=db).observe()
    try:
        first = await obs._stored.stored("s1")
        assert first is not None and first.counts is not None
        assert "s1" not in await obs._stored.listing()
        assert await obs._stored.stored("s1") is first  # its first answer stands
        assert await obs._stored.stored("nope") is None  # not in the listing: not read
    finally:
        obs.close()
    assert rows == [["s1"]]


async def test_a_stored_session_answered_by_index_has_one_view_made_without_a_task(
    db: Any,
) -> None:
    """Askers of one stored session's view at once get the same view, made by the first
    of them once the session is proved (no task of its own, nothing in the folded views'
    memo); a later ask gets it again."""
    obs = SessionQuery(persistence=db).observe()
    try:
        views = await asyncio.gather(*(obs.view("s1") for _ in range(3)))
        assert views[0] is views[1] is views[2] is await obs.view("s1")
        assert views[0].length == 1 and not views[0].live
        assert obs._folded_views._memo == {}
    finally:
        obs.close()


async def test_an_observation_for_one_session_makes_no_corpus_parts(db: Any) -> None:
    obs = SessionQuery(persistence=db).observe()
    try:
        header, live, persisted = await obs.locate("s1")
        assert (header.id, live, persisted) == ("s1", False, True)
        made = vars(obs)
        assert "_corpus" not in made and "_walks" not in made and "_filtered" not in made
        assert [r.header.id for r in (await obs.sessions_page(None, 5)).records] == ["s1"]
        assert "_corpus" in vars(obs)  # made on the first corpus question
    finally:
        obs.close()


async def test_capabilities_are_checked_once_per_mount_not_per_observation(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[object] = []
    real = backend_module.capabilities_of

    def counting(backend: Any) -> Any:
        checked.append(backend)
        return real(backend)

    monkeypatch.setattr(query_module, "capabilities_of", counting)
    query = SessionQuery(persistence=db)
    for _ in range(3):
        obs = query.observe()
        assert (await obs.stored("s1")) is not None
        obs.close()
    assert checked == [db]
    query.unmount_persistence()
    obs = query.observe()
    assert not obs.has_backend and await obs.stored("s1") is None
    obs.close()


async def test_each_request_context_observes_afresh_with_its_own_budget(db: Any) -> None:
    store = SessionStore()
    query = SessionQuery(live=[store], persistence=db)
    cursors = CursorCodec(None)
    budget = ResponseBudget(1_000, 10)
    first = Context.for_request(query, cursors, budget=budget)
    assert first.budget is budget and first.started == budget.started
    store.create("live-1", created_at=5)
    second = Context.for_request(query, cursors)
    try:
        assert second.obs is not first.obs and second.budget is not budget
        assert second.budget.max_bytes is None  # no budget given: unlimited, as before
        assert (await second.obs.locate("live-1"))[1] is True
    finally:
        first.close()
        second.close()


async def test_a_proxied_backend_makes_its_snapshot_entry_once_and_calls_the_inner_one(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.observability.backend_proxy import BackendProxy
    from gateway.observability.metrics import GatewayMetrics, instrument_backend

    proxy = instrument_backend(db, GatewayMetrics())
    entry = proxy.read_snapshot
    assert proxy.read_snapshot is entry  # made once, not on every observation
    calls: list[int] = []
    real = db.read_snapshot

    def counted() -> Any:
        calls.append(1)
        return real()

    monkeypatch.setattr(db, "read_snapshot", counted)  # replaced after the entry was made
    snapshot = proxy.read_snapshot()
    try:
        assert calls == [1]
        assert isinstance(snapshot.backend, BackendProxy)  # its reads still seen
        assert await snapshot.backend.load_sessions(["s1"])
    finally:
        snapshot.close()
