"""The surface fold (SPEC §2): one set of transitions for whole logs and live appends.

The surface is a doubly linked list of seqs. Each node on it carries an order
label that strictly increases along the list, so "is this seq on the surface"
and "does start come before end" are O(1): an append takes the tail's label
plus one, and a replacement takes over the label of its `start` node (the
range it removes sat exactly there). Walking the removed nodes is the only
per-replacement cost, which makes a whole fold linear in the log.

`SurfaceFold` is the incremental state; `fold_surface(events)` replays a whole
log through the same `apply` and returns a detached `FoldResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from .errors import ErrorCode, SessionQueryError
from .jsonvalue import JsonValue
from .model import SURFACE_TYPES


class EventSurface(StrEnum):
    """Where a raw event stands relative to the model-visible surface."""

    CURRENT = "CURRENT"
    SHADOWED = "SHADOWED"
    LOG_ONLY = "LOG_ONLY"


class FoldableEvent(Protocol):
    """What the fold reads of an event. `data` is read only for tool-result rewrites."""

    @property
    def type(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def data(self) -> JsonValue: ...
    @property
    def surface_op(self) -> JsonValue: ...
    @property
    def source_event_seqs(self) -> JsonValue: ...


@dataclass(frozen=True, slots=True)
class Replacement:
    """One positional replacement: its own seq, the declared range and what it removed.

    `shadowed` is in surface order (position(start) through position(end)).
    """

    seq: int
    start: int
    end: int
    shadowed: tuple[int, ...]


LOG_ONLY_CODE, CURRENT_CODE, SHADOWED_CODE = 0, 1, 2
"""The class codes of events: what a fold's `codes` hold per seq and what a writer
stores (`gateway.core.backend`); defined here only."""
_CLASS = (EventSurface.LOG_ONLY, EventSurface.CURRENT, EventSurface.SHADOWED)
SURFACE_BY_CODE: tuple[EventSurface, ...] = _CLASS
"""EventSurface by class code."""
CODE_BY_SURFACE: dict[EventSurface, int] = {cls: code for code, cls in enumerate(_CLASS)}
_NONE = -1
_TOOL_RESULT = "tool/result"
_ASSISTANT_MESSAGE = "assistant/message"

RULES = {
    1: "seqs are contiguous from 0",
    2: "only surface events carry surfaceOp or sourceEventSeqs",
    3: "a surface event carries a well-formed surfaceOp",
    4: "replace endpoints are on the current surface, start not after end",
    5: "sourceEventSeqs is a list of distinct earlier seqs",
    6: "a replace cites every node it shadows",
    7: "a tool/result replace rewrites one tool/result's content only",
}


def _reject(rule: int, seq: object, detail: str) -> SessionQueryError:
    return SessionQueryError(
        ErrorCode.INVALID_SURFACE,
        f"event seq {seq} breaks surface rule {rule} ({RULES[rule]}): {detail}",
    )


@dataclass(frozen=True, slots=True)
class FoldResult:
    """A whole log's fold: the surface in model-visible order and every replacement.

    Also answers, per raw seq, its classification and its immediate replacer.
    """

    nodes: tuple[int, ...]
    replacements: tuple[Replacement, ...]
    _states: bytes
    _replaced_by: dict[int, int]
    _by_seq: dict[int, Replacement]

    def __len__(self) -> int:
        return len(self._states)

    @property
    def codes(self) -> bytes:
        """The class code of every raw event, by seq (0 LOG_ONLY, 1 CURRENT, 2 SHADOWED)."""
        return self._states

    def surface_of(self, seq: int) -> EventSurface:
        return _CLASS[self._states[seq]]

    def classes(self) -> list[EventSurface]:
        """The classification of every raw event, by seq."""
        table = _CLASS
        return [table[s] for s in self._states]

    def replaced_by(self, seq: int) -> int | None:
        return self._replaced_by.get(seq)

    def replacement(self, seq: int) -> Replacement | None:
        """The replacement made by event `seq`, if it made one."""
        return self._by_seq.get(seq)

    def replacement_chain(self, seq: int) -> list[int]:
        """Replacers of `seq` from the immediate one to the last (which is CURRENT)."""
        chain = []
        replacer = self._replaced_by.get(seq)
        while replacer is not None:
            chain.append(replacer)
            replacer = self._replaced_by.get(replacer)
        return chain


class SurfaceFold:
    """Incremental fold state. `apply` validates one event and commits it, or raises
    `SessionQueryError(INVALID_SURFACE)` and leaves the state exactly as it was."""

    __slots__ = (
        "_by_seq",
        "_head",
        "_label",
        "_lookup",
        "_next",
        "_prev",
        "_replaced_by",
        "_replacements",
        "_states",
        "_tail",
    )

    def __init__(self, lookup: Callable[[int], FoldableEvent]) -> None:
        """`lookup(seq)` returns an already applied event (needed for rule 7 only)."""
        self._lookup = lookup
        self._states = bytearray()
        self._label: list[int] = []
        self._prev: list[int] = []
        self._next: list[int] = []
        self._head = _NONE
        self._tail = _NONE
        self._replacements: list[Replacement] = []
        self._replaced_by: dict[int, int] = {}
        self._by_seq: dict[int, Replacement] = {}

    def __len__(self) -> int:
        return len(self._states)

    @classmethod
    def resume(
        cls,
        length: int,
        current: Iterable[tuple[int, int]],
        codes: Mapping[int, int],
        lookup: Callable[[int], FoldableEvent],
    ) -> SurfaceFold:
        """The state after a log of `length` events, from what a writer stored of it.

        `current` is the surface as (seq, label) in label order; `codes` gives the
        class code of other seqs the next events may name (any other seq reads as
        log-only: it only changes which rule-4 message a refusal gives). What came
        before is not replayed: `replaced_by`, `replacement`, `replacements_since`
        and `derivations` answer for the events applied from now on, which is what
        a writer appending to a stored log needs.
        """
        fold = cls(lookup)
        states = fold._states = bytearray(length)
        for seq, code in codes.items():
            states[seq] = code
        label = fold._label = [_NONE] * length
        prev = fold._prev = [_NONE] * length
        nxt = fold._next = [_NONE] * length
        last = _NONE
        for seq, seq_label in current:
            states[seq] = CURRENT_CODE
            label[seq] = seq_label
            prev[seq] = last
            if last == _NONE:
                fold._head = seq
            else:
                nxt[last] = seq
            last = seq
        fold._tail = last
        return fold

    def apply(self, event: FoldableEvent) -> None:
        """Validate `event` as the next entry of the log, then commit it."""
        seq = event.seq
        states = self._states
        if type(seq) is not int or seq != len(states):
            raise _reject(1, seq, f"expected seq {len(states)}")
        etype = event.type
        op = event.surface_op
        sources = event.source_event_seqs
        if etype not in SURFACE_TYPES:
            if op is not None or sources is not None:
                what = "surfaceOp" if op is not None else "sourceEventSeqs"
                raise _reject(2, seq, f"log-only type {etype!r} carries {what}")
            states.append(LOG_ONLY_CODE)
            self._label.append(_NONE)
            self._prev.append(_NONE)
            self._next.append(_NONE)
            return
        if op is None:
            raise _reject(3, seq, f"surface type {etype!r} has no surfaceOp")
        if sources is not None:
            _check_sources(seq, etype, sources)
        if op == "append":
            self._link_tail(seq)
            states.append(CURRENT_CODE)
            return
        start, end = _parse_replace(seq, op)
        shadowed = self._range(seq, start, end)
        cited = set(sources) if sources is not None else set()
        missing = [s for s in shadowed if s not in cited]
        if missing:
            raise _reject(6, seq, f"shadows {missing} without citing them in sourceEventSeqs")
        if etype == _TOOL_RESULT:
            self._check_tool_result_rewrite(event, shadowed)
        self._commit_replace(seq, start, end, shadowed)

    def apply_all(self, events: Iterable[FoldableEvent]) -> None:
        """`apply` each event in turn: the whole-log fold's hot loop.

        The two common cases, a valid log-only event and a plain append, are
        inlined with the same checks in the same order; everything else (and
        every rejection) goes through `apply`, so the outcome is identical.
        """
        states = self._states
        label, prev, nxt = self._label, self._prev, self._next
        add_state, add_label, add_prev, add_next = (
            states.append,
            label.append,
            prev.append,
            nxt.append,
        )
        surface_types, apply, none = SURFACE_TYPES, self.apply, _NONE
        tail = self._tail
        try:
            for event in events:
                seq = event.seq
                op = event.surface_op
                sources = event.source_event_seqs
                if type(seq) is int and seq == len(states):
                    if event.type not in surface_types:
                        if op is None and sources is None:
                            add_state(LOG_ONLY_CODE)
                            add_label(none)
                            add_prev(none)
                            add_next(none)
                            continue
                    elif op == "append":
                        if sources is not None:
                            _check_sources(seq, event.type, sources)
                        if tail == none:
                            self._head = seq
                            add_label(0)
                        else:
                            nxt[tail] = seq
                            add_label(label[tail] + 1)
                        add_prev(tail)
                        add_next(none)
                        add_state(CURRENT_CODE)
                        tail = seq
                        continue
                self._tail = tail
                apply(event)  # a replacement, or a rejection naming its rule
                tail = self._tail
        finally:  # the state stays whole when an event is refused
            self._tail = tail

    def _link_tail(self, seq: int) -> None:
        tail = self._tail
        if tail == _NONE:
            self._head = seq
            self._label.append(0)
        else:
            self._next[tail] = seq
            self._label.append(self._label[tail] + 1)
        self._prev.append(tail)
        self._next.append(_NONE)
        self._tail = seq

    def _range(self, seq: int, start: int, end: int) -> list[int]:
        """The nodes from position(start) through position(end); read-only."""
        label = self._label
        states = self._states
        for name, node in (("start", start), ("end", end)):
            if node >= seq or states[node] != CURRENT_CODE:
                where = "is not in the log yet" if node >= seq else _where(self._states[node])
                raise _reject(4, seq, f"replace {name} {node} {where}")
        if label[start] > label[end]:
            raise _reject(4, seq, f"replace start {start} comes after end {end} on the surface")
        out = [start]
        nxt = self._next
        node = start
        while node != end:
            node = nxt[node]
            out.append(node)
        return out

    def _check_tool_result_rewrite(self, event: FoldableEvent, shadowed: list[int]) -> None:
        seq = event.seq
        if len(shadowed) != 1:
            raise _reject(7, seq, f"a tool/result replace shadows {len(shadowed)} nodes, not 1")
        old = self._lookup(shadowed[0])
        if old.type != _TOOL_RESULT:
            raise _reject(7, seq, f"replaces {old.type!r} seq {old.seq}, not a tool/result")
        detail = _rewrite_difference(old.data, event.data)
        if detail:
            raise _reject(7, seq, detail)

    def _commit_replace(self, seq: int, start: int, end: int, shadowed: list[int]) -> None:
        label, prev, nxt = self._label, self._prev, self._next
        before, after = prev[start], nxt[end]
        new_label = label[start]
        states, replaced_by = self._states, self._replaced_by
        for node in shadowed:
            states[node] = SHADOWED_CODE
            replaced_by[node] = seq
        label.append(new_label)
        prev.append(before)
        nxt.append(after)
        if before == _NONE:
            self._head = seq
        else:
            nxt[before] = seq
        if after == _NONE:
            self._tail = seq
        else:
            prev[after] = seq
        states.append(CURRENT_CODE)
        made = Replacement(seq, start, end, tuple(shadowed))
        self._replacements.append(made)
        self._by_seq[seq] = made

    # -- what a reader or a writer asks of the state so far --------------------

    @property
    def codes(self) -> bytearray:
        """The class code of every event now, by seq (read it under the owner's lock)."""
        return self._states

    def nodes_linked(self) -> tuple[int, list[int]]:
        """The surface's head and the `next` links (read under the owner's lock)."""
        return self._head, self._next

    def code(self, seq: int) -> int:
        """The class of `seq` now, as a stored code (0 LOG_ONLY, 1 CURRENT, 2 SHADOWED)."""
        return self._states[seq]

    def label(self, seq: int) -> int | None:
        """The order label of a surface event (never changes; None on log-only events).

        Labels strictly increase along the surface at every moment, so sorting
        the nodes current at any moment by label gives that moment's surface.
        """
        value = self._label[seq]
        return None if value == _NONE else value

    def replaced_by(self, seq: int) -> int | None:
        """The immediate replacer of `seq`, if it was shadowed."""
        return self._replaced_by.get(seq)

    def replacement(self, seq: int) -> Replacement | None:
        """The replacement made by event `seq`, if it made one."""
        return self._by_seq.get(seq)

    def replacements_since(self, seq: int) -> list[Replacement]:
        """The replacements made by events with seq >= `seq`, in log order."""
        out: list[Replacement] = []
        for made in reversed(self._replacements):
            if made.seq < seq:
                break
            out.append(made)
        out.reverse()
        return out

    def derivations(self, start: int = 0) -> list[tuple[int, int | None, int | None]]:
        """(code, replaced_by, label) of every event from `start` on, by seq: what a
        writer stores beside the events (see `gateway.persistence.tables`)."""
        states, labels, replaced_by = self._states, self._label, self._replaced_by
        none = _NONE
        return [
            (states[s], replaced_by.get(s), None if labels[s] == none else labels[s])
            for s in range(start, len(states))
        ]

    def nodes(self) -> tuple[int, ...]:
        """The current surface in model-visible order."""
        out = []
        nxt = self._next
        node = self._head
        while node != _NONE:
            out.append(node)
            node = nxt[node]
        return tuple(out)

    def result(self) -> FoldResult:
        """A detached snapshot of the fold so far."""
        return FoldResult(
            nodes=self.nodes(),
            replacements=tuple(self._replacements),
            _states=bytes(self._states),
            _replaced_by=dict(self._replaced_by),
            _by_seq=dict(self._by_seq),
        )


def fold_surface(events: Sequence[FoldableEvent]) -> FoldResult:
    """Replay a whole log; accept it as a whole or raise INVALID_SURFACE naming the rule."""
    state = SurfaceFold(events.__getitem__)
    state.apply_all(events)
    return state.result()


def _where(state: int) -> str:
    return "was shadowed by an earlier replace" if state == SHADOWED_CODE else "is log-only"


def _parse_replace(seq: int, op: Any) -> tuple[int, int]:
    if type(op) is not dict or op.keys() != {"op", "start", "end"} or op["op"] != "replace":
        raise _reject(
            3, seq, f'surfaceOp must be "append" or {{op: "replace", start, end}}, got {op!r}'
        )
    start, end = op["start"], op["end"]
    if type(start) is not int or type(end) is not int or start < 0 or end < 0:
        raise _reject(3, seq, f"replace start/end must be non-negative integers, got {op!r}")
    return start, end


def _check_sources(seq: int, etype: str, sources: Any) -> None:
    if not isinstance(sources, (tuple, list)):
        raise _reject(5, seq, f"sourceEventSeqs must be a list, got {sources!r}")
    if not sources and etype != _ASSISTANT_MESSAGE:
        raise _reject(5, seq, f"sourceEventSeqs is empty on {etype!r}")
    for s in sources:
        if type(s) is not int or s < 0:
            raise _reject(5, seq, f"sourceEventSeqs holds {s!r}, not a non-negative integer")
        if s >= seq:
            raise _reject(5, seq, f"sourceEventSeqs names {s}, which is not earlier")
    if len(sources) > 1 and len(set(sources)) != len(sources):  # no set for the usual one
        raise _reject(5, seq, f"sourceEventSeqs repeats a seq: {list(sources)}")


def _first_content_item(data: JsonValue) -> dict[str, Any] | None:
    if type(data) is not dict:
        return None
    message = data.get("message")
    if type(message) is not dict:
        return None
    content = message.get("content")
    if type(content) is not list or not content or type(content[0]) is not dict:
        return None
    item: dict[str, Any] = content[0]
    return item


def _rewrite_difference(old: JsonValue, new: JsonValue) -> str | None:
    """Why `new` is not `old` with only data.message.content[0].content changed, or None."""
    old_item, new_item = _first_content_item(old), _first_content_item(new)
    if old_item is None or new_item is None:
        which = "replaced" if old_item is None else "replacing"
        return f"the {which} tool/result has no object at data.message.content[0]"
    if {k: v for k, v in old.items() if k != "message"} != {
        k: v for k, v in new.items() if k != "message"
    }:
        return "changes data outside data.message"
    old_msg, new_msg = old["message"], new["message"]
    if {k: v for k, v in old_msg.items() if k != "content"} != {
        k: v for k, v in new_msg.items() if k != "content"
    }:
        return "changes data.message outside its content"
    if old_msg["content"][1:] != new_msg["content"][1:]:
        return "changes data.message.content beyond its first item"
    if {k: v for k, v in old_item.items() if k != "content"} != {
        k: v for k, v in new_item.items() if k != "content"
    }:
        return "changes data.message.content[0] outside its content"
    return None


def iter_citations(events: Iterable[FoldableEvent], target: int) -> list[int]:
    """Seqs of the events that cite `target` directly, in log order."""
    out = []
    for event in events:
        sources = event.source_event_seqs
        if sources is not None and event.seq > target and target in sources:
            out.append(event.seq)
    return out
