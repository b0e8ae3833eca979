"""SPEC §11 in the core: append listeners on live sessions and the replay-then-tail
algorithm (`gateway.core.tail`), without GraphQL."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from gateway import SessionStore
from gateway.core import ErrorCode, SessionQuery, SessionQueryError
from gateway.core.tail import TailItem, TailLagged, tail_session
from gateway.persistence import SqlPersistence
from tests.test_persistence_fixtures import db_fixture, db_url_fixture, engine_name_fixture

__all__ = ["db_fixture", "db_url_fixture", "engine_name_fixture"]

TURN = "turn/start"


class Recorder:
    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.closes = 0

    def appended(self, event: Any) -> None:
        self.seqs.append(event.seq)

    def closed(self) -> None:
        self.closes += 1


class Broken:
    def appended(self, event: Any) -> None:
        raise RuntimeError("listener bug")

    def closed(self) -> None:
        raise RuntimeError("listener bug")


def live(n: int = 0) -> tuple[SessionStore, Any]:
    store = SessionStore()
    session = store.create("s", created_at=1)
    for i in range(n):
        session.append(TURN, {"i": i})
    return store, session


async def collect(it: Any, limit: int | None = None) -> list[TailItem]:
    out = []
    async for item in it:
        out.append(item)
        if limit is not None and len(out) >= limit:
            break
    return out


# -- listeners ----------------------------------------------------------------------------


def test_listen_returns_the_length_and_hears_every_later_append_in_order() -> None:
    _, s = live(3)
    rec = Recorder()
    length, closed, unlisten = s.listen(rec)
    assert (length, closed) == (3, False)
    for i in range(4):
        s.append(TURN, {"i": i})
    unlisten()
    s.append(TURN, {})
    assert rec.seqs == [3, 4, 5, 6]


def test_a_raising_listener_never_breaks_an_append_and_is_dropped() -> None:
    _, s = live()
    rec = Recorder()
    s.listen(Broken())
    s.listen(rec)
    event = s.append(TURN, {})
    assert event.seq == 0 and len(s) == 1
    s.append(TURN, {})
    assert rec.seqs == [0, 1] and s.listener_count == 1


def test_leaving_the_store_closes_listeners_once_and_later_listens_see_closed() -> None:
    store, s = live(2)
    rec = Recorder()
    s.listen(rec)
    s.listen(Broken())
    assert store.remove("s") is s
    s.close()
    assert rec.closes == 1 and s.listener_count == 0
    assert s.listen(Recorder())[:2] == (2, True)


def test_appends_from_many_threads_reach_a_listener_in_seq_order() -> None:
    _, s = live()
    rec = Recorder()
    s.listen(rec)

    def work() -> None:
        for _ in range(500):
            s.append(TURN, {})

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rec.seqs == list(range(2000))


# -- replay then tail ------------------------------------------------------------------


async def test_tail_sends_every_seq_after_after_seq_once_in_order_then_follows_appends() -> None:
    store, s = live(10)
    query = SessionQuery(live=[store])
    tail = tail_session(query.observe(), "s", after_seq=3, page_size=4)
    first = await collect(tail, 6)
    assert [i.event.seq for i in first] == [4, 5, 6, 7, 8, 9]
    for i in range(5):
        s.append(TURN, {"i": i})
    rest = await collect(tail, 5)
    assert [i.event.seq for i in rest] == [10, 11, 12, 13, 14]
    assert {i.surface.value for i in first + rest} == {"LOG_ONLY"}
    await tail.aclose()
    assert s.listener_count == 0


async def test_appends_racing_the_replay_are_neither_lost_nor_duplicated() -> None:
    """An appender thread runs while the replay reads the log a few events at a time."""
    store, s = live(3000)
    query = SessionQuery(live=[store])
    stop = threading.Event()
    appended = 0

    def appender() -> None:
        nonlocal appended
        while not stop.is_set() and appended < 900:
            s.append(TURN, {})
            appended += 1

    tail = tail_session(query.observe(), "s", page_size=7, buffer_size=100_000)
    seqs: list[int] = []
    thread = threading.Thread(target=appender)
    async for item in tail:
        seqs.append(item.event.seq)
        if len(seqs) == 10:
            thread.start()  # appends start during the replay
        if len(seqs) % 50 == 0:
            await asyncio.sleep(0)
        if len(seqs) >= 3000 and not thread.is_alive() and len(seqs) == 3000 + appended:
            break
    stop.set()
    thread.join()
    await tail.aclose()
    assert appended > 0
    assert seqs == list(range(3000 + appended))


async def test_a_subscriber_that_stops_reading_lags_with_last_seq_and_resumes_gap_free() -> None:
    store, s = live(5)
    query = SessionQuery(live=[store])
    tail = tail_session(query.observe(), "s", buffer_size=10)
    s.append(TURN, {})
    got = [i.event.seq for i in await collect(tail, 6)]  # the replay, then one append
    assert got == [0, 1, 2, 3, 4, 5]
    for _ in range(49):  # the consumer is not reading: the buffer overflows
        s.append(TURN, {})
    with pytest.raises(TailLagged) as info:
        await collect(tail)
    last = info.value.last_seq
    assert last == got[-1]
    assert s.listener_count == 0  # a lagged subscriber has left
    resumed = tail_session(query.observe(), "s", after_seq=last)
    again = [i.event.seq for i in await collect(resumed, 55 - last - 1)]
    assert again == list(range(last + 1, 55))
    await resumed.aclose()


async def test_a_live_session_removed_from_its_store_completes_after_its_last_event() -> None:
    store, s = live(2)
    query = SessionQuery(live=[store])
    tail = tail_session(query.observe(), "s")
    assert [i.event.seq for i in await collect(tail, 2)] == [0, 1]

    async def finish() -> None:
        await asyncio.sleep(0.01)
        s.append(TURN, {})
        s.append(TURN, {})
        store.remove("s")

    task = asyncio.create_task(finish())
    rest = await asyncio.wait_for(collect(tail), 5)
    await task
    assert [i.event.seq for i in rest] == [2, 3]


async def test_appends_from_another_thread_wake_the_tail() -> None:
    store, s = live()
    query = SessionQuery(live=[store])
    tail = tail_session(query.observe(), "s")

    def later() -> None:
        for _ in range(3):
            s.append(TURN, {})
        store.remove("s")

    timer = threading.Timer(0.05, later)
    timer.start()
    got = await asyncio.wait_for(collect(tail), 5)
    timer.join()
    assert [i.event.seq for i in got] == [0, 1, 2]


async def test_an_unknown_session_is_session_not_found() -> None:
    query = SessionQuery(live=[SessionStore()])
    with pytest.raises(SessionQueryError) as info:
        await collect(tail_session(query.observe(), "nope"))
    assert info.value.code is ErrorCode.SESSION_NOT_FOUND


async def test_a_persisted_only_session_replays_in_pages_with_classes_then_completes(
    db: SqlPersistence,
) -> None:
    store = SessionStore()
    source = store.create("p", created_at=5)
    source.append("user/message", {"content": []}, surface_op="append")
    for i in range(20):
        source.append(TURN, {"i": i})
    source.append("assistant/message", {"content": []}, surface_op="append")
    header, events = source.snapshot()
    await db.create(header)
    await db.append("p", list(events))
    query = SessionQuery(live=[SessionStore()], persistence=db)
    got = await asyncio.wait_for(
        collect(tail_session(query.observe(), "p", after_seq=0, page_size=6)), 10
    )
    assert [i.event.seq for i in got] == list(range(1, 22))
    assert [i.surface.value for i in got if i.surface] == ["LOG_ONLY"] * 20 + ["CURRENT"]


async def test_subscribers_of_one_session_share_one_listener_and_leave_independently() -> None:
    store, s = live(3)
    query = SessionQuery(live=[store])
    first = tail_session(query.observe(), "s")
    second = tail_session(query.observe(), "s", after_seq=1)
    assert [i.event.seq for i in await collect(first, 3)] == [0, 1, 2]
    assert [i.event.seq for i in await collect(second, 1)] == [2]
    assert s.listener_count == 1  # one feed for this loop, whatever the subscriber count
    await first.aclose()
    s.append(TURN, {})
    assert [i.event.seq for i in await collect(second, 1)] == [3]
    await second.aclose()
    assert s.listener_count == 0


async def test_a_lagged_subscriber_does_not_disturb_a_reading_one() -> None:
    store, s = live(0)
    query = SessionQuery(live=[store])
    slow = tail_session(query.observe(), "s", buffer_size=5)
    fast = tail_session(query.observe(), "s", buffer_size=5)
    s.append(TURN, {})
    assert [i.event.seq for i in await collect(slow, 1)] == [0]
    got = []
    for _ in range(4):  # fast keeps reading, slow does not
        for _ in range(3):
            s.append(TURN, {})
        got += [i.event.seq for i in await collect(fast, 3 if got else 4)]
    assert got == list(range(13))
    with pytest.raises(TailLagged) as info:
        await collect(slow)
    assert info.value.last_seq == 0
    await fast.aclose()
