"""JSON values as the core holds them, and the one way to detach them."""

from __future__ import annotations

import math
from typing import Any, TypeAlias

# A JSON value: None, bool, int, float, str, list of JSON values, dict of str to
# JSON values. Spelled `Any` because Python's type system cannot say "recursive
# JSON" without forcing casts on every caller.
JsonValue: TypeAlias = Any


def clone_json(value: JsonValue) -> JsonValue:
    """Deep-copy a JSON value (dicts and lists are rebuilt; scalars are shared).

    Raises TypeError naming the offending path when the value is not JSON, so
    a caller learns at `append` time rather than when a reader serialises it.
    Tuples are accepted and become lists (what JSON would make of them).
    """
    return _clone(value, "$")


def _clone(value: JsonValue, path: str) -> JsonValue:
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        raise TypeError(f"{path}: {value!r} is not a JSON number")
    if t is dict:
        out: dict[str, JsonValue] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise TypeError(f"{path}: object key {k!r} is not a string")
            out[k] = _clone(v, f"{path}.{k}")
        return out
    if t is list or t is tuple:
        return [_clone(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"{path}: {t.__name__} is not a JSON value")
