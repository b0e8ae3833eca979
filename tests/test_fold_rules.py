"""SPEC §2: the surface fold, one test (or more) per rule, accepted and rejected cases."""

from __future__ import annotations

import pytest

from gateway.core import ErrorCode, EventSurface, SessionQueryError, fold_surface
from tests.core_helpers import build, ev, replace, tool_data

U, A, T = "user/message", "assistant/message", "tool/result"


def rejected(events, rule: int) -> SessionQueryError:
    with pytest.raises(SessionQueryError) as info:
        fold_surface(events)
    assert info.value.code is ErrorCode.INVALID_SURFACE
    assert f"rule {rule}" in info.value.message
    return info.value


# -- accepted logs -------------------------------------------------------------


def test_fold_appends_in_seq_order_and_log_only_events_stay_off_the_surface():
    log = build(("turn/start", None, None), (U, "append", None), (A, "append", [1]))
    result = fold_surface(log)
    assert result.nodes == (1, 2)
    assert result.replacements == ()
    assert result.classes() == [EventSurface.LOG_ONLY, EventSurface.CURRENT, EventSurface.CURRENT]


def test_fold_replace_puts_its_seq_in_place_of_the_range():
    log = build(
        (U, "append", None),  # 0
        (A, "append", None),  # 1
        (U, "append", None),  # 2
        (A, "append", None),  # 3
        (U, replace(1, 2), [1, 2]),  # 4 replaces 1..2 -> surface 0 4 3
    )
    result = fold_surface(log)
    assert result.nodes == (0, 4, 3)
    (r,) = result.replacements
    assert (r.seq, r.start, r.end, r.shadowed) == (4, 1, 2, (1, 2))
    assert result.surface_of(1) is EventSurface.SHADOWED
    assert result.replaced_by(1) == 4 and result.replaced_by(2) == 4
    assert result.replaced_by(0) is None


def test_fold_shadowed_seqs_are_in_surface_order_after_earlier_replacements():
    log = build(
        (U, "append", None),  # 0
        (A, "append", None),  # 1
        (U, "append", None),  # 2
        (A, replace(0, 0), [0]),  # 3 -> surface 3 1 2
        (U, replace(3, 1), [1, 3]),  # 4 -> shadows 3 then 1 (surface order, not seq order)
    )
    result = fold_surface(log)
    assert result.nodes == (4, 2)
    assert result.replacements[-1].shadowed == (3, 1)


def test_fold_nested_replacements_chain_to_the_last_replacer():
    log = build(
        (U, "append", None),
        (A, "append", None),
        (U, replace(0, 1), [0, 1]),  # 2 shadows 0, 1
        (A, "append", None),
        (U, replace(2, 3), [2, 3]),  # 4 shadows 2 (the earlier replacer) and 3
    )
    result = fold_surface(log)
    assert result.nodes == (4,)
    assert result.replaced_by(0) == 2 and result.replaced_by(2) == 4


def test_fold_replace_with_start_equal_to_end_is_accepted():
    log = build((U, "append", None), (U, replace(0, 0), [0]))
    assert fold_surface(log).nodes == (1,)


def test_fold_stored_null_surface_op_and_sources_mean_absent():
    from gateway.core import SessionEvent

    event = SessionEvent.from_json(
        {
            "type": "turn/start",
            "seq": 0,
            "time": 1,
            "data": {},
            "surfaceOp": None,
            "sourceEventSeqs": None,
        }
    )
    assert fold_surface([event]).classes() == [EventSurface.LOG_ONLY]


def test_fold_empty_log_is_accepted():
    result = fold_surface([])
    assert result.nodes == () and result.classes() == []


# -- rule 1: seqs contiguous from 0 ------------------------------------------------


def test_rule_1_seq_not_starting_at_zero_is_rejected():
    rejected([ev(1)], 1)


def test_rule_1_gap_in_seqs_is_rejected():
    rejected([ev(0), ev(2)], 1)


def test_rule_1_repeated_seq_is_rejected():
    rejected([ev(0), ev(0)], 1)


def test_rule_1_non_integer_seq_is_rejected():
    rejected([ev(0), ev(True)], 1)  # type: ignore[arg-type]


# -- rule 2: only surface events carry surfaceOp / sourceEventSeqs -----------------


def test_rule_2_log_only_event_with_surface_op_is_rejected():
    rejected([ev(0, "tool/call", op="append")], 2)


def test_rule_2_log_only_event_with_sources_is_rejected():
    rejected([ev(0), ev(1, "compaction/summary", src=[0])], 2)


def test_rule_2_unknown_plugin_type_is_log_only():
    log = [ev(0, "plugin/whatever"), ev(1, U, op="append")]
    assert fold_surface(log).classes() == [EventSurface.LOG_ONLY, EventSurface.CURRENT]


# -- rule 3: surface event needs a well-formed surfaceOp ---------------------------


def test_rule_3_surface_event_without_surface_op_is_rejected():
    rejected([ev(0, U)], 3)


@pytest.mark.parametrize(
    "op",
    [
        "prepend",
        "APPEND",
        {"op": "replace", "start": 0},
        {"op": "replace", "start": 0, "end": 0, "extra": 1},
        {"op": "delete", "start": 0, "end": 0},
        {"op": "replace", "start": -1, "end": 0},
        {"op": "replace", "start": 0, "end": "0"},
        {"op": "replace", "start": True, "end": 0},
        {"op": "replace", "start": 0.0, "end": 0},
        ["replace", 0, 0],
        7,
    ],
)
def test_rule_3_malformed_surface_op_is_rejected(op):
    rejected([ev(0, U, op="append"), ev(1, A, op=op, src=[0])], 3)


# -- rule 4: replace endpoints on the current surface, start not after end ---------


def test_rule_4_replace_endpoint_that_was_shadowed_is_rejected():
    log = build((U, "append", None), (U, replace(0, 0), [0]), (U, replace(0, 0), [0]))
    err = rejected(log, 4)
    assert "shadowed" in err.message


def test_rule_4_replace_endpoint_that_is_log_only_is_rejected():
    log = build(("turn/start", None, None), (U, "append", None), (U, replace(0, 1), [0, 1]))
    assert "log-only" in rejected(log, 4).message


def test_rule_4_replace_endpoint_not_yet_in_the_log_is_rejected():
    log = build((U, "append", None), (U, replace(0, 5), [0]))
    rejected(log, 4)


def test_rule_4_replace_endpoint_naming_itself_is_rejected():
    log = build((U, "append", None), (U, replace(0, 1), [0]))
    rejected(log, 4)


def test_rule_4_start_after_end_on_the_surface_is_rejected():
    log = build((U, "append", None), (A, "append", None), (U, replace(1, 0), [0, 1]))
    assert "after" in rejected(log, 4).message


def test_rule_4_order_is_surface_order_not_seq_order():
    # after 3 replaces 0, the surface is 3 1 2: start=3, end=1 is in order though 3 > 1
    ok = build(
        (U, "append", None),
        (A, "append", None),
        (U, "append", None),
        (A, replace(0, 0), [0]),
        (U, replace(3, 1), [3, 1]),
    )
    assert fold_surface(ok).nodes == (4, 2)
    bad = build(
        (U, "append", None),
        (A, "append", None),
        (U, "append", None),
        (A, replace(0, 0), [0]),
        (U, replace(1, 3), [3, 1]),  # 1 comes after 3 on the surface
    )
    rejected(bad, 4)


# -- rule 5: sourceEventSeqs well formed ------------------------------------------


@pytest.mark.parametrize(
    "src",
    [
        [-1],
        ["0"],
        [0.0],
        [True],
        [None],
        "0",
        5,
        {"0": 0},
    ],
)
def test_rule_5_sources_that_are_not_non_negative_integers_are_rejected(src):
    log = [ev(0, U, op="append"), ev(1, U, op="append", src=src)]
    rejected(log, 5)


def test_rule_5_empty_sources_rejected_except_on_assistant_message():
    rejected([ev(0, U, op="append", src=[])], 5)
    rejected([ev(0, T, op="append", src=[])], 5)
    assert fold_surface([ev(0, A, op="append", src=[])]).nodes == (0,)


def test_rule_5_repeated_source_is_rejected():
    log = [ev(0, U, op="append"), ev(1, A, op="append", src=[0, 0])]
    assert "repeats" in rejected(log, 5).message


def test_rule_5_source_not_earlier_than_the_event_is_rejected():
    rejected([ev(0, U, op="append"), ev(1, A, op="append", src=[1])], 5)
    rejected([ev(0, U, op="append"), ev(1, A, op="append", src=[2])], 5)


def test_rule_5_sources_may_cite_log_only_and_shadowed_events():
    log = build(
        ("tool/call", None, None),
        (T, "append", [0]),
        (U, replace(1, 1), [1]),
        (A, "append", [0, 1, 2]),
    )
    assert fold_surface(log).nodes == (2, 3)


# -- rule 6: a replace cites every node it shadows --------------------------------


def test_rule_6_replace_without_sources_is_rejected():
    log = build((U, "append", None), (U, replace(0, 0), None))
    rejected(log, 6)


def test_rule_6_replace_missing_one_shadowed_node_in_sources_is_rejected():
    log = build((U, "append", None), (A, "append", None), (U, replace(0, 1), [0]))
    assert "[1]" in rejected(log, 6).message


def test_rule_6_replace_may_cite_more_than_it_shadows():
    log = build(("turn/start", None, None), (U, "append", None), (U, replace(1, 1), [0, 1]))
    assert fold_surface(log).nodes == (2,)


# -- rule 7: tool/result rewrites -----------------------------------------------------


def tool_log(new_data, *, start=1, end=1, extra=()):
    return [
        ev(0, "tool/call"),
        ev(1, T, tool_data("long output"), "append", [0]),
        *extra,
        ev(2 + len(extra), T, new_data, replace(start, end), [start, end] if start != end else [1]),
    ]


def test_rule_7_tool_result_rewrite_of_content_only_is_accepted():
    result = fold_surface(tool_log(tool_data("[elided]")))
    assert result.nodes == (2,)
    assert result.replaced_by(1) == 2


def test_rule_7_tool_result_rewrite_may_change_content_type():
    assert fold_surface(tool_log(tool_data([{"type": "text", "text": "x"}]))).nodes == (2,)


def test_rule_7_tool_result_replacing_two_nodes_is_rejected():
    log = [
        ev(0, T, tool_data("a"), "append"),
        ev(1, T, tool_data("b"), "append"),
        ev(2, T, tool_data("c"), replace(0, 1), [0, 1]),
    ]
    rejected(log, 7)


def test_rule_7_tool_result_replacing_a_message_is_rejected():
    log = [ev(0, U, tool_data("a"), "append"), ev(1, T, tool_data("b"), replace(0, 0), [0])]
    rejected(log, 7)


def test_rule_7_other_types_may_replace_a_tool_result():
    log = [ev(0, T, tool_data("a"), "append"), ev(1, U, {"content": []}, replace(0, 0), [0])]
    assert fold_surface(log).nodes == (1,)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(extra=1),
        lambda d: d["message"].update(role="user"),
        lambda d: d["message"]["content"].append({"type": "text"}),
        lambda d: d["message"]["content"][0].update(toolCallId="c2"),
        lambda d: d["message"]["content"][0].pop("type"),
    ],
    ids=["outside-message", "message-field", "content-length", "item-field", "item-key-removed"],
)
def test_rule_7_tool_result_rewrite_changing_anything_else_is_rejected(mutate):
    new = tool_data("[elided]")
    mutate(new)
    rejected(tool_log(new), 7)


@pytest.mark.parametrize(
    "bad",
    [None, {}, {"message": None}, {"message": {"content": []}}, {"message": {"content": ["x"]}}],
)
def test_rule_7_both_events_need_an_object_at_content_0(bad):
    rejected(tool_log(bad), 7)
    log = [ev(0, T, bad, "append"), ev(1, T, tool_data("x"), replace(0, 0), [0])]
    rejected(log, 7)


# -- whole-log acceptance ----------------------------------------------------------------


def test_fold_rejects_the_log_as_a_whole_even_when_the_error_is_last():
    log = build((U, "append", None), (A, "append", None), (U, None, None))
    err = rejected(log, 3)
    assert "seq 2" in err.message
