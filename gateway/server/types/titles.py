"""Title types of SPEC §14: `TitleSourceKind`, `SessionTitle` (the field `Session.title`).

They map `gateway.core.titles.SessionTitle`, nothing more: which event is a
session's title, and when a title event is too malformed to be one, is the
core's rule.
"""

from __future__ import annotations

from enum import Enum

import strawberry

from gateway.core import SessionTitle as CoreTitle
from gateway.core import TitleSource

from .scalars import EpochMillis


@strawberry.enum(description="Who chose a session's title.")
class TitleSourceKind(Enum):
    FALLBACK = strawberry.enum_value(
        "FALLBACK", description="The host's fallback, e.g. the first words of a message."
    )
    PROVIDER = strawberry.enum_value("PROVIDER", description="A model provider wrote it.")
    USER = strawberry.enum_value("USER", description="The user set it.")


TO_GRAPHQL_SOURCE: dict[TitleSource, TitleSourceKind] = {
    TitleSource.FALLBACK: TitleSourceKind.FALLBACK,
    TitleSource.PROVIDER: TitleSourceKind.PROVIDER,
    TitleSource.USER: TitleSourceKind.USER,
}


@strawberry.type(
    description=(
        "A session's title: what its last `session/title` event says (null on `Session.title` "
        "when it has none, or when that last event is malformed)."
    )
)
class SessionTitle:
    title: str = strawberry.field(description="The title text.")
    source_kind: TitleSourceKind = strawberry.field(description="Who chose it.")
    provider: str | None = strawberry.field(
        description="The model provider that wrote it (PROVIDER titles), when recorded."
    )
    message_seqs: list[int] = strawberry.field(
        description="The seqs of the messages it was made from, as recorded."
    )
    event_seq: int = strawberry.field(description="The seq of the `session/title` event.")
    updated_at: EpochMillis = strawberry.field(description="That event's time (epoch ms).")

    @classmethod
    def of(cls, title: CoreTitle) -> SessionTitle:
        return cls(
            title=title.title,
            source_kind=TO_GRAPHQL_SOURCE[title.source_kind],
            provider=title.provider,
            message_seqs=list(title.message_seqs),
            event_seq=title.event_seq,
            updated_at=EpochMillis(title.updated_at),
        )
