"""Linear-time checks of a parsed document, run before graphql-core validates it.

Why by hand: strawberry's `QueryDepthLimiter` and `MaxAliasesLimiter` expand
every fragment spread again at every use (a 561-byte document of fragments
that each spread the next ten times took minutes), and graphql-core's
`OverlappingFieldsCanBeMerged` rule is quadratic in the fields that share a
response name. No library measures a document once per fragment, so this
module does: each fragment is measured once (memoised, in dependency order,
without recursion across fragments, a cycle counting as nothing: the
`NoFragmentCycles` rule reports it), and every figure below is the figure of
the document with its fragments expanded, computed in time linear in the
document's text.

| figure | default | meaning |
|---|---|---|
| depth | 15 | nesting of fields (introspection does not count: `__schema`, `__type`, `__x` types) |
| aliases | 30 | aliased fields, fragments expanded |
| fields | 2,000 | field selections, fragments expanded (introspection counted) |
| selections | 1,000 | fields, spreads and inline fragments written in the text |
| same-name fields | 20 | fields sharing a response name in one selection set (*) |
| cost | 50,000 | objects the response can hold (see `gateway.server.cost`) |

(*) its inline fragments and the distinct fragments it spreads included:
graphql-core's overlapping-fields rule compares every such pair.

The checks run on a document that has not been validated yet: unknown
fragments, types and fields add what they can and cost nothing; validation
then reports them.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)

from .codes import GatewayCode
from .cost import CostModel, Weight

SATURATE = 10**12
"""Every figure stops growing here: expanded counts of hostile documents are astronomic."""


def _sat(n: int) -> int:
    return n if n < SATURATE else SATURATE


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    max_depth: int
    max_aliases: int
    max_fields: int
    max_selections: int
    max_same_name: int
    max_cost: int


@dataclass(slots=True)
class _Measure:
    """One selection set (or fragment) with its fragments expanded."""

    depth: int = 0
    aliases: int = 0
    fields: int = 0
    weight: Weight = field(default_factory=Weight)
    names: Counter[str] = field(default_factory=Counter)  # response names, one level
    crowded: str | None = None  # a response name over the same-name limit

    def add(self, other: _Measure) -> None:
        """Count one more spread of a fragment (its weight is added once per set)."""
        self.depth = max(self.depth, other.depth)
        self.aliases = _sat(self.aliases + other.aliases)
        self.fields = _sat(self.fields + other.fields)
        self.crowded = self.crowded or other.crowded


class _Walker:
    def __init__(
        self,
        schema: GraphQLSchema,
        document: DocumentNode,
        cost: CostModel,
        variables: Mapping[str, Any] | None,
        max_same_name: int,
    ) -> None:
        self.schema = schema
        self.cost = cost
        self.variables = variables if variables is not None else {}  # never len() it
        self.max_same_name = max_same_name
        self.fragments: dict[str, FragmentDefinitionNode] = {}
        for definition in document.definitions:
            if isinstance(definition, FragmentDefinitionNode):
                self.fragments.setdefault(definition.name.value, definition)
        self.measured: dict[str, _Measure] = {}

    # -- fragments, in dependency order --------------------------------------------------

    def measure_fragments(self) -> None:
        """Measure every fragment once, children first, without recursing across fragments."""
        state: dict[str, int] = {}  # 1 = on the stack, 2 = done
        for root in self.fragments:
            if root in state:
                continue
            stack: list[tuple[str, list[str]]] = [(root, self._spreads_of(root))]
            state[root] = 1
            while stack:
                name, pending = stack[-1]
                if pending:
                    child = pending.pop()
                    if child in self.fragments and child not in state:
                        state[child] = 1
                        stack.append((child, self._spreads_of(child)))
                    continue
                stack.pop()
                fragment = self.fragments[name]
                on = self.schema.get_type(fragment.type_condition.name.value)
                self.measured[name] = self.selection_set(fragment.selection_set, on)
                state[name] = 2

    def _spreads_of(self, name: str) -> list[str]:
        out: list[str] = []
        pending = [self.fragments[name].selection_set]
        while pending:
            for selection in pending.pop().selections:
                if isinstance(selection, FragmentSpreadNode):
                    out.append(selection.name.value)
                elif (
                    isinstance(selection, FieldNode | InlineFragmentNode)
                    and selection.selection_set is not None
                ):
                    pending.append(selection.selection_set)
        return out

    # -- selection sets --------------------------------------------------------------------

    def selection_set(self, node: SelectionSetNode, on: Any) -> _Measure:
        """The measure of `node` on the named type `on` (None when unknown)."""
        out = _Measure()
        spread: set[str] = set()
        self._collect(node, on, out, spread)
        for name in spread:  # a fragment spread twice in one set merges into one answer
            fragment = self.measured.get(name)
            if fragment is not None:  # None: unknown, or on a cycle (reported by validation)
                out.names.update(fragment.names)
                out.weight = out.weight.plus(fragment.weight)
        crowded = next((n for n, c in out.names.items() if c > self.max_same_name), None)
        out.crowded = out.crowded or crowded
        return out

    def _collect(self, node: SelectionSetNode, on: Any, out: _Measure, spread: set[str]) -> None:
        for selection in node.selections:
            if isinstance(selection, FieldNode):
                self._field(selection, on, out)
            elif isinstance(selection, InlineFragmentNode):
                inner = on
                if selection.type_condition is not None:
                    inner = self.schema.get_type(selection.type_condition.name.value)
                self._collect(selection.selection_set, inner, out, spread)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                fragment = self.measured.get(name)
                if fragment is not None:
                    out.add(fragment)
                spread.add(name)

    def _field(self, node: FieldNode, on: Any, out: _Measure) -> None:
        name = node.name.value
        out.names[node.alias.value if node.alias else name] += 1
        out.fields = _sat(out.fields + 1)
        if node.alias is not None:
            out.aliases = _sat(out.aliases + 1)
        introspection = name.startswith("__") or getattr(on, "name", "").startswith("__")
        if node.selection_set is None:
            out.depth = max(out.depth, 0 if introspection else 1)
            return
        target = self.cost.field_type(on, name)
        inner = self.selection_set(node.selection_set, target)
        weight = self.cost.weigh(on, name, node, self.variables, inner.weight)
        out.depth = max(out.depth, inner.depth + (0 if introspection else 1))
        out.aliases = _sat(out.aliases + inner.aliases)
        out.fields = _sat(out.fields + inner.fields)
        out.weight = out.weight.plus(weight)
        out.crowded = out.crowded or inner.crowded


def count_selections(document: DocumentNode) -> int:
    """Fields, spreads and inline fragments written in the document (not expanded)."""
    count = 0
    pending: list[SelectionSetNode] = []
    for definition in document.definitions:
        selection_set = getattr(definition, "selection_set", None)
        if selection_set is not None:
            pending.append(selection_set)
    while pending:
        node = pending.pop()
        count += len(node.selections)
        for selection in node.selections:
            if getattr(selection, "selection_set", None) is not None:
                pending.append(selection.selection_set)  # type: ignore[attr-defined]
    return count


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a document is refused: `code` for `extensions.code`, a message in the
    client's terms."""

    code: str
    message: str


QUERY_TOO_COSTLY = GatewayCode.QUERY_TOO_COSTLY
VALIDATION_FAILED = GatewayCode.VALIDATION_FAILED


def check_document(
    schema: GraphQLSchema,
    document: DocumentNode,
    limits: DocumentLimits,
    cost: CostModel,
    variables: Mapping[str, Any] | None,
    operation_name: str | None,
) -> Refusal | None:
    """The first limit `document` passes, or None when it is within all of them."""
    selections = count_selections(document)
    if selections > limits.max_selections:
        return Refusal(
            VALIDATION_FAILED,
            f"the document has {selections} selections; at most {limits.max_selections} "
            "are allowed",
        )
    walker = _Walker(schema, document, cost, variables, limits.max_same_name)
    try:
        walker.measure_fragments()
        operations = [
            (d, walker.selection_set(d.selection_set, _root_type(schema, d)))
            for d in document.definitions
            if isinstance(d, OperationDefinitionNode)
        ]
    except RecursionError:  # the parser bounds nesting, but never trust it twice
        return Refusal(VALIDATION_FAILED, "the document nests selections too deeply")
    measures: Iterable[_Measure] = [m for _, m in operations]
    measures = [*measures, *walker.measured.values()]
    for m in measures:
        if m.crowded is not None:
            return Refusal(
                VALIDATION_FAILED,
                f"more than {limits.max_same_name} fields named {m.crowded!r} in one selection set",
            )
    depth = max((m.depth for m in measures), default=0)
    if depth > limits.max_depth:
        return Refusal(
            VALIDATION_FAILED,
            f"the document nests fields {_figure(depth)} deep, over the maximum operation "
            f"depth of {limits.max_depth}",
        )
    aliases = max((m.aliases for _, m in operations), default=0)
    if aliases > limits.max_aliases:
        return Refusal(
            VALIDATION_FAILED,
            f"an operation uses {_figure(aliases)} aliases (fragments expanded); at most "
            f"{limits.max_aliases} are allowed",
        )
    fields = max((m.fields for _, m in operations), default=0)
    if fields > limits.max_fields:
        return Refusal(
            VALIDATION_FAILED,
            f"an operation selects {_figure(fields)} fields (fragments expanded); at most "
            f"{limits.max_fields} are allowed",
        )
    chosen = [
        m
        for d, m in operations
        if operation_name is None or (d.name is not None and d.name.value == operation_name)
    ]
    estimate = max((m.weight.total(1) for m in chosen), default=0)
    if estimate > limits.max_cost:
        return Refusal(
            QUERY_TOO_COSTLY,
            f"the operation could return an estimated {_figure(estimate)} objects; the limit "
            f"is {limits.max_cost} (ask for smaller pages with `first`, or split the query)",
        )
    return None


MEMO_ENTRIES = 64
"""Outcomes `LimitsMemo` keeps for one text (least recently used dropped first)."""
MEMO_SHAPES = 8
"""Distinct sets of variables read that `LimitsMemo` tracks per operation name."""
MEMO_MAX_STRING = 256
"""A string variable longer than this is not a key: the document is checked afresh."""

_ABSENT: tuple[()] = ()
"""The token of a variable the request does not give."""
_SCALARS = frozenset({str, int, float, bool, type(None)})

Token = tuple[Any, ...]


def _token(value: Any) -> Token | None:
    """What a read variable's value is keyed by: its exact type and value (True, 1 and
    1.0 are three keys; so are 0.0 and -0.0), None when it cannot be a key (a list,
    an object, a long string: the check then runs afresh)."""
    kind = type(value)
    if kind not in _SCALARS:
        return None
    if kind is float:
        return (float, value.hex())
    if kind is str and len(value) > MEMO_MAX_STRING:
        return None
    return (kind, value)


class _Recorded(Mapping[str, Any]):
    """The request's variables as the walk sees them, each one it reads recorded with
    its token. Reading the whole mapping (its length, its keys) or a value that cannot
    be a key makes the outcome unkeyable (`exact` False)."""

    __slots__ = ("_values", "exact", "read")

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values
        self.read: dict[str, Token] = {}
        self.exact = True

    def _note(self, key: str, found: bool, value: Any) -> None:
        if key in self.read:
            return
        token = _token(value) if found else _ABSENT
        if token is None:
            self.exact = False
            token = _ABSENT
        self.read[key] = token

    def __getitem__(self, key: str) -> Any:
        try:
            value = self._values[key]
        except KeyError:
            self._note(key, False, None)
            raise
        self._note(key, True, value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._values:
            value = self._values[key]
            self._note(key, True, value)
            return value
        self._note(key, False, None)
        return default

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            self.exact = False
            return key in self._values
        found = key in self._values
        self._note(key, found, self._values[key] if found else None)
        return found

    def __iter__(self) -> Iterator[str]:
        self.exact = False
        return iter(self._values)

    def __len__(self) -> int:
        self.exact = False
        return len(self._values)


_MISS = object()


class LimitsMemo:
    """`check_document`'s outcomes for one document, remembered by the operation name
    and the values of exactly the variables the walk read.

    The walk is a deterministic function of the document, the operation name and
    what it reads of the variables; a run that read the variables `names` and got
    the tokens `values` gives the same outcome for any request whose variables have
    those tokens at those names (every read returns the same thing, so the same
    reads follow). So the key is (operation name, names read, their tokens), the
    names and tokens recorded while the walk runs (`_Recorded`); a lookup tries
    each set of names seen for the operation name (one, for every document of this
    schema's walk). A variable the walk never reads is in no key; a value that
    cannot be a key (`_token`) makes the check run afresh, unremembered.

    Bounded: `MEMO_ENTRIES` outcomes (LRU) and `MEMO_SHAPES` sets of names per
    operation name. Not thread-safe: one preparer touches a text's memo from one
    thread (the event loop, or its one worker for large texts).
    """

    __slots__ = ("_entries", "_shapes")

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str | None, tuple[str, ...], tuple[Token, ...]], Any] = (
            OrderedDict()
        )
        self._shapes: dict[str | None, list[tuple[str, ...]]] = {}

    def check(
        self,
        schema: GraphQLSchema,
        document: DocumentNode,
        limits: DocumentLimits,
        cost: CostModel,
        variables: Mapping[str, Any] | None,
        operation_name: str | None,
    ) -> Refusal | None:
        """`check_document(schema, document, limits, cost, variables, operation_name)`,
        remembered (see the class docstring); `document` is always this memo's."""
        values: Mapping[str, Any] = variables if variables is not None else {}
        shapes = self._shapes.get(operation_name)
        if shapes:
            for names in shapes:
                tokens = _tokens(names, values)
                if tokens is None:
                    continue
                key = (operation_name, names, tokens)
                found = self._entries.get(key, _MISS)
                if found is not _MISS:
                    self._entries.move_to_end(key)
                    return found  # type: ignore[no-any-return]
        recorded = _Recorded(values)
        refusal = check_document(schema, document, limits, cost, recorded, operation_name)
        if recorded.exact:
            self._remember(operation_name, recorded.read, refusal)
        return refusal

    def _remember(
        self, operation_name: str | None, read: dict[str, Token], refusal: Refusal | None
    ) -> None:
        names = tuple(read)
        shapes = self._shapes.setdefault(operation_name, [])
        if names not in shapes:
            if len(shapes) >= MEMO_SHAPES:
                return
            shapes.append(names)
        self._entries[(operation_name, names, tuple(read.values()))] = refusal
        if len(self._entries) > MEMO_ENTRIES:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def _tokens(names: tuple[str, ...], values: Mapping[str, Any]) -> tuple[Token, ...] | None:
    """The tokens of `names` in `values` (None when one cannot be a key)."""
    if not names:  # the walk read no variable (most documents): one key whatever is sent
        return ()
    out: list[Token] = []
    for name in names:
        if name in values:
            token = _token(values[name])
            if token is None:
                return None
            out.append(token)
        else:
            out.append(_ABSENT)
    return tuple(out)


def _root_type(schema: GraphQLSchema, operation: OperationDefinitionNode) -> Any:
    kind = operation.operation.value
    return {
        "query": schema.query_type,
        "mutation": schema.mutation_type,
        "subscription": schema.subscription_type,
    }.get(kind)


def _figure(n: int) -> str:
    return f"more than {SATURATE:,}" if n >= SATURATE else f"{n:,}"


_LEXEME = re.compile(
    r'#[^\n\r]*|"""(?:[^"\\]|\\.|"(?!""))*"""|"(?:[^"\\\n\r]|\\.)*"|\.\.\.'
    r"|[_A-Za-z][_0-9A-Za-z]*|-?[0-9][_0-9A-Za-z.+-]*|[^\s,\ufeff]"
)
PARSE_FAILED = GatewayCode.PARSE_FAILED


def lexical_refusal(text: str, max_tokens: int, max_selections: int) -> Refusal | None:
    """Refuse, before graphql-core parses it, a document over the token limit, or one
    with more than twice `max_selections` names outside arguments (each selection
    needs a name, so it holds more selections than allowed).

    graphql-core's lexer and parser are pure Python: a document at the 5,000-token
    limit takes about 0.1 s to parse. This scan is one C-level regex pass that
    stops at the token limit, so such documents cost a few milliseconds; the exact
    selection count is still checked on the parsed document.
    """
    tokens = names = parens = 0
    for match in _LEXEME.finditer(text):
        lexeme = match.group()
        first = lexeme[0]
        if first == "#":
            continue
        tokens += 1
        if tokens > max_tokens:
            return Refusal(
                PARSE_FAILED,
                f"Syntax Error: Document contains more than {max_tokens} tokens. Parsing aborted.",
            )
        if first == "(":
            parens += 1
        elif first == ")":
            parens -= 1
        elif parens <= 0 and (first == "_" or first.isalpha()):
            names += 1
    if names > 2 * max_selections:
        return Refusal(
            VALIDATION_FAILED,
            f"the document has {names:,} names outside arguments, so more than "
            f"{max_selections} selections; at most {max_selections} are allowed",
        )
    return None
