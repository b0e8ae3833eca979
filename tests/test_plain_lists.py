"""The plain-list path (`gateway.server.execution`): a list of objects selecting only
plain leaves answers exactly what graphql-core's own completion answers, values of
every leaf kind included (the exact-type shortcuts, enum tables and the coercers'
conversions and errors), whatever the selection (aliases, repeats, fragments,
`@skip`/`@include`, `__typename`) and whatever the items (null, errors, awaitables)."""

from __future__ import annotations

import asyncio
import enum
from typing import Any

import pytest
import strawberry
from hypothesis import given, settings
from hypothesis import strategies as st
from strawberry.scalars import JSON
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from gateway.server.execution import GatewayExecutionContext
from gateway.server.types.plain import install_plain_resolvers, plain, plain_read


@strawberry.enum
class Color(enum.Enum):
    RED = "red"
    GREEN = "g"
    BLUE = 3


@strawberry.type
class Thing:
    i: int | None
    s: str | None
    b: bool | None
    f: float | None
    ident: strawberry.ID | None
    color: Color | None
    j: JSON | None
    nn_i: int
    nn_color: Color

    @plain("i twice")
    def twice(self) -> int | None:
        return None if self.i is None else 2 * self.i  # type: ignore[operator]

    @plain("raises on a 0")
    def inverse(self) -> float | None:
        return 1 / self.nn_i


@strawberry.interface
class Named:
    i: int | None


@strawberry.type
class Tagged(Named):
    """A type with an interface: Strawberry gives it an `is_type_of` (Thing has none)."""


@strawberry.type
class Root:
    things: list[Thing | None]
    strict: list[Thing]
    tagged: list[Tagged | None] = strawberry.field(default_factory=list)


def _thing(**kw: Any) -> Thing:
    base: dict[str, Any] = dict(
        i=1, s="a", b=True, f=1.5, ident="x", color=Color.RED, j={"k": [1]}, nn_i=2
    )
    base["nn_color"] = Color.BLUE
    base.update(kw)
    return Thing(**base)


VALUES: dict[str, list[Any]] = {
    "i": [0, -(2**31), 2**31 - 1, 2**31, -(2**31) - 1, 2**40, True, 3.0, 3.5, "4", "x", None],
    "s": ["", "a", "\ud800", 5, True, 2.5, None, ["l"]],
    "b": [True, False, 0, 1, 2.0, "no", None],
    "f": [0.5, 2, float("nan"), True, "1.5", None],
    "ident": ["x", "", 7, 7.0, True, None],
    "color": [Color.RED, Color.GREEN, Color.BLUE, "red", 3, "RED", "nope", None],
    "j": [None, 1, "s", {"a": None}, [1, 2]],
    "nn_i": [1, 0, 2**40, None, "z"],
    "nn_color": [Color.GREEN, None, "g", 99],
}
FIELDS = ["i", "s", "b", "f", "ident", "color", "j", "nnI", "nnColor", "twice", "inverse"]


def _schema(context_class: Any) -> strawberry.Schema:
    schema = strawberry.Schema(query=Root, execution_context_class=context_class)
    install_plain_resolvers(schema._schema)
    return schema


FAST = _schema(GatewayExecutionContext)
SLOW = _schema(StrawberryGraphQLCoreExecutionContext)


def _answer(schema: strawberry.Schema, query: str, root: Root, variables: Any = None) -> Any:
    result = schema.execute_sync(query, root_value=root, variable_values=variables)
    errors = [(e.message, e.path) for e in result.errors or []]
    return result.data, errors


def _both(query: str, root: Root, variables: Any = None) -> Any:
    fast = _answer(FAST, query, root, variables)
    assert fast == _answer(SLOW, query, root, variables)
    return fast


def test_schema_fields_read_plainly() -> None:
    fields = FAST._schema.type_map["Thing"].fields  # type: ignore[union-attr]
    assert all(plain_read(fields[name].resolve) is not None for name in FIELDS)


@pytest.mark.parametrize("field", sorted(VALUES))
def test_every_leaf_value_completes_as_graphql_core_completes_it(field: str) -> None:
    """Each value alone in one item, the others valid: conversions (True as Int 1, 5 as
    String "5"), errors (Int past 32 bits, NaN, an unknown enum value) and nulls where
    the type is non-null, each as graphql-core reports it."""
    name = {"nn_i": "nnI", "nn_color": "nnColor"}.get(field, field)
    root = Root(things=[_thing(**{field: v}) for v in VALUES[field]], strict=[])
    data, _ = _both(f"{{ things {{ {name} i }} }}", root)
    assert len(data["things"]) == len(VALUES[field])


def test_enum_members_answer_their_graphql_names() -> None:
    root = Root(things=[_thing(color=c, nn_color=c) for c in Color], strict=[])
    data, errors = _both("{ things { color nnColor } }", root)
    assert data["things"] == [{"color": c.name, "nnColor": c.name} for c in Color]
    assert errors == []


def test_non_null_items_and_fields_propagate_as_graphql_core() -> None:
    root = Root(
        things=[_thing(), None, _thing(nn_i=None)],
        strict=[_thing(), _thing(nn_color=None), _thing()],
    )
    _, errors = _both("{ things { nnI nnColor } strict { nnI nnColor } }", root)
    assert errors


@pytest.mark.parametrize(
    "query",
    [
        "{ things { a: i b: i i } }",
        "{ things { i ... on Thing { s i } ...F } } fragment F on Thing { color }",
        "{ things { i @skip(if: true) s @include(if: false) color @include(if: true) } }",
        "query($x: Boolean!) { things { i @skip(if: $x) s @include(if: $x) } }",
        "{ things { __typename t: __typename twice } }",
        "{ things { inverse i } }",
    ],
)
def test_selections_answer_as_graphql_core(query: str) -> None:
    root = Root(things=[_thing(), _thing(i=None, nn_i=0), None, _thing(i=2**31)], strict=[])
    _both(query, root, {"x": True})


def test_items_graphql_core_must_complete_go_to_it() -> None:
    """An error item, an object without the attributes: graphql-core's answer."""
    root = Root(things=[_thing(), ValueError("broken"), object(), _thing()], strict=[])  # type: ignore[list-item]
    data, errors = _both("{ things { i s } }", root)
    assert data["things"][1] is None and data["things"][2] == {"i": None, "s": None}
    assert len(errors) == 3


def test_awaitable_items_are_awaited_as_graphql_core_awaits_them() -> None:
    async def later(thing: Thing | None) -> Thing | None:
        return thing

    async def run(schema: strawberry.Schema) -> Any:
        root = Root(things=[_thing(), later(_thing(i=5)), later(None), _thing()], strict=[])  # type: ignore[list-item]
        result = await schema.execute("{ things { i color } }", root_value=root)
        return result.data, [(e.message, e.path) for e in result.errors or []]

    assert asyncio.run(run(FAST)) == asyncio.run(run(SLOW))


def test_the_plain_list_path_runs_for_plain_selections(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons above compare the fast path, not graphql-core with itself: a plain
    item never reaches graphql-core's per-item completion, one it cannot finish does."""
    seen: list[Any] = []
    original = StrawberryGraphQLCoreExecutionContext.complete_list_item_value

    def spy(self: Any, item: Any, *args: Any) -> Any:
        seen.append(item)
        return original(self, item, *args)

    monkeypatch.setattr(StrawberryGraphQLCoreExecutionContext, "complete_list_item_value", spy)
    things = [_thing(), _thing(i=2**31), None]
    data, _ = _answer(FAST, "{ things { i s color } }", Root(things=things, strict=[]))
    assert data["things"][0] == {"i": 1, "s": "a", "color": "RED"}
    assert seen == things[1:]


_selection = st.lists(
    st.tuples(
        st.sampled_from([*FIELDS, "__typename"]),
        st.sampled_from(["", "a: ", "b: "]),
        st.sampled_from(["", " @skip(if: true)", " @skip(if: false)", " @include(if: false)"]),
    ),
    min_size=1,
    max_size=6,
)


def _valid_alias(selection: list[tuple[str, str, str]]) -> bool:
    """Validation refuses one alias for two different fields: not a selection to compare."""
    named: dict[str, str] = {}
    for field, alias, _ in selection:
        key = alias[:-2] if alias else field
        if named.setdefault(key, field) != field:
            return False
    return True


_item = st.one_of(
    st.none(),
    st.fixed_dictionaries({k: st.sampled_from(v) for k, v in VALUES.items()}).map(
        lambda kw: _thing(**kw)
    ),
)


@settings(max_examples=150, deadline=None)
@given(selection=_selection, items=st.lists(_item, max_size=4), strict=st.booleans())
def test_any_selection_of_plain_leaves_answers_as_graphql_core(
    selection: list[tuple[str, str, str]], items: list[Thing | None], strict: bool
) -> None:
    if not _valid_alias(selection):
        return
    fields = " ".join(f"{alias}{field}{directive}" for field, alias, directive in selection)
    root = Root(things=items, strict=[t for t in items if t is not None])
    _both(f"{{ {'strict' if strict else 'things'} {{ {fields} }} }}", root)


class SubTagged(Tagged):
    pass


def _own_await() -> Any:
    yield None


def _awaiting() -> Tagged:
    item = Tagged(i=7)
    item.__await__ = _own_await  # type: ignore[attr-defined]
    return item


@pytest.mark.parametrize(
    ("make", "failed"),
    [
        (lambda: strawberry.cast(Thing, Tagged(i=9)), True),  # is_type_of says no
        (_awaiting, True),  # the awaitable check says yes: awaited, and fails
        (lambda: SubTagged(i=8), False),  # another class: both checks made
    ],
)
def test_an_item_cast_or_awaitable_by_its_own_attributes_completes_as_graphql_core(
    make: Any, failed: bool
) -> None:
    """After a first plain item, later items of exactly its class skip the awaitable
    check and `is_type_of`, unless their own `__dict__` could change either answer: an
    instance cast to another type (`strawberry.cast`), one with an `__await__` of its
    own, and a subclass's instance each get graphql-core's answer."""

    async def run(schema: strawberry.Schema) -> Any:
        root = Root(things=[], strict=[], tagged=[Tagged(i=1), make(), Tagged(i=4)])
        result = await schema.execute("{ tagged { i } }", root_value=root)
        return result.data, [(e.message, e.path) for e in result.errors or []]

    fast = asyncio.run(run(FAST))
    assert fast == asyncio.run(run(SLOW))
    data, errors = fast
    assert data["tagged"][0] == {"i": 1} and data["tagged"][2] == {"i": 4}
    assert [path for _, path in errors] == ([["tagged", 1]] if failed else [])


def test_items_of_the_first_plain_items_class_skip_both_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shortcut is taken (so the comparison above compares it): `is_type_of` runs for
    the first item of a page only."""
    tagged_type: Any = FAST._schema.type_map["Tagged"]
    calls: list[Any] = []
    original = tagged_type.is_type_of

    def counting(obj: Any, info: Any) -> bool:
        calls.append(obj)
        return bool(original(obj, info))

    counting.__module__ = original.__module__  # Strawberry's check, counted
    monkeypatch.setattr(tagged_type, "is_type_of", counting)
    tagged = [Tagged(i=n) for n in range(5)]
    data, errors = _answer(FAST, "{ tagged { i } }", Root(things=[], strict=[], tagged=tagged))
    assert data["tagged"] == [{"i": n} for n in range(5)] and errors == []
    assert calls == tagged[:1]
