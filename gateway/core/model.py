"""The data model of SPEC §1: immutable session headers and events.

Both convert to and from the camelCase JSON shape that artifacts, databases and
GraphQL clients use; Python attributes are snake_case.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from .jsonvalue import JsonValue, clone_json

SURFACE_TYPES: frozenset[str] = frozenset({"user/message", "assistant/message", "tool/result"})
"""Event types that take part in the model-visible surface; all others are log-only."""


def _is_int(value: object) -> bool:
    return type(value) is int


@dataclass(frozen=True, slots=True)
class SessionHeader:
    """A session's immutable header. Absent optional fields are `None`, never invented."""

    id: str
    created_at: int
    version: int = 0
    cwd: str | None = None
    parent_session: str | None = None
    seed_length: int | None = None
    origin: str | None = None
    delegation_depth: int | None = None
    agent_preset: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"session id must be a non-empty string, got {self.id!r}")
        if not _is_int(self.created_at):
            raise ValueError(f"createdAt must be an integer (epoch ms), got {self.created_at!r}")
        if not _is_int(self.version):
            raise ValueError(f"version must be an integer, got {self.version!r}")
        for name in ("cwd", "parent_session", "origin", "agent_preset"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{_CAMEL[name]} must be a string, got {value!r}")
        if self.parent_session == "":
            raise ValueError("parentSession must be a non-empty string when present")
        for name in ("seed_length", "delegation_depth"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise ValueError(f"{_CAMEL[name]} must be a non-negative integer, got {value!r}")

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SessionHeader:
        """Build a header from its camelCase JSON object (a `"type"` tag is ignored).

        Missing `version` reads as 0 (the only format version); unknown keys are
        ignored; a missing or ill-typed required field raises ValueError.
        """
        if not isinstance(obj, dict):
            raise ValueError(f"a session header must be a JSON object, got {type(obj).__name__}")
        if "id" not in obj:
            raise ValueError("session header has no 'id'")
        if "createdAt" not in obj:
            raise ValueError("session header has no 'createdAt'")
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            key = _CAMEL[f.name]
            if key in obj and obj[key] is not None:
                kwargs[f.name] = obj[key]
        return cls(**kwargs)

    def to_json(self) -> dict[str, Any]:
        """The camelCase JSON object; absent optional fields are left out."""
        out: dict[str, Any] = {"version": self.version, "id": self.id, "createdAt": self.created_at}
        for name in _OPTIONAL_HEADER_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[_CAMEL[name]] = value
        return out

    def conflicts_with(self, other: SessionHeader) -> list[str]:
        """The camelCase names of immutable fields that differ (`delegationDepth` None == 0)."""
        diff = []
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name == "delegation_depth":
                a, b = a or 0, b or 0
            if a != b:
                diff.append(_CAMEL[f.name])
        return diff


_CAMEL = {
    "id": "id",
    "created_at": "createdAt",
    "version": "version",
    "cwd": "cwd",
    "parent_session": "parentSession",
    "seed_length": "seedLength",
    "origin": "origin",
    "delegation_depth": "delegationDepth",
    "agent_preset": "agentPreset",
}
HEADER_FIELDS: tuple[str, ...] = tuple(_CAMEL)
"""Every header field's Python name (storage layers keep one column per field)."""

_OPTIONAL_HEADER_FIELDS = (
    "cwd",
    "parent_session",
    "seed_length",
    "origin",
    "delegation_depth",
    "agent_preset",
)


class SessionEvent(NamedTuple):
    """One entry of a session's append-only log.

    `surface_op` is `"append"` or `{"op": "replace", "start": S, "end": E}`;
    `source_event_seqs` is a tuple of earlier seqs. Both are `None` when absent.
    Values loaded leniently (`from_json`) may hold anything a stored record
    held; the surface fold is what judges them.

    A named tuple: immutable like a frozen dataclass, and several times cheaper
    to build, which is most of the cost of reading a long log.
    """

    type: str
    seq: int
    time: int
    data: JsonValue = None
    surface_op: JsonValue = None
    source_event_seqs: JsonValue = None
    ignorable: bool = False

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SessionEvent:
        """Build an event from its camelCase JSON object.

        Lenient about `surfaceOp` and `sourceEventSeqs` (SPEC §6): whatever a
        stored record holds is kept (a stored `null` means absent), so a
        malformed log reaches the fold and is rejected there by rule. Only a
        record that is not an object, or has no string `type`, raises ValueError.
        """
        if not isinstance(obj, dict):
            raise ValueError(f"an event must be a JSON object, got {type(obj).__name__}")
        etype = obj.get("type")
        if not isinstance(etype, str):
            raise ValueError(f"event has no string 'type' (got {etype!r})")
        sources = obj.get("sourceEventSeqs")
        if isinstance(sources, list):
            sources = tuple(sources)
        op = obj.get("surfaceOp")
        if isinstance(op, dict):
            op = dict(op)
        return cls(
            type=etype,
            seq=obj.get("seq"),  # type: ignore[arg-type]  # judged by fold rule 1
            time=obj.get("time"),  # type: ignore[arg-type]
            data=obj.get("data"),
            surface_op=op,
            source_event_seqs=sources,
            ignorable=obj.get("ignorable") is True,
        )

    def to_json(self) -> dict[str, Any]:
        """The camelCase JSON object (a detached copy); absent fields are left out."""
        out: dict[str, Any] = {
            "type": self.type,
            "seq": self.seq,
            "time": self.time,
            "data": clone_json(self.data),
        }
        if self.surface_op is not None:
            op = self.surface_op
            out["surfaceOp"] = dict(op) if isinstance(op, dict) else op
        if self.source_event_seqs is not None:
            src = self.source_event_seqs
            out["sourceEventSeqs"] = list(src) if isinstance(src, tuple) else src
        if self.ignorable:
            out["ignorable"] = True
        return out

    def detached(self) -> SessionEvent:
        """A copy whose mutable parts (data, a replace op) are the caller's own."""
        op = self.surface_op
        return SessionEvent(
            type=self.type,
            seq=self.seq,
            time=self.time,
            data=clone_json(self.data),
            surface_op=dict(op) if isinstance(op, dict) else op,
            source_event_seqs=self.source_event_seqs,
            ignorable=self.ignorable,
        )
