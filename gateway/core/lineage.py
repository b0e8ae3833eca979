"""Session lineage over one corpus observation (SPEC §4, trace_session).

Iterative throughout: chains thousands of levels deep must not hit Python's
recursion limit.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ErrorCode, SessionQueryError
from .results import LineageNode, SessionRecord, SessionTrace


def children_index(records: Mapping[str, SessionRecord]) -> dict[str, list[SessionRecord]]:
    """parent id -> children, each list ordered by createdAt then id."""
    index: dict[str, list[SessionRecord]] = {}
    for record in records.values():
        parent = record.header.parent_session
        if parent is not None:
            index.setdefault(parent, []).append(record)
    for siblings in index.values():
        siblings.sort(key=lambda r: (r.header.created_at, r.header.id))
    return index


def trace_lineage(
    records: Mapping[str, SessionRecord],
    target_id: str,
    children: Mapping[str, list[SessionRecord]] | None = None,
) -> SessionTrace:
    """Ancestors, descendants and root of `target_id` within `records`."""
    target = records.get(target_id)
    if target is None:
        raise SessionQueryError(
            ErrorCode.SESSION_NOT_FOUND, f"session {target_id!r} is not in the corpus"
        )
    ancestors: list[SessionRecord] = []
    visited = {target_id}
    unresolved: str | None = None
    parent = target.header.parent_session
    while parent is not None:
        if parent in visited:
            raise SessionQueryError(
                ErrorCode.INVALID_LINEAGE,
                f"the parent chain of session {target_id!r} loops back to {parent!r}",
            )
        record = records.get(parent)
        if record is None:
            unresolved = parent
            break
        visited.add(parent)
        ancestors.append(record)
        parent = record.header.parent_session
    if children is None:
        children = children_index(records)
    complete = unresolved is None
    return SessionTrace(
        target=target,
        ancestors=ancestors,
        descendants=descendant_tree(target_id, children),
        complete=complete,
        root=(ancestors[-1] if ancestors else target) if complete else None,
        unresolved_parent_id=unresolved,
    )


def descendant_tree(root_id: str, children: Mapping[str, list[SessionRecord]]) -> list[LineageNode]:
    """The complete tree of children below `root_id`, built without recursion."""
    top: list[LineageNode] = []
    pending: list[tuple[str, list[LineageNode]]] = [(root_id, top)]
    seen = {root_id}
    while pending:
        parent_id, into = pending.pop()
        for child in children.get(parent_id, ()):
            if child.header.id in seen:  # only reachable through a cycle
                raise SessionQueryError(
                    ErrorCode.INVALID_LINEAGE,
                    f"session {child.header.id!r} is its own descendant",
                )
            seen.add(child.header.id)
            node = LineageNode(child, [])
            into.append(node)
            pending.append((child.header.id, node.descendants))
    return top


def flatten(nodes: list[LineageNode]) -> list[LineageNode]:
    """Every node of a descendant forest, parents before children, siblings in order."""
    out: list[LineageNode] = []
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.descendants))
    return out
