"""The filter inputs of SPEC §12 and their mapping onto the core's filter values.

A field left out and a field given as `null` are the same ("not given"); a list
given empty matches nothing. Validation (ranges, bounds, NUL, `text`) is the
core's (`gateway.core.filters`), so every caller gets the same codes.
"""

from __future__ import annotations

from enum import Enum

import strawberry

from gateway.core.filters import Availability as CoreAvailability
from gateway.core.filters import EventFilter as CoreEventFilter
from gateway.core.filters import SeqRange as CoreSeqRange
from gateway.core.filters import SessionFilter as CoreSessionFilter
from gateway.core.filters import TimeRange as CoreTimeRange

from .scalars import TO_CORE_SURFACE, EpochMillis, EventSurface


@strawberry.enum(description="Where a session is held now.")
class Availability(Enum):
    LIVE = strawberry.enum_value("LIVE", description="Live in a registered store now.")
    PERSISTED = strawberry.enum_value("PERSISTED", description="In the mounted backend now.")


@strawberry.input(
    description="An inclusive range of epoch milliseconds; either bound may be left out."
)
class TimeRange:
    from_: EpochMillis | None = strawberry.field(default=None, name="from")
    to: EpochMillis | None = None


@strawberry.input(description="An inclusive range of seqs; either bound may be left out.")
class SeqRange:
    from_: int | None = strawberry.field(default=None, name="from")
    to: int | None = None


@strawberry.input(
    description="Which sessions to keep: given fields are ANDed, the values of one list ORed."
)
class SessionFilter:
    ids: list[strawberry.ID] | None = strawberry.field(default=None, description="id is one of")
    cwd: list[str | None] | None = strawberry.field(
        default=None, description="cwd is one of; null selects sessions without a cwd"
    )
    created_at: TimeRange | None = strawberry.field(default=None, name="createdAt")
    parent: list[strawberry.ID | None] | None = strawberry.field(
        default=None,
        description="parentSessionId is one of; null selects sessions without one",
    )
    availability: list[Availability] | None = strawberry.field(
        default=None, description="LIVE: live now; PERSISTED: in the backend now"
    )


@strawberry.input(
    description="Which events to keep: given fields are ANDed, the values of one list ORed."
)
class EventFilter:
    seq: SeqRange | None = None
    time: TimeRange | None = None
    types: list[str] | None = None
    surface: list[EventSurface] | None = None
    text: str | None = strawberry.field(
        default=None, description="literal scan of the event's text (SPEC §13), not search"
    )


def _time(r: TimeRange | None) -> CoreTimeRange | None:
    return None if r is None else CoreTimeRange(r.from_, r.to)


def to_session_filter(f: SessionFilter | None) -> CoreSessionFilter | None:
    """The core's value of a `SessionFilter` input (None when not given)."""
    if f is None:
        return None
    return CoreSessionFilter(
        ids=None if f.ids is None else tuple(str(i) for i in f.ids),
        cwd=None if f.cwd is None else tuple(f.cwd),
        created_at=_time(f.created_at),
        parent=None if f.parent is None else tuple(None if p is None else str(p) for p in f.parent),
        availability=None
        if f.availability is None
        else tuple(CoreAvailability(a.name) for a in f.availability),
    )


def to_event_filter(f: EventFilter | None) -> CoreEventFilter | None:
    """The core's value of an `EventFilter` input (None when not given)."""
    if f is None:
        return None
    return CoreEventFilter(
        seq=None if f.seq is None else CoreSeqRange(f.seq.from_, f.seq.to),
        time=_time(f.time),
        types=None if f.types is None else tuple(f.types),
        surface=None if f.surface is None else tuple(TO_CORE_SURFACE[s] for s in f.surface),
        text=f.text,
    )


__all__ = [
    "Availability",
    "EventFilter",
    "SeqRange",
    "SessionFilter",
    "TimeRange",
    "to_event_filter",
    "to_session_filter",
]
