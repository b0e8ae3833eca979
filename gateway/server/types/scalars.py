"""Custom scalars and enums of SPEC §7: `JSON`, `EpochMillis`, `EventSurface`, `SurfaceOpKind`.

The scalars are `NewType`s mapped to their definitions through `SCALAR_MAP`
(handed to `StrawberryConfig(scalar_map=...)`), so resolvers stay plainly typed.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, NewType, TypeVar, cast

import strawberry
from graphql import IntValueNode, ValueNode
from strawberry.types.scalar import ScalarDefinition

from gateway.core import EventSurface as CoreEventSurface

JSON = NewType("JSON", object)
"""Any JSON value, served as is (event payloads)."""

EpochMillis = NewType("EpochMillis", int)
"""Integer Unix epoch milliseconds."""

MAX_SAFE_INTEGER = 2**53 - 1


def _serialize_millis(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"EpochMillis must be an integer, got {type(value).__name__}")
    return value


def _parse_millis(value: Any) -> int:
    if type(value) is not int or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise ValueError(f"EpochMillis must be an integer within ±(2^53-1), got {value!r}")
    return value


def _parse_millis_literal(node: ValueNode, variables: dict[str, Any] | None = None) -> int:
    if not isinstance(node, IntValueNode):
        raise ValueError("EpochMillis must be an integer literal")
    return _parse_millis(int(node.value))


def _identity(value: Any) -> Any:
    return value


SCALAR_MAP: dict[object, ScalarDefinition] = {
    JSON: strawberry.scalar(
        name="JSON",
        description=(
            "Any JSON value (object, array, string, number, boolean or null), "
            "served exactly as recorded."
        ),
        specified_by_url="https://www.ecma-international.org/publications-and-standards/standards/ecma-404/",
        serialize=_identity,
        parse_value=_identity,
    ),
    EpochMillis: strawberry.scalar(
        name="EpochMillis",
        description=(
            "Unix epoch time in integer milliseconds, serialized as a JSON number "
            "(exact up to 2^53-1; wider than a GraphQL Int)."
        ),
        serialize=_serialize_millis,
        parse_value=_parse_millis,
        parse_literal=_parse_millis_literal,
    ),
}


@strawberry.enum(description="Where a raw event stands relative to the model-visible surface.")
class EventSurface(Enum):
    CURRENT = strawberry.enum_value("CURRENT", description="On the current surface.")
    SHADOWED = strawberry.enum_value(
        "SHADOWED", description="Was on the surface until a replacement removed it."
    )
    LOG_ONLY = strawberry.enum_value(
        "LOG_ONLY", description="Never on the surface (bookkeeping, chunks, tool calls, ...)."
    )


@strawberry.enum(description="How a surface event changes the surface.")
class SurfaceOpKind(Enum):
    APPEND = strawberry.enum_value("APPEND", description="Adds the event at the tail.")
    REPLACE = strawberry.enum_value(
        "REPLACE", description="Replaces the surface nodes from `start` through `end` in place."
    )


TO_GRAPHQL_SURFACE: dict[CoreEventSurface, EventSurface] = {
    CoreEventSurface.CURRENT: EventSurface.CURRENT,
    CoreEventSurface.SHADOWED: EventSurface.SHADOWED,
    CoreEventSurface.LOG_ONLY: EventSurface.LOG_ONLY,
}
TO_CORE_SURFACE: dict[EventSurface, CoreEventSurface] = {
    v: k for k, v in TO_GRAPHQL_SURFACE.items()
}


F = TypeVar("F", bound=Callable[..., Any])


def resolver(description: str) -> Callable[[F], F]:
    """`@strawberry.field(description=...)` for a resolver method, keeping its type for mypy."""

    def wrap(fn: F) -> F:
        return cast(F, strawberry.field(fn, description=description))

    return wrap
