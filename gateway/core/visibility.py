"""A scope applied to one observation (SPEC §10): who may see which session.

An observation with a scope answers as if the sessions the scope makes visible
were the whole corpus. `Visibility` is where that is decided: every way in (a
session by id, a page, children, lineage) asks it, an invisible id fails
exactly like an absent one, and pages, counts and walks carry the scope down
to the backend as a `ScopeFilter`. Whether a session lies in a granted tree
is decided from its ancestry in the whole (unscoped) corpus, each session's
answer remembered; a stored ancestry is read as whole chains (the ancestry
loader's answer for one id is that id's own chain).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from .backend import ScopeFilter
from .batching import Lifetime, PerKey
from .errors import session_not_found
from .model import SessionHeader
from .reach import Headers, proves_absent
from .scope import Scope
from .sources import NO_BACKEND, NOT_STORED, LiveSources, StoredSources


def walk_filter(scope: Scope) -> ScopeFilter:
    """The scope for a walk below a session that is not inside a granted tree: a cwd
    prefix, an id glob, or being a tree's root (whose subtree the walk then enters)."""
    return ScopeFilter(scope.cwd_prefixes, scope.id_globs, ids=tuple(sorted(scope.trees)))


class Visibility:
    """The scope of one observation (None: the whole corpus), applied on request."""

    def __init__(
        self,
        scope: Scope | None,
        live: LiveSources,
        stored: StoredSources,
        lifetime: Lifetime,
    ) -> None:
        self.scope = None if scope is None or scope.sees_all else scope
        self.walk_filter = None if self.scope is None else walk_filter(self.scope)
        self._live = live
        self._stored = stored
        self._in_tree: dict[str, bool] = {}
        self._checked: PerKey[str, None] = PerKey(lifetime, self._check)

    async def visible(self, header: SessionHeader) -> bool:
        """Whether the scope lets this session be seen (always, when unscoped)."""
        scope = self.scope
        if scope is None or scope.direct(header):
            return True
        return scope.has_trees and await self.tree_member(header)

    async def visible_only(self, headers: Sequence[SessionHeader]) -> list[SessionHeader]:
        if self.scope is None:
            return list(headers)
        kept = await asyncio.gather(*(self.visible(h) for h in headers))
        return [h for h, ok in zip(headers, kept, strict=True) if ok]

    async def require(self, session_id: str) -> None:
        """SESSION_NOT_FOUND, worded as for an absent id, when the scope hides the session.

        An id the corpus lacks passes: the caller's own lookup reports it, so an
        invisible id and an absent one fail with the same message.
        """
        if self.scope is not None:
            await self._checked.get(session_id)

    async def _check(self, session_id: str) -> None:
        live = self._live.session(session_id)
        header = live.header if live is not None else None
        if header is None and self._stored.backend is not None:
            stored = await self._stored.stored(session_id)
            header = stored.header if stored is not None else None
        if header is not None and not await self.visible(header):
            why = NO_BACKEND if self._stored.backend is None else NOT_STORED
            raise session_not_found(session_id, why)

    async def tree_member(self, header: SessionHeader) -> bool:
        """Whether `header` lies in a granted tree: its ancestry in the whole corpus,
        walked once; every session on the walk gets its answer remembered."""
        known = self._in_tree.get(header.id)
        if known is not None:
            return known
        scope = self.scope
        assert scope is not None
        if header.id in scope.trees:
            return True
        chain = [header.id]
        seen = {header.id}
        node: SessionHeader | None = header
        stored: Headers = {}  # the stored chain last read: `node`'s stored ancestors too
        while node is not None and node.parent_session is not None:
            parent = node.parent_session
            chain.append(parent)
            if parent in seen or parent in scope.trees or parent in self._in_tree:
                break
            seen.add(parent)
            node, stored = await self._unscoped_header(parent, node, stored)
        # The last id decides for everything below it: in a tree, or a walk that ended.
        last = chain[-1]
        member = last in scope.trees or self._in_tree.get(last, False)
        for i in range(len(chain) - 1, -1, -1):
            member = member or chain[i] in scope.trees
            if i < len(chain) - 1 or chain[i] in seen:
                self._in_tree.setdefault(chain[i], member)
        return self._in_tree[header.id]

    async def _unscoped_header(
        self, session_id: str, child: SessionHeader, chain: Headers
    ) -> tuple[SessionHeader | None, Headers]:
        """The header of `child`'s parent in the whole corpus (live first, then stored),
        and the stored chain that holds it: `chain` when it does (or proves it is not
        stored), else this id's own chain, read whole."""
        live = self._live.headers().get(session_id)
        if live is not None:
            return live, chain
        if session_id in chain:
            return chain[session_id], chain
        stored = self._stored
        if stored.backend is None or proves_absent(chain, child, session_id):
            return None, chain
        if stored.corpus is not None:
            reached = await stored.corpus.ancestry.load(session_id)
            own: Headers = reached.headers if reached is not None else {}
        else:
            own = await stored.listing()
        return own.get(session_id), own

    async def session_filter(self) -> ScopeFilter | None:
        """The scope as a backend predicate: tree seeds are the granted roots and the
        live sessions inside a granted tree (stored sessions below a live-only one)."""
        scope = self.scope
        if scope is None:
            return None
        seeds = set(scope.trees)
        if scope.has_trees:
            live = list(self._live.headers().values())
            inside = await asyncio.gather(*(self.tree_member(h) for h in live))
            seeds.update(h.id for h, ok in zip(live, inside, strict=True) if ok)
        return ScopeFilter(scope.cwd_prefixes, scope.id_globs, tuple(sorted(seeds)))
