"""Issue 19's figures: full-text search, the `text` filter, filtered pages, the index's cost.

    .venv/bin/python -m benchmarks.bench_search [--quick] [--no-postgres] [--only SECTIONS]

Prints a table `figure | measured | target | what exactly was timed`:

* search: `searchSessions(first: 20)` for a term in exactly 5 events, on a
  corpus of 100k and of 1M events (1k / 10k sessions of 100 events): the 1M
  figure <= 50 ms, growth 100k -> 1M <= 1.5x; a term in 10 % of the events
  (100k matches at 1M): <= 1 s. Through GraphQL and through the Python API
  (`SessionQuery.search_sessions`). SQLite and PostgreSQL;
* events: `searchEvents(first: 20)` in one 100k-event session for the common
  term (10k matches): <= 300 ms, both engines;
* text: `events(sessionId, first: 100, filter: {text})` on that session, for
  the common term (the page fills early) and for a term in one event (the
  whole session is scanned): report, both engines;
* filter: a `sessions(first: 50, filter: {cwd: [10 of 97 cwds], createdAt: the
  middle half})` page at 1k and at 1M persisted sessions (headers only, bulk
  inserted): growth <= 1.5x, both engines;
* import: `SqlPersistence.import_many` of 100k events (1k sessions) into a
  fresh database with the search index vs without it: >= 60 %; and the size
  of the index (the tables and indexes the search migration adds) per byte of
  event text (SPEC §13, UTF-8, as indexed) on the 1M corpus: report, both engines.

Reads go through the real app in process (`create_app` on `httpx.ASGITransport`,
labelled "in-process POST") or the Python API ("Python API"): one warm-up, then
the median (and min) of several runs; every answer is checked once against a
model computed from the generated logs before it is timed (ranking of SPEC §13,
the first page of the `text` filter, the filtered session page). Ratios come
from figures measured in the same run.

Corpora (`benchmarks.search_data`) look like agent sessions (messages from a
vocabulary, shell tool calls, grep/test output, titles) and are written through
the real writer (`prepare_import` in two worker processes, then
`SqlPersistence.import_prepared`), so the index is the writer's own. Built
databases are cached (`benchmarks.search_cache`, under
`$TMPDIR/bench-search-cache`) keyed by their parameters and by the code that
decides their rows (writer, schema, §13 text and tokens, generator): the first
full run builds them (minutes), a second run reuses them. The PostgreSQL
cluster (Debian's server binaries, a free loopback port, fsync off) lives in
the same cache.

A figure whose feature is not on this branch prints "not measured: <reason>".
`--quick` runs the same harness on small sizes (seconds; a smoke test for CI).
`--profile` prints where the time of each timed read goes (cProfile, one run);
`--rebuild` builds every database afresh; `--build-only` fills the cache and
times nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import multiprocessing
import os
import pstats
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.bench_scale import (
    BenchError,
    Figure,
    InProcess,
    environment,
    figure_table,
    human,
    ms,
    within,
)
from benchmarks.scale_data import corpus_key, corpus_rows, insert_sessions
from benchmarks.search_cache import CachedCluster, SqliteCache, cache_key, cache_root
from benchmarks.search_data import (
    COMMON_TERM,
    RARE_EVENTS,
    RARE_TERM,
    CorpusSpec,
    TextFacts,
    big_session,
    corpus_sessions,
    generate_session,
    prepared_big,
    prepared_chunk,
)
from gateway import SessionQuery
from gateway.core import SessionEvent
from gateway.core.event_text import event_text
from gateway.core.words import indexable, terms
from gateway.persistence import SqlPersistence, migrate

SECTIONS = ("search", "events", "text", "filter", "import")

SEARCH_SESSIONS_Q = """query($q: String!, $first: Int) {
  searchSessions(query: $q, first: $first) {
    pageInfo { hasNextPage endCursor }
    nodes { session { id }
            bestMatch { snippet highlights { start length } event { seq type } } } } }"""
SEARCH_EVENTS_Q = """query($id: ID!, $q: String!, $first: Int) {
  searchEvents(sessionId: $id, query: $q, first: $first) {
    pageInfo { hasNextPage endCursor }
    nodes { snippet highlights { start length } event { seq type } } } }"""
TEXT_FILTER_Q = """query($id: ID!, $text: String!) {
  events(sessionId: $id, first: 100, filter: {text: $text}) {
    pageInfo { hasNextPage endCursor } nodes { seq type } } }"""
SESSIONS_FILTER_Q = """query($cwd: [String], $from: EpochMillis, $to: EpochMillis) {
  sessions(first: 50, filter: {cwd: $cwd, createdAt: {from: $from, to: $to}}) {
    pageInfo { hasNextPage endCursor } nodes { id header { createdAt cwd } } } }"""

_MISSING = re.compile(
    r"Cannot query field '[^']+'|Unknown argument '[^']+' on field '[^']+'"
    r"|Unknown type '[^']+'|has no attribute '[^']+'"
)


# -- sizes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    corpora: tuple[int, int]  # sessions of the two search corpora
    events_per_session: int
    big_events: int  # the one long session of `events` and `text`
    header_corpora: tuple[int, int]  # persisted sessions of the `filter` figure
    import_sessions: int  # sessions (of `events_per_session`) of the import figure
    import_runs: int
    runs: int
    budget: float


FULL = Scale(
    corpora=(1_000, 10_000),
    events_per_session=100,
    big_events=100_000,
    header_corpora=(1_000, 1_000_000),
    import_sessions=1_000,
    import_runs=3,
    runs=9,
    budget=20.0,
)
QUICK = Scale(
    corpora=(20, 100),
    events_per_session=50,
    big_events=5_000,
    header_corpora=(100, 5_000),
    import_sessions=40,
    import_runs=1,
    runs=3,
    budget=3.0,
)


# -- results --------------------------------------------------------------------------


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)

    def add(self, figure: Figure) -> None:
        self.figures.append(figure)
        verdict = f"  [{figure.verdict}]" if figure.verdict else ""
        print(f"  {figure.name}: {figure.measured}  (target {figure.target}){verdict}", flush=True)

    def not_measured(self, name: str, target: str, reason: str) -> None:
        self.add(Figure(name, f"not measured: {reason}", target, "-"))

    def failed(self, name: str, target: str, exc: BaseException) -> None:
        message = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:200]
        self.add(Figure(name, "FAILED", target, message, "FAILED"))


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    def __str__(self) -> str:
        return f"{ms(self.median)} (min {ms(self.min)}, n={len(self.samples)})"


async def measure(fn: Callable[[], Awaitable[Any]], runs: int, budget: float) -> Timing:
    """Wall times of `fn` over up to `runs` runs after one warm-up (at least 3 runs;
    fewer than `runs` once `budget` seconds are spent)."""
    await fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < runs:
        t = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - t)
        if len(samples) >= 3 and time.perf_counter() - start > budget:
            break
    return Timing(tuple(samples))


def missing_feature(exc: BaseException) -> str | None:
    """Why a figure cannot be measured on this branch, when `exc` says a feature is absent
    (GraphQL's validation of an unknown field or argument, a missing Python method)."""
    found = _MISSING.search(str(exc))
    return found.group(0) if found else None


def check(condition: bool, what: str) -> None:
    if not condition:
        raise BenchError(f"wrong answer: {what}")


# -- engines and corpora ------------------------------------------------------------


@dataclass
class Engine:
    """One SQL engine's cache of built databases: SQLite files or a PostgreSQL cluster."""

    name: str  # "SQLite" / "PostgreSQL"
    sqlite: SqliteCache | None = None
    cluster: CachedCluster | None = None

    def ready(self, name: str, key: str) -> bool:
        if self.sqlite is not None:
            return self.sqlite.ready(name, key)
        assert self.cluster is not None
        return self.cluster.ready(name, key)

    def url(self, name: str, key: str) -> str:
        if self.sqlite is not None:
            return f"sqlite+aiosqlite:///{self.sqlite.path(name, key)}"
        assert self.cluster is not None
        return self.cluster.database_url(name, key)

    async def building(self, name: str, key: str) -> str:
        """A fresh migrated database to build `name` into; its URL."""
        if self.sqlite is not None:
            url = f"sqlite+aiosqlite:///{self.sqlite.building(name, key)}"
        else:
            assert self.cluster is not None
            url = self.cluster.building(name, key)
        await migrate(url)
        return url

    def done(self, name: str, key: str, meta: dict[str, object]) -> None:
        if self.sqlite is not None:
            self.sqlite.done(name, key, meta)
        else:
            assert self.cluster is not None
            self.cluster.done(name, key, meta)

    def meta(self, name: str, key: str) -> dict[str, object]:
        if self.sqlite is not None:
            return self.sqlite.meta(name, key)
        assert self.cluster is not None
        return self.cluster.meta(name, key)


@dataclass
class Context:
    scale: Scale
    report: Report
    engines: list[Engine]
    pool: ProcessPoolExecutor
    profile: bool
    tmp: Path
    rebuild: bool = False
    built: list[str] = field(default_factory=list)  # "built NAME on ENGINE in S"

    @property
    def runs(self) -> int:
        return self.scale.runs

    @property
    def budget(self) -> float:
        return self.scale.budget


_CHUNK_SESSIONS = 250


def _chunks(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(n, start + size)


async def build(
    ctx: Context,
    name: str,
    params: dict[str, object],
    jobs: list[tuple[Callable[..., Any], tuple[Any, ...]]],
    expect: tuple[int, int],
) -> dict[str, str]:
    """The URL of database `name` on every engine, built where the cache lacks it.

    Each job runs in a worker process and returns (prepared imports, text facts);
    the prepared logs go through `SqlPersistence.import_prepared` on every engine
    that needs them, while the workers prepare the next ones. `expect`: how many
    events hold the rare and the common term (checked before the cache keeps it).
    """
    key = cache_key(params)
    urls = {e.name: e.url(name, key) for e in ctx.engines}
    todo = [e for e in ctx.engines if ctx.rebuild or not e.ready(name, key)]
    if not todo:
        return urls
    started = time.perf_counter()
    print(f"  building {name} on {', '.join(e.name for e in todo)} (cached for next runs) ...")
    dbs = {e.name: SqlPersistence(await e.building(name, key)) for e in todo}
    loop = asyncio.get_running_loop()
    facts = TextFacts()
    pending = [loop.run_in_executor(ctx.pool, fn, *args) for fn, args in jobs[:3]]
    queued = 3
    try:
        while pending:
            prepared, part = await pending.pop(0)
            if queued < len(jobs):
                fn, args = jobs[queued]
                pending.append(loop.run_in_executor(ctx.pool, fn, *args))
                queued += 1
            facts += part
            for db in dbs.values():
                outcomes = await db.import_prepared(prepared)
                bad = [o for o in outcomes if o != "created"]
                if bad:
                    raise BenchError(f"building {name}: {bad[0]!r}")
    finally:
        for db in dbs.values():
            await db.close()
    if (facts.rare, facts.common) != expect:
        raise BenchError(f"{name}: (rare, common) events {(facts.rare, facts.common)} != {expect}")
    meta = {"events": facts.events, "texts": facts.texts, "text_bytes": facts.text_bytes}
    for e in todo:
        e.done(name, key, meta)
    seconds = time.perf_counter() - started
    ctx.built.append(f"built {name} on {', '.join(e.name for e in todo)} in {seconds:.0f} s")
    print(f"  ... {ctx.built[-1]}", flush=True)
    return urls


def corpus_spec(ctx: Context, sessions: int) -> CorpusSpec:
    return CorpusSpec("s", sessions, ctx.scale.events_per_session)


async def corpus(ctx: Context, sessions: int) -> tuple[CorpusSpec, dict[str, str]]:
    spec = corpus_spec(ctx, sessions)
    jobs: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
        (prepared_chunk, (spec, a, b)) for a, b in _chunks(sessions, _CHUNK_SESSIONS)
    ]
    expect = (RARE_EVENTS, spec.total_events // 10)
    urls = await build(ctx, f"corpus{human(spec.total_events)}", spec.key(), jobs, expect)
    return spec, urls


def big_spec(ctx: Context) -> CorpusSpec:
    return CorpusSpec("big", 1, ctx.scale.big_events)


async def big_corpus(ctx: Context) -> tuple[CorpusSpec, dict[str, str]]:
    spec = big_spec(ctx)
    params = {**spec.key(), "kind": "big"}
    jobs: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [(prepared_big, (spec, spec.events))]
    urls = await build(ctx, f"big{human(spec.events)}", params, jobs, (1, spec.events // 10))
    return spec, urls


@contextmanager
def profiled(enabled: bool, label: str) -> Iterator[None]:
    if not enabled:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(22)
        print(f"--- profile: {label} (one run, cumulative) ---")
        print("\n".join(out.getvalue().splitlines()[:60]))


async def timed(ctx: Context, label: str, fn: Callable[[], Awaitable[Any]]) -> Timing:
    timing = await measure(fn, ctx.runs, ctx.budget)
    if ctx.profile:
        with profiled(True, label):
            await fn()
    return timing


class Gateway:
    """A backend on `url`, the query over it, and the app in process."""

    def __init__(self, url: str) -> None:
        self.db = SqlPersistence(url)
        self.query = SessionQuery(persistence=self.db)
        self.app = InProcess(self.query)

    async def gql(self, query: str, variables: dict[str, Any] | None = None) -> Any:
        return await self.app.gql(query, variables)

    async def close(self) -> None:
        await self.app.close()
        await self.db.close()


# -- models (from the generated logs, SPEC §13) --------------------------------------------


def _rank(session_id: str, seq: int, etime: int, text: str, term: str) -> tuple[Any, ...]:
    """The §13 ranking key (ascending) of an event matching the one-token query `term`:
    matchCount (occurrences of the token), length in code points, time, id, seq."""
    count = terms(indexable(text)).count(term)
    return (-count, len(indexable(text)), -etime, session_id, -seq)


def rare_model(spec: CorpusSpec) -> list[str]:
    """The session ids of `RARE_TERM`'s hits in ranked order."""
    keys = []
    for i, per in spec.rare_per_session().items():
        head, log = generate_session(spec, i, per)
        best = min(
            _rank(head.id, e.seq, e.time, t, RARE_TERM)
            for e in log
            if RARE_TERM in (t := event_text(e.type, e.data)).casefold()
        )
        keys.append(best)
    return [k[3] for k in sorted(keys)]


def big_model(spec: CorpusSpec) -> tuple[str, list[SessionEvent], list[tuple[Any, ...]]]:
    """The long session's id, its log, and the ranking keys of `COMMON_TERM`'s hits."""
    head, log = big_session(spec, spec.events)
    ranked = sorted(
        _rank(head.id, e.seq, e.time, t, COMMON_TERM)
        for e in log
        if COMMON_TERM in (t := event_text(e.type, e.data)).casefold()
    )
    return head.id, log, ranked


# -- sections ---------------------------------------------------------------------------


async def guarded(
    ctx: Context, name: str, target: str, body: Callable[[], Awaitable[Timing]]
) -> Timing | None:
    """Run one figure's body; a missing feature is "not measured", an error FAILED."""
    try:
        return await body()
    except Exception as exc:  # one broken figure must not hide the others
        reason = str(exc) if isinstance(exc, FeatureMissing) else missing_feature(exc)
        if reason is not None:
            ctx.report.not_measured(name, target, f"not on this branch ({reason})")
        else:
            traceback.print_exc()
            ctx.report.failed(name, target, exc)
        return None


_SEARCH_WHAT = (
    "in-process POST searchSessions(query, first:20){pageInfo nodes{session{id} "
    "bestMatch{snippet highlights event{seq type}}}}"
)


async def section_search(ctx: Context) -> None:
    sizes = ctx.scale.corpora
    built = {n: await corpus(ctx, n) for n in sizes}
    for engine in ctx.engines:
        rare: dict[int, Timing] = {}
        for n in sizes:
            spec, urls = built[n]
            gw = Gateway(urls[engine.name])
            try:
                last = n == sizes[-1]
                name = (
                    f"searchSessions rare term @ {human(spec.total_events)} events ({engine.name})"
                )
                target = "<= 50 ms" if last else "report"
                timing = await guarded(ctx, name, target, partial(_rare, ctx, gw, spec, name, last))
                if timing is not None:
                    rare[n] = timing
                if last:
                    name = (
                        f"search_sessions rare @ {human(spec.total_events)} events ({engine.name})"
                    )
                    await guarded(ctx, name, "<= 50 ms", partial(_python_rare, ctx, gw, spec, name))
                    matches = human(spec.total_events // 10)
                    name = f"searchSessions common term ({matches} matches, {engine.name})"
                    await guarded(ctx, name, "<= 1 s", partial(_common, ctx, gw, spec, name))
            finally:
                await gw.close()
        small, large = (human(n * ctx.scale.events_per_session) for n in sizes)
        name = f"searchSessions rare growth {small}->{large} events ({engine.name})"
        growth(ctx, name, rare, sizes, "median time on the large corpus / on the small one")


def growth(
    ctx: Context, name: str, timings: dict[int, Timing], sizes: tuple[int, int], what: str
) -> None:
    small, large = sizes
    if small not in timings or large not in timings:
        ctx.report.not_measured(name, "<= 1.5x", "a figure above was not measured")
        return
    ratio = timings[large].median / timings[small].median
    ctx.report.add(
        Figure(
            name,
            f"{ratio:.2f}x (min/min {timings[large].min / timings[small].min:.2f}x)",
            "<= 1.5x",
            f"{what}, same run",
            within(ratio, 1.5),
        )
    )


async def _rare(ctx: Context, gw: Gateway, spec: CorpusSpec, name: str, last: bool) -> Timing:
    variables = {"q": RARE_TERM, "first": 20}
    page = (await gw.gql(SEARCH_SESSIONS_Q, variables))["searchSessions"]
    ids = [node["session"]["id"] for node in page["nodes"]]
    want = rare_model(spec)
    check(ids == want, f"rare hits {ids} != {want}")
    check(not page["pageInfo"]["hasNextPage"], "rare: no next page")
    for node in page["nodes"]:
        hit = node["bestMatch"]
        check(len(hit["highlights"]) == 1, "rare: one highlight")
        h = hit["highlights"][0]
        word = hit["snippet"][h["start"] : h["start"] + h["length"]]
        check(word.casefold() == RARE_TERM, f"rare: highlight {word!r}")
    timing = await timed(ctx, name, partial(gw.gql, SEARCH_SESSIONS_Q, variables))
    verdict = within(timing.median, 0.050) if last else ""
    target = "<= 50 ms" if last else "report"
    ctx.report.add(Figure(name, str(timing), target, f"{_SEARCH_WHAT}, 5 hits", verdict))
    return timing


async def _python_rare(ctx: Context, gw: Gateway, spec: CorpusSpec, name: str) -> Timing:
    search = gw.query.search_sessions  # type: ignore[attr-defined]  # absent until it lands
    page = await search(RARE_TERM, limit=20)
    ids = [hit.session.header.id for hit in page.hits]
    check(ids == rare_model(spec), f"Python rare hits {ids}")
    check(not page.has_next, "Python rare: no next page")
    timing = await timed(ctx, name, partial(search, RARE_TERM, limit=20))
    ctx.report.add(
        Figure(
            name,
            str(timing),
            "<= 50 ms",
            "Python API: await SessionQuery.search_sessions(term, limit=20), 5 hits",
            within(timing.median, 0.050),
        )
    )
    return timing


async def _common(ctx: Context, gw: Gateway, spec: CorpusSpec, name: str) -> Timing:
    variables = {"q": COMMON_TERM, "first": 20}
    page = (await gw.gql(SEARCH_SESSIONS_Q, variables))["searchSessions"]
    check(len(page["nodes"]) == min(20, spec.sessions), "common: a full page")
    check(page["pageInfo"]["hasNextPage"] == (spec.sessions > 20), "common: next page")
    ids = [node["session"]["id"] for node in page["nodes"]]
    check(len(set(ids)) == len(ids), "common: each session once")
    timing = await timed(ctx, name, partial(gw.gql, SEARCH_SESSIONS_Q, variables))
    ctx.report.add(
        Figure(
            name,
            str(timing),
            "<= 1 s",
            f"{_SEARCH_WHAT}, on {human(spec.total_events)} events",
            within(timing.median, 1.0),
        )
    )
    return timing


async def section_events(ctx: Context) -> None:
    spec, urls = await big_corpus(ctx)
    sid, _, ranked = big_model(spec)
    for engine in ctx.engines:
        gw = Gateway(urls[engine.name])
        name = f"searchEvents common @ {human(spec.events)}-event session ({engine.name})"
        try:
            await guarded(ctx, name, "<= 300 ms", partial(_events, ctx, gw, sid, ranked, name))
        finally:
            await gw.close()


async def _events(
    ctx: Context, gw: Gateway, sid: str, ranked: list[tuple[Any, ...]], name: str
) -> Timing:
    variables = {"id": sid, "q": COMMON_TERM, "first": 20}
    want = [-key[4] for key in ranked[:20]]
    page = (await gw.gql(SEARCH_EVENTS_Q, variables))["searchEvents"]
    seqs = [node["event"]["seq"] for node in page["nodes"]]
    check(seqs == want, f"searchEvents order {seqs[:5]}... != {want[:5]}...")
    check(page["pageInfo"]["hasNextPage"], "searchEvents: next page")
    timing = await timed(ctx, name, partial(gw.gql, SEARCH_EVENTS_Q, variables))
    ctx.report.add(
        Figure(
            name,
            str(timing),
            "<= 300 ms",
            "in-process POST searchEvents(sessionId, query, first:20){pageInfo "
            f"nodes{{snippet highlights event{{seq type}}}}}}, {len(ranked):,} matches",
            within(timing.median, 0.300),
        )
    )
    return timing


async def section_text(ctx: Context) -> None:
    spec, urls = await big_corpus(ctx)
    sid, log, _ = big_model(spec)
    for engine in ctx.engines:
        gw = Gateway(urls[engine.name])
        try:
            for term, label in ((COMMON_TERM, "common term"), (RARE_TERM, "term in 1 event")):
                want = [e.seq for e in log if term in event_text(e.type, e.data).casefold()]
                events = human(spec.events)
                name = f"events(filter:{{text}}) {label} @ {events} events ({engine.name})"
                body = partial(_text, ctx, gw, sid, term, want, name)
                await guarded(ctx, name, "report", body)
        finally:
            await gw.close()


async def _text(
    ctx: Context, gw: Gateway, sid: str, term: str, want: list[int], name: str
) -> Timing:
    variables = {"id": sid, "text": term.upper()}
    page = (await gw.gql(TEXT_FILTER_Q, variables))["events"]
    seqs = [node["seq"] for node in page["nodes"]]
    check(seqs == want[:100], f"text filter page {seqs[:5]} != {want[:5]}")
    check(page["pageInfo"]["hasNextPage"] == (len(want) > 100), "text: next page")
    timing = await timed(ctx, name, partial(gw.gql, TEXT_FILTER_Q, variables))
    ctx.report.add(
        Figure(
            name,
            str(timing),
            "report",
            "in-process POST events(sessionId, first:100, filter:{text}){pageInfo "
            f"nodes{{seq type}}}}, the term upper-cased, {len(want):,} "
            + ("match" if len(want) == 1 else "matches"),
        )
    )
    return timing


def _filter_variables(n: int) -> tuple[dict[str, Any], list[str]]:
    """The `filter` figure's variables on the `n`-session corpus, and the page it answers."""
    cwds = [f"/bench/{k}" for k in range(10)]
    newest, oldest = corpus_key(n // 4)[0], corpus_key(3 * n // 4)[0]
    variables = {"cwd": cwds, "from": oldest, "to": newest}
    page = []
    for i in range(n):  # the model: brute force over the corpus rows
        created, sid = corpus_key(i)
        if i % 97 < 10 and oldest <= created <= newest:
            page.append(sid)
            if len(page) == 50:
                break
    return variables, page


async def section_filter(ctx: Context) -> None:
    for engine in ctx.engines:
        timings: dict[int, Timing] = {}
        for n in ctx.scale.header_corpora:
            url = await header_corpus(engine, n, ctx.rebuild)
            gw = Gateway(url)
            label = (
                f"sessions(filter:{{cwd, createdAt}}) page @ {human(n)} sessions ({engine.name})"
            )
            try:
                timing = await guarded(ctx, label, "report", partial(_filter, ctx, gw, n, label))
                if timing is not None:
                    timings[n] = timing
            finally:
                await gw.close()
        small, large = (human(n) for n in ctx.scale.header_corpora)
        name = f"sessions(filter:) page growth {small}->{large} sessions ({engine.name})"
        what = "median filtered page time at the large corpus / at the small one"
        growth(ctx, name, timings, ctx.scale.header_corpora, what)


async def header_corpus(engine: Engine, n: int, rebuild: bool) -> str:
    """`n` persisted session headers without events (`scale_data.corpus_rows`: cwd
    `/bench/{i % 97}`, two sessions per createdAt), bulk-inserted; cached."""
    name, key = f"headers{human(n)}", cache_key({"kind": "headers", "sessions": n})
    if rebuild or not engine.ready(name, key):
        url = await engine.building(name, key)
        if engine.sqlite is not None:
            insert_sessions(Path(url.split(":///", 1)[1]), corpus_rows(n))
        else:
            await _copy_sessions(url, n)
        engine.done(name, key, {"sessions": n})
    return engine.url(name, key)


async def _copy_sessions(url: str, n: int) -> None:
    """`corpus_rows(n)` into PostgreSQL with one COPY (asyncpg's binary copy)."""
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        records = (
            (sid, 0, created, cwd, parent, 0) for sid, created, cwd, parent in corpus_rows(n)
        )
        columns = ["id", "version", "created_at", "cwd", "parent_session", "event_count"]
        await conn.copy_records_to_table("sessions", records=records, columns=columns)
        await conn.execute("ANALYZE sessions")
    finally:
        await conn.close()


async def _filter(ctx: Context, gw: Gateway, n: int, name: str) -> Timing:
    variables, want = _filter_variables(n)
    page = (await gw.gql(SESSIONS_FILTER_Q, variables))["sessions"]
    ids = [node["id"] for node in page["nodes"]]
    check(ids == want, f"filtered page {ids[:3]} != {want[:3]}")
    timing = await timed(ctx, name, partial(gw.gql, SESSIONS_FILTER_Q, variables))
    ctx.report.add(
        Figure(
            name,
            str(timing),
            "report",
            "in-process POST sessions(first:50, filter:{cwd: 10 of 97 values, createdAt: "
            "the middle half}){pageInfo nodes{id header{createdAt cwd}}}",
        )
    )
    return timing


async def section_import(ctx: Context) -> None:
    baseline = {e.name: await _objects_before_index(ctx, e) for e in ctx.engines}
    await _index_size(ctx, baseline)
    await _import_throughput(ctx, baseline)


BEFORE_INDEX = "0004"
"""The schema revision before the search index (issue 19's migration comes after it)."""


async def _objects_before_index(ctx: Context, engine: Engine) -> set[str]:
    """The tables and indexes of a database at `BEFORE_INDEX`: everything else that a
    database at head holds is the search index (and titles' column, in a table of its own
    only if it is one)."""
    url = await _fresh_database(ctx, engine, "probe", revision=BEFORE_INDEX)
    try:
        return await _objects(url)
    finally:
        _drop_database(engine, url)


_fresh = itertools.count()


async def _fresh_database(ctx: Context, engine: Engine, label: str, revision: str = "head") -> str:
    """An empty database at `revision` for one measurement (dropped by `_drop_database`)."""
    n = next(_fresh)
    if engine.cluster is not None:
        dbname = f"t_{label}_{os.getpid()}_{n}"
        engine.cluster.drop_database(dbname)
        engine.cluster.create_database(dbname)
        url = engine.cluster.url(dbname)
    else:
        url = f"sqlite+aiosqlite:///{ctx.tmp / f'{label}-{n}.db'}"
    await migrate(url, revision)
    return url


def _drop_database(engine: Engine, url: str) -> None:
    if engine.cluster is not None:
        engine.cluster.drop_database(url.rsplit("/", 1)[1])
    else:
        Path(url.split(":///", 1)[1]).unlink(missing_ok=True)


_PG_OBJECTS = """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 'm', 'p')"""
_PG_SIZES = """SELECT c.relname, c.relkind, pg_relation_size(c.oid),
  pg_total_relation_size(c.oid), c2.relname AS tablename
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_index x ON x.indexrelid = c.oid LEFT JOIN pg_class c2 ON c2.oid = x.indrelid
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 'm', 'p')"""


async def _objects(url: str) -> set[str]:
    from sqlalchemy import text

    db = SqlPersistence(url)
    try:
        async with db.engine.connect() as conn:
            if url.startswith("sqlite"):
                sql = "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"
            else:
                sql = _PG_OBJECTS
            return {row[0] for row in await conn.execute(text(sql))}
    finally:
        await db.close()


async def _index_bytes(url: str, before: set[str]) -> tuple[int, list[str]]:
    """Bytes held by the tables and indexes not in `before` (SQLite: pages of each b-tree,
    from `dbstat`; PostgreSQL: a new table with its indexes and TOAST, a new index on an old
    table), and their names."""
    if url.startswith("sqlite"):
        import apsw

        con = apsw.Connection(url.split(":///", 1)[1], flags=apsw.SQLITE_OPEN_READONLY)
        try:
            rows = list(con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
        finally:
            con.close()
        skip = before | {"sqlite_schema", "sqlite_master"}
        new = [(str(name), int(size)) for name, size in rows if name not in skip]
        return sum(size for _, size in new), sorted(name for name, _ in new)
    from sqlalchemy import text

    db = SqlPersistence(url)
    try:
        async with db.engine.connect() as conn:
            rows = list(await conn.execute(text(_PG_SIZES)))
    finally:
        await db.close()
    total, names = 0, []
    for name, kind, own, with_all, table in rows:
        if name in before:
            continue
        if kind == "i" and table not in before:
            continue  # counted with its new table
        total += int(with_all if kind != "i" else own)
        names.append(str(name))
    return total, sorted(names)


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


async def _index_size(ctx: Context, before: dict[str, set[str]]) -> None:
    spec, urls = await corpus(ctx, ctx.scale.corpora[-1])
    events = human(spec.total_events)
    for engine in ctx.engines:
        name = f"index bytes per text byte @ {events} events ({engine.name})"
        url = urls[engine.name]
        meta = engine.meta(f"corpus{events}", cache_key(spec.key()))
        size, names = await _index_bytes(url, before[engine.name])
        if not names:
            ctx.report.not_measured(name, "report", "not on this branch (no index in the schema)")
            continue
        text_bytes = int(str(meta["text_bytes"]))
        ctx.report.add(
            Figure(
                name,
                f"{size / text_bytes:.2f} ({mib(size)} / {mib(text_bytes)})",
                "report",
                f"bytes of what the schema adds after {BEFORE_INDEX} ({', '.join(names)}) / UTF-8 "
                f"bytes of the §13 texts of {int(str(meta['texts'])):,} events",
            )
        )


@contextmanager
def without_index() -> Iterator[list[str]]:
    """The writer with no event text: `gateway.core.event_text.event_text`, and every
    name in a `gateway` module bound to it, answers "" (an event with no text has no row
    in the index, SPEC §13), so an import writes no text rows, no FTS rows, no tokens:
    what the index adds is all that is left out. Yields the names patched."""
    import gateway.core.event_text as module

    real = module.event_text
    patched: list[tuple[object, str]] = [(module, "event_text")]
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("gateway.") and mod is not module:
            patched += [(mod, attr) for attr, value in list(vars(mod).items()) if value is real]
    for mod, attr in patched:
        setattr(mod, attr, lambda event_type, data: "")
    try:
        yield [f"{getattr(m, '__name__', m)}.{a}" for m, a in patched]
    finally:
        for mod, attr in patched:
            setattr(mod, attr, real)


async def _import_throughput(ctx: Context, before: dict[str, set[str]]) -> None:
    spec = CorpusSpec("imp", ctx.scale.import_sessions, ctx.scale.events_per_session)
    items = list(corpus_sessions(spec, 0, spec.sessions))
    n_events = spec.total_events
    for engine in ctx.engines:
        name = f"import with index / without ({engine.name})"
        body = partial(_import, ctx, engine, before[engine.name], items, n_events, name)
        await guarded(ctx, name, ">= 60 %", body)


async def _import(
    ctx: Context,
    engine: Engine,
    before: set[str],
    items: list[tuple[Any, Any]],
    n_events: int,
    name: str,
) -> Timing:
    rates: dict[bool, list[float]] = {True: [], False: []}
    sizes: dict[bool, int] = {}
    patched: list[str] = []
    for _ in range(ctx.scale.import_runs):
        for indexed in (True, False):
            url = await _fresh_database(ctx, engine, "imp")
            db = SqlPersistence(url)
            try:
                await db.ping()
                with nullcontext([]) if indexed else without_index() as names:
                    patched = patched or names
                    t = time.perf_counter()
                    outcomes = await db.import_many(items)
                    seconds = time.perf_counter() - t
                check(all(o == "created" for o in outcomes), "import: every session created")
                sizes[indexed], _ = await _index_bytes(url, before)
                rates[indexed].append(n_events / seconds)
            finally:
                await db.close()
                _drop_database(engine, url)
    if ctx.profile:  # one more import with the index, under cProfile
        url = await _fresh_database(ctx, engine, "imp")
        db = SqlPersistence(url)
        try:
            with profiled(True, f"{name}: import_many with the index"):
                await db.import_many(items)
        finally:
            await db.close()
            _drop_database(engine, url)
    empty = await _empty_index_bytes(ctx, engine, before)
    written = {k: size - empty for k, size in sizes.items()}
    if written[True] <= 0:
        raise FeatureMissing("the writer writes no search index yet")
    if written[False] > 0.02 * written[True]:
        raise BenchError(f"without text the import still wrote {written[False]} index bytes")
    with_rate, without_rate = (statistics.median(rates[k]) for k in (True, False))
    ratio = with_rate / without_rate
    ctx.report.add(
        Figure(
            name,
            f"{ratio:.0%} ({with_rate:,.0f} / {without_rate:,.0f} events/s)",
            ">= 60 %",
            f"await SqlPersistence.import_many({len(items):,} sessions, {n_events:,} events) "
            f"into a fresh database, median of {ctx.scale.import_runs}, interleaved; without: "
            f'{", ".join(patched)} answering "" (index bytes {mib(sizes[True])} vs '
            f"{mib(sizes[False])})",
            "ok" if ratio >= 0.6 else "MISSED",
        )
    )
    return Timing(tuple(n_events / r for r in rates[True]))


async def _empty_index_bytes(ctx: Context, engine: Engine, before: set[str]) -> int:
    """What the index's tables and indexes hold in a freshly migrated database."""
    url = await _fresh_database(ctx, engine, "empty")
    try:
        return (await _index_bytes(url, before))[0]
    finally:
        _drop_database(engine, url)


class FeatureMissing(RuntimeError):
    """What a figure measures is not on this branch (printed as "not measured")."""


SECTION_FUNCTIONS: dict[str, Callable[[Context], Awaitable[None]]] = {
    "search": section_search,
    "events": section_events,
    "text": section_text,
    "filter": section_filter,
    "import": section_import,
}


async def build_all(ctx: Context) -> None:
    """Every database the sections read, built into the cache (nothing timed)."""
    for n in ctx.scale.corpora:
        await corpus(ctx, n)
    await big_corpus(ctx)
    for engine in ctx.engines:
        for n in ctx.scale.header_corpora:
            await header_corpus(engine, n, ctx.rebuild)


def engines(no_postgres: bool) -> tuple[list[Engine], str]:
    root = cache_root()
    found = [Engine("SQLite", sqlite=SqliteCache(root))]
    if no_postgres:
        return found, "PostgreSQL skipped (--no-postgres)"
    try:
        cluster = CachedCluster(root / "pg-cluster")
        cluster.start()
    except Exception as exc:  # binaries missing, cannot start: say so, go on
        return found, f"PostgreSQL skipped: {type(exc).__name__}: {exc}"
    found.append(Engine("PostgreSQL", cluster=cluster))
    return found, f"PostgreSQL {cluster.bindir.parent.name} on port {cluster.port}"


async def run(args: argparse.Namespace) -> Report:
    scale = QUICK if args.quick else FULL
    if args.runs:
        scale = replace(scale, runs=args.runs)
    print(environment(), flush=True)
    wanted = [s.strip() for s in args.only.split(",")] if args.only else list(SECTIONS)
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    report = Report()
    found, note = engines(args.no_postgres)
    print(f"{note}; cache {cache_root()}", flush=True)
    spawn = multiprocessing.get_context("spawn")
    try:
        with (
            ProcessPoolExecutor(max_workers=2, mp_context=spawn) as pool,
            tempfile.TemporaryDirectory(prefix="bench-search-") as tmp,
        ):
            ctx = Context(scale, report, found, pool, args.profile, Path(tmp), args.rebuild)
            started = time.perf_counter()
            if args.build_only:
                await build_all(ctx)
                wanted = []
            for name in SECTIONS:
                if name not in wanted:
                    continue
                print(f"[{time.perf_counter() - started:6.1f} s] {name}", flush=True)
                try:
                    await SECTION_FUNCTIONS[name](ctx)
                except Exception as exc:  # one broken section must not hide the others
                    traceback.print_exc()
                    report.failed(f"{name} (section)", "-", exc)
            print(f"[{time.perf_counter() - started:6.1f} s] done; {environment()}", flush=True)
            for line in ctx.built:
                print(f"  {line}")
    finally:
        for engine in found:
            if engine.cluster is not None:
                engine.cluster.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--only", metavar="SECTIONS", help=f"comma-separated, of {SECTIONS}")
    parser.add_argument("--runs", type=int, help="timed runs per read figure (median)")
    parser.add_argument("--profile", action="store_true", help="cProfile one run of each read")
    parser.add_argument("--rebuild", action="store_true", help="ignore the cache of databases")
    parser.add_argument("--build-only", action="store_true", help="fill the cache, time nothing")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    print()
    print(
        "Machine: 2 cores shared with other work, so figures are noisy: medians with their "
        "min; ratios are of medians measured in this run."
    )
    print(figure_table(report.figures))
    return 1 if any(f.verdict == "FAILED" for f in report.figures) else 0


if __name__ == "__main__":
    sys.exit(main())
