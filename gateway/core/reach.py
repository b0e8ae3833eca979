"""What one seed reaches, derived exactly from a lineage walk batched over many seeds.

A backend walks from many seeds in one call and answers with the union of what
they reach (`CorpusReads.load_ancestry`, `.load_descendancy`). A loader must
remember each seed's own whole answer (`gateway.core.batching`), so the batch
functions here split the union per seed before anything is remembered:

* ancestry: a seed's own chain is the parent links followed from it within the
  union (every header on its chain is in the union);
* descendancy: a seed's own descendants are the child links followed from it
  within the union. Exact, because every session on a path from a seed down to
  one of its descendants is itself that seed's descendant, so it is in the
  union too; this needs the union to hold a seed that another seed reaches,
  which the protocol requires.

A scoped walk (`within`) is split the same way: whether a session is visible
depends on the session (and, for a granted tree, on its ancestry in the whole
corpus), not on the seed the walk came from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .backend import ScopeFilter
from .model import SessionHeader

Headers = Mapping[str, SessionHeader]


@dataclass(frozen=True, slots=True)
class Reached:
    """What one walk reached from its own seed: that seed's whole answer, by id.

    An ancestry holds the seed (when stored) and its parents up to the first id
    not stored or a revisit, in that order; a descendancy holds every session
    below the seed (the seed itself only when a cycle leads back to it).
    """

    seed: str
    headers: Headers


class WalkSeed(NamedTuple):
    """A descendancy question: below `id`, within a scope's filter when given.

    `inside`: the seed lies in a granted tree (so does everything below it);
    only meaningful with `within`.
    """

    id: str
    within: ScopeFilter | None = None
    inside: bool = False


UnionFn = Callable[[Sequence[str]], Awaitable[Headers]]
"""A backend walk from many seeds at once, answering with the union of what they reach."""

ScopedUnionFn = Callable[[Sequence[str], ScopeFilter, Sequence[str]], Awaitable[Headers]]
"""A scoped backend walk: seeds, the scope's filter, the seeds inside a granted tree."""


def chain_in(seed: str, union: Headers) -> dict[str, SessionHeader]:
    """`seed`'s own ancestry within `union`: itself and its parents while they are in
    `union`, nearest first, ending before a revisit."""
    chain: dict[str, SessionHeader] = {}
    node: str | None = seed
    while node is not None and node in union and node not in chain:
        header = chain[node] = union[node]
        node = header.parent_session
    return chain


def child_index(headers: Headers) -> dict[str, list[str]]:
    """parent id -> the ids in `headers` whose parentSession it is."""
    index: dict[str, list[str]] = {}
    for sid, header in headers.items():
        parent = header.parent_session
        if parent is not None:
            index.setdefault(parent, []).append(sid)
    return index


def reached_in(root: str, index: Mapping[str, list[str]]) -> list[str]:
    """Every id below `root` by child links in `index`, each once (`root` itself only
    when a cycle leads back to it)."""
    out: list[str] = []
    seen: set[str] = set()
    stack = [root]
    while stack:
        for child in index.get(stack.pop(), ()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out


def proves_absent(chain: Headers, child: SessionHeader, parent: str) -> bool:
    """Whether `chain` (one id's own stored chain) shows that `parent` is not stored:
    it holds `child` as stored, with this parent, and stops there."""
    held = chain.get(child.id)
    return held is not None and held.parent_session == parent and parent not in chain


def below(root: str, pool: Headers) -> list[str]:
    """Ids below `root` through child links among `pool` (the root itself excluded)."""
    return [sid for sid in reached_in(root, child_index(pool)) if sid != root]


def ancestry_per_seed(fetch: UnionFn) -> Callable[[Sequence[str]], Awaitable[dict[str, Reached]]]:
    """The batch function of the ancestry loader: one backend walk, each seed's own chain."""

    async def batch(seeds: Sequence[str]) -> dict[str, Reached]:
        union = await fetch(seeds)
        return {seed: Reached(seed, chain_in(seed, union)) for seed in seeds}

    return batch


def descendancy_per_seed(
    fetch: UnionFn, scoped: ScopedUnionFn
) -> Callable[[Sequence[WalkSeed]], Awaitable[dict[WalkSeed, Reached]]]:
    """The batch function of the descendancy loader: one backend walk per filter among the
    batch's keys (unscoped, or the one scope of the observation), each seed's own
    descendants."""

    async def batch(keys: Sequence[WalkSeed]) -> dict[WalkSeed, Reached]:
        groups: dict[ScopeFilter | None, list[WalkSeed]] = {}
        for key in keys:
            groups.setdefault(key.within, []).append(key)
        out: dict[WalkSeed, Reached] = {}
        for within, group in groups.items():  # one group but in a scoped observation
            ids = [k.id for k in group]
            if within is None:
                union = await fetch(ids)
            else:
                union = await scoped(ids, within, [k.id for k in group if k.inside])
            index = child_index(union)
            for key in group:
                out[key] = Reached(key.id, {sid: union[sid] for sid in reached_in(key.id, index)})
        return out

    return batch
