"""The execution context: lists of objects whose selection is plain leaves, completed in one loop.

graphql-core completes each field of each list item on its own: a resolve info,
the resolver, an awaitable check, the nullability and leaf checks, the field
dict. A page of 100 events selecting `seq type surface` is 400 such
completions, most of the page's CPU once the SQL is cheap. When a list's item
type is an object type and the item's selection (after `@skip`/`@include`) is
only leaf fields resolved by `gateway.server.types.plain` resolvers (or
`__typename`), with no arguments and nothing deferred, each item is completed
here in one loop instead: the same resolvers, the same `is_type_of` check, the
same `coerce_output_value` of each leaf type, the same field order.

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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from graphql import (
    GraphQLLeafType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    Undefined,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList
from graphql.pyutils import Path, gather_with_cancel
from graphql.type.definition import GraphQLResolveInfoHelpers
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from .types.plain import is_plain_resolver

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


_Leaf = tuple[str, Callable[[Any, Any], Any] | None, GraphQLLeafType | None, bool, str]
"""(response key, resolver (None: `__typename`), leaf type, non-null, typename)."""


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
                fields.append((response_key, None, None, True, object_type.name))
                continue
            if node.arguments or any(d.fragment_variable_values for d in details):
                return None
            field_def = object_type.fields.get(name)
            if field_def is None or field_def.args or not is_plain_resolver(field_def.resolve):
                return None
            leaf_type = field_def.type
            non_null = isinstance(leaf_type, GraphQLNonNull)
            if non_null:
                leaf_type = leaf_type.of_type
            if not is_leaf_type(leaf_type):
                return None
            fields.append((response_key, field_def.resolve, leaf_type, non_null, ""))
        return _Plan(fields, object_type.is_type_of, field_details_list)

    def _complete_plain(self, plan: _Plan, item: Any, info: GraphQLResolveInfo[Any]) -> Any:
        is_type_of = plan.is_type_of
        if is_type_of is not None and is_type_of(item, info) is not True:
            return _MISS
        out: dict[str, Any] = {}
        is_awaitable = self.is_awaitable
        for key, resolve, leaf_type, non_null, typename in plan.fields:
            if resolve is None:
                out[key] = typename
                continue
            try:
                value = resolve(item, info)
            except Exception:
                return _MISS
            if value is None or value is Undefined:
                if non_null:
                    return _MISS
                out[key] = None
                continue
            if isinstance(value, Exception):
                return _MISS
            if is_awaitable(value):
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
            out[key] = coerced
        return out

    def complete_list_item_value(
        self,
        item: Any,
        complete_results: list[Any],
        item_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo[Any],
        item_path: Path,
        position_context: Any,
    ) -> bool:
        plan = self._plain_plan(item_type, field_details_list)
        if plan is not None and item is not None and not isinstance(item, Exception):
            done = self._complete_plain(plan, item, info)
            if done is not _MISS:
                complete_results.append(done)
                return False
        return super().complete_list_item_value(
            item,
            complete_results,
            item_type,
            field_details_list,
            info,
            item_path,
            position_context,
        )


__all__ = ["GatewayExecutionContext"]
