"""Demo data for `session-gateway serve --demo`: everything worth exploring in GraphiQL.

A coding agent fixing a flaky parser test, as a small corpus:

* a fork tree three levels deep: `demo-root` -> `demo-fork-a` -> `demo-fork-a-sub`
  -> `demo-fork-a-sub-check`, plus a sibling fork `demo-fork-b`;
* `demo-orphan`, forked from `demo-deleted-parent`, which is in no source (its
  lineage is incomplete: `unresolvedParentId`), with a child of its own;
* compactions with nested replacements in `demo-root`: a summary replaces a span
  of the surface, and a later summary replaces that summary (a replacement
  that shadows an earlier replacement);
* a tool-result rewrite: a long test log elided in place (only
  `data.message.content[0].content` changes);
* `demo-resumed`, present both live and persisted, the live log ahead of the
  persisted prefix;
* `demo-agent-live`, a live session a simulated agent keeps appending to
  (`SimulatedAgent`), every append valid under the surface fold;
* titles (SPEC §14): `session/title` events of every source kind (a host's
  fallback, a provider's, a user's rename; `demo-fork-a-sub-check` has none);
* text worth searching (SPEC §13), in the shapes the real artifacts use: user
  and assistant messages, tool calls with their arguments, tool results with
  errors (`ECONNREFUSED`, `ENOENT`), todo lists, a turn that ended in error;
* a few working directories and creation times spread over two weeks.

The persisted part is written through any backend with async `create(header)`
and `append(session_id, events)` (`DemoBackend`; in practice `SqlPersistence`,
which `session-gateway serve --demo` opens on a throwaway SQLite file); the live
part goes into a `SessionStore`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.core import (
    LiveSession,
    SessionEvent,
    SessionHeader,
    SessionQueryError,
    SessionStore,
    fold_surface,
)
from gateway.core.store import now_ms

logger = logging.getLogger("gateway.demo")

T0 = 1_780_000_000_000  # 2026-05-28T20:26:40Z: the demo's fixed epoch (ms)
DAY = 86_400_000
FORK_B_AT = T0 + 7 * DAY
"""`demo-fork-b` came a week after its parent: the demo's sessions span two weeks."""
RESUMED_AT = T0 + 14 * DAY

ROOT = "demo-root"
FORK_A = "demo-fork-a"
FORK_A_SUB = "demo-fork-a-sub"
FORK_A_SUB_CHECK = "demo-fork-a-sub-check"
FORK_B = "demo-fork-b"
ORPHAN = "demo-orphan"
ORPHAN_CHILD = "demo-orphan-child"
MISSING_PARENT = "demo-deleted-parent"
RESUMED = "demo-resumed"
AGENT = "demo-agent-live"


class DemoBackend(Protocol):
    """What `load_demo` needs of a persistence backend (`SqlPersistence` has it)."""

    async def create(self, header: SessionHeader) -> None: ...

    async def append(self, session_id: str, events: Sequence[SessionEvent]) -> object: ...


# -- building logs --------------------------------------------------------------------


@dataclass
class LogBuilder:
    """Builds a valid log step by step, tracking the surface to aim replacements."""

    time: int
    events: list[SessionEvent] = field(default_factory=list)
    surface: list[int] = field(default_factory=list)
    turn: int = 0

    def add(
        self,
        etype: str,
        data: Any,
        op: Any = None,
        sources: Sequence[int] | None = None,
        gap_ms: int = 900,
    ) -> int:
        self.time += gap_ms
        seq = len(self.events)
        self.events.append(
            SessionEvent(
                etype, seq, self.time, data, op, None if sources is None else tuple(sources)
            )
        )
        if op == "append":
            self.surface.append(seq)
        elif isinstance(op, dict):
            i, j = self.surface.index(op["start"]), self.surface.index(op["end"])
            self.surface[i : j + 1] = [seq]
        return seq

    # surface events
    def user(self, text: str) -> int:
        return self.add("user/message", _user(text), "append", gap_ms=4_000)

    def assistant(self, text: str, sources: Sequence[int] = ()) -> int:
        self.chunks(text)
        return self.add("assistant/message", _message("assistant", text), "append", list(sources))

    def tool(
        self,
        name: str,
        arguments: dict[str, Any],
        output: str,
        error: tuple[str, str] | None = None,
    ) -> int:
        """A tool call and its result (`error`: the result's (name, code), as a failed
        call records it)."""
        call_id = f"call_{len(self.events):04d}"
        call = self.add(
            "tool/call",
            {"callId": call_id, "name": name, "arguments": json.dumps(arguments)},
            gap_ms=300,
        )
        return self.add(
            "tool/result", _tool_result(call_id, output, error), "append", [call], gap_ms=2_500
        )

    def rewrite_tool_result(self, old: int, content: str) -> int:
        """Replace tool/result `old` in place, changing only its content text."""
        new = _rewritten(self.events[old].data, content)
        return self.add("tool/result", new, {"op": "replace", "start": old, "end": old}, [old])

    def compact(self, start: int, end: int, summary: str) -> int:
        """Replace surface nodes start..end (by seq) with a summary citing each of them."""
        self.add("compaction/start", {"reason": "context budget", "strategy": "summarize"})
        i, j = self.surface.index(start), self.surface.index(end)
        shadowed = self.surface[i : j + 1]
        return self.add(
            "user/message",
            _user(f"[compacted summary] {summary}"),
            {"op": "replace", "start": start, "end": end},
            shadowed,
        )

    # log-only events
    def title(
        self,
        text: str,
        messages: Sequence[int],
        kind: str = "fallback",
        provider: str | None = None,
        model: str | None = None,
    ) -> int:
        """A `session/title` event (SPEC §14): the session's title from now on."""
        return self.add("session/title", _title(text, messages, kind, provider, model), gap_ms=20)

    def todos(self, *items: tuple[str, str]) -> int:
        """A `todo/write` event: the whole list, each (status, content)."""
        todos = [{"content": content, "status": status} for status, content in items]
        return self.add("todo/write", {"todos": todos}, gap_ms=30)

    def turn_end(self, reason: str = "completed", message: str | None = None) -> int:
        why: dict[str, Any] = {"kind": reason}
        if message is not None:
            why["error"] = {"message": message}
        return self.add("turn/end", {"turn": self.turn, "reason": why}, gap_ms=60)

    def turn_start(self) -> int:
        self.turn += 1
        return self.add("turn/start", {"turn": self.turn}, gap_ms=50)

    def chunks(self, text: str) -> None:
        words = text.split(" ")
        for index, piece in enumerate(words[:6]):
            self.add(
                "assistant/chunk",
                {
                    "turn": self.turn,
                    "step": 0,
                    "chunk": {"type": "text-delta", "index": 0, "text": piece + " "},
                },
                gap_ms=40 + index,
            )


def _message(role: str, text: str) -> dict[str, Any]:
    """An assistant message's data: its blocks under `message.content` (SPEC §13)."""
    return {"message": {"role": role, "content": [{"type": "text", "text": text}]}}


def _user(text: str) -> dict[str, Any]:
    """A user message's data as the real artifacts record it: blocks under `content`."""
    return {"content": [{"type": "text", "text": text}], "source": {"kind": "user"}}


def _tool_result(call_id: str, output: str, error: tuple[str, str] | None) -> dict[str, Any]:
    item = {
        "type": "tool-result",
        "toolCallId": call_id,
        "content": [{"type": "text", "text": output}],
        "isError": error is not None,
    }
    data: dict[str, Any] = {"message": {"role": "user", "content": [item]}}
    if error is not None:
        data["error"] = {"name": error[0], "code": error[1]}
    return data


def _rewritten(data: Any, text: str) -> dict[str, Any]:
    """`data` of a tool result with only `message.content[0].content` changed (the one
    change a tool-result rewrite may make)."""
    item = {**data["message"]["content"][0], "content": [{"type": "text", "text": text}]}
    return {**data, "message": {**data["message"], "content": [item]}}


def _title(
    text: str, messages: Sequence[int], kind: str, provider: str | None, model: str | None
) -> dict[str, Any]:
    source: dict[str, Any] = {"kind": kind}
    if provider is not None:
        source["provider"] = provider
    if model is not None:
        source["model"] = model
    return {"title": text, "messageSeqs": list(messages), "source": source}


TEST_LOG = "\n".join(
    [
        "============================= test session starts ==============================",
        "collected 214 items",
        *(f"tests/test_parser.py::test_case_{i:03d} PASSED" for i in range(40)),
        "tests/test_parser.py::test_nested_quotes FAILED",
        "E   AssertionError: expected ['a', 'b\\\"c'] got ['a', 'b\\\\', 'c']",
        "=================== 1 failed, 213 passed in 3.81s ===================",
    ]
)


TITLE_PROVIDER = "example-llm"
TITLE_MODEL = "title-small-1"


def root_log() -> LogBuilder:
    """The root session: a bug hunt with a tool-result rewrite and nested compactions."""
    b = LogBuilder(T0)
    b.turn_start()
    ask = b.user("test_nested_quotes fails about one run in five. Please find out why and fix it.")
    b.assistant("I'll run the parser tests first to see the failure.", [ask])
    b.title("test_nested_quotes fails about one run", [ask])
    log1 = b.tool("bash", {"command": "pytest tests/test_parser.py -q"}, TEST_LOG)
    seen = b.assistant(
        "The failure is in the quote handling: an escaped quote inside a quoted field is split.",
        [log1],
    )
    src = b.tool(
        "read_file",
        {"path": "parser/split.py", "lines": "40-80"},
        "def split_fields(line):\n    ...\n    if ch == '\\\\' and state.cache_hit:\n        ...",
    )
    b.assistant(
        "split_fields consults a module-level cache whose entry depends on the previous line: "
        "that is why it is flaky (test order).",
        [src],
    )
    b.todos(
        ("completed", "reproduce the flaky test_nested_quotes"),
        ("in_progress", "make the split_fields cache per call"),
        ("pending", "add a regression test for quote handling"),
    )
    # A tool-result rewrite: the long test log is elided in place.
    b.rewrite_tool_result(log1, f"[elided: pytest output, {len(TEST_LOG)} characters]")
    b.turn_end()
    b.turn_start()
    more = b.user("Good find. Can you make the cache per call instead of per module?")
    patch = b.tool(
        "apply_patch",
        {"path": "parser/split.py"},
        "patched parser/split.py: cache moved into split_fields (+6 -9)",
    )
    b.assistant("Done: the cache now lives inside split_fields.", [more, patch])
    # First compaction: the first exchange becomes a summary.
    first = b.compact(
        ask,
        seen,
        "Asked to fix flaky test_nested_quotes; the pytest run showed an escaped quote split.",
    )
    b.turn_end()
    b.turn_start()
    b.tool(
        "bash",
        {"command": "pip install pytest-repeat"},
        "WARNING: Retrying after connection broken by 'NewConnectionError: Failed to establish "
        "a new connection: [Errno 111] Connection refused' (proxy 127.0.0.1:3128)\n"
        "ERROR: Could not install pytest-repeat: connect ECONNREFUSED 127.0.0.1:3128",
        error=("ConnectionError", "ECONNREFUSED"),
    )
    rerun = b.tool(
        "bash",
        {"command": "pytest tests/test_parser.py -q -p no:randomly --count 20"},
        "4280 passed in 61.2s",
    )
    b.assistant(
        "The package proxy refused the connection (ECONNREFUSED), but pytest-repeat was "
        "already vendored: 20 repeated runs pass, the flakiness is gone.",
        [rerun],
    )
    # Second compaction shadows the first summary: a nested replacement.
    b.compact(
        first,
        patch,
        "Flaky test_nested_quotes came from a module-level cache in split_fields; "
        "moved the cache into the call.",
    )
    b.turn_end()
    b.turn_start()
    final = b.user("Please also add a regression test.")
    b.tool("write_file", {"path": "tests/test_parser.py"}, "added test_nested_quotes_is_order_free")
    done = b.assistant("Added test_nested_quotes_is_order_free; all tests pass.", [final])
    b.todos(
        ("completed", "reproduce the flaky test_nested_quotes"),
        ("completed", "make the split_fields cache per call"),
        ("completed", "add a regression test for quote handling"),
    )
    b.title(
        "Fix flaky test_nested_quotes: per-call split_fields cache",
        [ask, final, done],
        kind="provider",
        provider=TITLE_PROVIDER,
        model=TITLE_MODEL,
    )
    b.turn_end()
    return b


@dataclass(frozen=True)
class Title:
    """A title a demo session sets after its first turn (see `LogBuilder.title`)."""

    text: str
    kind: str = "fallback"
    provider: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class Tool:
    """The tool a fork's turns call, and what it answers."""

    name: str = "bash"
    arguments: tuple[tuple[str, str], ...] = (("command", "rg -n cache parser/"),)
    output: str = "parser/split.py:12:_CACHE = {}"
    error: tuple[str, str] | None = None


def fork_log(
    parent: Sequence[SessionEvent],
    seed: int,
    time: int,
    asks: Sequence[str],
    *,
    title: Title | None = None,
    tool: Tool = Tool(),
    end: tuple[str, str | None] = ("completed", None),
) -> LogBuilder:
    """A fork: the parent's first `seed` events, then its own turns (each an ask, a tool
    call, an answer; `title` after the first, `end` how the last one ended)."""
    b = LogBuilder(time)
    for event in parent[:seed]:
        b.add(event.type, event.data, event.surface_op, event.source_event_seqs, gap_ms=0)
    for n, ask in enumerate(asks):
        b.turn_start()
        q = b.user(ask)
        out = b.tool(tool.name, dict(tool.arguments), tool.output, tool.error)
        answer = b.assistant(f"Looked into it: {ask.lower()}", [q, out])
        if n == 0 and title is not None:
            b.title(title.text, [q, answer], title.kind, title.provider, title.model)
        b.turn_end(*(end if n == len(asks) - 1 else ("completed", None)))
    return b


def resumed_log() -> LogBuilder:
    """`demo-resumed`, two weeks later: docs work that meets a dead preview server and a
    missing file. Its title comes after the persisted prefix: only the live copy has one."""
    b = LogBuilder(RESUMED_AT)
    b.turn_start()
    ask = b.user("Update the docs for split_fields")
    preview = b.tool(
        "bash",
        {"command": "make docs-preview"},
        "Error: connect ECONNREFUSED 127.0.0.1:8080\n    at TCPConnectWrapper.afterConnect",
        error=("FetchError", "ECONNREFUSED"),
    )
    answer = b.assistant(
        "The docs preview server is not running (connect ECONNREFUSED 127.0.0.1:8080); "
        "I'll start it and rebuild.",
        [ask, preview],
    )
    b.title("Update the docs for split_fields", [ask, answer])
    b.turn_end()
    b.turn_start()
    readme = b.user("Now the README example")
    missing = b.tool(
        "read_file",
        {"path": "docs/examples/split.md"},
        "ENOENT: no such file or directory, open 'docs/examples/split.md'",
        error=("FsError", "ENOENT"),
    )
    b.assistant("docs/examples/split.md does not exist yet; I'll create it.", [readme, missing])
    b.todos(
        ("completed", "document the per-call cache of split_fields"),
        ("in_progress", "write the README example"),
        ("pending", "add a changelog entry"),
    )
    b.turn_end()
    b.turn_start()
    log = b.user("And the changelog")
    wrote = b.tool("write_file", {"path": "CHANGELOG.md"}, "added 1 entry under Unreleased")
    b.assistant("Changelog updated under Unreleased.", [log, wrote])
    b.title("Docs and changelog for the split_fields fix", [ask, readme, log], kind="user")
    b.turn_end()
    return b


@dataclass
class DemoSession:
    header: SessionHeader
    events: list[SessionEvent]


def demo_sessions() -> dict[str, DemoSession]:
    """Every demo session's header and full log (validated)."""
    root = root_log()
    out: dict[str, DemoSession] = {}

    def put(header: SessionHeader, builder: LogBuilder) -> None:
        fold_surface(builder.events)  # the demo must be valid under every fold rule
        out[header.id] = DemoSession(header, builder.events)

    put(SessionHeader(ROOT, T0, cwd="/work/parser", agent_preset="coder"), root)
    seed_a = 9
    a = fork_log(
        root.events, seed_a, T0 + 600_000, ["Try the fix on the 2.x branch too"],
        title=Title("Backport the split_fields fix to 2.x", kind="user"),
        tool=Tool("bash", (("command", "git cherry-pick -x 4f2a9c1"),),
                  "error: could not apply 4f2a9c1... parser: per-call cache in split_fields\n"
                  "CONFLICT (content): Merge conflict in parser/split.py",
                  ("GitError", "MERGE_CONFLICT")),
    )  # fmt: skip
    put(
        SessionHeader(
            FORK_A, T0 + 600_000, cwd="/work/parser", parent_session=ROOT, seed_length=seed_a,
            origin="fork", agent_preset="coder",
        ),
        a,
    )  # fmt: skip
    sub = fork_log(
        a.events, 4, T0 + 900_000, ["Check which callers rely on the cache"],
        title=Title("Callers of the split_fields cache", "provider", TITLE_PROVIDER, TITLE_MODEL),
        tool=Tool(output="parser/split.py:12:_CACHE = {}\nparser/csv.py:88:    split_fields(row)"),
    )  # fmt: skip
    put(
        SessionHeader(
            FORK_A_SUB, T0 + 900_000, cwd="/work/parser", parent_session=FORK_A, seed_length=4,
            origin="subagent", delegation_depth=1, agent_preset="explorer",
        ),
        sub,
    )  # fmt: skip
    check = fork_log(
        sub.events, 2, T0 + 1_000_000, ["Run the benchmarks for split_fields"],
        tool=Tool(arguments=(("command", "python -m bench split_fields --rounds 5"),),
                  output="split_fields: 1.84 µs/row (was 1.91 µs/row), 5 rounds"),
    )  # no title: `title` is null  # fmt: skip
    put(
        SessionHeader(
            FORK_A_SUB_CHECK, T0 + 1_000_000, cwd="/work/parser/bench",
            parent_session=FORK_A_SUB, seed_length=2, origin="subagent", delegation_depth=2,
            agent_preset="runner",
        ),
        check,
    )  # fmt: skip
    b = fork_log(
        root.events, 3, FORK_B_AT, ["Is there a simpler fix without a cache?"],
        title=Title("Is there a simpler fix without a cache?"),
    )  # fmt: skip
    put(
        SessionHeader(
            FORK_B, FORK_B_AT, cwd="/work/parser", parent_session=ROOT, seed_length=3,
            origin="fork",
        ),
        b,
    )  # fmt: skip
    orphan = fork_log(
        [], 0, T0 - DAY, ["Summarize yesterday's release notes"],
        title=Title("Release notes digest", "provider", TITLE_PROVIDER, TITLE_MODEL),
        tool=Tool("read_file", (("path", "RELEASE_NOTES.md"),),
                  "## 3.2.0\n- faster split_fields\n- dropped Python 3.9"),
    )  # fmt: skip
    put(
        SessionHeader(
            ORPHAN, T0 - DAY, cwd="/work/release", parent_session=MISSING_PARENT,
            seed_length=0, origin="fork",
        ),
        orphan,
    )  # fmt: skip
    child = fork_log(
        orphan.events, 2, T0 - 86_000_000, ["Draft the changelog entry"],
        title=Title("Draft the changelog entry"),
        tool=Tool("write_file", (("path", "CHANGELOG.md"),), "wrote 6 lines"),
        end=("error", "provider overloaded (HTTP 529): retry later"),
    )  # fmt: skip
    put(
        SessionHeader(
            ORPHAN_CHILD, T0 - 86_000_000, cwd="/work/release", parent_session=ORPHAN,
            seed_length=2, origin="subagent", delegation_depth=1,
        ),
        child,
    )  # fmt: skip
    put(
        SessionHeader(RESUMED, RESUMED_AT, cwd="/work/parser", agent_preset="writer"), resumed_log()
    )
    return out


RESUMED_PERSISTED_PREFIX = 9
"""How many of `demo-resumed`'s events the backend holds; the live store holds them all."""

PERSISTED = (ROOT, FORK_A, FORK_A_SUB, FORK_A_SUB_CHECK, FORK_B, ORPHAN, ORPHAN_CHILD, RESUMED)
LIVE_ONLY = (AGENT,)


@dataclass
class Demo:
    store: SessionStore
    agent: SimulatedAgent


async def load_demo(
    backend: DemoBackend, store: SessionStore, *, agent_interval: float = 1.0
) -> Demo:
    """Write the demo corpus: persisted sessions through `backend`, live ones into `store`.

    `backend` is any `DemoBackend` (e.g. `SqlPersistence`); it must hold none of the
    demo's sessions yet. Returns the store and the simulated agent (not started:
    run `agent.run()`).
    """
    sessions = demo_sessions()
    for sid in PERSISTED:
        demo = sessions[sid]
        events = demo.events[:RESUMED_PERSISTED_PREFIX] if sid == RESUMED else demo.events
        await backend.create(demo.header)
        await backend.append(sid, events)
    resumed = sessions[RESUMED]
    store.add(resumed.header, resumed.events)  # the live copy is ahead of the persisted one
    live = store.create(
        AGENT,
        created_at=now_ms(),
        cwd="/work/parser",
        origin="subagent",
        parent_session=ROOT,
        seed_length=0,
        delegation_depth=1,
        agent_preset="coder",
    )
    return Demo(store, SimulatedAgent(live, interval=agent_interval))


# -- the simulated agent ------------------------------------------------------------------


class SimulatedAgent:
    """Appends a plausible agent's events to a live session, one every `interval` seconds.

    A cycle: turn/start, a user ask (every few turns), streamed chunks, an
    assistant message citing the ask, a tool call and its result; now and then
    it elides an old tool result (a rewrite) or compacts the oldest part of the
    surface. Every append goes through the live store, which validates it.
    `stop()` (or cancelling the task) ends `run()`.
    """

    def __init__(self, session: LiveSession, interval: float = 1.0) -> None:
        self.session = session
        self.interval = interval
        self._stopped = asyncio.Event()
        self._surface: list[int] = [e.seq for e in session.events() if e.surface_op == "append"]
        self._tool_results: list[int] = []
        self._steps = self._script()
        self.appended = 0

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> None:
        while not self._stopped.is_set():
            self.step()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.interval)

    def step(self) -> SessionEvent:
        """Append the next event now and return it."""
        etype, data, op, sources = next(self._steps)
        try:
            event = self.session.append(etype, data, surface_op=op, source_event_seqs=sources)
        except SessionQueryError:  # pragma: no cover - the script only makes valid appends
            logger.exception("simulated agent made an invalid append; restarting its script")
            self._steps = self._script()
            raise
        self.appended += 1
        if op == "append":
            self._surface.append(event.seq)
        elif isinstance(op, dict):
            i, j = self._surface.index(op["start"]), self._surface.index(op["end"])
            self._surface[i : j + 1] = [event.seq]
        if etype == "tool/result":
            self._tool_results.append(event.seq)
        return event

    def _script(self) -> Any:
        tasks = itertools.cycle(
            [
                (
                    "Profile split_fields on the 50 MB fixture",
                    "bash",
                    "python -m cProfile ...",
                    None,
                ),
                ("Check the fix on Windows line endings", "bash", "pytest -k crlf", None),
                (
                    "Fetch the fixture from the cache server",
                    "bash",
                    "curl -fsS http://127.0.0.1:9000/fixtures/big.csv",
                    ("FetchError", "ECONNREFUSED"),
                ),
                ("Look for other module-level caches", "bash", "rg -n '_CACHE' parser/", None),
                ("Update the docstring of split_fields", "apply_patch", "parser/split.py", None),
            ]
        )
        for turn in itertools.count(1):
            ask_text, tool, arg, error = next(tasks)
            yield ("turn/start", {"turn": turn}, None, None)
            ask = len(self.session)
            yield ("user/message", _user(ask_text), "append", None)
            for word in ["Working", "on", "it", "now"]:
                chunk = {"type": "text-delta", "index": 0, "text": word + " "}
                yield ("assistant/chunk", {"turn": turn, "step": 0, "chunk": chunk}, None, None)
            answer = len(self.session)
            yield (
                "assistant/message",
                _message("assistant", f"Working on it: {ask_text.lower()}."),
                "append",
                [ask],
            )
            if turn == 1:  # the host's fallback title, then a provider's (SPEC §14)
                yield ("session/title", _title(ask_text, [ask], "fallback", None, None), None, None)
            elif turn == 2:
                title = _title(
                    "Speed up split_fields", [ask, answer], "provider", TITLE_PROVIDER, TITLE_MODEL
                )
                yield ("session/title", title, None, None)
            call_id = f"call_live_{turn}"
            call = len(self.session)
            arguments = json.dumps({"arg": arg})
            yield (
                "tool/call",
                {"callId": call_id, "name": tool, "arguments": arguments},
                None,
                None,
            )
            if error is None:
                output = f"$ {arg}\n" + "\n".join(f"line {n}: ok" for n in range(30))
            else:
                output = f"$ {arg}\ncurl: (7) Failed to connect: connect {error[1]} 127.0.0.1:9000"
            yield ("tool/result", _tool_result(call_id, output, error), "append", [call])
            yield (
                "assistant/message",
                _message("assistant", f"Turn {turn} done."),
                "append",
                [len(self.session) - 1],
            )
            if turn % 3 == 0 and len(self._tool_results) >= 2:
                old = self._tool_results[-2]
                if old in self._surface:
                    new = _rewritten(self.session.snapshot()[1][old].data, "[elided]")
                    yield ("tool/result", new, {"op": "replace", "start": old, "end": old}, [old])
            if turn % 5 == 0 and len(self._surface) > 12:
                span = self._surface[:6]
                yield ("compaction/start", {"reason": "context budget"}, None, None)
                yield (
                    "user/message",
                    _user(f"[compacted summary of turns up to {turn - 2}]"),
                    {"op": "replace", "start": span[0], "end": span[-1]},
                    span,
                )
            yield ("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None, None)


# -- tokens for `serve --demo --auth tokens` ----------------------------------------------

DEMO_TOKENS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("demo-all", ("all",)),
    ("demo-release", ("cwd:/work/release",)),
)
"""The tokens `serve --demo --auth tokens` makes and prints: one that sees everything, one
scoped to `/work/release` (`demo-orphan` and `demo-orphan-child`). The demo's database is
temporary, so `token create` (which writes a real database) cannot make one for it."""


class DemoTokenStore(Protocol):
    async def create(self, name: str, grants: list[str]) -> tuple[Any, str]: ...


async def create_demo_tokens(tokens: DemoTokenStore) -> list[tuple[str, tuple[str, ...], str]]:
    """Make `DEMO_TOKENS` in the demo's database: `(name, grants, secret)` each."""
    made = []
    for name, grants in DEMO_TOKENS:
        _, secret = await tokens.create(name, list(grants))
        made.append((name, grants, secret))
    return made


# -- what to try in GraphiQL ------------------------------------------------------------

EXAMPLE_QUERIES: dict[str, str] = {
    "lineage graph": """\
query LineageGraph {
  traceSession(sessionId: "demo-fork-a-sub-check") {
    complete
    root { id }
    ancestors { id header { origin delegationDepth } }
  }
  tree: traceSession(sessionId: "demo-root") {
    graph {
      nodes { id live persisted header { createdAt origin parentSessionId } }
      edges { parentId childId }
    }
  }
  orphan: traceSession(sessionId: "demo-orphan-child") {
    complete
    unresolvedParentId
  }
}
""",
    "current surface": """\
query CurrentSurface {
  session(id: "demo-root") {
    header { cwd agentPreset }
    surface {
      seq
      type
      surfaceOp { kind start end }
      replacedEvents { seq type surface }
      data
    }
  }
}
""",
    "titles": """\
query Titles {
  sessions(first: 10) {
    nodes {
      id
      title { title sourceKind provider messageSeqs eventSeq updatedAt }
    }
  }
}
""",
    "event trace": """\
query EventTrace {
  event(sessionId: "demo-root", seq: 1) {
    type
    surface
    replacedBy { seq type }
    replacementChain { seq type surface }
    trace { replacementChain sourceEventSeqs derivedEventSeqs }
    derived { seq type }
  }
}
""",
}

DEFAULT_DEMO_QUERY = (
    "# The demo corpus: run one operation at a time with the ▶ button.\n"
    "# `demo-agent-live` keeps growing: run WatchAgent to watch it live (a subscription\n"
    "# over graphql-transport-ws), or re-run LiveAgent.\n\n"
    + "\n".join(EXAMPLE_QUERIES.values())
    + """
query LiveAgent {
  session(id: "demo-agent-live") {
    events(first: 5, surface: [CURRENT]) { totalCount nodes { seq type data } }
  }
}

subscription WatchAgent {
  sessionEvents(sessionId: "demo-agent-live", afterSeq: -1) { seq type surface data }
}
"""
)
