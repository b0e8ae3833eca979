"""SPEC §4: the five operations and their error codes; §4 detachment; §4 config."""

from __future__ import annotations

import pytest

from gateway import SessionQuery, SessionQueryError, SessionStore
from gateway.core import ErrorCode, EventSurface, SessionHeader
from tests.backends import Broken, Scripted
from tests.core_helpers import ev, tool_data

U, A, T = "user/message", "assistant/message", "tool/result"


def compaction_session(store: SessionStore, sid: str = "s"):
    """0 user, 1 turn/start, 2 assistant cites 0, 3 tool/call, 4 tool/result cites 3,
    5 tool/result rewrite of 4, 6 compaction of 0..5 (surface order 0,2,5), 7 user."""
    s = store.create(sid, created_at=10)
    s.append(U, {"content": [{"text": "hi"}]}, surface_op="append")
    s.append("turn/start", {"turn": 1})
    s.append(A, {"content": []}, surface_op="append", source_event_seqs=[0])
    s.append("tool/call", {"id": "c1"})
    s.append(T, tool_data("long"), surface_op="append", source_event_seqs=[3])
    s.append(
        T,
        tool_data("[elided]"),
        surface_op={"op": "replace", "start": 4, "end": 4},
        source_event_seqs=[4],
    )
    s.append(
        U,
        {"content": [{"text": "summary"}]},
        surface_op={"op": "replace", "start": 0, "end": 5},
        source_event_seqs=[0, 2, 5, 1],
    )
    s.append(U, {"content": [{"text": "next"}]}, surface_op="append")
    return s


def code(excinfo) -> ErrorCode:
    return excinfo.value.code


# -- list_events ------------------------------------------------------------------------


async def test_list_events_classifies_every_raw_event_by_seq():
    store = SessionStore()
    compaction_session(store)
    rows = await SessionQuery(live=[store]).list_events("s")
    assert [r.seq for r in rows] == list(range(8))
    assert [r.surface for r in rows] == [
        EventSurface.SHADOWED,
        EventSurface.LOG_ONLY,
        EventSurface.SHADOWED,
        EventSurface.LOG_ONLY,
        EventSurface.SHADOWED,
        EventSurface.SHADOWED,
        EventSurface.CURRENT,
        EventSurface.CURRENT,
    ]
    assert rows[3].session_id == "s" and rows[3].type == "tool/call"
    assert isinstance(rows[0].time, int)


async def test_list_events_rejects_a_stored_log_that_breaks_a_fold_rule():
    header = SessionHeader("bad", 1)
    backend = Scripted([header], {"bad": (header, [ev(0, U, {}, None)])})
    with pytest.raises(SessionQueryError) as info:
        await SessionQuery(persistence=backend).list_events("bad")
    assert code(info) is ErrorCode.INVALID_SURFACE


async def test_list_events_of_a_missing_session_is_session_not_found():
    with pytest.raises(SessionQueryError) as info:
        await SessionQuery(live=[SessionStore()]).list_events("x")
    assert code(info) is ErrorCode.SESSION_NOT_FOUND


# -- read_event -----------------------------------------------------------------------------


async def test_read_event_returns_target_and_raw_neighbours_clipped_to_the_log():
    store = SessionStore()
    compaction_session(store)
    query = SessionQuery(live=[store])
    w = await query.read_event("s", 1, before=5, after=2)
    assert (w.start_seq, w.end_seq) == (0, 3)
    assert [e.seq for e in w.events] == [0, 1, 2, 3]
    assert w.target.seq == 1 and w.target.type == "turn/start"
    assert w.session == store.get("s").header
    w = await query.read_event("s", 7, before=1, after=50)
    assert (w.start_seq, w.end_seq) == (6, 7)
    w = await query.read_event("s", 4)
    assert [e.seq for e in w.events] == [4] and w.target.data == tool_data("long")


async def test_read_event_window_defaults_to_zero_and_does_not_need_the_fold():
    header = SessionHeader("bad", 1)
    broken_log = [ev(0, U, {}, None), ev(1)]  # rule 3 broken, yet raw reads work
    query = SessionQuery(persistence=Scripted([header], {"bad": (header, broken_log)}))
    w = await query.read_event("bad", 0)
    assert (w.start_seq, w.end_seq, len(w.events)) == (0, 0, 1)


@pytest.mark.parametrize("bad", [-1, 51, True, False, 1.0, "1", None])
async def test_read_event_invalid_window_is_checked_before_any_io(bad):
    broken = Broken()
    query = SessionQuery(persistence=broken)
    for kwargs in ({"before": bad}, {"after": bad}):
        with pytest.raises(SessionQueryError) as info:
            await query.read_event("anything", 0, **kwargs)
        assert code(info) is ErrorCode.INVALID_WINDOW
    assert broken.calls == 0


async def test_read_event_window_bounds_follow_read_window_max():
    store = SessionStore()
    compaction_session(store)
    query = SessionQuery(live=[store], read_window_max=2)
    assert len((await query.read_event("s", 4, before=2, after=2)).events) == 5
    with pytest.raises(SessionQueryError) as info:
        await query.read_event("s", 4, before=3)
    assert code(info) is ErrorCode.INVALID_WINDOW
    zero = SessionQuery(live=[store], read_window_max=0)
    assert len((await zero.read_event("s", 4)).events) == 1
    with pytest.raises(SessionQueryError):
        await zero.read_event("s", 4, after=1)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "50", None])
def test_read_window_max_is_checked_when_the_query_is_constructed(bad):
    with pytest.raises(SessionQueryError) as info:
        SessionQuery(read_window_max=bad)
    assert code(info) is ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize("seq", [8, 100, -1, True])
async def test_read_event_missing_target_is_event_not_found(seq):
    store = SessionStore()
    compaction_session(store)
    with pytest.raises(SessionQueryError) as info:
        await SessionQuery(live=[store]).read_event("s", seq)
    assert code(info) is ErrorCode.EVENT_NOT_FOUND


# -- trace_event ----------------------------------------------------------------------------


async def test_trace_event_of_a_shadowed_event_follows_the_replacement_chain():
    store = SessionStore()
    compaction_session(store)
    trace = await SessionQuery(live=[store]).trace_event("s", 4)
    assert trace.target.surface is EventSurface.SHADOWED
    assert trace.replaced_by == 5
    assert trace.replacement_chain == [5, 6]
    assert trace.replaced_event_seqs == []
    assert trace.source_event_seqs == [3]
    assert trace.derived_event_seqs == [5]
    assert trace.event.data == tool_data("long")


async def test_trace_event_of_a_replacer_lists_what_it_removed_in_surface_order():
    store = SessionStore()
    compaction_session(store)
    trace = await SessionQuery(live=[store]).trace_event("s", 6)
    assert trace.target.surface is EventSurface.CURRENT
    assert trace.replaced_by is None and trace.replacement_chain == []
    assert trace.replaced_event_seqs == [0, 2, 5]
    assert trace.source_event_seqs == [0, 2, 5, 1]  # recorded order
    assert trace.derived_event_seqs == []


async def test_trace_event_sources_are_empty_when_none_were_recorded_and_not_transitive():
    store = SessionStore()
    compaction_session(store)
    query = SessionQuery(live=[store])
    trace = await query.trace_event("s", 0)
    assert trace.source_event_seqs == []
    assert trace.derived_event_seqs == [2, 6]  # 5 cites 4 which cites 3: not followed
    log_only = await query.trace_event("s", 3)
    assert log_only.target.surface is EventSurface.LOG_ONLY
    assert log_only.derived_event_seqs == [4]


async def test_trace_event_proves_the_target_exists_before_folding():
    header = SessionHeader("bad", 1)
    backend = Scripted([header], {"bad": (header, [ev(0, U, {}, None)])})
    query = SessionQuery(persistence=backend)
    with pytest.raises(SessionQueryError) as info:
        await query.trace_event("bad", 5)
    assert code(info) is ErrorCode.EVENT_NOT_FOUND
    with pytest.raises(SessionQueryError) as info:
        await query.trace_event("bad", 0)
    assert code(info) is ErrorCode.INVALID_SURFACE


async def test_trace_event_of_a_missing_session_is_session_not_found():
    with pytest.raises(SessionQueryError) as info:
        await SessionQuery().trace_event("x", 0)
    assert code(info) is ErrorCode.SESSION_NOT_FOUND


# -- detachment -------------------------------------------------------------------------------


async def test_everything_returned_is_detached_from_stores_and_later_results():
    store = SessionStore()
    compaction_session(store)
    store.create("child", created_at=20, parent_session="s")
    query = SessionQuery(live=[store])

    records = await query.list_sessions()
    records.clear()
    rows = await query.list_events("s")
    rows.reverse()
    window = await query.read_event("s", 4, before=1, after=1)
    window.target.data["message"]["content"][0]["content"] = "MUTATED"
    for e in window.events:
        e.data.clear()
    window.events.clear()
    trace = await query.trace_event("s", 6)
    trace.event.data["content"].append("MUTATED")
    trace.event.surface_op["start"] = 99
    trace.replaced_event_seqs.append(99)
    trace.source_event_seqs.append(99)
    trace.derived_event_seqs.append(99)
    lineage = await query.trace_session("s")
    lineage.descendants.clear()
    lineage.ancestors.append(lineage.target)

    assert [r.id for r in await query.list_sessions()] == ["child", "s"]
    assert [r.seq for r in await query.list_events("s")] == list(range(8))
    again = await query.read_event("s", 4, before=1, after=1)
    assert again.target.data == tool_data("long")
    assert [e.seq for e in again.events] == [3, 4, 5] and again.events[0].data == {"id": "c1"}
    trace = await query.trace_event("s", 6)
    assert trace.event.data == {"content": [{"text": "summary"}]}
    assert trace.event.surface_op == {"op": "replace", "start": 0, "end": 5}
    assert trace.replaced_event_seqs == [0, 2, 5]
    assert trace.source_event_seqs == [0, 2, 5, 1]
    lineage = await query.trace_session("s")
    assert [n.session.id for n in lineage.descendants] == ["child"] and lineage.ancestors == []
    assert store.get("s").snapshot()[1][4].data == tool_data("long")
