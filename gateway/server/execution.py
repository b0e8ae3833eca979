"""The execution context: lists of objects whose selection is plain leaves, completed in one loop.

graphql-core completes each field of each list item on its own: a resolve info,
the resolver, an awaitable check, the nullability and leaf checks, the field
dict. A page of 100 events selecting `seq type surface` is 400 such
completions, most of the page's CPU once the SQL is cheap. When a list's item
type is an object type and the item's selection (after `@skip`/`@include`) is
only leaf fields resolved by `gateway.server.types.plain` resolvers (or
`__typename`), with no arguments and nothing deferred, each item is completed
here in one loop instead: the same resolvers, the same `is_type_of` check, the
same `coerce_output_value` of each leaf type, the same field order. Once an item
has passed the awaitable check and `is_type_of`, later items of exactly its class
skip both calls where their answers are the class's (`_exact_type`: a plain class,
Strawberry's `is_type_of`, no `__await__` or type cast in the item's own `__dict__`).

What it trades: nothing in the answer. An item the loop cannot finish exactly
(a resolver raises or returns an awaitable, an error value or null where the
type is non-null, a leaf coerces to nothing, `is_type_of` says no) is completed
again by graphql-core's own path, which reports the error as it always did.
The plain resolvers read the object only, except `Event.data`, which charges
the response budget: re-completing an item whose payload was charged before a
later field failed charges it twice (only an answer that already has an error;
the only field failing after `data` in practice is a tripped budget, whose
answer is that error alone).
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import CoroutineType, GeneratorType
from typing import Any

from graphql import (
    GRAPHQL_MAX_INT,
    GRAPHQL_MIN_INT,
    GraphQLEnumType,
    GraphQLLeafType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLScalarType,
    Undefined,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList
from graphql.execution.executor import collect_iterator_awaitables
from graphql.pyutils import Path, gather_with_cancel
from graphql.pyutils import is_awaitable as graphql_is_awaitable
from graphql.type.definition import GraphQLResolveInfoHelpers
from graphql.type.scalars import serialize_boolean, serialize_id, serialize_int, serialize_string
from strawberry.execution.is_awaitable import optimized_is_awaitable
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import CustomGraphQLEnumType, GraphQLCoreConverter
from strawberry.types.cast import TYPE_CAST_ATTRIBUTE

from .types.plain import plain_read

_MISS = object()


def _weak_helpers(context: weakref.ref[GatewayExecutionContext]) -> GraphQLResolveInfoHelpers:
    """The context's `track` and `gather` through `context`, a weak reference. Once the
    execution is gone there is nothing to track for, and gathering needs no context."""

    def track(values: Sequence[Any]) -> None:
        ctx = context()
        if ctx is not None:
            ctx.track_async_work(values)

    def gather(values: Sequence[Awaitable[Any]]) -> Awaitable[list[Any]]:
        ctx = context()
        return gather_with_cancel(*values) if ctx is None else ctx.gather_async_work(values)

    return GraphQLResolveInfoHelpers(gather=gather, track=track)


_Leaf = tuple[str, Callable[[Any], Any] | None, Any, Any, GraphQLLeafType | None, bool]
"""(response key, read of the object (None: `__typename`), exact type, table or typename,
leaf type, non-null): a value whose type is exactly `exact` is its own output (an Int
within 32 bits), or for an enum the name its table holds."""

_MIN_INT, _MAX_INT = GRAPHQL_MIN_INT, GRAPHQL_MAX_INT
_SAME: dict[Callable[[Any], Any], type] = {
    serialize_int: int,
    serialize_string: str,
    serialize_id: str,
    serialize_boolean: bool,
}
"""graphql-core's own coercers and the one type whose values each returns unchanged
(serialize_int: within 32 bits)."""

_ENUM_TABLES: weakref.WeakKeyDictionary[GraphQLEnumType, dict[int, str]] = (
    weakref.WeakKeyDictionary()
)


def _enum_table(enum_type: CustomGraphQLEnumType) -> dict[int, str]:
    """The name a Strawberry enum's own `coerce_output_value` gives each member of its
    Python class (a pure function of the schema), made once per type, by the member's
    id: an enum's `__hash__` is a Python call, and the class holds its members (so their
    ids) for as long as the type holds the class."""
    table = _ENUM_TABLES.get(enum_type)
    if table is None:
        table = {}
        member: Any
        for member in enum_type.wrapped_cls:
            try:
                name = enum_type.coerce_output_value(member)
            except Exception:
                continue
            if isinstance(name, str):
                table[id(member)] = name
        _ENUM_TABLES[enum_type] = table
    return table


def _shortcut(leaf_type: GraphQLLeafType) -> tuple[type | None, dict[int, str] | None]:
    """The exact type whose values `leaf_type` outputs without its coercer, and for an
    enum the table of names: (None, None) when every value goes to the coercer."""
    if isinstance(leaf_type, CustomGraphQLEnumType):
        if type(leaf_type).coerce_output_value is CustomGraphQLEnumType.coerce_output_value:
            return leaf_type.wrapped_cls, _enum_table(leaf_type)
        return None, None
    if isinstance(leaf_type, GraphQLScalarType):
        coerce = leaf_type.coerce_output_value
        if coerce is not None:
            return _SAME.get(coerce), None
    return None, None


_AWAITABLE_CHECKS = frozenset({graphql_is_awaitable, optimized_is_awaitable})
"""The awaitable checks whose answer `_exact_type` knows: each is (coroutine,
iterable-coroutine generator, `hasattr(value, "__await__")`)."""
_SHADOWING = ("__await__", TYPE_CAST_ATTRIBUTE)
"""Instance attributes that would change an item's awaitable check or `is_type_of`."""


def _exact_type(item: Any, is_type_of: Any, is_awaitable: Any) -> type | None:
    """`type(item)` when, for every instance of exactly that type whose `__dict__` holds
    none of `_SHADOWING`, the awaitable check says no and `is_type_of` says yes as they
    did for `item` (just checked): a class with a plain attribute lookup (no
    `__getattr__`, object's `__getattribute__`), no `__await__` or type cast of its own,
    not a coroutine or generator, instances with a `__dict__`; and `is_type_of` None or
    Strawberry's, whose answer depends only on that cast and the class. Else None."""
    cls = type(item)
    if is_awaitable not in _AWAITABLE_CHECKS:
        return None
    if is_type_of is not None and getattr(is_type_of, "__module__", None) != _STRAWBERRY_IS_TYPE_OF:
        return None
    own = [vars(k) for k in cls.__mro__ if k is not object]
    if (
        issubclass(cls, CoroutineType | GeneratorType)
        or any("__getattribute__" in d or "__getattr__" in d for d in own)
        or any(hasattr(cls, name) for name in _SHADOWING)
        or not isinstance(getattr(item, "__dict__", None), dict)
    ):
        return None
    return cls


_STRAWBERRY_IS_TYPE_OF = GraphQLCoreConverter.__module__


class _NoItem:
    """No list item is exactly of this type (the loop's class before one is known)."""


class _Plan:
    """How to complete one item of a list of objects selecting plain leaves."""

    __slots__ = ("fields", "is_type_of", "keep")

    def __init__(self, fields: list[_Leaf], is_type_of: Any, keep: FieldDetailsList) -> None:
        self.fields = fields
        self.is_type_of = is_type_of
        self.keep = keep  # holds the list alive, so its id (the cache key) stays its own


class GatewayExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's execution context with the plain-list path (module docstring).

    Its resolve-info helpers reach it through a weak reference: graphql-core's hold
    two bound methods of the context, a reference cycle that made every request's
    execution (its collected fields, variables and errors, ~35 objects) garbage only
    the cyclic collector frees, under load a large share of the server's CPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plain_plans: dict[tuple[int, int], _Plan | None] = {}
        self.async_helpers = _weak_helpers(weakref.ref(self))

    def _plain_plan(
        self, item_type: GraphQLOutputType, field_details_list: FieldDetailsList
    ) -> _Plan | None:
        key = (id(item_type), id(field_details_list))
        plans = self._plain_plans
        if key in plans:
            return plans[key]
        plan = plans[key] = self._make_plan(item_type, field_details_list)
        return plan

    def _make_plan(
        self, item_type: GraphQLOutputType, field_details_list: FieldDetailsList
    ) -> _Plan | None:
        manager = self.middleware_manager
        if manager is not None and manager.middlewares:  # a resolver wrapped: not plain
            return None
        object_type = item_type.of_type if isinstance(item_type, GraphQLNonNull) else item_type
        if not isinstance(object_type, GraphQLObjectType):
            return None
        grouped, deferred, _forbidden = self.collect_subfields(object_type, field_details_list)
        if deferred:
            return None
        fields: list[_Leaf] = []
        for response_key, details in grouped.items():
            node = details[0].node
            name = node.name.value
            if name == "__typename":
                fields.append((response_key, None, None, object_type.name, None, True))
                continue
            if node.arguments or any(d.fragment_variable_values for d in details):
                return None
            field_def = object_type.fields.get(name)
            if field_def is None or field_def.args:
                return None
            read = plain_read(field_def.resolve)
            if read is None:
                return None
            leaf_type = field_def.type
            non_null = isinstance(leaf_type, GraphQLNonNull)
            if non_null:
                leaf_type = leaf_type.of_type
            if not is_leaf_type(leaf_type):
                return None
            exact, table = _shortcut(leaf_type)
            fields.append((response_key, read, exact, table, leaf_type, non_null))
        return _Plan(fields, object_type.is_type_of, field_details_list)

    def _leaf(self, value: Any, leaf_type: GraphQLLeafType | None, non_null: bool) -> Any:
        """A leaf's value that is not its own output completed as graphql-core completes
        it, or `_MISS` where graphql-core must (an error, an awaitable, null where
        non-null)."""
        if value is None or value is Undefined:
            return _MISS if non_null else None
        if isinstance(value, Exception):
            return _MISS
        if self.is_awaitable(value):
            close = getattr(value, "close", None)
            if close is not None:
                close()  # a coroutine never started: graphql-core makes its own
            return _MISS
        assert leaf_type is not None
        try:
            coerced = leaf_type.coerce_output_value(value)
        except Exception:
            return _MISS
        if coerced is None or coerced is Undefined:
            return _MISS
        return coerced

    def complete_iterable_value(
        self,
        item_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo[Any],
        path: Path,
        items: Iterable[Any],
        position_context: Any,
    ) -> Any:
        """graphql-core's loop over a list's items, each item of a plain plan completed
        here, in the loop itself (no item path, no call per item or per field but its
        reads): its `is_type_of`, then each leaf, its own output when exactly its type
        (an enum member: its name), else `_leaf`. The rest (null, errors, awaitables,
        whatever the loop cannot finish) is completed as graphql-core completes it. A
        streamed list (`@stream`) is graphql-core's alone."""
        plan = self._plain_plan(item_type, field_details_list)
        if plan is None or self.get_stream_usage(field_details_list, path) is not None:
            return super().complete_iterable_value(
                item_type, field_details_list, info, path, items, position_context
            )
        is_awaitable, is_type_of, fields, leaf = (
            self.is_awaitable,
            plan.is_type_of,
            plan.fields,
            self._leaf,
        )
        complete_item = super().complete_list_item_value
        completed_results: list[Any] = []
        append_completed = completed_results.append
        awaitable_indices: list[int] = []
        iterator = iter(items)
        # The items' class once one passed both checks, when they are known for the class
        # (`_exact_type`): its next instances skip both calls.
        exact_type: type = _NoItem
        probed = False
        shadow_await, shadow_cast = _SHADOWING
        try:
            for index, item in enumerate(iterator):
                if (
                    type(item) is exact_type
                    and shadow_await not in (d := item.__dict__)
                    and shadow_cast not in d
                ):
                    plain_item = True
                elif is_awaitable(item):
                    append_completed(
                        self.complete_awaitable_list_item_value(
                            item,
                            item_type,
                            field_details_list,
                            info,
                            path.add_key(index, None),
                            position_context,
                        )
                    )
                    awaitable_indices.append(index)
                    continue
                elif (
                    item is not None
                    and not isinstance(item, Exception)
                    and (is_type_of is None or is_type_of(item, info) is True)
                ):
                    plain_item = True
                    if not probed:
                        probed = True
                        exact_type = _exact_type(item, is_type_of, is_awaitable) or _NoItem
                else:
                    plain_item = False
                if plain_item:
                    out: dict[str, Any] = {}
                    for key, read, exact, table, leaf_type, non_null in fields:
                        if read is None:
                            out[key] = table  # __typename
                            continue
                        value: Any
                        try:
                            value = read(item)
                        except Exception:
                            break
                        if type(value) is exact:  # its own output, or an enum member's name
                            if table is None:
                                if exact is not int or _MIN_INT <= value <= _MAX_INT:
                                    out[key] = value
                                    continue
                            else:
                                name = table.get(id(value))
                                if name is not None:
                                    out[key] = name
                                    continue
                        value = leaf(value, leaf_type, non_null)
                        if value is _MISS:
                            break
                        out[key] = value
                    else:
                        append_completed(out)
                        continue
                # not plainly completed: graphql-core's own completion of the item
                if complete_item(
                    item,
                    completed_results,
                    item_type,
                    field_details_list,
                    info,
                    path.add_key(index, None),
                    position_context,
                ):
                    awaitable_indices.append(index)
        except Exception:
            # as graphql-core: settle the awaitables made so far and those still held
            maybe_awaitables = [completed_results[i] for i in awaitable_indices]
            maybe_awaitables.extend(collect_iterator_awaitables(iterator, is_awaitable))
            if maybe_awaitables:
                self.settle_in_background(maybe_awaitables)
            raise

        if not awaitable_indices:
            return completed_results

        async def get_completed_results() -> list[Any]:
            if len(awaitable_indices) == 1:
                i = awaitable_indices[0]
                completed_results[i] = await completed_results[i]
            else:
                awaited = await gather_with_cancel(
                    *(completed_results[i] for i in awaitable_indices)
                )
                for i, sub_result in zip(awaitable_indices, awaited, strict=True):
                    completed_results[i] = sub_result
            return completed_results

        return get_completed_results()


__all__ = ["GatewayExecutionContext"]
