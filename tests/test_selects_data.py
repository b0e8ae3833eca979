"""`selects_data` (gateway.server.types.selection) walks graphql-core's nodes and
answers what a walk of Strawberry's `info.selected_fields` answers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
import strawberry
from strawberry.types.nodes import FragmentSpread, InlineFragment, SelectedField

from gateway.server.types.selection import selects_data


def _strawberry_walk(info: Any) -> bool:
    """The walk `selects_data` made before, over Strawberry's converted selection."""

    def names(selections: Iterable[Any]) -> bool:
        pending = list(selections)
        while pending:
            node = pending.pop()
            if isinstance(node, SelectedField):
                if node.name == "data":
                    return True
                pending.extend(node.selections)
            elif isinstance(node, FragmentSpread | InlineFragment):
                pending.extend(node.selections)
            else:
                return True
        return False

    return any(names(field.selections) for field in info.selected_fields)


@strawberry.type
class Leaf:
    data: int = 1
    seq: int = 2

    @strawberry.field
    def next(self, k: int = 0) -> Leaf:
        return Leaf()


SEEN: list[tuple[bool, bool]] = []


@strawberry.type
class Query:
    @strawberry.field
    def page(self, info: strawberry.Info, first: int = 1) -> list[Leaf]:
        SEEN.append((selects_data(info), _strawberry_walk(info)))
        return [Leaf()]


SCHEMA = strawberry.Schema(query=Query)


@pytest.mark.parametrize(
    ("document", "wanted"),
    [
        ("{ page { seq } }", False),
        ("{ page { data } }", True),
        ("{ page { d: data } }", True),
        ("{ page { data: seq } }", False),
        ("{ page { next(k: 2) { next { data } } } }", True),
        ("{ page { ... on Leaf { seq } } }", False),
        ("{ page { ... on Leaf { next { data } } } }", True),
        ("{ page { ...F ...F } } fragment F on Leaf { seq }", False),
        (
            "{ page { ...F next { ...F } } } "
            "fragment F on Leaf { seq ...G } fragment G on Leaf { data }",
            True,
        ),
        ("{ page { data @skip(if: true) seq } }", True),
        ("{ a: page(first: 2) { seq } b: page { data } }", False),
    ],
)
def test_selects_data_answers_what_strawberrys_selection_answers(
    document: str, wanted: bool
) -> None:
    SEEN.clear()
    result = SCHEMA.execute_sync(document)
    assert result.errors is None
    fast, slow = SEEN[0]
    assert fast == slow == wanted
    assert all(f == s for f, s in SEEN)
