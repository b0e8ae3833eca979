"""One observation loads each thing once, and coalesces loads across sessions, so the
backend work of a request does not grow with how many sessions it touches."""

from __future__ import annotations

import asyncio

import pytest

from gateway import SessionQuery
from gateway.core import SessionHeader
from gateway.core.query import list_events, read_event, trace_event, trace_session
from tests.backends import Counting, persist
from tests.core_helpers import ev


@pytest.fixture
async def db(tmp_path):
    from gateway.persistence import SqlPersistence

    backend = SqlPersistence(f"sqlite+aiosqlite:///{tmp_path / 'obs.db'}")
    yield backend
    await backend.close()


async def fill(db, n: int) -> list[str]:
    ids = []
    for i in range(n):
        sid = f"s{i:03}"
        events = [
            ev(0, "user/message", {"i": i}, "append"),
            ev(1),
            ev(2, "assistant/message", {"i": i}, "append", [0]),
        ]
        await persist(db, SessionHeader(sid, i, parent_session="s000" if i else None), events)
        ids.append(sid)
    return ids


@pytest.mark.parametrize("n", [5, 50])
async def test_backend_calls_within_one_observation_do_not_grow_with_sessions(db, n):
    ids = await fill(db, n)
    counting = Counting(db)
    obs = SessionQuery(persistence=counting).observe()

    async def everything(sid):
        await list_events(obs, sid)
        await read_event(obs, sid, 1, 1, 1, 50)
        await trace_event(obs, sid, 0)
        await trace_session(obs, sid)

    await asyncio.gather(*(everything(sid) for sid in ids))
    # One batched call per distinct question, whatever n: the proof (load_sessions), the
    # classes of every event and the window (two read_events), the traced event and its
    # relations, and the two lineage walks. No whole log is loaded and nothing is listed.
    assert counting.total <= 7, counting.calls
    assert counting.calls["read_events"] <= 2, counting.calls
    assert counting.calls["load"] == counting.calls["list"] == 0, counting.calls


async def test_each_session_log_is_loaded_at_most_once_per_observation(db):
    ids = await fill(db, 3)
    counting = Counting(db)
    obs = SessionQuery(persistence=counting).observe()
    for _ in range(3):
        for sid in ids:
            await list_events(obs, sid)
            await trace_event(obs, sid, 2)
    # each question is asked of the backend once per session, however often it is asked
    # of the observation; no whole log is loaded (stored derivations answer)
    for question in ("load_sessions", "read_events", "read_events_at", "read_traces"):
        assert counting.calls[question] == len(ids), counting.calls
    assert counting.calls["load"] == counting.calls["list"] == 0, counting.calls


async def test_a_new_observation_sees_new_data(db):
    await fill(db, 1)
    query = SessionQuery(persistence=db)
    first = query.observe()
    assert len(await list_events(first, "s000")) == 3
    await db.append("s000", [ev(3, "user/message", {}, "append")])
    assert len(await list_events(first, "s000")) == 3  # one observation, one state
    assert len(await list_events(query.observe(), "s000")) == 4
