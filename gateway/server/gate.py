"""`RequestGate`: the gateway's per-request HTTP rules in one ASGI layer, run in order.

Why one layer: each rule used to be a middleware of its own (request id, HTTP metrics,
security headers, in-flight cap, host allow-list, body size), and a pure-ASGI layer
costs, whatever it does, a coroutine frame, a wrapped `send` closure and its calls per
request: about 7,000 CPU instructions, 1-1.5 us, each, so five of them cost more than
the few dict lookups of their rules (`benchmarks/bench_middleware.py`). The gate keeps
each rule a small object in its own module (`Rule` below) and pays the layer once.

What stays as it was, rule by rule, is the order of the old stack: `rules[0]` is the
outermost. A request enters the rules in order; a rule that refuses it answers through
the rules before it only (so a 503 of the in-flight cap still carries the security
headers, the request id and is counted, as when those layers wrapped it), and the
rules after it never run. The response start passes back through the rules from the
innermost out; one that must see the whole body first (the HTML pages' CSP hash) holds
the start and the body until the last chunk, then the outer rules see the start. When
the request ends, normally or by an exception, every rule that admitted it leaves, from
the innermost out. A rule may also watch the request body (`receive`) and refuse from
there (the streamed-body limit): the gate answers that refusal through the rules before
it if no response has started, as the old layer did.

Each rule says which scope types it applies to (`scope_types`); lifespan passes through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Final, Protocol

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

Answer = Callable[[Send], Awaitable[None]]
"""A refusal: sends the whole answer (through the `send` it is given)."""

HOLD: Final = object()
"""What `Rule.start` returns to hold the response start until the body is complete."""

PASS: Final = object()
"""What `Rule.enter` returns for a request the rule leaves alone (no state, no hooks)."""


class Refusal:
    """What `Rule.enter` returns to refuse a request: the answer to send instead."""

    __slots__ = ("answer",)

    def __init__(self, answer: Answer) -> None:
        self.answer = answer


class Rule(Protocol):
    """One per-request rule of the gate (see the module docstring for the order)."""

    scope_types: frozenset[str]
    """The scope types (`http`, `websocket`) the rule applies to."""
    watches_body: bool
    """Whether `received` must see every `http.request` message."""

    def enter(self, scope: Scope) -> object:
        """The rule's state for this request, `PASS`, or a `Refusal`."""

    def start(self, state: Any, message: Message) -> object:
        """The response start going out (mutable: the gate's own copy), or `HOLD`."""

    def complete(self, state: Any, start: Message, body: bytes) -> None:
        """The held start, now the whole body is known (only after `start` said `HOLD`)."""

    def received(self, state: Any, message: Message) -> Answer | None:
        """A request-body message as it is read; an `Answer` refuses the request."""

    def leave(self, state: Any, status: int | None) -> None:
        """The request ended: `status` is the one sent, None when none was."""


class _Refused(Exception):
    """Raised from the gate's `receive` when a rule refuses the body being read."""

    def __init__(self, position: int, answer: Answer) -> None:
        self.position = position
        self.answer = answer


class RequestGate:
    """ASGI middleware running `rules` (outermost first) for every request."""

    def __init__(self, app: ASGIApp, rules: Sequence[Rule]) -> None:
        self.app = app
        self.rules = tuple(rules)
        self._by_type = {
            kind: tuple(i for i, r in enumerate(self.rules) if kind in r.scope_types)
            for kind in ("http", "websocket")
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        positions = self._by_type.get(scope["type"])
        if not positions:
            await self.app(scope, receive, send)
            return
        await _Exchange(self, scope, receive, send, positions).run()


class _Exchange:
    """One request through the gate: each admitting rule's state, the response status."""

    __slots__ = (
        "app",
        "chunks",
        "entered",
        "held",
        "receive_",
        "refusal",
        "rules",
        "scope",
        "send_",
        "status",
    )

    def __init__(
        self,
        gate: RequestGate,
        scope: Scope,
        receive: Receive,
        send: Send,
        positions: tuple[int, ...],
    ) -> None:
        self.app = gate.app
        self.rules = gate.rules
        self.scope = scope
        self.receive_ = receive
        self.send_ = send
        self.entered: list[tuple[int, Any]] = []
        self.status: int | None = None
        self.held: tuple[int, Message] | None = None
        self.chunks: list[bytes] = []
        self.refusal: Answer | None = None
        for position in positions:
            state = self.rules[position].enter(scope)
            if state is PASS:
                continue
            if isinstance(state, Refusal):  # the rules before it see the refusal
                self.refusal = state.answer
                return
            self.entered.append((position, state))

    async def run(self) -> None:
        try:
            if self.refusal is not None:
                await self.refusal(self.send)
                return
            watching = any(self.rules[p].watches_body for p, _ in self.entered)
            try:
                await self.app(self.scope, self.receive if watching else self.receive_, self.send)
            except _Refused as refused:
                if self.status is not None or self.held is not None:
                    return  # the answer has begun: the old layer let it end as it was
                # the rules from the refusing one in leave as an exception would make them
                split = next(i for i, (p, _) in enumerate(self.entered) if p == refused.position)
                for position, state in reversed(self.entered[split:]):
                    self.rules[position].leave(state, None)
                del self.entered[split:]
                await refused.answer(self.send)
        finally:
            for position, state in reversed(self.entered):
                self.rules[position].leave(state, self.status)

    async def receive(self) -> Message:
        message = await self.receive_()
        if message["type"] == "http.request":
            for position, state in self.entered:
                rule = self.rules[position]
                if rule.watches_body and (answer := rule.received(state, message)) is not None:
                    raise _Refused(position, answer)
        return message

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            message = {**message, "headers": list(message.get("headers", ()))}
            await self._start(message, len(self.entered))
            return
        if self.held is not None and kind == "http.response.body":
            self.chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            index, start = self.held
            self.held = None
            body = b"".join(self.chunks)
            position, state = self.entered[index]
            self.rules[position].complete(state, start, body)
            await self._start(start, index)
            await self.send_({"type": "http.response.body", "body": body})
            return
        await self.send_(message)

    async def _start(self, message: Message, below: int) -> None:
        """Pass the start through the admitting rules `entered[:below]`, innermost first."""
        for index in range(below - 1, -1, -1):
            position, state = self.entered[index]
            if self.rules[position].start(state, message) is HOLD:
                self.held = (index, message)
                return
        self.status = int(message["status"])
        await self.send_(message)


class BaseRule:
    """Defaults for the hooks a rule does not need (each rule overrides what it uses)."""

    scope_types: frozenset[str] = frozenset({"http"})
    watches_body = False

    def enter(self, scope: Scope) -> object:
        return None

    def start(self, state: Any, message: Message) -> object:
        return None

    def complete(self, state: Any, start: Message, body: bytes) -> None:
        return None

    def received(self, state: Any, message: Message) -> Answer | None:
        return None

    def leave(self, state: Any, status: int | None) -> None:
        return None


__all__ = ["HOLD", "PASS", "Answer", "BaseRule", "Refusal", "RequestGate", "Rule"]
