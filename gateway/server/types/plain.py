"""Fields resolved by graphql-core directly, without Strawberry's per-call wrapper.

Strawberry installs a resolver of its own on every field: for a plain attribute
it calls `StrawberryField.get_result`, and for a resolver method it builds an
`Info`, converts the arguments and chains the field extensions, on every call.
A page of 100 events selecting three fields makes 300 such calls, about a
third of the page's CPU. After the schema is built, `install_plain_resolvers`
replaces those wrappers where they add nothing:

* a plain attribute (Strawberry's own `_is_default` resolver: no resolver, no
  extensions, no permission classes) reads the attribute by its Python name,
  as Strawberry's default resolver (`getattr`) does;
* a resolver marked `@plain(...)` (synchronous, taking only the object, no
  arguments, no `Info`) is called with the object alone.

What is traded: nothing the schema uses. These fields get no field extensions
and no Strawberry `Info` (none of them had either); the value they return is
completed by graphql-core exactly as before (scalars, enums and objects are
serialized by their types, not by the resolver wrapper). Fields with arguments,
`Info`, extensions or async resolvers keep Strawberry's wrapper.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, cast

import strawberry
from graphql import GraphQLObjectType, GraphQLResolveInfo, GraphQLSchema
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

F = TypeVar("F", bound=Callable[..., Any])

_PLAIN = "_gateway_plain"
_BACKREF = GraphQLCoreConverter.DEFINITION_BACKREF


def plain(description: str) -> Callable[[F], F]:
    """`@strawberry.field(description=...)` for a synchronous resolver of the object
    alone, resolved without Strawberry's wrapper once the schema is installed (module
    docstring); keeps the method's type for mypy."""

    def wrap(fn: F) -> F:
        return cast(F, strawberry.field(plain_function(fn), description=description))

    return wrap


def plain_function(fn: F) -> F:
    """Mark a function used as `strawberry.field(resolver=fn)` (of the object alone) as
    plain (module docstring)."""
    setattr(fn, _PLAIN, True)
    return fn


_RESOLVER = "_gateway_plain_resolver"
_READ = "_gateway_plain_read"


def _attribute(name: str) -> Callable[[Any, GraphQLResolveInfo[Any]], Any]:
    def resolve(source: Any, info: GraphQLResolveInfo[Any]) -> Any:
        return getattr(source, name)

    setattr(resolve, _RESOLVER, True)
    setattr(resolve, _READ, attrgetter(name))
    return resolve


def _called(fn: Callable[[Any], Any]) -> Callable[[Any, GraphQLResolveInfo[Any]], Any]:
    def resolve(source: Any, info: GraphQLResolveInfo[Any]) -> Any:
        return fn(source)

    setattr(resolve, _RESOLVER, True)
    setattr(resolve, _READ, fn)
    return resolve


def is_plain_resolver(resolve: object) -> bool:
    """Whether a GraphQL field's resolver is one `install_plain_resolvers` put there: it
    reads its object only and ignores the resolve info (`gateway.server.execution`)."""
    return getattr(resolve, _RESOLVER, False) is True


def plain_read(resolve: object) -> Callable[[Any], Any] | None:
    """What a plain resolver does, as a function of the object alone (`getattr` of the
    attribute as an `attrgetter`, or the `@plain` function itself), so a caller that
    knows the info is unused skips a frame per value; None for any other resolver."""
    if not is_plain_resolver(resolve):
        return None
    read = getattr(resolve, _READ, None)
    return read if callable(read) else None


def install_plain_resolvers(schema: GraphQLSchema) -> int:
    """Replace Strawberry's wrapper on the plain fields of `schema`'s object types
    (module docstring); the number of fields changed."""
    changed = 0
    subscription = schema.subscription_type
    for named in schema.type_map.values():
        if not isinstance(named, GraphQLObjectType) or named is subscription:
            continue
        if named.name.startswith("__"):
            continue
        for field in named.fields.values():
            definition = (field.extensions or {}).get(_BACKREF)
            if not isinstance(definition, StrawberryField) or field.args:
                continue
            if definition.is_subscription or definition.extensions:
                continue
            resolver = definition.base_resolver
            if resolver is None:
                if getattr(field.resolve, "_is_default", False):
                    field.resolve = _attribute(definition.python_name)
                    changed += 1
                continue
            fn = resolver.wrapped_func
            if not getattr(fn, _PLAIN, False) or not callable(fn):
                continue
            if resolver.is_async or len(resolver.signature.parameters) != 1:
                raise TypeError(
                    f"{named.name}.{definition.python_name}: @plain needs a "
                    "synchronous resolver of the object alone"
                )
            field.resolve = _called(fn)
            changed += 1
    return changed


__all__ = ["install_plain_resolvers", "is_plain_resolver", "plain", "plain_function", "plain_read"]
