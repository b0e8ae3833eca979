"""How many objects an operation can return, estimated before it runs.

The estimate counts composite values (objects) a response can hold; scalar
leaves are free (their number per object is bounded by the document's size).
A field returning an object counts 1 plus what is selected inside it; a list
counts its bound times that:

| list | bound |
|---|---|
| `nodes` / `edges` of a connection | the field's `first` (default 50, at most 500) |
| `nodes` / `edges` of a search connection | the field's `first` (default 20, at most 100) |
| `EventSearchHit.highlights` | 10 (snippets are cheap: a scalar) |
| `ReadWindow.events` | `before + after + 1` of `window` / `readEvent` |
| `Session.surface` | 500 |
| `Session.children`, `Event.replacementChain` / `replacedEvents` / `sources` / `derived` | 20 |
| `SessionTrace.ancestors` | 20 |
| `SessionTrace.descendants` | 50 |
| `LineageNode.descendants` (each level of the nested tree multiplies) | 5 |
| `LineageGraph.nodes` / `edges` | 200 |
| `Query.nodes` (Relay refetch by ids) | its most ids, `MAX_NODE_IDS` (100) |
| introspection lists (`types`, `fields`, `args`, ...) | what the schema holds (its averages) |
| any other list | 100 |

`Session.title` is one object per session (its `messageSeqs` are leaves) and
is read, for a page of stored sessions, in one batched backend call
(`TitleReads`), so it costs what the page returns.
A page asked with an event `filter` holding `text` (SPEC §12) adds
`TEXT_FILTER_COST`: the literal scan reads the session's texts, whatever the
page returns. Every other filter clause is answered by index (the page costs
what it returns) and adds nothing; its lists are bounded by
`gateway.core.filters.MAX_FILTER_VALUES`.

Unpaged lists can be longer than their bound (a surface of a million events):
the bounds estimate a typical answer so that nesting them is refused, they do
not cut answers. They are made honest at run time instead: each unpaged list
(`surface`, `children`, `ancestors`, `descendants`, lineage `graph`) counts
its true length against the same limit when it is read
(`gateway.server.budget.ResponseBudget.listed`), and the first list past it
ends the answer with QUERY_TOO_COSTLY before its items are built. So 30
aliases of a 200,000-event `surface` stop after one read of it, not after
six million objects. Why not larger static bounds, or paging these lists:
an honest static bound for `surface` is the longest log there is, which would
refuse `sessions { nodes { surface } }` on every corpus, and paging them would
change what `surface: [Event!]!` means (SPEC §7); the true lengths are only
cheap to know once read, and one read per request is what the answer costs
anyway. Paged reads stay `events(first:)`.

A connection's figures are a linear form `fixed + per_page * page`, so a
fragment on a connection type is measured once whatever `first` it is spread
under.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    FieldNode,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLUnionType,
    IntValueNode,
    NullValueNode,
    ObjectValueNode,
    VariableNode,
    get_named_type,
)

from gateway.core.search import DEFAULT_SEARCH_LIMIT as DEFAULT_SEARCH_PAGE
from gateway.core.search import MAX_SEARCH_LIMIT as MAX_SEARCH_PAGE

from .types.node import MAX_NODE_IDS
from .types.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE

DEFAULT_LIST_BOUND = 100

UNPAGED_LIST_BOUNDS: dict[tuple[str, str], int] = {
    ("Session", "surface"): 500,
    ("Session", "children"): 20,
    ("Event", "replacementChain"): 20,
    ("Event", "replacedEvents"): 20,
    ("Event", "sources"): 20,
    ("Event", "derived"): 20,
    ("SessionTrace", "ancestors"): 20,
    ("SessionTrace", "descendants"): 50,
    ("LineageNode", "descendants"): 5,
    ("LineageGraph", "nodes"): 200,
    ("LineageGraph", "edges"): 200,
    ("EventSearchHit", "highlights"): 10,
    ("Query", "nodes"): MAX_NODE_IDS,
}

CAP = 10**12

TEXT_FILTER_COST = 1_000
"""What a `text` filter adds to its page: a scan of one session's texts, counted as
a thousand objects (a default operation affords some fifty of them)."""


def _cap(n: int) -> int:
    return n if n < CAP else CAP


@dataclass(frozen=True, slots=True)
class Weight:
    """Objects a selection can return: `fixed + per_page * page`, where `page` is
    the page size of the connection (or window) the selection sits in."""

    fixed: int = 0
    per_page: int = 0

    def plus(self, other: Weight) -> Weight:
        return Weight(_cap(self.fixed + other.fixed), _cap(self.per_page + other.per_page))

    def times(self, n: int) -> Weight:
        return Weight(_cap(self.fixed * n), _cap(self.per_page * n))

    def total(self, page: int) -> int:
        return _cap(self.fixed + self.per_page * page)


def _arg(node: FieldNode, name: str, variables: Mapping[str, Any], default: int) -> int:
    """An integer argument as the request gives it (literal or variable), clamped to
    0..MAX_PAGE_SIZE; `default` when absent or not an integer (validation says why)."""
    for argument in node.arguments or ():
        if argument.name.value != name:
            continue
        value = argument.value
        raw: Any = default
        if isinstance(value, IntValueNode):
            raw = int(value.value)
        elif isinstance(value, VariableNode):
            raw = variables.get(value.name.value, default)
        if type(raw) is not int:
            raw = default
        return max(0, min(int(raw), MAX_PAGE_SIZE))
    return default


def _has_text_filter(node: FieldNode, variables: Mapping[str, Any]) -> bool:
    """Whether the field's `filter` argument (literal or variable) holds a `text`."""
    for argument in node.arguments or ():
        if argument.name.value != "filter":
            continue
        value = argument.value
        if isinstance(value, VariableNode):
            given = variables.get(value.name.value)
            return isinstance(given, Mapping) and given.get("text") is not None
        if isinstance(value, ObjectValueNode):
            for field in value.fields:
                if field.name.value != "text":
                    continue
                inner = field.value
                if isinstance(inner, VariableNode):
                    return variables.get(inner.name.value) is not None
                return not isinstance(inner, NullValueNode)
    return False


def _first(node: FieldNode, variables: Mapping[str, Any]) -> int:
    return _arg(node, "first", variables, DEFAULT_PAGE_SIZE)


def _search_first(node: FieldNode, variables: Mapping[str, Any]) -> int:
    return min(_arg(node, "first", variables, DEFAULT_SEARCH_PAGE), MAX_SEARCH_PAGE)


def _window(node: FieldNode, variables: Mapping[str, Any]) -> int:
    return _arg(node, "before", variables, 0) + _arg(node, "after", variables, 0) + 1


PAGED_TYPES: dict[str, tuple[Callable[[FieldNode, Mapping[str, Any]], int], frozenset[str]]] = {
    "SessionConnection": (_first, frozenset({"nodes", "edges"})),
    "EventConnection": (_first, frozenset({"nodes", "edges"})),
    "SessionSearchConnection": (_search_first, frozenset({"nodes", "edges"})),
    "EventSearchConnection": (_search_first, frozenset({"nodes", "edges"})),
    "ReadWindow": (_window, frozenset({"events"})),
}


class CostModel:
    """The list bounds of one schema (introspection bounds read from it once)."""

    def __init__(self, schema: GraphQLSchema) -> None:
        self.schema = schema
        types = list(schema.type_map.values())
        composite = GraphQLObjectType | GraphQLInterfaceType
        fields = [t.fields for t in types if isinstance(t, composite)]
        inputs = [t.fields for t in types if isinstance(t, GraphQLInputObjectType)]
        args = [len(f.args) for fs in fields for f in fs.values()]
        args += [len(d.args) for d in schema.directives]
        enums = [len(getattr(t, "values", ())) for t in types]
        possible = [
            len(schema.get_possible_types(t))
            for t in types
            if isinstance(t, GraphQLInterfaceType | GraphQLUnionType)
        ]
        # A type lists fields, input fields or enum values, and `__Schema.types` multiplies
        # them all: the figures per type and per field are the schema's averages (rounded
        # up), so the whole introspection GraphiQL sends estimates what the schema holds
        # rather than every type times the largest one (which refused it once the schema
        # grew the search and filter types). Nesting still multiplies.
        n = max(len(types), 1)
        field_count = sum(len(f) for f in fields)
        self.bounds = dict(UNPAGED_LIST_BOUNDS)
        self.bounds.update(
            {
                ("__Schema", "types"): len(types),
                ("__Schema", "directives"): len(schema.directives),
                ("__Type", "fields"): _mean(field_count, n),
                ("__Type", "inputFields"): _mean(sum(len(f) for f in inputs), n),
                ("__Type", "enumValues"): _mean(sum(enums), n),
                ("__Type", "interfaces"): max(possible, default=1),
                ("__Type", "possibleTypes"): max(possible, default=1),
                ("__Field", "args"): _mean(sum(args), field_count + len(schema.directives)),
                ("__Directive", "args"): max(args, default=1),
            }
        )

    def field_type(self, on: Any, name: str) -> Any:
        """The named type `name` returns on the type `on` (None when unknown)."""
        if name == "__schema":
            return self.schema.get_type("__Schema")
        if name == "__type":
            return self.schema.get_type("__Type")
        fields = getattr(on, "fields", None)
        found = fields.get(name) if isinstance(fields, dict) else None
        return get_named_type(found.type) if found is not None else None

    def weigh(
        self, on: Any, name: str, node: FieldNode, variables: Mapping[str, Any], inner: Weight
    ) -> Weight:
        """What the field `name` of type `on` costs, given the weight of what it selects."""
        fields = getattr(on, "fields", None)
        found = fields.get(name) if isinstance(fields, dict) else None
        named = self.field_type(on, name)
        paged = PAGED_TYPES.get(getattr(named, "name", ""))
        if paged is not None:  # a connection or window: its items multiply by the page
            scan = TEXT_FILTER_COST if _has_text_filter(node, variables) else 0
            return Weight(_cap(1 + scan + inner.total(paged[0](node, variables))))
        parent = PAGED_TYPES.get(getattr(on, "name", ""))
        if parent is not None and name in parent[1]:
            return Weight(0, _cap(1 + inner.fixed))
        if found is not None and _is_list(found.type):
            bound = self.bounds.get((on.name, name), DEFAULT_LIST_BOUND)
            return Weight(_cap(bound * (1 + inner.fixed)))
        return Weight(_cap(1 + inner.fixed))


def _mean(total: int, count: int) -> int:
    """`total / count` rounded up, at least 1."""
    return max(1, -(-total // max(count, 1)))


def _is_list(kind: Any) -> bool:
    while isinstance(kind, GraphQLNonNull | GraphQLList):
        if isinstance(kind, GraphQLList):
            return True
        kind = kind.of_type
    return False
