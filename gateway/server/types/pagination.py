"""Relay-style connection plumbing: `PageInfo` and page sizes.

`first` defaults to 50 and may not exceed 500 (a clear BAD_USER_INPUT error
says so); cursors come from `gateway.server.cursors` and hold keyset positions.
"""

from __future__ import annotations

from typing import TypeVar

import strawberry

from ..errors import bad_input

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500

T = TypeVar("T")


@strawberry.type(description="Where a page sits in its list (Relay cursor connections).")
class PageInfo:
    has_next_page: bool = strawberry.field(description="More items follow this page.")
    has_previous_page: bool = strawberry.field(description="Items precede this page.")
    start_cursor: str | None = strawberry.field(
        description="Cursor of the first item of the page (null on an empty page)."
    )
    end_cursor: str | None = strawberry.field(
        description="Cursor of the last item: pass it as `after` to get the next page."
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
