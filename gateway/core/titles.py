"""A session's title (SPEC §14): what its last `session/title` event says.

The title is read from the *last* `session/title` event of the log, never from
an earlier one: when that last event's data is malformed (not an object, a
`title` that is not a string, `messageSeqs` that is not a list of seqs, a
`source.kind` other than fallback/provider/user, a `provider` or `model`
that is not a string), the session has no title (`None`), exactly as if the
event said nothing readable. Falling back to an earlier, well-formed event
would make the answer depend on history the host has already overwritten.

Where the last title event comes from is the caller's business: a live
session remembers the seqs of its title events as they are committed
(`LiveSession`), a backend with `TitleReads` answers a page's ids in one read,
and any other log is scanned (`last_title_event`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from .model import SessionEvent

TITLE_EVENT = "session/title"
"""The event type that sets a session's title."""

MAX_SEQ = 2**31 - 1
"""The largest seq a title may name: `messageSeqs` are GraphQL `Int`s (32 bits)."""


class TitleSource(Enum):
    """Who chose a title: the host's fallback (e.g. the first words of a message),
    a model provider, or the user."""

    FALLBACK = "fallback"
    PROVIDER = "provider"
    USER = "user"


@dataclass(frozen=True, slots=True)
class SessionTitle:
    """A session's current title, read from its last `session/title` event.

    `event_seq` and `updated_at` are that event's seq and time; `message_seqs`
    the messages the title was made from, as recorded.
    """

    title: str
    source_kind: TitleSource
    provider: str | None
    model: str | None
    message_seqs: tuple[int, ...]
    event_seq: int
    updated_at: int


def _seqs(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    for seq in value:
        if type(seq) is not int or not 0 <= seq <= MAX_SEQ:
            return None
    return tuple(value)


def _optional_text(source: dict[str, object], key: str) -> tuple[bool, str | None]:
    """(well-formed, value) of an optional string field (absent or null: None)."""
    value = source.get(key)
    if value is None or isinstance(value, str):
        return True, value
    return False, None


def title_of(event: SessionEvent) -> SessionTitle | None:
    """The title `event` (a `session/title` event) sets; None when its data is malformed
    (see the module docstring) or it is no title event."""
    data = event.data
    if event.type != TITLE_EVENT or not isinstance(data, dict):
        return None
    title, source = data.get("title"), data.get("source")
    seqs = _seqs(data.get("messageSeqs"))
    if not isinstance(title, str) or seqs is None or not isinstance(source, dict):
        return None
    try:
        kind = TitleSource(source.get("kind"))
    except ValueError:
        return None
    ok_provider, provider = _optional_text(source, "provider")
    ok_model, model = _optional_text(source, "model")
    if not (ok_provider and ok_model):
        return None
    if type(event.seq) is not int or type(event.time) is not int:
        return None
    return SessionTitle(title, kind, provider, model, seqs, event.seq, event.time)


def last_title_event(events: Sequence[SessionEvent]) -> SessionEvent | None:
    """The last `session/title` event of a log (scanned from its end), or None."""
    for event in reversed(events):
        if event.type == TITLE_EVENT:
            return event
    return None


def title_seqs(events: Iterable[SessionEvent]) -> list[int]:
    """The seqs of a log's `session/title` events, ascending (what a live session keeps)."""
    return [e.seq for e in events if e.type == TITLE_EVENT]
