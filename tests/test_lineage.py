"""SPEC §4 trace_session: ancestors, root, unresolved parents, descendants, cycles, depth."""

from __future__ import annotations

import pytest

from gateway import SessionQuery, SessionQueryError, SessionStore
from gateway.core import ErrorCode
from gateway.core.lineage import flatten


def tree(store: SessionStore, spec: dict[str, tuple[int, str | None]]) -> None:
    for sid, (created, parent) in spec.items():
        store.create(sid, created_at=created, parent_session=parent)


async def test_trace_session_ancestors_nearest_parent_first_and_root_is_farthest():
    store = SessionStore()
    tree(store, {"root": (1, None), "mid": (2, "root"), "leaf": (3, "mid")})
    trace = await SessionQuery(live=[store]).trace_session("leaf")
    assert [a.id for a in trace.ancestors] == ["mid", "root"]
    assert trace.complete is True and trace.unresolved_parent_id is None
    assert trace.root.id == "root"
    assert trace.target.id == "leaf" and trace.target.live and not trace.target.persisted


async def test_trace_session_root_of_a_parentless_session_is_itself():
    store = SessionStore()
    tree(store, {"solo": (1, None)})
    trace = await SessionQuery(live=[store]).trace_session("solo")
    assert trace.complete and trace.root.id == "solo" and trace.ancestors == []


async def test_trace_session_chain_leaving_the_corpus_is_incomplete_and_names_the_first_gap():
    store = SessionStore()
    tree(store, {"b": (2, "gone"), "c": (3, "b")})
    trace = await SessionQuery(live=[store]).trace_session("c")
    assert [a.id for a in trace.ancestors] == ["b"]
    assert trace.complete is False
    assert trace.unresolved_parent_id == "gone"
    assert trace.root is None


async def test_trace_session_descendants_are_the_complete_tree_siblings_by_created_at_then_id():
    store = SessionStore()
    tree(
        store,
        {
            "r": (1, None),
            "c2": (5, "r"),
            "c1b": (3, "r"),
            "c1a": (3, "r"),
            "g1": (9, "c1a"),
            "g2": (4, "c1a"),
            "gg": (10, "g1"),
            "other": (2, None),
        },
    )
    trace = await SessionQuery(live=[store]).trace_session("r")
    top = trace.descendants
    assert [n.session.id for n in top] == ["c1a", "c1b", "c2"]
    assert [n.session.id for n in top[0].descendants] == ["g2", "g1"]
    assert [n.session.id for n in top[0].descendants[1].descendants] == ["gg"]
    assert [n.session.id for n in flatten(top)] == ["c1a", "g2", "g1", "gg", "c1b", "c2"]


async def test_trace_session_cycle_reached_from_the_target_is_invalid_lineage():
    store = SessionStore()
    tree(store, {"a": (1, "c"), "b": (2, "a"), "c": (3, "b"), "d": (4, "a"), "ok": (5, None)})
    query = SessionQuery(live=[store])
    for sid in ("a", "d"):
        with pytest.raises(SessionQueryError) as info:
            await query.trace_session(sid)
        assert info.value.code is ErrorCode.INVALID_LINEAGE
    assert (await query.trace_session("ok")).complete  # a cycle elsewhere does not matter


async def test_trace_session_self_parent_is_invalid_lineage():
    store = SessionStore()
    tree(store, {"me": (1, "me")})
    with pytest.raises(SessionQueryError) as info:
        await SessionQuery(live=[store]).trace_session("me")
    assert info.value.code is ErrorCode.INVALID_LINEAGE


async def test_trace_session_of_a_missing_session_is_session_not_found():
    with pytest.raises(SessionQueryError) as info:
        await SessionQuery(live=[SessionStore()]).trace_session("nope")
    assert info.value.code is ErrorCode.SESSION_NOT_FOUND


async def test_trace_session_ten_thousand_deep_chain_from_both_ends():
    depth = 10_000
    store = SessionStore()
    store.create("n0", created_at=0)
    for i in range(1, depth):
        store.create(f"n{i}", created_at=i, parent_session=f"n{i - 1}")
    query = SessionQuery(live=[store])

    from_leaf = await query.trace_session(f"n{depth - 1}")
    assert len(from_leaf.ancestors) == depth - 1
    assert from_leaf.ancestors[0].id == f"n{depth - 2}"
    assert from_leaf.root.id == "n0" and from_leaf.complete
    assert from_leaf.descendants == []

    from_root = await query.trace_session("n0")
    assert from_root.ancestors == [] and from_root.root.id == "n0"
    node, seen = from_root.descendants, 0
    while node:
        (only,) = node
        seen += 1
        assert only.session.id == f"n{seen}"
        node = only.descendants
    assert seen == depth - 1
    assert len(flatten(from_root.descendants)) == depth - 1
