"""What a connection field's selection reads, so that the page reads only that.

`selects_data(info)` says whether the selection under the resolving field names a
`data` field anywhere (fragments and inline fragments included): a page of events
read for `nodes { seq type surface }` then asks persistence for no payloads, which
are neither read nor decoded. It errs on the side of reading: a `data` nested
further down (`nodes { replacedBy { data } }`) counts too, though those events are
read by questions of their own.

It walks graphql-core's own nodes of the document (the field's nodes and the
operation's fragments), each named fragment once, rather than Strawberry's
`info.selected_fields`, which first converts the whole selection below the field
(arguments and variables included) into Strawberry's objects: the same answer,
without building a second tree of the selection on every page.
"""

from __future__ import annotations

from typing import Any

from graphql import FieldNode, FragmentSpreadNode, InlineFragmentNode, SelectionNode

__all__ = ["selects_data"]


def selects_data(info: Any) -> bool:
    """Whether the field being resolved (`info`: Strawberry's `Info` or graphql-core's
    resolve info) selects `data` anywhere below it."""
    raw = getattr(info, "_raw_info", info)
    pending: list[SelectionNode] = []
    for node in raw.field_nodes:
        if node.selection_set is not None:
            pending.extend(node.selection_set.selections)
    return _names_data(pending, raw.fragments)


def _names_data(pending: list[SelectionNode], fragments: dict[str, Any]) -> bool:
    walked: set[str] = set()
    while pending:
        node = pending.pop()
        if isinstance(node, FieldNode):
            if node.name.value == "data":
                return True
            if node.selection_set is not None:
                pending.extend(node.selection_set.selections)
        elif isinstance(node, InlineFragmentNode):
            pending.extend(node.selection_set.selections)
        elif isinstance(node, FragmentSpreadNode):
            name = node.name.value
            if name in walked:
                continue  # its selection answered already
            walked.add(name)
            fragment = fragments.get(name)
            if fragment is None:  # not a fragment this walk can see: read the payloads
                return True
            pending.extend(fragment.selection_set.selections)
        else:  # a node kind this walk does not know: read the payloads
            return True
    return False
