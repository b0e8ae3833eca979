"""Lineage types: `SessionTrace`, `LineageNode`, and the flat `LineageGraph`.

`SessionTrace.descendants` is the nested tree the core returns; a deep tree
needs a deep query, which the depth limit caps, so `graph` offers the same
lineage flat: every node (target, ancestors, all descendants) and every
parent->child edge among them, at a fixed query depth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import strawberry

from gateway.core import results as core
from gateway.core.lineage import flatten

from ..context import Context
from .scalars import resolver

if TYPE_CHECKING:
    from .sessions import Session

LazySession = Annotated["Session", strawberry.lazy("gateway.server.types.sessions")]
Info = strawberry.Info[Context, None]


def _session(record: core.SessionRecord) -> Session:
    from .sessions import Session

    return Session.of_record(record)


@strawberry.type(description="A descendant session and its own children, siblings by createdAt.")
class LineageNode:
    node: strawberry.Private[core.LineageNode]

    @resolver("The descendant session.")
    def session(self) -> LazySession:
        return _session(self.node.session)

    @resolver("Its children, ordered by createdAt then id.")
    def descendants(self, info: Info) -> list[LineageNode]:
        info.context.budget.listed(len(self.node.descendants))
        return [LineageNode(node=child) for child in self.node.descendants]


@strawberry.type(description="One parent->child link of a lineage graph.")
class LineageEdge:
    parent_id: strawberry.ID = strawberry.field(description="The parent (forked-from) session.")
    child_id: strawberry.ID = strawberry.field(description="The child (forked) session.")


@strawberry.type(
    description=(
        "A lineage, flat: nodes are the target, its ancestors and every descendant; edges "
        "are each parent->child link among them. Query depth stays fixed however deep "
        "the tree is."
    )
)
class LineageGraph:
    nodes: list[LazySession] = strawberry.field(
        description="Target first, then ancestors (nearest first), then descendants (preorder)."
    )
    edges: list[LineageEdge] = strawberry.field(description="Each parent->child link among nodes.")


@strawberry.type(
    description=(
        "A session's lineage from one corpus listing: ancestors nearest parent first, the "
        "complete descendant tree, and the root when the parent chain is complete."
    )
)
class SessionTrace:
    trace: strawberry.Private[core.SessionTrace]

    @classmethod
    def of(cls, trace: core.SessionTrace) -> SessionTrace:
        return cls(trace=trace)

    @resolver("The traced session.")
    def target(self) -> LazySession:
        return _session(self.trace.target)

    @resolver("Its ancestors, nearest parent first.")
    def ancestors(self, info: Info) -> list[LazySession]:
        info.context.budget.listed(len(self.trace.ancestors))
        return [_session(r) for r in self.trace.ancestors]

    @resolver("Its children, each with their own descendants.")
    def descendants(self, info: Info) -> list[LineageNode]:
        info.context.budget.listed(len(self.trace.descendants))
        return [LineageNode(node=n) for n in self.trace.descendants]

    @resolver("Whether the parent chain reaches a root inside the corpus.")
    def complete(self) -> bool:
        return self.trace.complete

    @resolver("The farthest ancestor (or the target itself) when the chain is complete.")
    def root(self) -> LazySession | None:
        root = self.trace.root
        return None if root is None else _session(root)

    @resolver("The first parent id the corpus lacks, when incomplete.")
    def unresolved_parent_id(self) -> strawberry.ID | None:
        missing = self.trace.unresolved_parent_id
        return None if missing is None else strawberry.ID(missing)

    @resolver("The same lineage as flat nodes and parent->child edges.")
    def graph(self, info: Info) -> LineageGraph:
        trace = self.trace
        records = [trace.target, *trace.ancestors]
        records.extend(node.session for node in flatten(trace.descendants))
        ids = {r.header.id for r in records}
        edges = [
            LineageEdge(parent_id=strawberry.ID(parent), child_id=strawberry.ID(r.header.id))
            for r in records
            if (parent := r.header.parent_session) is not None and parent in ids
        ]
        info.context.budget.listed(len(records) + len(edges))
        return LineageGraph(nodes=[_session(r) for r in records], edges=edges)
