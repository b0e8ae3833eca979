"""Relay-style connection plumbing: `PageInfo` and page sizes.

`first` defaults to 50 and may not exceed 500 (a clear BAD_USER_INPUT error
says so); cursors come from `gateway.server.cursors` and hold keyset positions.

A cursor is signed (an HMAC) only when a query selects it: a connection holds a
`Sign` per item, a call that makes the cursor from the item's key, and the
`cursor` / `startCursor` / `endCursor` resolvers call it. A page whose selection
names no cursor signs none (an HMAC per edge was 8.6 % of an events page).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import strawberry

from ..errors import bad_input
from .plain import plain_function

Sign = Callable[[], str]
"""Makes one item's cursor when called (e.g. `partial(codec.event, sid, seq, digest)`)."""

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500

T = TypeVar("T")


CURSOR = "Opaque cursor: pass it as `after`."


class _Signed(Protocol):
    _sign: Sign


@plain_function
def edge_cursor(root: strawberry.Parent[_Signed]) -> str:
    """An edge's `cursor`: signed only when selected (the edge holds its `Sign`)."""
    return root._sign()


@plain_function
def _start_cursor(root: strawberry.Parent[PageInfo]) -> str | None:
    return None if root._start is None else root._start()


@plain_function
def _end_cursor(root: strawberry.Parent[PageInfo]) -> str | None:
    return None if root._end is None else root._end()


@strawberry.type(description="Where a page sits in its list (Relay cursor connections).")
class PageInfo:
    has_next_page: bool = strawberry.field(description="More items follow this page.")
    has_previous_page: bool = strawberry.field(description="Items precede this page.")
    start_cursor: str | None = strawberry.field(
        resolver=_start_cursor,
        description="Cursor of the first item of the page (null on an empty page).",
    )
    end_cursor: str | None = strawberry.field(
        resolver=_end_cursor,
        description="Cursor of the last item: pass it as `after` to get the next page.",
    )
    _start: strawberry.Private[Sign | None]
    _end: strawberry.Private[Sign | None]


def page_info(has_next: bool, has_previous: bool, signs: Sequence[Sign]) -> PageInfo:
    """The `PageInfo` of a page whose items' cursors `signs` make (signed when asked)."""
    return PageInfo(
        has_next_page=has_next,
        has_previous_page=has_previous,
        _start=signs[0] if signs else None,
        _end=signs[-1] if signs else None,
    )


def given(value: T | None) -> T | None:
    """An optional argument's value, None when omitted (UNSET) or null."""
    return None if value is None or value is strawberry.UNSET else value


def page_size(first: int | None) -> int:
    """`first` checked: default 50, 0..500 allowed."""
    first = given(first)
    if first is None:
        return DEFAULT_PAGE_SIZE
    if first < 0:
        raise bad_input(f"`first` must not be negative (got {first})", "first")
    if first > MAX_PAGE_SIZE:
        raise bad_input(
            f"`first` may be at most {MAX_PAGE_SIZE} (got {first}); page with `after` instead",
            "first",
        )
    return first
