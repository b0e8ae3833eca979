"""Corpora for the search benchmarks (`benchmarks.bench_search`), built fast and never timed.

Sessions look like real agent sessions: turns of a user message, stream chunks
and bookkeeping, an assistant message with a tool call, the tool call and its
result, the turn's end (now and then an error), and one `session/title`. Texts
are drawn from a programming vocabulary with Zipf-like weights, tool calls are
shell commands and results are grep/test output, so an FTS index holds what it
would hold for real logs (many distinct words, long tails, numbers, paths).

Two terms are planted, and occur nowhere else (no vocabulary word is either):
`RARE_TERM` in exactly `RARE_EVENTS` events of a corpus (one event in each of
five sessions spread over the corpus), `COMMON_TERM` in exactly a tenth of the
events of every session (on events that have a text, SPEC §13).

Everything is deterministic in its parameters, so a database built from them
can be cached (`bench_search` keys its cache by these parameters and by the
writer's code). Logs go through the real writer (`prepare_import` here, in
worker processes; `SqlPersistence.import_prepared` in the benchmark), so the
index in the database is the writer's own.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import astuple, dataclass
from itertools import accumulate

from gateway.core import SessionEvent, SessionHeader
from gateway.core.event_text import event_text
from gateway.core.words import indexable
from gateway.persistence.writes import PreparedImport, prepare_import

BASE_MS = 1_780_000_000_000
"""createdAt of the newest generated session (epoch ms); older ones 1 s apart."""

RARE_TERM = "xylophorbic"
COMMON_TERM = "econnrefused"
RARE_EVENTS = 5
COMMON_SHARE = 10  # one event in COMMON_SHARE holds COMMON_TERM
ABSENT_TERM = "quintessentialism"
"""Occurs in no generated text: a `text` filter for it scans a whole session."""

GENERATOR_VERSION = 1
"""Bumped whenever what is generated changes (part of the cache key)."""

_PARAGRAPH = """
the a to of and in is it that for on with this be as not are we you can will if
or by from at an have but all so one which there was file function test error
value return type data line code run build check import module class method call
result output input path name list string number case change update add remove
fix use need should would could make look see find read write open close start
stop first last next new old same other each every only also just now then when
where why how what because before after again still already here some more most
less few many much very well good bad right wrong true false none null empty
config server client request response header body query page cursor session event
index search token filter range limit order count total size length time date
user assistant tool message chunk step turn surface fold replace append import
export log trace span metric health ready timeout retry connection socket port
host address database table column row schema migration commit transaction lock
cache memory disk thread process loop task queue worker pool batch stream buffer
parse encode decode serialize json yaml toml text bytes unicode ascii utf8 emoji
script shell bash grep sed awk python node rust cargo pip npm git branch merge
rebase diff patch review issue bug feature release version tag deploy container
image docker kubernetes cluster node pod service ingress proxy gateway route
handler middleware router endpoint api graphql schema resolver field argument
variable fragment directive mutation subscription websocket sse http https tls
certificate key secret password auth scope grant role permission policy sandbox
approval preset mode agent model provider prompt completion reasoning summary
title note readme docs spec contract rule property model benchmark figure target
median percentile latency throughput budget quota cost slow fast small large
package workspace directory folder tree root parent child descendant ancestor
lineage graph edge vertex walk chain depth width level rank score match phrase
word term snippet highlight marker window prefix suffix offset position begin end
"""
VOCABULARY: tuple[str, ...] = tuple(dict.fromkeys(re.findall(r"\S+", _PARAGRAPH)))
assert RARE_TERM not in VOCABULARY and COMMON_TERM not in VOCABULARY
assert ABSENT_TERM not in VOCABULARY

_CUM_WEIGHTS = list(accumulate(1.0 / (rank + 1) ** 0.9 for rank in range(len(VOCABULARY))))
_COMMANDS = ("grep -rn", "rg", "cat", "ls -la", "pytest -q", "git diff", "sed -n 1,80p", "wc -l")
_PROJECTS = tuple(f"/srv/{w}" for w in VOCABULARY[40:90])
"""The cwds of generated sessions (50 of them)."""


@dataclass(frozen=True)
class CorpusSpec:
    """A corpus of `sessions` sessions of `events` events each (ids `{prefix}{i:06d}`)."""

    prefix: str
    sessions: int
    events: int
    seed: int = 19

    @property
    def total_events(self) -> int:
        return self.sessions * self.events

    def session_id(self, i: int) -> str:
        return f"{self.prefix}{i:06d}"

    def rare_sessions(self) -> tuple[int, ...]:
        """The sessions holding one `RARE_TERM` event each (spread over the corpus)."""
        n = self.sessions
        if n >= RARE_EVENTS:
            return tuple((2 * k + 1) * n // (2 * RARE_EVENTS) for k in range(RARE_EVENTS))
        return tuple(range(n))

    def rare_per_session(self) -> dict[int, int]:
        """How many `RARE_TERM` events each session of `rare_sessions` holds (5 in all)."""
        chosen = self.rare_sessions()
        counts = dict.fromkeys(chosen, 0)
        for k in range(RARE_EVENTS):
            counts[chosen[k % len(chosen)]] += 1
        return counts

    def key(self) -> dict[str, object]:
        return {
            "kind": "corpus",
            "prefix": self.prefix,
            "sessions": self.sessions,
            "events": self.events,
            "seed": self.seed,
            "generator": GENERATOR_VERSION,
        }


def header(spec: CorpusSpec, i: int) -> SessionHeader:
    return SessionHeader(spec.session_id(i), BASE_MS - i * 1_000, cwd=_PROJECTS[i % len(_PROJECTS)])


class _Text:
    """Sentences, commands and outputs from the vocabulary, one rng per session."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def words(self, k: int) -> list[str]:
        return self.rng.choices(VOCABULARY, cum_weights=_CUM_WEIGHTS, k=k)

    def sentence(self, lo: int, hi: int, plant: tuple[str, ...] = ()) -> str:
        words = self.words(self.rng.randint(lo, hi))
        for term in plant:
            words.insert(self.rng.randrange(len(words) + 1), term)
        words[0] = words[0].capitalize()
        return " ".join(words) + self.rng.choice((".", ".", "?", ":"))

    def command(self, plant: tuple[str, ...] = ()) -> str:
        a, b, c = self.words(3)
        extra = " ".join(plant)
        return f"{self.rng.choice(_COMMANDS)} {a} src/{b}/{c}.py {extra}".rstrip()

    def output(self, plant: tuple[str, ...] = ()) -> str:
        lines = []
        for _ in range(self.rng.randint(1, 4)):
            a, b = self.words(2)
            lines.append(f"src/{a}/{b}.py:{self.rng.randint(1, 900)}: {self.sentence(3, 12)}")
        if plant:
            lines.insert(self.rng.randrange(len(lines) + 1), self.sentence(2, 8, plant))
        return "\n".join(lines)


# the shape of one turn: (type, has text); `_Turn` fills it in
_TURN: tuple[tuple[str, bool], ...] = (
    ("turn/start", False),
    ("user/message", True),
    ("step/start", False),
    ("request/header", False),
    ("assistant/chunk", False),
    ("assistant/chunk", False),
    ("assistant/chunk", False),
    ("assistant/message", True),
    ("tool/call", True),
    ("tool/result", True),
    ("step/end", False),
    ("assistant/chunk", False),
    ("assistant/message", True),
    ("turn/end", False),
)


def _types(n: int) -> list[tuple[str, bool]]:
    """The types of a session of `n` events: a title after the first user message, then
    whole turns, cut at `n` (a cut may leave a tool/call without its result: valid)."""
    out: list[tuple[str, bool]] = []
    while len(out) < n:
        out.extend(_TURN)
        if len(out) == len(_TURN):
            out.insert(2, ("session/title", False))
    return out[:n]


def generate_session(
    spec: CorpusSpec, i: int, rare: int = 0, n_events: int | None = None
) -> tuple[SessionHeader, list[SessionEvent]]:
    """Session `i` of `spec` (or a session of `n_events` under that id): a tenth of its
    events hold `COMMON_TERM`, `rare` of them `RARE_TERM` (valid under the fold)."""
    n = spec.events if n_events is None else n_events
    rng = random.Random(spec.seed * 1_000_003 + i)
    text = _Text(rng)
    head = header(spec, i)
    types = _types(n)
    texted = [seq for seq, (_, has) in enumerate(types) if has]
    common_quota = n // COMMON_SHARE
    if len(texted) < common_quota + rare:
        raise ValueError(f"{n} events have only {len(texted)} texts")
    chosen = rng.sample(texted, common_quota + rare)
    plant: dict[int, tuple[str, ...]] = {seq: (COMMON_TERM,) for seq in chosen[:common_quota]}
    for seq in chosen[common_quota:]:
        plant[seq] = (RARE_TERM,)
    events: list[SessionEvent] = []
    t = head.created_at
    turn = step = 0
    last_user = last_surface = call_seq = -1
    call_id = ""
    for seq, (etype, _) in enumerate(types):
        t += rng.randint(5, 400)
        terms = plant.get(seq, ())
        op: object = None
        sources: tuple[int, ...] | None = None
        data: object
        if etype == "turn/start":
            turn += 1
            step = 0
            data = {"turn": turn}
        elif etype == "step/start":
            step += 1
            data = {"turn": turn, "step": step}
        elif etype == "step/end":
            data = {"turn": turn, "step": step, "finishReason": "tool-calls"}
        elif etype == "request/header":
            data = {"turn": turn, "step": step, "model": "bench-model", "n": seq}
        elif etype == "assistant/chunk":
            delta = " ".join(text.words(3))
            data = {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0,
                                                          "text": delta}}  # fmt: skip
        elif etype == "session/title":
            data = {"title": text.sentence(2, 5).rstrip(".?:"), "messageSeqs": [last_user],
                    "source": {"kind": "fallback"}}  # fmt: skip
        elif etype == "user/message":
            data = {"content": [{"type": "text", "text": text.sentence(6, 30, terms)}]}
            op = "append"
            last_user = last_surface = seq
        elif etype == "assistant/message":
            call_id = f"call_{i}_{seq}"
            content: list[object] = [{"type": "text", "text": text.sentence(8, 40, terms)}]
            if rng.random() < 0.6:
                args = json.dumps({"command": text.command()})
                content.append({"type": "tool-call", "id": call_id, "name": "bash",
                                "arguments": args})  # fmt: skip
            data = {"turn": turn, "step": step,
                    "message": {"role": "assistant", "content": content}}  # fmt: skip
            op = "append"
            sources = (last_surface,) if last_surface >= 0 else None
            last_surface = seq
        elif etype == "tool/call":
            call_seq = seq
            args = json.dumps({"command": text.command(terms)})
            data = {"turn": turn, "step": step, "callId": call_id, "name": "bash",
                    "arguments": args}  # fmt: skip
        elif etype == "tool/result":
            result = {"type": "tool-result", "toolCallId": call_id,
                      "content": [{"type": "text", "text": text.output(terms)}]}  # fmt: skip
            data = {"turn": turn, "step": step,
                    "message": {"source": {"kind": "tool", "callId": call_id},
                                "content": [result]}}  # fmt: skip
            op = "append"
            sources = (call_seq,) if call_seq >= 0 else None
            last_surface = seq
        else:  # turn/end
            if rng.random() < 0.05:
                reason = {"kind": "error", "error": {"message": text.sentence(3, 10)}}
            else:
                reason = {"kind": "completed"}
            data = {"turn": turn, "reason": reason}
        events.append(SessionEvent(etype, seq, t, data, op, sources))  # type: ignore[arg-type]
    return head, events


def corpus_sessions(
    spec: CorpusSpec, start: int, stop: int
) -> Iterator[tuple[SessionHeader, list[SessionEvent]]]:
    rare = spec.rare_per_session()
    for i in range(start, stop):
        yield generate_session(spec, i, rare.get(i, 0))


@dataclass(frozen=True)
class TextFacts:
    """Of a set of logs: events, those with a text (SPEC §13), its UTF-8 bytes as indexed,
    and the events whose text holds `RARE_TERM` / `COMMON_TERM` (the corpus's promise)."""

    events: int = 0
    texts: int = 0
    text_bytes: int = 0
    rare: int = 0
    common: int = 0

    def __add__(self, other: TextFacts) -> TextFacts:
        return TextFacts(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def text_facts(log: list[SessionEvent]) -> TextFacts:
    texts = [t.casefold() for e in log if (t := event_text(e.type, e.data))]
    return TextFacts(
        len(log),
        len(texts),
        sum(len(indexable(t).encode()) for t in texts),
        sum(RARE_TERM in t for t in texts),
        sum(COMMON_TERM in t for t in texts),
    )


def prepared_chunk(
    spec: CorpusSpec, start: int, stop: int
) -> tuple[list[PreparedImport], TextFacts]:
    """Sessions `start..stop` of `spec`, generated and prepared for `import_prepared`,
    and their text facts (a worker process's job: the prepared rows are plain values)."""
    prepared, facts = [], TextFacts()
    for h, log in corpus_sessions(spec, start, stop):
        prepared.append(prepare_import(h, log))
        facts += text_facts(log)
    return prepared, facts


def prepared_big(spec: CorpusSpec, n_events: int) -> tuple[list[PreparedImport], TextFacts]:
    """`big_session`, prepared for `import_prepared`, and its text facts."""
    head, log = big_session(spec, n_events)
    return [prepare_import(head, log)], text_facts(log)


def big_session(spec: CorpusSpec, n_events: int) -> tuple[SessionHeader, list[SessionEvent]]:
    """One session of `n_events` under `spec.session_id(0)`; a tenth of its events hold
    `COMMON_TERM`, one `RARE_TERM`."""
    head, events = generate_session(spec, 0, rare=1, n_events=n_events)
    return head, events
