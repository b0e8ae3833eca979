"""Bearer-token authentication (SPEC §10): credentials to a `Principal`.

`token_authenticator(tokens)` is the `Authenticate` callable of `serve --auth
tokens`: it resolves `Authorization: Bearer SECRET` through the database's
access tokens, read afresh on every call, so a revoked or expired token is
refused from the next operation. Where and how often it is asked (every
operation on every transport, and periodically for running subscriptions) is
`gateway.server.access`'s; how the principal narrows the corpus is the
context's (`gateway.server.context`).

Open without a token: `/healthz`, `/readyz`, static files, the GraphiQL and
viewer pages themselves (a browser GET that asks for HTML and carries no
operation: the page holds no data, and it is where a person types the
token), and CORS preflights.

Written by hand because the check is one header and one database read;
Starlette's `AuthenticationMiddleware` would add a user/scopes model the rest
of the gateway does not use, and its error responses are plain text, not
GraphQL errors.
"""

from __future__ import annotations

from gateway.persistence.tokens import TokenRefused, TokenStore

from .principal import Principal, Unauthenticated


def token_authenticator(tokens: TokenStore) -> TokenAuthenticator:
    """`Authenticate` over the database's access tokens (read afresh on every call)."""
    return TokenAuthenticator(tokens)


class TokenAuthenticator:
    """Bearer tokens to principals (`AuthenticateWithin`): a token is read in the
    request's snapshot when the pipeline gives one of the token store's database."""

    def __init__(self, tokens: TokenStore) -> None:
        self._tokens = tokens

    async def __call__(self, authorization: str | None) -> Principal:
        return await self.within(authorization, None)

    async def within(self, authorization: str | None, reads: object) -> Principal:
        if not authorization or not authorization.strip():
            raise Unauthenticated("this gateway needs an `Authorization: Bearer <token>` header")
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated("use `Authorization: Bearer <token>`")
        try:
            info = await self._tokens.authenticate(value.strip(), reads)
        except TokenRefused as refused:
            raise Unauthenticated(refused.reason) from None
        return Principal(info.name, info.grants, info.trusted_documents_only)


__all__ = ["TokenAuthenticator", "token_authenticator"]
