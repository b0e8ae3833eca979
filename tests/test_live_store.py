"""SPEC §2 (live validation) and §6 (store API): appends are validated incrementally,
refused appends leave the log unchanged, snapshots are consistent prefixes."""

from __future__ import annotations

import threading

import pytest

from gateway import SessionEvent, SessionQueryError, SessionStore
from gateway.core import ErrorCode, fold_surface
from gateway.core.fold import SurfaceFold
from tests.core_helpers import ev, replace, tool_data

U, A, T = "user/message", "assistant/message", "tool/result"


def make_session(**kw):
    store = SessionStore()
    return store, store.create("s1", created_at=1, **kw)


def test_append_assigns_contiguous_seqs_and_returns_the_event():
    _, s = make_session()
    e0 = s.append(U, {"content": []}, surface_op="append")
    e1 = s.append("turn/start", {"turn": 1}, time=5)
    assert (e0.seq, e1.seq) == (0, 1)
    assert e1.time == 5 and e1.data == {"turn": 1}
    assert isinstance(e0.time, int) and e0.time > 1_600_000_000_000  # now, in ms
    assert len(s) == 2


def test_append_with_surface_op_none_is_required_on_surface_types():
    _, s = make_session()
    with pytest.raises(SessionQueryError) as info:
        s.append(U, {"content": []}, surface_op=None)
    assert info.value.code is ErrorCode.INVALID_SURFACE and "rule 3" in info.value.message
    assert len(s) == 0


def test_append_with_surface_op_is_forbidden_on_log_only_types():
    _, s = make_session()
    with pytest.raises(SessionQueryError) as info:
        s.append("tool/call", {}, surface_op="append")
    assert "rule 2" in info.value.message


def test_refused_append_leaves_the_log_and_the_surface_unchanged():
    _, s = make_session()
    s.append(U, {"content": []}, surface_op="append")
    s.append(A, {"content": []}, surface_op="append", source_event_seqs=[0])
    before = s.snapshot()[1]
    for bad in (
        dict(surface_op=replace(1, 0), source_event_seqs=[0, 1]),  # rule 4
        dict(surface_op=replace(0, 1), source_event_seqs=[0]),  # rule 6
        dict(surface_op="append", source_event_seqs=[5]),  # rule 5
    ):
        with pytest.raises(SessionQueryError):
            s.append(U, {"content": []}, **bad)
    assert s.snapshot()[1] == before
    # the fold state is untouched too: a valid replace of the same range still works
    e = s.append(U, {"content": []}, surface_op=replace(0, 1), source_event_seqs=[0, 1])
    assert e.seq == 2
    assert fold_surface(s.snapshot()[1]).nodes == (2,)


def test_append_validates_tool_result_rewrites_against_the_stored_payload():
    _, s = make_session()
    s.append("tool/call", {"id": "c1"})
    s.append(T, tool_data("long"), surface_op="append", source_event_seqs=[0])
    with pytest.raises(SessionQueryError) as info:
        s.append(T, tool_data("x", extra=1), surface_op=replace(1, 1), source_event_seqs=[1])
    assert "rule 7" in info.value.message
    s.append(T, tool_data("[elided]"), surface_op=replace(1, 1), source_event_seqs=[1])


def test_append_refuses_values_that_are_not_json():
    _, s = make_session()
    with pytest.raises(TypeError, match="not a JSON value"):
        s.append("x/y", {"when": object()})
    with pytest.raises(TypeError):
        s.append("x/y", {1: "non-string key"})
    with pytest.raises(ValueError):
        s.append("x/y", {}, time=-1)
    assert len(s) == 0


def test_append_detaches_the_payload_both_ways():
    _, s = make_session()
    payload = {"content": [{"text": "a"}]}
    returned = s.append(U, payload, surface_op="append")
    payload["content"][0]["text"] = "mutated"
    returned.data["content"].append("mutated")
    assert s.snapshot()[1][0].data == {"content": [{"text": "a"}]}


def test_seed_is_validated_as_a_whole_and_a_bad_seed_creates_nothing():
    store = SessionStore()
    good = [ev(0, U, {}, "append"), ev(1, A, {}, "append", [0])]
    s = store.create("seeded", created_at=1, seed_length=2, seed=good)
    assert [e.seq for e in s.snapshot()[1]] == [0, 1]
    assert s.append(U, {}, surface_op="append").seq == 2
    bad = [ev(0, U, {}, "append"), ev(1, U, {}, replace(0, 0), None)]
    with pytest.raises(SessionQueryError):
        store.create("bad", created_at=1, seed=bad)
    assert store.get("bad") is None
    json_seed = [e.to_json() for e in good]
    assert store.create("from-json", created_at=1, seed=json_seed).snapshot()[1] == tuple(good)


def test_store_create_get_list_remove():
    store = SessionStore()
    a = store.create("a", created_at=1)
    b = store.create("b", created_at=2, parent_session="a", origin="subagent")
    assert store.get("a") is a and store.get("zzz") is None
    assert [s.id for s in store.list()] == ["a", "b"]
    assert b.header.parent_session == "a" and b.header.origin == "subagent"
    with pytest.raises(ValueError, match="already exists"):
        store.create("a", created_at=3)
    assert store.remove("a") is a
    assert store.remove("a") is None
    assert [s.id for s in store.list()] == ["b"]


def test_store_create_refuses_invalid_headers():
    store = SessionStore()
    with pytest.raises(ValueError):
        store.create("", created_at=1)
    with pytest.raises(ValueError):
        store.create("x", created_at="yesterday")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.create("x", created_at=1, delegation_depth=-1)


def test_snapshot_taken_while_appends_continue_is_a_consistent_prefix():
    _, s = make_session()
    s.append(U, {"content": []}, surface_op="append")
    stop = threading.Event()

    errors = []

    def writer():
        last = 0  # the latest surface node
        try:
            for i in range(20_000):
                if stop.is_set():
                    break
                if i % 7 == 0:
                    op = replace(last, last)
                    last = s.append(U, {"i": i}, surface_op=op, source_event_seqs=[last]).seq
                elif i % 2:
                    last = s.append(A, {"i": i}, surface_op="append", source_event_seqs=[last]).seq
                else:
                    s.append("assistant/chunk", {"i": i})
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        sizes = []
        # 40 snapshots, each folded whole: enough to catch torn prefixes while the
        # writer runs; 200 took up to 40 s of a busy machine's suite.
        for _ in range(40):
            _, events = s.snapshot()
            assert [e.seq for e in events] == list(range(len(events)))
            fold_surface(events)  # every snapshot is itself a valid log
            sizes.append(len(events))
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]


def test_incremental_validation_does_not_rescan_the_log():
    """Appends go through SurfaceFold.apply once each: the lookup hook (rule 7) is the only
    way back into history, and it is used only for tool-result rewrites."""
    looked_up = []
    events: list[SessionEvent] = []

    def lookup(seq):
        looked_up.append(seq)
        return events[seq]

    fold = SurfaceFold(lookup)
    for i in range(2_000):
        e = ev(i, U, {}, "append") if i % 2 else ev(i)
        fold.apply(e)
        events.append(e)
    assert looked_up == []
