"""Generated session logs for benchmarks: a realistic mix of event types.

Each turn: a user message, log-only bookkeeping and stream chunks, assistant
messages citing what they answer, tool calls and their results. A given share
of events are replacements: compactions of a recent span of the surface and
tool-result rewrites, both citing what they shadow.
"""

from __future__ import annotations

import random

from gateway.core import SessionEvent


def generate_log(n: int, replace_ratio: float = 0.01, seed: int = 7) -> list[SessionEvent]:
    """`n` events, about `replace_ratio` of them replacements, valid under every fold rule."""
    rng = random.Random(seed)
    events: list[SessionEvent] = []
    surface: list[int] = []  # model-visible order (only the tail is ever edited)
    tool_results: dict[int, dict] = {}
    t = 1_780_000_000_000

    def add(etype, data, op=None, sources=None):
        nonlocal t
        t += rng.randint(0, 40)
        seq = len(events)
        events.append(SessionEvent(etype, seq, t, data, op, sources))
        return seq

    while len(events) < n:
        room = n - len(events)
        if rng.random() < replace_ratio and len(surface) >= 4:
            tail = surface[-200:]
            tr = [s for s in tail if s in tool_results]
            if tr and rng.random() < 0.3:
                old = rng.choice(tr)
                data = {
                    "message": {
                        "role": "tool",
                        "content": [
                            {**tool_results[old]["message"]["content"][0], "content": "[elided]"}
                        ],
                    }
                }
                seq = add("tool/result", data, {"op": "replace", "start": old, "end": old}, (old,))
                tool_results[seq] = data
                surface[surface.index(old)] = seq
            else:
                k = rng.randint(1, min(20, len(tail)))
                i = rng.randint(len(surface) - len(tail), len(surface) - k)
                span = surface[i : i + k]
                data = {"content": [{"type": "text", "text": "compacted summary"}]}
                seq = add(
                    "user/message",
                    data,
                    {"op": "replace", "start": span[0], "end": span[-1]},
                    tuple(span),
                )
                surface[i : i + k] = [seq]
            continue
        roll = rng.random()
        if roll < 0.11:
            surface.append(
                add("user/message", {"content": [{"type": "text", "text": "hi"}]}, "append")
            )
        elif roll < 0.22:
            cite = (surface[-1],) if surface else ()
            surface.append(
                add(
                    "assistant/message",
                    {"content": [{"type": "text", "text": "ok"}]},
                    "append",
                    cite,
                )
            )
        elif roll < 0.33:
            call = add("tool/call", {"id": f"c{len(events)}", "name": "bash"}) if room > 1 else None
            data = {
                "message": {
                    "role": "tool",
                    "content": [{"type": "tool_result", "content": "out" * 8}],
                }
            }
            if len(events) < n:
                seq = add("tool/result", data, "append", (call,) if call is not None else None)
                tool_results[seq] = data
                surface.append(seq)
        elif roll < 0.75:
            add(
                "assistant/chunk",
                {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}},
            )
        else:
            add(
                rng.choice(("turn/start", "step/start", "step/end", "request/header")),
                {"n": len(events)},
            )
    return events[:n]
