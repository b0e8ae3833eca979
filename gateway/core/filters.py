"""Filters of pages and searches (SPEC §12), and the bounds on what a caller may ask.

`SessionFilter` and `EventFilter` are the contract's inputs as frozen values
(the GraphQL inputs map onto them one to one). `None` means "not given" for a
field; an empty tuple is an empty list and matches nothing. `check_*` refuse
what the contract calls invalid (`SESSION_QUERY_INVALID_FILTER`, the message
naming the argument) and what would make a request unbounded (lists and texts
longer than the bounds below).

The same values go to a backend (`gateway.core.backend`): every clause but
`availability` (which only the core knows: it is about the live stores) and
`text` (the literal scan, `gateway.core.text_filter`) is answered by indexed
queries there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

from .errors import ErrorCode, SessionQueryError
from .event_text import js_trim
from .fold import EventSurface
from .matching import normalize_query
from .model import SessionEvent, SessionHeader

MAX_FILTER_VALUES = 100
"""Most values one filter list may hold (`ids`, `cwd`, `parent`, `types`, ...)."""
MAX_TEXT_LENGTH = 1000
"""Most code points of a `text` filter or a search query."""


class Availability(StrEnum):
    LIVE = "LIVE"
    PERSISTED = "PERSISTED"


@dataclass(frozen=True, slots=True)
class TimeRange:
    """Epoch milliseconds, inclusive; either bound may be left out."""

    from_: int | None = None
    to: int | None = None

    def contains(self, value: int) -> bool:
        return (self.from_ is None or value >= self.from_) and (self.to is None or value <= self.to)


@dataclass(frozen=True, slots=True)
class SeqRange:
    """Seqs, inclusive; either bound may be left out."""

    from_: int | None = None
    to: int | None = None

    def contains(self, value: int) -> bool:
        return (self.from_ is None or value >= self.from_) and (self.to is None or value <= self.to)


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Which sessions a page or search keeps (SPEC §12); fields ANDed, list values ORed.

    `cwd` and `parent` may hold None: sessions without a cwd / without a parent."""

    ids: tuple[str, ...] | None = None
    cwd: tuple[str | None, ...] | None = None
    created_at: TimeRange | None = None
    parent: tuple[str | None, ...] | None = None
    availability: tuple[Availability, ...] | None = None

    @property
    def stored_part(self) -> SessionFilter | None:
        """What a backend applies: all but `availability` (None when nothing is left)."""
        if (
            self.ids is None
            and self.cwd is None
            and self.created_at is None
            and self.parent is None
        ):
            return None
        return SessionFilter(self.ids, self.cwd, self.created_at, self.parent)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a page or search keeps (SPEC §12); fields ANDed, list values ORed."""

    seq: SeqRange | None = None
    time: TimeRange | None = None
    types: tuple[str, ...] | None = None
    surface: tuple[EventSurface, ...] | None = None
    text: str | None = None


def _invalid(message: str) -> SessionQueryError:
    return SessionQueryError(ErrorCode.INVALID_FILTER, message)


def _check_range(name: str, r: TimeRange | SeqRange | None) -> None:
    if r is not None and r.from_ is not None and r.to is not None and r.from_ > r.to:
        raise _invalid(f"{name}: from ({r.from_}) is greater than to ({r.to})")


def _check_list(name: str, values: tuple[object, ...] | None) -> None:
    if values is not None and len(values) > MAX_FILTER_VALUES:
        raise _invalid(
            f"{name} lists {len(values)} values; at most {MAX_FILTER_VALUES} are allowed"
        )
    for value in values or ():
        if isinstance(value, str) and "\x00" in value:
            raise _invalid(f"{name} holds a NUL character")


def check_session_filter(f: SessionFilter, name: str = "filter") -> None:
    """INVALID_FILTER for an inverted range, an over-long list or a NUL."""
    _check_range(f"{name}.createdAt", f.created_at)
    _check_list(f"{name}.ids", f.ids)
    _check_list(f"{name}.cwd", f.cwd)
    _check_list(f"{name}.parent", f.parent)


def check_event_filter(
    f: EventFilter, name: str = "filter", *, text_allowed: bool = True
) -> str | None:
    """INVALID_FILTER for an inverted range, an over-long list, a NUL or a bad `text`
    (a search's filters take none); returns the trimmed `text`, if given."""
    _check_range(f"{name}.seq", f.seq)
    _check_range(f"{name}.time", f.time)
    _check_list(f"{name}.types", f.types)
    if f.text is None:
        return None
    if not text_allowed:
        raise _invalid(f"{name}.text is not allowed here: a search's filters take no text clause")
    text = js_trim(f.text)
    if not text:
        raise _invalid(f"{name}.text is empty after trimming")
    if "\x00" in text:
        raise _invalid(f"{name}.text holds a NUL character")
    if len(text) > MAX_TEXT_LENGTH:
        raise _invalid(
            f"{name}.text is {len(text)} characters long; at most {MAX_TEXT_LENGTH} are allowed"
        )
    return text


def check_query(query: str, name: str = "query") -> str:
    """The normalized search query (trimmed, whitespace runs one space), or
    INVALID_QUERY when it is empty, holds a NUL or is longer than the bound."""
    if "\x00" in query:
        raise SessionQueryError(ErrorCode.INVALID_QUERY, f"{name} holds a NUL character")
    normalized = normalize_query(query)
    if not normalized:
        raise SessionQueryError(ErrorCode.INVALID_QUERY, f"{name} is empty after trimming")
    if len(normalized) > MAX_TEXT_LENGTH:
        raise SessionQueryError(
            ErrorCode.INVALID_QUERY,
            f"{name} is {len(normalized)} characters long; at most {MAX_TEXT_LENGTH} are allowed",
        )
    return normalized


# -- the clauses as predicates (live sessions, backends without pushdown, models) -------


def header_matches(f: SessionFilter, header: SessionHeader) -> bool:
    """Whether a header satisfies every clause but `availability`."""
    if f.ids is not None and header.id not in f.ids:
        return False
    if f.cwd is not None and header.cwd not in f.cwd:
        return False
    if f.created_at is not None and not f.created_at.contains(header.created_at):
        return False
    return f.parent is None or header.parent_session in f.parent


def availability_matches(f: SessionFilter, *, live: bool, persisted: bool) -> bool:
    """Whether a session that is `live` / `persisted` now satisfies `availability`."""
    if f.availability is None:
        return True
    return (Availability.LIVE in f.availability and live) or (
        Availability.PERSISTED in f.availability and persisted
    )


def event_matches(f: EventFilter, event: SessionEvent, surface: EventSurface) -> bool:
    """Whether an event (classified as of the view) satisfies every clause but `text`."""
    if f.seq is not None and not f.seq.contains(event.seq):
        return False
    if f.time is not None and not f.time.contains(event.time):
        return False
    if f.types is not None and event.type not in f.types:
        return False
    return f.surface is None or surface in f.surface


# -- the normalized form (what a cursor is bound to) -----------------------------------


def _values(values: tuple[object, ...] | None) -> list[object] | None:
    """A list's values as a set: deduplicated and sorted (None first)."""
    if values is None:
        return None
    return sorted(set(values), key=lambda v: (v is not None, str(v)))


def _range(r: TimeRange | SeqRange | None) -> list[int | None] | None:
    return None if r is None or (r.from_ is None and r.to is None) else [r.from_, r.to]


def filter_key(f: SessionFilter | EventFilter | None) -> str:
    """The normalized filter as canonical JSON ("" when it constrains nothing): equal
    for filters that select the same by the contract's rules (a `null` field or an
    unbounded range left out, list values as a set, `text` trimmed)."""
    if f is None:
        return ""
    fields: dict[str, object]
    if isinstance(f, SessionFilter):
        fields = {
            "ids": _values(f.ids),
            "cwd": _values(f.cwd),
            "createdAt": _range(f.created_at),
            "parent": _values(f.parent),
            "availability": _values(f.availability),
        }
    else:
        fields = {
            "seq": _range(f.seq),
            "time": _range(f.time),
            "types": _values(f.types),
            "surface": _values(f.surface),
            "text": None if f.text is None else js_trim(f.text),
        }
    kept = {k: v for k, v in fields.items() if v is not None}
    if not kept:
        return ""
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
