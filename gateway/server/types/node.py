"""Relay's Global Object Identification: the `Node` interface, `Query.node` and `Query.nodes`.

Relay keeps one store record per id, so a node id must name one object of one
type. `Session.id` is the session id (SPEC §7 fixes it; clients use it), and
a session id may be any Unicode text up to 1,024 characters except NUL and
lone surrogates (`gateway.core.ids`, the text policy every writer enforces).
So an `Event` id is built outside that space:

    <session id> U+0000 <seq in decimal, no sign, no leading zero>

Every Event id holds a NUL and no session id can, so no Event id is a Session
id; and since the session id part holds no NUL, the first NUL splits an Event
id back into its session and seq exactly (one event, one id, and back).
Decoding is the only thing `node(id:)` does before the read it stands for: a
session id reads like `session(id:)`, an Event id like `event(sessionId:,
seq:)`, so scope applies the same way (an invisible id is null with the same
error as an absent one) and `nodes(ids:)` loads each session once, through the
request's batched observation. An id with a NUL that does not decode names no
event: null with SESSION_QUERY_EVENT_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import strawberry

from gateway.core import ErrorCode, SessionQueryError
from gateway.core.ids import shown

from ..context import Context
from ..errors import bad_input

if TYPE_CHECKING:
    from .events import Event
    from .sessions import Session

SEPARATOR = "\x00"
"""Between an Event id's session id and seq: the one character no session id holds."""

MAX_NODE_IDS = 100
"""Most ids one `nodes(ids:)` may ask for (BAD_USER_INPUT past it; the cost model
counts each as one object with what it selects)."""

_MAX_SEQ_DIGITS = 18


@strawberry.interface(
    description=(
        "An object with a globally unique id (Relay's Global Object Identification): "
        "`node(id:)` fetches it again. A Session's id is its session id; an Event's id is "
        "its session id, a NUL (U+0000) and its seq in decimal, which no session id can be."
    )
)
class Node:
    id: strawberry.ID = strawberry.field(
        description="Globally unique: no two objects of any types share it."
    )


event_id_text: Callable[[str, int], str] = f"{{}}{SEPARATOR}{{}}".format
"""`event_node_id` in one C call (`str.format`, no Python frame: a page wraps each of
its events; `strawberry.ID` is `str` at run time)."""


def event_node_id(session_id: str, seq: int) -> strawberry.ID:
    """The node id of event `seq` of `session_id` (see the module docstring)."""
    return strawberry.ID(event_id_text(session_id, seq))


@dataclass(frozen=True, slots=True)
class SessionNodeId:
    session_id: str


@dataclass(frozen=True, slots=True)
class EventNodeId:
    session_id: str
    seq: int


def decode_node_id(node_id: str) -> SessionNodeId | EventNodeId | None:
    """What a node id names: a session, an event, or (a NUL that does not decode) nothing.

    Only ids `event_node_id` makes decode as events: the seq part is canonical
    decimal, so no two ids name one event."""
    session_id, sep, seq = node_id.partition(SEPARATOR)
    if not sep:
        return SessionNodeId(node_id)
    canonical = seq.isascii() and seq.isdigit() and (seq == "0" or not seq.startswith("0"))
    if not session_id or not canonical or len(seq) > _MAX_SEQ_DIGITS:
        return None
    return EventNodeId(session_id, int(seq))


def _no_such_node(node_id: str) -> SessionQueryError:
    return SessionQueryError(
        ErrorCode.EVENT_NOT_FOUND,
        f"no event has the id {shown(node_id)} (an Event id is its session id, U+0000 "
        "and its seq in decimal)",
    )


async def resolve_node(ctx: Context, node_id: str) -> Session | Event | None:
    """`node(id:)`: the read the id stands for (its errors, its scope)."""
    from .sessions import Session, event_by_seq

    named = decode_node_id(node_id)
    if isinstance(named, SessionNodeId):
        return Session.of(await ctx.session(named.session_id))
    if isinstance(named, EventNodeId):
        return await event_by_seq(ctx, named.session_id, named.seq)
    raise _no_such_node(node_id)


async def resolve_nodes(ctx: Context, node_ids: list[strawberry.ID]) -> list[Node | None]:
    """`nodes(ids:)`: each id as `node(id:)` would answer it, in order, resolved together
    (one loop turn, so the observation batches their backend reads); a missing one is
    null with its own error at its index."""
    if len(node_ids) > MAX_NODE_IDS:
        raise bad_input(f"`ids` may hold at most {MAX_NODE_IDS} ids (got {len(node_ids)})", "ids")

    async def one(node_id: str) -> Session | Event | SessionQueryError | None:
        try:
            return await resolve_node(ctx, node_id)
        except SessionQueryError as exc:
            return exc  # graphql-core reports an Exception item as that item's error

    answers = await asyncio.gather(*(one(i) for i in node_ids))
    return cast("list[Node | None]", answers)
