"""One request header read from an ASGI scope, without building Starlette's `Headers`.

The hot path reads two or three headers of every request (`accept`, `content-type`,
`authorization`); a `Headers` object per lookup was a measurable part of a small
request. Same rule as `Headers(scope=scope).get`: the first value, decoded latin-1."""

from __future__ import annotations

from starlette.types import Scope


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of the request header `name` (lowercase, as ASGI gives names)."""
    for key, value in scope.get("headers") or ():
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


__all__ = ["header"]
