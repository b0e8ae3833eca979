"""SPEC §3: the logical corpus — live stores overlaid on a persistence backend."""

from __future__ import annotations

import dataclasses

import pytest

from gateway import SessionQuery, SessionQueryError, SessionStore
from gateway.core import ErrorCode, SessionHeader
from tests.backends import Broken, Counting, Scripted, persist
from tests.core_helpers import ev

U, A = "user/message", "assistant/message"


@pytest.fixture
async def db(tmp_path):
    from gateway.persistence import SqlPersistence

    backend = SqlPersistence(f"sqlite+aiosqlite:///{tmp_path / 'corpus.db'}")
    yield backend
    await backend.close()


def code_of(excinfo) -> ErrorCode:
    return excinfo.value.code


async def test_cross_corpus_list_asks_the_backend_on_every_call(db):
    counting = Counting(db)
    query = SessionQuery(persistence=counting)
    await persist(db, SessionHeader("a", 1))
    assert [r.id for r in await query.list_sessions()] == ["a"]
    await persist(db, SessionHeader("b", 2))
    assert [r.id for r in await query.list_sessions()] == ["b", "a"]  # nothing cached
    assert counting.calls["list"] == 2


async def test_matching_ids_become_one_record_live_header_wins_sources_reported(db):
    await persist(db, SessionHeader("both", 5, cwd="/w"), [ev(0, U, {}, "append")])
    await persist(db, SessionHeader("stored", 4))
    store = SessionStore()
    store.create("both", created_at=5, cwd="/w")
    store.create("live", created_at=6)
    records = await SessionQuery(live=[store], persistence=db).list_sessions()
    assert [(r.id, r.live, r.persisted) for r in records] == [
        ("live", True, False),
        ("both", True, True),
        ("stored", False, True),
    ]
    assert records[1].header is store.get("both").header


async def test_delegation_depth_absent_equals_zero(db):
    await persist(db, SessionHeader("s", 1, delegation_depth=0))
    store = SessionStore()
    store.create("s", created_at=1)  # delegation_depth absent
    (record,) = await SessionQuery(live=[store], persistence=db).list_sessions()
    assert record.live and record.persisted
    assert record.header.delegation_depth is None  # the live header wins, absent stays absent


CONFLICTING_FIELDS = {
    "created_at": 2,
    "version": 1,
    "cwd": "/elsewhere",
    "parent_session": "p",
    "seed_length": 3,
    "origin": "subagent",
    "delegation_depth": 2,
    "agent_preset": "minimal",
}


@pytest.mark.parametrize("field", sorted(CONFLICTING_FIELDS))
async def test_source_conflict_when_immutable_headers_differ(db, field):
    await persist(db, SessionHeader("s", 1))
    store = SessionStore()
    store.add(dataclasses.replace(SessionHeader("s", 1), **{field: CONFLICTING_FIELDS[field]}))
    query = SessionQuery(live=[store], persistence=db)
    with pytest.raises(SessionQueryError) as info:
        await query.list_sessions()
    assert code_of(info) is ErrorCode.SOURCE_CONFLICT
    camel = {
        "created_at": "createdAt",
        "parent_session": "parentSession",
        "seed_length": "seedLength",
        "delegation_depth": "delegationDepth",
        "agent_preset": "agentPreset",
    }.get(field, field)
    assert camel in info.value.message
    with pytest.raises(SessionQueryError) as info:
        await query.trace_session("s")
    assert code_of(info) is ErrorCode.SOURCE_CONFLICT


async def test_same_id_in_two_live_stores_is_a_conflict_for_lists_and_exact_reads():
    one, two = SessionStore(), SessionStore()
    one.create("dup", created_at=1).append(U, {}, surface_op="append")
    two.create("dup", created_at=1)
    query = SessionQuery(live=[one, two])
    for call in (
        query.list_sessions(),
        query.list_events("dup"),
        query.read_event("dup", 0),
        query.trace_event("dup", 0),
        query.trace_session("dup"),
    ):
        with pytest.raises(SessionQueryError) as info:
            await call
        assert code_of(info) is ErrorCode.SOURCE_CONFLICT


async def test_order_is_newest_first_with_ties_by_id_ascending(db):
    for sid, created in (("b", 5), ("a", 5), ("c", 9), ("z", 1)):
        await persist(db, SessionHeader(sid, created))
    store = SessionStore()
    store.create("m", created_at=5)
    records = await SessionQuery(live=[store], persistence=db).list_sessions()
    assert [r.id for r in records] == ["c", "a", "b", "m", "z"]


async def test_exact_read_of_a_live_session_never_touches_persistence():
    broken = Broken()
    store = SessionStore()
    s = store.create("live", created_at=1)
    s.append(U, {"content": []}, surface_op="append")
    s.append(
        A,
        {"content": []},
        surface_op={"op": "replace", "start": 0, "end": 0},
        source_event_seqs=[0],
    )
    query = SessionQuery(live=[store], persistence=broken)
    assert [e.surface.value for e in await query.list_events("live")] == ["SHADOWED", "CURRENT"]
    assert (await query.read_event("live", 1, before=1)).start_seq == 0
    assert (await query.trace_event("live", 0)).replaced_by == 1
    assert broken.calls == 0


async def test_cross_corpus_reads_fail_with_persistence_failed_when_the_backend_fails():
    broken = Broken(OSError("disk on fire"))
    store = SessionStore()
    store.create("live", created_at=1)
    query = SessionQuery(live=[store], persistence=broken)
    for call in (
        query.list_sessions(),
        query.trace_session("live"),  # lineage needs the corpus listing
        query.list_events("not-live"),
        query.read_event("not-live", 0),
        query.trace_event("not-live", 0),
    ):
        with pytest.raises(SessionQueryError) as info:
            await call
        assert code_of(info) is ErrorCode.PERSISTENCE_FAILED
        assert "OSError" in info.value.message and "correlation id" in info.value.message
        assert "disk on fire" not in info.value.message  # backend text: the log only
    assert broken.calls == 5


async def test_persisted_read_proves_the_id_is_listed(db):
    query = SessionQuery(persistence=db)
    with pytest.raises(SessionQueryError) as info:
        await query.list_events("nowhere")
    assert code_of(info) is ErrorCode.SESSION_NOT_FOUND
    with pytest.raises(SessionQueryError) as info:
        await SessionQuery().read_event("nowhere", 0)
    assert code_of(info) is ErrorCode.SESSION_NOT_FOUND


async def test_loaded_header_differing_from_listed_header_is_a_conflict():
    listed = SessionHeader("s", 1)
    loaded = SessionHeader("s", 1, cwd="/other")
    backend = Scripted([listed], {"s": (loaded, [ev(0, U, {}, "append")])})
    query = SessionQuery(persistence=backend)
    for call in (query.list_events("s"), query.read_event("s", 0), query.trace_event("s", 0)):
        with pytest.raises(SessionQueryError) as info:
            await call
        assert code_of(info) is ErrorCode.SOURCE_CONFLICT


async def test_backend_returning_garbage_is_persistence_failed():
    class Garbage:
        async def list(self):
            return ["not a header"]

        async def load(self, session_id):
            return None

    with pytest.raises(SessionQueryError) as info:
        await SessionQuery(persistence=Garbage()).list_sessions()
    assert code_of(info) is ErrorCode.PERSISTENCE_FAILED


async def test_persistence_can_be_mounted_replaced_and_unmounted_at_runtime(db, tmp_path):
    from gateway.persistence import SqlPersistence

    await persist(db, SessionHeader("first", 1))
    other = SqlPersistence(f"sqlite+aiosqlite:///{tmp_path / 'other.db'}")
    try:
        await persist(other, SessionHeader("second", 2))
        query = SessionQuery()
        assert await query.list_sessions() == []
        query.mount_persistence(db)
        assert [r.id for r in await query.list_sessions()] == ["first"]
        query.mount_persistence(other)
        assert [r.id for r in await query.list_sessions()] == ["second"]
        assert query.unmount_persistence() is other
        assert await query.list_sessions() == []
        with pytest.raises(SessionQueryError) as info:
            await query.list_events("second")
        assert code_of(info) is ErrorCode.SESSION_NOT_FOUND
    finally:
        await other.close()


async def test_mounting_something_that_is_not_a_backend_is_invalid_config():
    with pytest.raises(SessionQueryError) as info:
        SessionQuery(persistence=object())
    assert code_of(info) is ErrorCode.INVALID_CONFIG


async def test_live_stores_can_be_registered_and_unregistered_at_runtime():
    a, b = SessionStore(), SessionStore()
    a.create("a", created_at=1)
    b.create("b", created_at=2)
    query = SessionQuery(live=[a])
    assert [r.id for r in await query.list_sessions()] == ["a"]
    query.register_live(b)
    query.register_live(b)  # idempotent
    assert [r.id for r in await query.list_sessions()] == ["b", "a"]
    assert query.unregister_live(a) is True
    assert query.unregister_live(a) is False
    assert [r.id for r in await query.list_sessions()] == ["b"]
    with pytest.raises(SessionQueryError) as info:
        await query.list_events("a")
    assert code_of(info) is ErrorCode.SESSION_NOT_FOUND


async def test_persisted_state_may_lag_the_live_log_and_the_live_log_is_what_reads_see(db):
    header = SessionHeader("s", 1)
    await persist(db, header, [ev(0, U, {"v": "old"}, "append")])
    store = SessionStore()
    live = store.add(header, seed=[ev(0, U, {"v": "old"}, "append")])
    live.append(A, {"v": "new"}, surface_op="append")
    query = SessionQuery(live=[store], persistence=db)
    assert len(await query.list_events("s")) == 2
    store.remove("s")
    assert len(await query.list_events("s")) == 1  # falls back to the persisted prefix


async def test_every_call_observes_the_sources_afresh(db):
    store = SessionStore()
    s = store.create("s", created_at=1)
    query = SessionQuery(live=[store], persistence=db)
    assert await query.list_events("s") == []
    s.append(U, {}, surface_op="append")
    assert len(await query.list_events("s")) == 1
    await persist(db, SessionHeader("p", 2), [ev(0, U, {}, "append")])
    assert len(await query.list_events("p")) == 1
