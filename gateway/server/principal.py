"""Who a request acts for: the `Principal` the auth layer attaches to a request.

With `serve --auth tokens` the auth middleware resolves the bearer token and
stores a `Principal` in the ASGI scope's state (`request.state.principal`);
with auth off nothing is stored and `principal_of` answers None. Everything
downstream (trusted documents, rate limits, the scoped corpus, subscriptions)
reads it through `principal_of`, so there is one place that says how.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

STATE_KEY = "principal"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: the token's name, its grants and its restrictions.

    `grants` are the SPEC §10 grant strings (`all`, `cwd:PREFIX`, `id:GLOB`,
    `tree:ID`); `trusted_documents_only` restricts the caller to the trusted
    documents manifest.
    """

    name: str
    grants: tuple[str, ...]
    trusted_documents_only: bool = False

    @property
    def sees_all(self) -> bool:
        return "all" in self.grants


class Unauthenticated(Exception):
    """The credentials were missing, unknown, expired or revoked (HTTP 401, UNAUTHENTICATED)."""


# Resolves an `Authorization` header value ("Bearer SECRET", or None when the
# request sent none) to a Principal, or raises Unauthenticated. `create_app`
# takes one (`authenticate=`); None means auth is off.
Authenticate = Callable[[str | None], Awaitable[Principal]]


@runtime_checkable
class AuthenticateWithin(Protocol):
    """An `Authenticate` that can also read the credentials in the request's own
    snapshot (`reads`: the backend reading in it), as the request's first read; the
    pipeline then runs the operation's reads in the same snapshot."""

    def __call__(self, authorization: str | None, /) -> Awaitable[Principal]: ...

    def within(self, authorization: str | None, reads: object, /) -> Awaitable[Principal]: ...


def principal_of(scope: Mapping[str, Any]) -> Principal | None:
    """The principal stored in an ASGI scope (or a Starlette request), None when auth is off."""
    state = scope.get("state")
    if not isinstance(state, Mapping):
        return None
    found = state.get(STATE_KEY)
    return found if isinstance(found, Principal) else None


def attach_principal(scope: MutableMapping[str, Any], principal: Principal) -> None:
    """Store `principal` in `scope` the way Starlette's `request.state` reads it."""
    scope.setdefault("state", {})[STATE_KEY] = principal


__all__ = [
    "STATE_KEY",
    "Authenticate",
    "AuthenticateWithin",
    "Principal",
    "Unauthenticated",
    "attach_principal",
    "principal_of",
]
