"""MCP for agents (issue 22, point 6): `session-gateway mcp` over stdio and `/mcp` on a
served app over streamable HTTP, driven by the official SDK's own client.

The corpus is the 120 real artifacts imported into a SQLite file, plus a small
fork tree (`LINEAGE`) whose cwds split it for scoped callers. Every answer is
compared with the same question asked of `SessionQuery` directly (the model):
the structured content field by field, and the text for the facts it must show.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from gateway import SessionQuery, create_app
from gateway.agent_tools import AgentTools
from gateway.agent_tools.arguments import iso_time, parse_time
from gateway.core import (
    Availability,
    EventFilter,
    EventSurface,
    SeqRange,
    SessionEvent,
    SessionFilter,
    SessionHeader,
    SessionQueryError,
    TimeRange,
)
from gateway.ingest import import_paths
from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import TokenStore
from gateway.server.config import GatewayConfig
from tests.support.server import running_server
from tests.support.sqlite_backend import sqlite_url
from tests.support.tokens import KEY, bearer, issued_tokens_for_a_server
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "data" / "dsh-jsonl"
TOOLS = {
    "session_search": [
        "query", "session_ids", "created_at_from", "created_at_to", "parent_session_ids",
        "include_root_sessions", "availability", "event_seq_from", "event_seq_to",
        "event_time_from", "event_time_to", "event_types", "event_surfaces",
    ],
    "session_event_search": [
        "session_id", "query", "seq_from", "seq_to", "time_from", "time_to", "event_types",
        "surfaces",
    ],
    "session_trace": ["session_id"],
    "session_event_trace": ["session_id", "seq"],
    "session_event_read": ["session_id", "seq", "before", "after"],
}  # fmt: skip
LINEAGE = [  # (id, parent, cwd): the child is outside cwd:/work/a, its own child inside
    ("mcp-root", None, "/work/a"),
    ("mcp-child", "mcp-root", "/work/b"),
    ("mcp-grandchild", "mcp-child", "/work/a"),
]
LINEAGE_TIME = 1_900_000_000_000
SURFACE = {EventSurface.CURRENT: "current", EventSurface.SHADOWED: "shadowed"}
SURFACE[EventSurface.LOG_ONLY] = "log-only"


def _message(seq: int, text: str) -> SessionEvent:
    data = {"content": [{"type": "text", "text": text}]}
    return SessionEvent("user/message", seq, LINEAGE_TIME + seq, data, "append")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file holding the 120 real artifacts and the `LINEAGE` fork tree."""
    path = tmp_path_factory.mktemp("mcp") / "corpus.db"

    async def build() -> None:
        db = SqlPersistence(sqlite_url(path))
        try:
            summary = await import_paths(db, [CORPUS])
            assert [r.status for r in summary.reports] == ["imported"] * 120
            for i, (sid, parent, cwd) in enumerate(LINEAGE):
                header = SessionHeader(sid, LINEAGE_TIME + i, cwd=cwd, parent_session=parent)
                await db.create(header, [_message(0, f"zebra crossing {sid}")])
        finally:
            await db.close()

    asyncio.run(build())
    return path


@asynccontextmanager
async def model(path: Path, grants: list[str] | None = None) -> AsyncIterator[Any]:
    """The same questions asked of `SessionQuery` directly (scoped like the caller)."""
    db = SqlPersistence(sqlite_url(path))
    query = SessionQuery(persistence=db)
    try:
        yield query if grants is None else query.scoped(grants)
    finally:
        await db.close()


@asynccontextmanager
async def stdio_session(path: Path, log: Path, *extra: str) -> AsyncIterator[ClientSession]:
    """The SDK's client over stdio, talking to `python -m gateway mcp` in a subprocess."""
    args = ["-m", "gateway", "mcp", "--database", sqlite_url(path), *extra]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))
    with log.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
    assert "Traceback" not in await asyncio.to_thread(log.read_text)


async def call(session: ClientSession, name: str, **arguments: Any) -> tuple[str, Any]:
    """(text, structured content) of a successful call."""
    result = await session.call_tool(name, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    return text, result.structured_content


async def tool_error(session: ClientSession, name: str, **arguments: Any) -> str:
    """The text of a call that must be a tool error (never a protocol error)."""
    result = await session.call_tool(name, arguments)
    assert result.is_error, result
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text and 'File "' not in text
    return text


# -- what the model expects ------------------------------------------------------------


async def want_session_search(q: Any, text: str, **filters: Any) -> list[tuple[Any, ...]]:
    page = await q.search_sessions(text, limit=100, **filters)
    return [
        (
            h.session.id,
            await title_of(q, h.session.id),
            h.session.live,
            h.session.persisted,
            h.best_match.record.seq,
            SURFACE[h.best_match.record.surface],
            h.best_match.snippet,
            [[r.start, r.length] for r in h.best_match.highlights],
            h.best_match.match_count,
        )
        for h in page.hits
    ]


async def title_of(q: Any, session_id: str) -> str | None:
    title = await q.session_title(session_id)
    return None if title is None else title.title


def got_session_search(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (
            s["session"]["id"],
            s["session"]["title"],
            s["session"]["live"],
            s["session"]["persisted"],
            s["best_match"]["seq"],
            s["best_match"]["surface"],
            s["best_match"]["snippet"],
            [[h["start"], h["length"]] for h in s["best_match"]["highlights"]],
            s["best_match"]["match_count"],
        )
        for s in data["sessions"]
    ]


async def a_shadowed_event(q: Any) -> tuple[str, int]:
    """Some (session, seq) of the corpus that a replacement shadowed."""
    for record in await q.list_sessions():
        for event in await q.list_events(record.id):
            if event.surface is EventSurface.SHADOWED:
                return record.id, event.seq
    raise AssertionError("the corpus has no shadowed event")


# -- stdio -------------------------------------------------------------------------------


async def test_mcp_lists_the_five_tools_with_the_reference_argument_names(
    corpus: Path, tmp_path: Path
) -> None:
    async with stdio_session(corpus, tmp_path / "err.log") as session:
        listed = (await session.list_tools()).tools
    assert [t.name for t in listed] == list(TOOLS)
    for tool in listed:
        assert list(tool.input_schema["properties"]) == TOOLS[tool.name]
        assert tool.input_schema["additionalProperties"] is False
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.description
        # no cursor, offset or page size is offered to a model
        assert not {"cursor", "first", "limit", "offset", "page"} & set(TOOLS[tool.name])
    required = {t.name: t.input_schema["required"] for t in listed}
    assert required["session_search"] == ["query"]
    assert required["session_event_read"] == ["session_id", "seq"]


async def test_mcp_tool_answers_match_session_query(corpus: Path, tmp_path: Path) -> None:
    async with (
        model(corpus) as q,
        stdio_session(corpus, tmp_path / "err.log") as session,
    ):
        # session_search, unfiltered and with every kind of filter
        for phrase in ("Operation not permitted", "file", "zebra crossing"):
            text, data = await call(session, "session_search", query=phrase)
            assert got_session_search(data) == await want_session_search(q, phrase)
            assert data["capped"] is False
            for sid, *_ in got_session_search(data):
                assert f"Session {sid} — " in text
        created = (await q.list_sessions())[60].header.created_at
        # two hours west of UTC: the clock reads two hours earlier for the same instant
        west = datetime.fromtimestamp(created / 1000, UTC) - timedelta(hours=2)
        arguments = {
            "created_at_from": west.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "-02:00",
            "availability": ["persisted"],
            "event_types": ["tool/result", "assistant/message"],
            "event_surfaces": ["current", "shadowed"],
            "event_seq_from": 2,
        }
        _, data = await call(session, "session_search", query="file", **arguments)
        want = await want_session_search(
            q,
            "file",
            session_filter=SessionFilter(
                created_at=TimeRange(created, None), availability=(Availability.PERSISTED,)
            ),
            event_filter=EventFilter(
                seq=SeqRange(2, None),
                types=("tool/result", "assistant/message"),
                surface=(EventSurface.CURRENT, EventSurface.SHADOWED),
            ),
        )
        assert got_session_search(data) == want and want
        _, data = await call(
            session, "session_search", query="zebra", parent_session_ids=["mcp-root"],
            include_root_sessions=True,
        )  # fmt: skip
        roots = SessionFilter(parent=("mcp-root", None))
        assert got_session_search(data) == await want_session_search(
            q, "zebra", session_filter=roots
        )
        assert {s["session"]["id"] for s in data["sessions"]} == {"mcp-child", "mcp-root"}

        # session_event_search
        sid = "apps-web--approval-composer"
        text, data = await call(session, "session_event_search", session_id=sid, query="the")
        page = await q.search_events(sid, "the", limit=100)
        assert [(e["seq"], e["snippet"], e["match_count"]) for e in data["events"]] == [
            (h.record.seq, h.snippet, h.match_count) for h in page.hits
        ]
        title = await q.session_title(sid)
        assert data["title"] == title.title and json.dumps(title.title) in text
        _, data = await call(
            session, "session_event_search", session_id=sid, query="the", seq_to=100,
            surfaces=["current"], event_types=["user/message"],
        )  # fmt: skip
        f = EventFilter(
            seq=SeqRange(None, 100),
            types=("user/message",),
            surface=(EventSurface.CURRENT,),
        )
        page = await q.search_events(sid, "the", f, limit=100)
        assert [e["seq"] for e in data["events"]] == [h.record.seq for h in page.hits]

        # session_trace
        text, data = await call(session, "session_trace", session_id="mcp-root")
        trace = await q.trace_session("mcp-root")
        assert data["complete"] is trace.complete is True and data["root_id"] == "mcp-root"
        assert [(d["session"]["id"], d["depth"], d["parent_id"]) for d in data["descendants"]] == [
            ("mcp-child", 1, "mcp-root"),
            ("mcp-grandchild", 2, "mcp-child"),
        ]
        assert [n.session.id for n in trace.descendants] == ["mcp-child"]
        assert "\n- mcp-child — " in text and "\n  - mcp-grandchild — " in text
        _, data = await call(session, "session_trace", session_id="mcp-grandchild")
        assert [a["id"] for a in data["ancestors"]] == ["mcp-child", "mcp-root"]

        # session_event_trace, on an event a replacement shadowed
        sid, seq = await a_shadowed_event(q)
        text, data = await call(session, "session_event_trace", session_id=sid, seq=seq)
        want_trace = await q.trace_event(sid, seq)
        assert data["target"]["surface"] == "shadowed"
        assert data["replaced_by"] == want_trace.replaced_by is not None
        assert data["replacement_chain"] == want_trace.replacement_chain
        assert data["replaced_event_seqs"] == want_trace.replaced_event_seqs
        assert data["source_event_seqs"] == want_trace.source_event_seqs
        assert data["derived_event_seqs"] == want_trace.derived_event_seqs
        assert f"Replaced by: {want_trace.replaced_by}\n" in text

        # session_event_read: the target whole, neighbours summarized, clipped to the log
        text, data = await call(
            session, "session_event_read", session_id=sid, seq=seq, before=3, after=2
        )
        window = await q.read_event(sid, seq, 3, 2)
        assert data["event"] == window.target.to_json()
        assert (data["start_seq"], data["end_seq"]) == (window.start_seq, window.end_seq)
        assert [n["seq"] for n in data["before"] + data["after"]] == [
            e.seq for e in window.events if e.seq != seq
        ]
        assert json.dumps(window.target.to_json(), ensure_ascii=False, indent=2) in text
        _, data = await call(session, "session_event_read", session_id="mcp-root", seq=0, after=5)
        assert (data["start_seq"], data["end_seq"], data["after"]) == (0, 0, [])


async def test_mcp_grant_sees_only_its_sessions_and_invisible_is_not_found(
    corpus: Path, tmp_path: Path
) -> None:
    grants = ["cwd:/work/a"]
    async with (
        model(corpus, grants) as q,
        stdio_session(corpus, tmp_path / "err.log", "--grant", "cwd:/work/a") as session,
    ):
        _, data = await call(session, "session_search", query="zebra crossing")
        assert got_session_search(data) == await want_session_search(q, "zebra crossing")
        assert {s["session"]["id"] for s in data["sessions"]} == {"mcp-root", "mcp-grandchild"}
        _, data = await call(session, "session_search", query="file")
        assert data["sessions"] == []  # none of the real artifacts lies under /work/a
        # the child is invisible: not found, exactly like an id that does not exist
        for name, extra in (
            ("session_trace", {}),
            ("session_event_trace", {"seq": 0}),
            ("session_event_read", {"seq": 0}),
            ("session_event_search", {"query": "zebra"}),
        ):
            hidden = await tool_error(session, name, session_id="mcp-child", **extra)
            absent = await tool_error(session, name, session_id="mcp-nothing", **extra)
            assert hidden.startswith("SESSION_QUERY_SESSION_NOT_FOUND: ")
            assert hidden.replace("mcp-child", "X") == absent.replace("mcp-nothing", "X")
        # lineage stops at the invisible parent; the root sees no descendant through it
        text, data = await call(session, "session_trace", session_id="mcp-grandchild")
        want = await q.trace_session("mcp-grandchild")
        assert (
            (data["complete"], data["unresolved_parent_id"], data["ancestors"])
            == (
                want.complete,
                want.unresolved_parent_id,
                [],
            )
            == (False, "mcp-child", [])
        )
        assert "mcp-child — not found" in text
        _, data = await call(session, "session_trace", session_id="mcp-root")
        assert data["descendants"] == []


async def test_mcp_bad_arguments_are_tool_errors_naming_the_code(
    corpus: Path, tmp_path: Path
) -> None:
    sid = "apps-web--approval-composer"
    async with stdio_session(corpus, tmp_path / "err.log") as session:
        naive = await tool_error(
            session, "session_search", query="file", created_at_from="2026-05-01T00:00:00"
        )
        assert naive.startswith("SESSION_QUERY_INVALID_FILTER: created_at_from ")
        assert "time zone" in naive
        for argument in ("session_ids", "event_types", "availability", "event_surfaces"):
            empty = await tool_error(session, "session_search", query="file", **{argument: []})
            assert empty.startswith(f"SESSION_QUERY_INVALID_FILTER: {argument} must contain")
        empty = await tool_error(session, "session_event_search", session_id=sid, query="a",
                                 surfaces=[])  # fmt: skip
        assert empty.startswith("SESSION_QUERY_INVALID_FILTER: surfaces ")
        many = await tool_error(session, "session_search", query="f", session_ids=["a"] * 101)
        assert many.startswith("SESSION_QUERY_INVALID_FILTER: session_ids lists 101 values")
        wrong = await tool_error(session, "session_search", query="f", event_surfaces=["LIVE"])
        assert wrong.startswith("SESSION_QUERY_INVALID_FILTER: event_surfaces: 'LIVE' is not")
        inverted = await tool_error(
            session, "session_event_search", session_id=sid, query="a", seq_from=5, seq_to=2
        )
        assert inverted.startswith("SESSION_QUERY_INVALID_FILTER: seq_from (5) is greater")
        later = await tool_error(
            session, "session_search", query="a", event_time_from="2026-05-02T00:00:00Z",
            event_time_to="2026-05-01T23:00:00+00:00",
        )  # fmt: skip
        assert later.startswith("SESSION_QUERY_INVALID_FILTER: event_time_from ")
        blank = await tool_error(session, "session_search", query="   ")
        assert blank.startswith("SESSION_QUERY_INVALID_QUERY: ")
        for bad_seq in (10_000_000, -1):
            for name in ("session_event_trace", "session_event_read"):
                missing = await tool_error(session, name, session_id=sid, seq=bad_seq)
                assert missing.startswith("SESSION_QUERY_EVENT_NOT_FOUND: ")
                assert str(bad_seq) in missing
        window = await tool_error(session, "session_event_read", session_id=sid, seq=3, after=51)
        assert window.startswith("SESSION_QUERY_INVALID_WINDOW: after must be an integer")
        typed = await tool_error(session, "session_event_read", session_id=sid, seq="3")
        assert typed.startswith("BAD_USER_INPUT: seq must be an integer")
        unknown = await tool_error(session, "session_trace", session_id=sid, cursor="x")
        assert unknown.startswith("BAD_USER_INPUT: session_trace has no argument 'cursor'")
        missing_arg = await tool_error(session, "session_trace")
        assert missing_arg.startswith("BAD_USER_INPUT: session_trace needs the argument")
        # the session still answers after every refusal
        await call(session, "session_trace", session_id=sid)


async def test_mcp_search_follows_pages_up_to_the_cap_and_says_it_capped(
    corpus: Path, tmp_path: Path
) -> None:
    async with model(corpus) as q:
        everything = await want_session_search(q, "file")
        assert len(everything) > 7
        db = SqlPersistence(sqlite_url(corpus))
        try:  # the tool body itself, following pages of 2 up to a cap of 5 (and of 100)
            capped = await AgentTools(
                SessionQuery(persistence=db), max_results=5, page_size=2
            ).call("session_search", {"query": "file"}, None)
            whole = await AgentTools(SessionQuery(persistence=db), page_size=3).call(
                "session_search", {"query": "file"}, None
            )
        finally:
            await db.close()
    assert capped.data.capped is True and "Result cap reached" in capped.text  # type: ignore[union-attr]
    assert (
        [s.session.id for s in capped.data.sessions]
        == [  # type: ignore[union-attr]
            row[0] for row in everything[:5]
        ]
    )
    assert whole.data.capped is False and "Result cap reached" not in whole.text  # type: ignore[union-attr]
    assert [s.session.id for s in whole.data.sessions] == [row[0] for row in everything]  # type: ignore[union-attr]
    async with stdio_session(corpus, tmp_path / "err.log", "--max-results", "3") as session:
        text, data = await call(session, "session_search", query="file")
        assert (len(data["sessions"]), data["capped"], data["cap"]) == (3, True, 3)
        assert text.endswith("Narrow the query or add filters to find the others.")
        _, data = await call(session, "session_search", query="Operation not permitted")
        assert data["capped"] is False
        sid = "apps-web--approval-composer"
        text, data = await call(session, "session_event_search", session_id=sid, query="the")
        assert (len(data["events"]), data["capped"]) == (3, True)
        assert "Result cap reached: only the best 3 events" in text


@given(st.integers(min_value=-62_135_596_800_000, max_value=253_402_300_799_999))
def test_times_written_by_the_tools_read_back_as_the_same_millisecond(ms: int) -> None:
    written = iso_time(ms)
    assert parse_time("t", written, upper=False) == ms == parse_time("t", written, upper=True)
    shifted = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    assert parse_time("t", shifted.isoformat(), upper=False) == ms  # +00:00 and 6 digits


def test_a_time_finer_than_a_millisecond_keeps_the_range_inclusive_of_what_it_names() -> None:
    assert parse_time("t", "1970-01-01T00:00:00.0015Z", upper=False) == 2
    assert parse_time("t", "1970-01-01T00:00:00.0015Z", upper=True) == 1
    assert parse_time("t", "1970-01-01T01:00:00.001000+01:00", upper=False) == 1
    for naive in ("2026-05-01T00:00:00", "2026-05-01", "yesterday", "2026-02-30T00:00:00Z"):
        with pytest.raises(SessionQueryError) as refused:
            parse_time("created_at_from", naive, upper=False)
        assert refused.value.code.value == "SESSION_QUERY_INVALID_FILTER"
        assert "created_at_from" in refused.value.message


def test_mcp_command_refuses_a_bad_grant_and_a_missing_database(tmp_path: Path) -> None:
    import subprocess

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway", "mcp", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    bad = run("--database", sqlite_url(tmp_path / "x.db"), "--grant", "cwd:")
    assert bad.returncode == 2 and "grant 'cwd:' is not one of" in bad.stderr
    missing = run("--database", sqlite_url(tmp_path / "absent.db"))
    assert missing.returncode == 2 and "no database file at" in missing.stderr
    assert not (tmp_path / "absent.db").exists() and "Traceback" not in missing.stderr
    helped = run("--help")
    assert "with no --grant, every session of the database" in helped.stdout


SOME_ARTIFACTS = sorted(CORPUS.glob("*.jsonl"))[::10]


async def _fill(db: SqlPersistence) -> None:
    summary = await import_paths(db, SOME_ARTIFACTS)
    assert {r.status for r in summary.reports} == {"imported"}
    for i, (sid, parent, cwd) in enumerate(LINEAGE):
        header = SessionHeader(sid, LINEAGE_TIME + i, cwd=cwd, parent_session=parent)
        await db.create(header, [_message(0, f"zebra crossing {sid} file")])


async def _answers(query: SessionQuery, grants: list[str] | None) -> list[Any]:
    """Every tool's structured answer to a fixed set of questions."""
    from gateway.core import Scope

    tools = AgentTools(query, page_size=2)
    scope = None if grants is None else Scope.parse(grants)
    sid = SOME_ARTIFACTS[0].stem
    questions: list[tuple[str, dict[str, Any]]] = [
        ("session_search", {"query": "file"}),
        ("session_search", {"query": "the", "event_types": ["user/message"]}),
        ("session_event_search", {"session_id": sid, "query": "the"}),
        ("session_trace", {"session_id": "mcp-grandchild"}),
        ("session_event_trace", {"session_id": sid, "seq": 5}),
        ("session_event_read", {"session_id": sid, "seq": 5, "before": 2, "after": 2}),
    ]
    out = []
    for name, arguments in questions:
        try:
            out.append((await tools.call(name, arguments, scope)).structured)
        except SessionQueryError as exc:
            out.append(exc.code.value)
    return out


async def test_agent_tools_answer_alike_on_both_engines_and_match_the_model(
    db: SqlPersistence, tmp_path: Path
) -> None:
    await _fill(db)
    reference = SqlPersistence(sqlite_url(tmp_path / "reference.db"))
    try:
        await _fill(reference)
        for grants in (None, ["cwd:/work/a"]):
            got = await _answers(SessionQuery(persistence=db), grants)
            assert got == await _answers(SessionQuery(persistence=reference), grants)
            q = SessionQuery(persistence=db)
            q = q if grants is None else q.scoped(grants)
            assert got_session_search(got[0]) == await want_session_search(q, "file")
        assert len(got[0]["sessions"]) == 2 and got[2] == "SESSION_QUERY_SESSION_NOT_FOUND"
    finally:
        await reference.close()


# -- streamable HTTP on a served app, with tokens ----------------------------------------

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def rpc(base: str, method: str, params: dict[str, Any], **headers: str) -> httpx.Response:
    """One raw JSON-RPC request to /mcp (stateless: no initialize needed first)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    hdrs = {**ACCEPT, "mcp-protocol-version": "2025-11-25", **headers}
    return httpx.post(f"{base}/mcp", json=body, headers=hdrs, timeout=30)


@asynccontextmanager
async def http_session(base: str, secret: str | None) -> AsyncIterator[ClientSession]:
    headers = bearer(secret) if secret is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(f"{base}/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def test_http_mcp_answers_within_each_tokens_scope(corpus: Path, tmp_path: Path) -> None:
    specs = (("everything", ["all"], False), ("workspace", ["cwd:/work/a"], False))
    with issued_tokens_for_a_server(tmp_path / "tokens.db", *specs) as (auth, secrets):
        db = SqlPersistence(sqlite_url(corpus))
        app = create_app(SessionQuery(persistence=db), GatewayConfig(), authenticate=auth)
        with running_server(app) as base:

            async def ask() -> None:
                async with model(corpus) as q, model(corpus, ["cwd:/work/a"]) as scoped:
                    async with http_session(base, secrets["everything"]) as session:
                        listed = (await session.list_tools()).tools
                        assert {t.name: list(t.input_schema["properties"]) for t in listed} == TOOLS
                        _, data = await call(session, "session_search", query="zebra crossing")
                        assert got_session_search(data) == await want_session_search(
                            q, "zebra crossing"
                        )
                        assert len(data["sessions"]) == 3
                        _, data = await call(session, "session_trace", session_id="mcp-child")
                        assert data["complete"] is True
                    async with http_session(base, secrets["workspace"]) as session:
                        _, data = await call(session, "session_search", query="zebra crossing")
                        assert got_session_search(data) == await want_session_search(
                            scoped, "zebra crossing"
                        )
                        assert len(data["sessions"]) == 2
                        hidden = await tool_error(session, "session_trace", session_id="mcp-child")
                        assert hidden.startswith("SESSION_QUERY_SESSION_NOT_FOUND: ")
                        _, data = await call(session, "session_trace", session_id="mcp-grandchild")
                        assert data["unresolved_parent_id"] == "mcp-child"
                    # the SDK's high-level Client negotiates the newest protocol (2026-07-28
                    # envelopes, another server path): the same token, the same scope
                    headers = bearer(secrets["workspace"])
                    async with (
                        httpx2.AsyncClient(headers=headers, timeout=30) as http,
                        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
                    ):
                        found = await client.call_tool("session_search", {"query": "zebra"})
                        assert got_session_search(found.structured_content) == (
                            await want_session_search(scoped, "zebra")
                        )
                        assert len(found.structured_content["sessions"]) == 2

            asyncio.run(ask())
        asyncio.run(db.close())


def test_http_mcp_without_a_valid_token_is_refused_like_graphql(
    corpus: Path, tmp_path: Path
) -> None:
    specs = (("everything", ["all"], False),)
    with issued_tokens_for_a_server(tmp_path / "tokens.db", *specs) as (auth, secrets):
        db = SqlPersistence(sqlite_url(corpus))
        app = create_app(SessionQuery(persistence=db), GatewayConfig(), authenticate=auth)
        with running_server(app) as base:
            graphql = httpx.post(f"{base}/graphql", json={"query": "{ __typename }"}, timeout=30)
            for headers in ({}, bearer("not-a-token")):
                refused = rpc(base, "tools/list", {}, **headers)
                assert refused.status_code == graphql.status_code == 401
                assert refused.headers["www-authenticate"].startswith("Bearer")
                assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
            listed = rpc(base, "tools/list", {}, **bearer(secrets["everything"]))
            assert listed.status_code == 200, listed.text
            assert len(listed.json()["result"]["tools"]) == 5

            async def sdk_without_token() -> None:
                with pytest.raises(Exception):  # noqa: B017  (the SDK's own refusal)
                    async with http_session(base, None):
                        pass

            asyncio.run(sdk_without_token())

            # credentials are checked afresh per call: a revoked token fails its next call
            call_params = {"name": "session_trace", "arguments": {"session_id": "mcp-root"}}
            before = rpc(base, "tools/call", call_params, **bearer(secrets["everything"]))
            assert before.status_code == 200 and not before.json()["result"]["isError"]

            async def revoke() -> None:
                tokens_db = SqlPersistence(sqlite_url(tmp_path / "tokens.db"))
                try:
                    await TokenStore(tokens_db, KEY).revoke("everything")
                finally:
                    await tokens_db.close()

            asyncio.run(revoke())
            after = rpc(base, "tools/call", call_params, **bearer(secrets["everything"]))
            assert after.status_code == 401
        asyncio.run(db.close())


def test_http_mcp_checks_host_origin_and_rate_like_the_rest_of_the_app(
    corpus: Path, tmp_path: Path
) -> None:
    specs = (("everything", ["all"], False),)
    config = GatewayConfig(
        allowed_hosts=("127.0.0.1", "localhost"),
        cors_origins=("http://tools.example",),
        rate_limit="6/minute",
    )
    with issued_tokens_for_a_server(tmp_path / "tokens.db", *specs) as (auth, secrets):
        db = SqlPersistence(sqlite_url(corpus))
        app = create_app(SessionQuery(persistence=db), config, authenticate=auth)
        token = bearer(secrets["everything"])
        with running_server(app) as base:
            rebound = rpc(base, "tools/list", {}, Host="attacker.example", **token)
            assert rebound.status_code == 421
            foreign = rpc(base, "tools/list", {}, Origin="http://attacker.example", **token)
            assert foreign.status_code == 403
            assert foreign.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"
            for origin in ("http://tools.example", base):  # an allowed origin, its own origin
                assert rpc(base, "tools/list", {}, Origin=origin, **token).status_code == 200
            codes = [rpc(base, "tools/list", {}, **token).status_code for _ in range(5)]
            assert codes[:3] == [200] * 3 and codes[-1] == 429  # 6 a minute, 2 spent above
        asyncio.run(db.close())


# -- the README's MCP (agents) examples, run as written -----------------------------------

README = (ROOT / "README.md").read_text()
MCP_SECTION = README.split("### MCP (agents)", 1)[1].split("\n## ", 1)[0]


async def test_readme_mcp_stdio_config_starts_a_scoped_server(corpus: Path, tmp_path: Path) -> None:
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", MCP_SECTION, re.S)]
    stdio, http = (b["mcpServers"]["sessions"] for b in blocks)
    assert stdio["command"] == "session-gateway"
    args = stdio["args"]
    assert args[:2] == ["mcp", "--database"] and args[3] == "--grant"
    assert http["url"].endswith("/mcp") and http["headers"]["Authorization"].startswith("Bearer ")
    command = Path(sys.executable).parent / stdio["command"]  # the installed console script
    args = [*args[:2], sqlite_url(corpus), args[3], "cwd:/work/a"]
    params = StdioServerParameters(command=str(command), args=args, cwd=str(tmp_path))
    with (tmp_path / "err.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            _, data = await call(session, "session_search", query="zebra crossing")
    assert {s["session"]["id"] for s in data["sessions"]} == {"mcp-root", "mcp-grandchild"}


def test_readme_mcp_python_example_runs_against_a_served_demo(tmp_path: Path) -> None:
    import os
    import subprocess

    from gateway import SessionStore
    from gateway.demo import load_demo

    (code,) = re.findall(r"```py\n(.*?)```", MCP_SECTION, re.S)
    db = SqlPersistence(sqlite_url(tmp_path / "demo.db"))
    store = SessionStore()
    asyncio.run(load_demo(db, store))
    asyncio.run(db.close())  # the server's loop opens its own connections
    app = create_app(SessionQuery(live=[store], persistence=db))
    try:
        with running_server(app) as base:
            result = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True, text=True, timeout=120, cwd=ROOT,
                env={**os.environ, "MCP_GATEWAY_URL": base},
            )  # fmt: skip
    finally:
        asyncio.run(db.close())
    assert result.returncode == 0, result.stderr
    assert str(list(TOOLS)) in result.stdout
    assert "Session search results (" in result.stdout and 'for "nested quotes"' in result.stdout
    assert "```json" in result.stdout and "After:" in result.stdout


# -- failures that are not the caller's -------------------------------------------------


class _BrokenBackend:
    """A backend whose database is gone: its driver's text must not reach the agent."""

    async def list(self) -> list[SessionHeader]:
        raise ConnectionError("could not connect to db.internal:5432 as admin/hunter2")

    async def load(self, session_id: str) -> Any:
        raise ConnectionError("could not connect to db.internal:5432 as admin/hunter2")


class _Buggy(AgentTools):
    async def call(self, name: str, arguments: Any, scope: Any) -> Any:
        raise RuntimeError("a bug that mentions /etc/secret")


async def test_mcp_failures_are_tool_errors_with_a_code_and_no_internals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gateway.mcp import build_server

    broken = build_server(AgentTools(SessionQuery(persistence=_BrokenBackend())), lambda c: None)
    async with Client(broken) as client:  # the SDK's in-process client
        result = await client.call_tool("session_search", {"query": "file"})
    text = result.content[0].text  # type: ignore[union-attr]
    assert result.is_error and text.startswith("SESSION_QUERY_PERSISTENCE_FAILED: ")
    assert "hunter2" not in text and "db.internal" not in text and "correlation id" in text
    buggy = build_server(_Buggy(SessionQuery()), lambda c: None)
    async with Client(buggy) as client:
        result = await client.call_tool("session_trace", {"session_id": "x"})
    text = result.content[0].text  # type: ignore[union-attr]
    assert result.is_error and text.startswith("INTERNAL_ERROR: the gateway failed to answer")
    assert "secret" not in text and "Traceback" not in text
    correlation = text.rsplit("correlation id ", 1)[1].rstrip(")")
    assert any(correlation in r.getMessage() and r.exc_info for r in caplog.records)


def test_http_mcp_failed_auth_limit_holds_before_credentials_are_read(
    corpus: Path, tmp_path: Path
) -> None:
    specs = (("everything", ["all"], False),)
    with issued_tokens_for_a_server(tmp_path / "tokens.db", *specs) as (auth, secrets):
        db = SqlPersistence(sqlite_url(corpus))
        app = create_app(
            SessionQuery(persistence=db), GatewayConfig(rate_limit="3/minute"), authenticate=auth
        )
        with running_server(app) as base:
            guesses = [rpc(base, "tools/list", {}, **bearer(f"guess-{i}")) for i in range(4)]
            assert [r.status_code for r in guesses] == [401, 401, 401, 429]
            # this address used up its failures: even the right token waits, on /mcp as on
            # /graphql (the one Access of the app)
            assert rpc(base, "tools/list", {}, **bearer(secrets["everything"])).status_code == 429
            graphql = httpx.post(
                f"{base}/graphql", json={"query": "{ __typename }"},
                headers=bearer(secrets["everything"]), timeout=30,
            )  # fmt: skip
            assert graphql.status_code == 429
        asyncio.run(db.close())
