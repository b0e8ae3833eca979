"""The shape and cost checks are remembered per text by exactly what they read.

`DocumentPreparer` keeps, for each known text, a `LimitsMemo` of
`check_document`'s outcomes keyed by the operation name and the values of the
variables the walk read (`gateway.server.document_limits`). These tests hold it
to the rule that makes that safe: the same relevant inputs, the same answer,
in any order; a variable the walk does not read is in no key; a value that
cannot be a key (a list, an object, a long string) is checked afresh; and the
memo agrees with a fresh `check_document` on generated documents and variables.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strawberry.types.graphql import OperationType

from gateway import SessionQuery, SessionStore, create_app
from gateway.server import document_limits
from gateway.server.config import GatewayConfig, Limits
from gateway.server.cost import CostModel
from gateway.server.document_limits import (
    MEMO_ENTRIES,
    MEMO_MAX_STRING,
    DocumentLimits,
    LimitsMemo,
    check_document,
)
from gateway.server.operation import Refused
from gateway.server.schema import build_schema
from tests.test_graphql_helpers import codes, gql

SCHEMA = build_schema()
GRAPHQL = SCHEMA._schema
COST = CostModel(GRAPHQL)
LIMITS = DocumentLimits(
    max_depth=6, max_aliases=4, max_fields=40, max_selections=60, max_same_name=3, max_cost=300
)
QUERY_TYPES = frozenset({OperationType.QUERY})

PAGED = 'query($n: Int) { events(sessionId: "big", first: $n) { nodes { seq } } }'
"""Costs 1 + n objects: refused by a max_cost of 100 from n = 100."""


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str | None]]:
    """The operation names `check_document` really ran for (a memo hit runs nothing)."""
    ran: list[str | None] = []
    real = document_limits.check_document

    def counting(*args: Any) -> Any:
        ran.append(args[-1])
        return real(*args)

    monkeypatch.setattr(document_limits, "check_document", counting)
    yield ran


def _parse(text: str) -> Any:
    from graphql import parse

    return parse(text)


async def test_a_cost_on_a_variable_is_refused_large_and_admitted_small_in_any_order(
    walks: list[str | None],
) -> None:
    from gateway.server.preparation import DocumentPreparer

    preparer = DocumentPreparer(Limits(max_cost=100))

    async def outcome(n: int) -> str:
        try:
            await preparer.prepare(GRAPHQL, PAGED, None, {"n": n}, QUERY_TYPES, "POST")
        except Refused as refused:
            return refused.codes[0]
        return "ok"

    order = [500, 5, 500, 5, 99, 100, 99, 100, 5, 500]
    got = [await outcome(n) for n in order]
    want = ["QUERY_TOO_COSTLY" if n >= 100 else "ok" for n in order]
    assert got == want
    assert len(walks) == 4  # one walk per distinct n: every repeat, either way, remembered


async def test_the_memo_holds_over_http_in_both_directions() -> None:
    store = SessionStore()
    session = store.create("big", created_at=1)
    session.append("user/message", {"text": "m"}, surface_op="append")
    app = create_app(SessionQuery(live=[store]), GatewayConfig(limits=Limits(max_cost=100)))
    for n, refused in [(5, False), (500, True), (5, False), (500, True)]:
        body = await gql(app, PAGED, {"n": n}, status=None)
        assert codes(body) == (["QUERY_TOO_COSTLY"] if refused else [])


def test_a_variable_the_walk_does_not_read_is_in_no_key(walks: list[str | None]) -> None:
    memo = LimitsMemo()
    document = _parse(
        "query($n: Int, $id: ID!) { events(sessionId: $id, first: $n) { nodes { seq } } }"
    )
    for i in range(5):
        variables = {"n": 3, "id": f"session-{i}", "unused": i}
        assert memo.check(GRAPHQL, document, LIMITS, COST, variables, None) is None
    assert len(walks) == 1 and len(memo) == 1


def test_absent_null_and_each_scalar_type_are_distinct_keys(walks: list[str | None]) -> None:
    memo = LimitsMemo()
    document = _parse(PAGED)
    values: list[dict[str, Any]] = [{}, {"n": None}, {"n": 1}, {"n": True}, {"n": 1.0}, {"n": "1"}]
    for variables in values * 2:
        fresh = check_document(GRAPHQL, document, LIMITS, COST, variables, None)
        assert memo.check(GRAPHQL, document, LIMITS, COST, variables, None) == fresh
    assert len(walks) == len(values)


def test_a_value_that_cannot_be_a_key_is_checked_afresh(walks: list[str | None]) -> None:
    memo = LimitsMemo()
    document = _parse(
        'query($f: EventFilter) { events(sessionId: "big", first: 10, filter: $f) '
        "{ nodes { seq } } }"
    )
    unkeyable: list[Any] = [{"text": "x"}, [1], "s" * (MEMO_MAX_STRING + 1)]
    for value in unkeyable * 2:
        fresh = check_document(GRAPHQL, document, LIMITS, COST, {"f": value}, None)
        assert memo.check(GRAPHQL, document, LIMITS, COST, {"f": value}, None) == fresh
    assert len(walks) == 2 * len(unkeyable) and len(memo) == 0


def test_the_memo_is_bounded_per_text() -> None:
    memo = LimitsMemo()
    document = _parse(PAGED)
    for n in range(3 * MEMO_ENTRIES):
        memo.check(GRAPHQL, document, LIMITS, COST, {"n": n}, None)
    assert len(memo) == MEMO_ENTRIES


def test_the_operation_name_is_part_of_the_key(walks: list[str | None]) -> None:
    memo = LimitsMemo()
    document = _parse(
        'query Small { events(sessionId: "big", first: 1) { nodes { seq } } } '
        'query Large { events(sessionId: "big", first: 500) { nodes { seq session { '
        'events(sessionId: "big", first: 500) { nodes { seq } } } } } }'
    )
    for name in ["Small", "Large", "Small", "Large", None, None]:
        fresh = check_document(GRAPHQL, document, LIMITS, COST, None, name)
        assert memo.check(GRAPHQL, document, LIMITS, COST, None, name) == fresh
    assert walks == ["Small", "Large", None]


# -- generated documents: the memo agrees with a fresh walk ----------------------------

_ARG = st.sampled_from(["$x", "$x", "$y", "$z", "3", "250", "null"])
_FIELDS = [
    'events(sessionId: "big", first: {a}) {{ nodes {{ seq {inner} }} }}',
    'events(sessionId: "big", first: {a}, filter: $f) {{ edges {{ node {{ seq }} }} }}',
    'readEvent(sessionId: "big", seq: 1, before: {a}, after: {b}) {{ events {{ seq }} }}',
    "sessions(first: {a}) {{ nodes {{ id surface {{ seq }} {inner} }} }}",
    'session(id: "big") {{ children {{ id }} {inner} }}',
    "sessions(first: {a}) {{ ...Page }}",
]
_INNER = ["", 'session { events(sessionId: "big", first: {a}) { nodes { seq } } }']


@st.composite
def _selection(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(_FIELDS))
    inner = draw(st.sampled_from(_INNER)).replace("{a}", draw(_ARG))
    text = template.format(a=draw(_ARG), b=draw(_ARG), inner=inner)
    alias = draw(st.sampled_from(["", "one: ", "two: "]))
    return alias + text


@st.composite
def _document(draw: st.DrawFn) -> str:
    header = "($x: Int, $y: Int, $z: Int, $f: EventFilter)"
    operations = []
    for name in draw(st.sampled_from([[""], ["A"], ["A", "B"]])):
        fields = " ".join(draw(st.lists(_selection(), min_size=1, max_size=4)))
        operations.append(f"query {name}{header} {{ {fields} }}")
    fragment = " fragment Page on SessionConnection { nodes { id children { id } } }"
    return " ".join(operations) + fragment


_INT = st.one_of(st.sampled_from([-1, 0, 2, 150, 299, 300, 600]), st.integers(-3, 600))
_VALUE = st.one_of(
    _INT,
    _INT,
    _INT,
    st.none(),
    st.booleans(),
    st.sampled_from([0.0, -0.0, 2.5, float("nan")]),
    st.text(max_size=2),
    st.lists(st.integers(0, 3), max_size=2),
    st.fixed_dictionaries({"text": st.one_of(st.none(), st.just("w"))}),
)
_VARIABLES = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(["x", "x", "y", "z", "f", "unused"]), _VALUE, max_size=5),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=_document(),
    values=st.lists(_VARIABLES, min_size=2, max_size=6),
    names=st.lists(st.sampled_from([None, "A", "B", "C"]), min_size=1, max_size=3, unique=True),
    order=st.randoms(use_true_random=False),
)
def test_the_memo_agrees_with_a_fresh_check_on_generated_documents(
    text: str,
    values: list[dict[str, Any] | None],
    names: list[str | None],
    order: Any,
) -> None:
    document = _parse(text)
    memo = LimitsMemo()
    asks = [(name, variables) for name in names for variables in values]
    order.shuffle(asks)
    for operation_name, variables in asks + asks:  # every ask again: from the memo
        fresh = check_document(GRAPHQL, document, LIMITS, COST, variables, operation_name)
        assert memo.check(GRAPHQL, document, LIMITS, COST, variables, operation_name) == fresh
