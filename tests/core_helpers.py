"""Small builders for core tests: events and logs written the way the contract spells them."""

from __future__ import annotations

from typing import Any

from gateway.core import SessionEvent


def ev(
    seq: int,
    etype: str = "turn/start",
    data: Any = None,
    op: Any = None,
    src: Any = None,
    time: int | None = None,
) -> SessionEvent:
    """One event; `op` is the surfaceOp, `src` the sourceEventSeqs (a list becomes a tuple)."""
    if isinstance(src, list):
        src = tuple(src)
    return SessionEvent(
        etype, seq, 1_000 + seq if time is None else time, {} if data is None else data, op, src
    )


def replace(start: int, end: int) -> dict[str, Any]:
    return {"op": "replace", "start": start, "end": end}


def tool_data(content: Any, **extra: Any) -> dict[str, Any]:
    """A tool/result payload with `content` at data.message.content[0].content."""
    return {
        "message": {
            "role": "tool",
            "content": [{"type": "tool_result", "toolCallId": "c1", "content": content}],
        },
        **extra,
    }


def build(*specs: tuple[Any, ...]) -> list[SessionEvent]:
    """A log from (type, op, src[, data]) tuples, seqs assigned in order."""
    out = []
    for seq, spec in enumerate(specs):
        etype, op, src, *rest = spec
        out.append(ev(seq, etype, rest[0] if rest else None, op, src))
    return out
