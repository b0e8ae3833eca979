"""A model's tool arguments, checked and turned into the core's filters.

A model writes JSON, so every value is checked here rather than trusted to the
schema it was shown: an argument of the wrong JSON type, an unknown or a missing
one is `BAD_USER_INPUT` (as a GraphQL variable of the wrong type is), and what
the contract itself judges keeps the contract's code: a filter value that is
wrong, an empty list given, a time without a zone or an inverted range is
`SESSION_QUERY_INVALID_FILTER`, an empty query `SESSION_QUERY_INVALID_QUERY`
(from the core), a window bound out of range `SESSION_QUERY_INVALID_WINDOW`.

Times are ISO 8601 with a zone (`Z` or `±HH:MM`), as the dsh reference's tools
take them: a naive time names no instant, so it is refused rather than guessed
at in the server's zone. A bound finer than a millisecond keeps the range
inclusive of exactly the instants it names: a lower bound rounds up, an upper
bound down.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import TypeVar

from gateway.core import (
    Availability,
    ErrorCode,
    EventFilter,
    EventSurface,
    SeqRange,
    SessionFilter,
    SessionQueryError,
    TimeRange,
)
from gateway.core.filters import MAX_FILTER_VALUES

BAD_USER_INPUT = "BAD_USER_INPUT"
"""The code of an argument of the wrong JSON type, an unknown and a missing one (the
gateway's code for input the contract's own codes do not cover)."""

AVAILABILITY_VALUES = {"live": Availability.LIVE, "persisted": Availability.PERSISTED}
SURFACE_VALUES = {
    "current": EventSurface.CURRENT,
    "shadowed": EventSurface.SHADOWED,
    "log-only": EventSurface.LOG_ONLY,
}
SURFACE_NAMES = {surface: name for name, surface in SURFACE_VALUES.items()}

_ISO = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
E = TypeVar("E")


class ToolInputError(Exception):
    """A tool argument that is not of the tool's form: `code` says which rule it broke."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def _invalid_filter(message: str) -> SessionQueryError:
    return SessionQueryError(ErrorCode.INVALID_FILTER, message)


class Arguments:
    """One call's arguments, read by name; `finish()` refuses what no read asked for."""

    def __init__(self, tool: str, raw: Mapping[str, object] | None, known: tuple[str, ...]):
        if raw is not None and not isinstance(raw, Mapping):
            raise ToolInputError(BAD_USER_INPUT, f"{tool} takes an object of arguments")
        self.tool = tool
        self.raw = dict(raw or {})
        unknown = sorted(k for k in self.raw if k not in known)
        if unknown:
            raise ToolInputError(
                BAD_USER_INPUT,
                f"{tool} has no argument {', '.join(repr(k) for k in unknown)} "
                f"(it takes: {', '.join(known)})",
            )

    def _given(self, name: str) -> object:
        """The value, None when left out or given as null (the same, as in the contract)."""
        return self.raw.get(name)

    def string(self, name: str, *, required: bool = False) -> str | None:
        value = self._given(name)
        if value is None:
            if required:
                raise ToolInputError(BAD_USER_INPUT, f"{self.tool} needs the argument {name!r}")
            return None
        if not isinstance(value, str):
            raise ToolInputError(
                BAD_USER_INPUT, f"{name} must be a string, got {_json_type(value)}"
            )
        return value

    def session_id(self) -> str:
        value = self.string("session_id", required=True)
        assert value is not None
        return value

    def integer(self, name: str, *, required: bool = False) -> int | None:
        """An integer as JSON writes it (`3` or `3.0`; never a bool)."""
        value = self._given(name)
        if value is None:
            if required:
                raise ToolInputError(BAD_USER_INPUT, f"{self.tool} needs the argument {name!r}")
            return None
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if type(value) is not int:
            raise ToolInputError(
                BAD_USER_INPUT, f"{name} must be an integer, got {_json_type(value)}"
            )
        return value

    def boolean(self, name: str) -> bool | None:
        value = self._given(name)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise ToolInputError(
                BAD_USER_INPUT, f"{name} must be true or false, got {_json_type(value)}"
            )
        return value

    def strings(self, name: str) -> tuple[str, ...] | None:
        """A list of strings; an empty list given is INVALID_FILTER (it could only
        match nothing, which is never what a model means)."""
        value = self._given(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ToolInputError(
                BAD_USER_INPUT, f"{name} must be a list of strings, got {_json_type(value)}"
            )
        if not value:
            raise _invalid_filter(f"{name} must contain at least one value when given")
        if len(value) > MAX_FILTER_VALUES:
            raise _invalid_filter(
                f"{name} lists {len(value)} values; at most {MAX_FILTER_VALUES} are allowed"
            )
        return tuple(value)

    def seq_bound(self, name: str) -> int | None:
        value = self.integer(name)
        if value is not None and value < 0:
            raise _invalid_filter(f"{name} must be a non-negative integer, got {value}")
        return value

    def time_bound(self, name: str, *, upper: bool) -> int | None:
        text = self.string(name)
        return None if text is None else parse_time(name, text, upper=upper)

    def seq_range(self, prefix: str) -> SeqRange | None:
        low, high = self.seq_bound(f"{prefix}_from"), self.seq_bound(f"{prefix}_to")
        if low is not None and high is not None and low > high:
            raise _invalid_filter(f"{prefix}_from ({low}) is greater than {prefix}_to ({high})")
        return None if low is None and high is None else SeqRange(low, high)

    def time_range(self, prefix: str) -> TimeRange | None:
        low = self.time_bound(f"{prefix}_from", upper=False)
        high = self.time_bound(f"{prefix}_to", upper=True)
        if low is not None and high is not None and low > high:
            raise _invalid_filter(
                f"{prefix}_from ({self.raw[f'{prefix}_from']}) is later than "
                f"{prefix}_to ({self.raw[f'{prefix}_to']})"
            )
        return None if low is None and high is None else TimeRange(low, high)

    def surfaces(self, name: str) -> tuple[EventSurface, ...] | None:
        return self._enum(name, SURFACE_VALUES)

    def availability(self, name: str) -> tuple[Availability, ...] | None:
        return self._enum(name, AVAILABILITY_VALUES)

    def _enum(self, name: str, values: Mapping[str, E]) -> tuple[E, ...] | None:
        given = self.strings(name)
        if given is None:
            return None
        for value in given:
            if value not in values:
                raise _invalid_filter(f"{name}: {value!r} is not one of {', '.join(values)}")
        return tuple(dict.fromkeys(values[v] for v in given))


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:80]!r}"
    if isinstance(value, list):
        return "a list" + ("" if all(isinstance(v, str) for v in value) else " of non-strings")
    return "an object" if isinstance(value, dict) else type(value).__name__


def parse_time(name: str, text: str, *, upper: bool) -> int:
    """Epoch milliseconds of an ISO 8601 time with a zone; INVALID_FILTER otherwise.

    Sub-millisecond digits round a lower bound up and an upper bound down, so the
    inclusive range holds exactly the whole milliseconds inside what was written."""
    match = _ISO.fullmatch(text.strip())
    if match is None:
        zone_missing = re.fullmatch(r"\d{4}-\d{2}-\d{2}([Tt ][\d:.]+)?", text.strip())
        why = (
            "has no time zone: add Z (UTC) or an offset like +02:00"
            if zone_missing
            else "is not an ISO 8601 time with a zone"
        )
        raise _invalid_filter(f"{name} {text[:80]!r} {why} (e.g. 2026-07-10T14:30:00Z)")
    year, month, day, hour, minute = (int(match.group(i)) for i in range(1, 6))
    second = int(match.group(6) or 0)
    fraction = match.group(7) or ""
    sign, off_h, off_m = match.group(9), match.group(10), match.group(11)
    try:
        offset = timedelta(0)
        if sign is not None:
            if int(off_h) > 23 or int(off_m) > 59:
                raise ValueError("offset out of range")
            offset = timedelta(hours=int(off_h), minutes=int(off_m))
            if sign == "-":
                offset = -offset
        when = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
    except ValueError:
        raise _invalid_filter(f"{name} {text[:80]!r} is not a valid date and time") from None
    seconds = (when - _EPOCH) // timedelta(seconds=1)
    millis = int((fraction + "000")[:3])
    ms = seconds * 1000 + millis
    finer = fraction[3:].strip("0")
    return ms + 1 if finer and not upper else ms


def session_filter(args: Arguments) -> SessionFilter | None:
    """`session_search`'s session clauses (None when it gives none).

    `parent_session_ids` and `include_root_sessions` are one clause, as in the
    reference: the parents listed, or (when true) no parent at all."""
    ids = args.strings("session_ids")
    created = args.time_range("created_at")
    parents: tuple[str | None, ...] | None = args.strings("parent_session_ids")
    if args.boolean("include_root_sessions"):
        parents = (*(parents or ()), None)
    if parents is not None:
        parents = tuple(dict.fromkeys(parents))
    availability = args.availability("availability")
    if ids is None and created is None and parents is None and availability is None:
        return None
    return SessionFilter(ids=ids, created_at=created, parent=parents, availability=availability)


def event_filter(
    args: Arguments, *, seq: str, time: str, types: str, surfaces: str
) -> EventFilter | None:
    """The event clauses under the names this tool gives them (None when none is given)."""
    f = EventFilter(
        seq=args.seq_range(seq),
        time=args.time_range(time),
        types=args.strings(types),
        surface=args.surfaces(surfaces),
    )
    return None if f == EventFilter() else f


def iso_time(ms: int) -> str:
    """Epoch milliseconds as an ISO 8601 UTC time (`2026-07-10T14:30:00.000Z`)."""
    try:
        when = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms since the epoch"
    return (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}T"
        f"{when.hour:02d}:{when.minute:02d}:{when.second:02d}.{ms % 1000:03d}Z"
    )


__all__ = [
    "AVAILABILITY_VALUES",
    "BAD_USER_INPUT",
    "SURFACE_NAMES",
    "SURFACE_VALUES",
    "Arguments",
    "ToolInputError",
    "event_filter",
    "iso_time",
    "parse_time",
    "session_filter",
]
