"""What the five operations return (SPEC §4): plain, freshly built, detached values.

Optional values are `None`, never missing attributes; lists are new lists the
caller owns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .fold import EventSurface
from .model import SessionEvent, SessionHeader


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session as the logical corpus sees it: which sources hold it, and its header.

    When both hold it, the live header is the one reported.
    """

    header: SessionHeader
    live: bool
    persisted: bool

    @property
    def id(self) -> str:
        return self.header.id


class EventRecord(NamedTuple):
    """A raw event's place in its log: `list_events` rows and `trace_event` targets.

    A named tuple rather than a dataclass: `list_events` builds one per raw
    event, and tuples are several times cheaper to make.
    """

    session_id: str
    seq: int
    type: str
    time: int
    surface: EventSurface


@dataclass(frozen=True, slots=True)
class ReadWindow:
    """A bounded window of raw events around one target, clipped to the log."""

    session: SessionHeader
    target: SessionEvent
    events: list[SessionEvent]
    start_seq: int
    end_seq: int


@dataclass(frozen=True, slots=True)
class LineageNode:
    """A descendant and its own children, siblings by createdAt then id."""

    session: SessionRecord
    descendants: list[LineageNode] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SessionTrace:
    """A session's lineage from one corpus observation.

    `ancestors` run nearest parent first. A complete chain has a `root` (the
    farthest ancestor, or the target itself); an incomplete one names the
    first parent id the corpus lacks.
    """

    target: SessionRecord
    ancestors: list[SessionRecord]
    descendants: list[LineageNode]
    complete: bool
    root: SessionRecord | None
    unresolved_parent_id: str | None


@dataclass(frozen=True, slots=True)
class EventTrace:
    """How one event replaces and cites others, and how others replace and cite it.

    `event` is the full target event (detached); `target` its record.
    """

    target: EventRecord
    event: SessionEvent
    replaced_by: int | None
    replacement_chain: list[int]
    replaced_event_seqs: list[int]
    source_event_seqs: list[int]
    derived_event_seqs: list[int]
