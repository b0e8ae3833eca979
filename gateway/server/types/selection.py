"""What a connection field's selection reads, so that the page reads only that.

`selects_data(info)` says whether the selection under the resolving field names a
`data` field anywhere (fragments and inline fragments included): a page of events
read for `nodes { seq type surface }` then asks persistence for no payloads, which
are neither read nor decoded. It errs on the side of reading: a `data` nested
further down (`nodes { replacedBy { data } }`) counts too, though those events are
read by questions of their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strawberry.types.nodes import FragmentSpread, InlineFragment, SelectedField

__all__ = ["selects_data"]


def selects_data(info: Any) -> bool:
    """Whether the field being resolved selects `data` anywhere below it."""
    return any(_names_data(field.selections) for field in info.selected_fields)


def _names_data(selections: Iterable[Any]) -> bool:
    pending = list(selections)
    while pending:
        node = pending.pop()
        if isinstance(node, SelectedField):
            if node.name == "data":
                return True
            pending.extend(node.selections)
        elif isinstance(node, FragmentSpread | InlineFragment):
            pending.extend(node.selections)
        else:  # a node kind this walk does not know: read the payloads
            return True
    return False
