"""Export (SPEC §15): a session as a dsh JSONL artifact, a zip with its descendants, over
HTTP (same caller rules as /graphql) and from the command line.

The chunk rows are checked against a model written from the SPEC's sentence (a
maximal run of >= 3 consecutive `assistant/chunk` events whose record is exactly
`{type, seq, time, data: {turn, step, chunk}}`, same turn, step, chunk type and
index, tool-call deltas the same id and the same name or none), over Python lists.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import SessionQuery, SessionStore, create_app
from gateway.core import SessionEvent, SessionHeader
from gateway.dsh_export import PAGE_EVENTS, artifact_lines, entry_name, open_export, safe_name
from gateway.dsh_jsonl import parse_artifact
from gateway.persistence import SqlPersistence
from gateway.server.config import GatewayConfig
from tests.backends import persist
from tests.support.sqlite_backend import sql_backend, sqlite_url
from tests.support.tokens import bearer, issued_tokens
from tests.test_graphql_helpers import client

CHUNK = "assistant/chunk"
HDR = SessionHeader("s", 1_000, cwd="/w")


def text_chunk(seq: int, text: str = "x", *, turn: int = 1, step: int = 0, index: int = 0,
               kind: str = "text-delta", time: int | None = None) -> SessionEvent:  # fmt: skip
    chunk = {"type": kind, "index": index, "text": text}
    return SessionEvent(CHUNK, seq, 10 * seq if time is None else time,
                        {"turn": turn, "step": step, "chunk": chunk})  # fmt: skip


def tool_chunk(seq: int, args: str = "{", *, call: str = "c1", name: str | None = "bash",
               index: int = 0) -> SessionEvent:  # fmt: skip
    chunk: dict[str, Any] = {"type": "tool-call-delta", "index": index, "id": call}
    if name is not None:
        chunk["name"] = name
    chunk["argumentsDelta"] = args
    return SessionEvent(CHUNK, seq, 10 * seq, {"turn": 1, "step": 0, "chunk": chunk})


def plain(seq: int) -> SessionEvent:
    return SessionEvent("turn/start", seq, 10 * seq, {"turn": 1})


# -- the model -----------------------------------------------------------------------------


def qualifies(e: SessionEvent) -> bool:
    record = e.to_json()
    if e.type != CHUNK or set(record) != {"type", "seq", "time", "data"}:
        return False
    d = e.data
    if not isinstance(d, dict) or set(d) != {"turn", "step", "chunk"}:
        return False
    c = d["chunk"]
    if not isinstance(c, dict) or any(type(d[k]) is not int for k in ("turn", "step")):
        return False
    if type(c.get("index")) is not int:
        return False
    if c.get("type") in ("text-delta", "reasoning-delta"):
        return set(c) == {"type", "index", "text"} and isinstance(c["text"], str)
    if c.get("type") == "tool-call-delta":
        keys = set(c) - {"name"}
        named_ok = "name" not in c or isinstance(c["name"], str)
        return keys == {"type", "index", "id", "argumentsDelta"} and named_ok
    return False


def same_run(a: SessionEvent, b: SessionEvent) -> bool:
    ca, cb = a.data["chunk"], b.data["chunk"]
    return (
        b.seq == a.seq + 1
        and (a.data["turn"], a.data["step"]) == (b.data["turn"], b.data["step"])
        and (ca["type"], ca["index"]) == (cb["type"], cb["index"])
        and ca.get("id") == cb.get("id")
        and ("name" in ca) == ("name" in cb)
        and ca.get("name") == cb.get("name")
    )


def model_records(events: list[SessionEvent]) -> list[dict[str, Any]]:
    """The records after the header, from the SPEC's rule, by brute force."""
    runs: list[list[SessionEvent]] = []
    for e in events:
        if qualifies(e) and runs and qualifies(runs[-1][-1]) and same_run(runs[-1][-1], e):
            runs[-1].append(e)
        else:
            runs.append([e])
    out: list[dict[str, Any]] = []
    for run in runs:
        if len(run) < 3:
            out.extend(e.to_json() for e in run)
            continue
        first = run[0].data
        c = first["chunk"]
        row_type = {"text-delta": "text-chunks", "reasoning-delta": "reasoning-chunks"}.get(
            c["type"], "tool-call-chunks"
        )
        data: dict[str, Any] = {"turn": first["turn"], "step": first["step"], "index": c["index"]}
        data["dt"] = [b.time - a.time for a, b in itertools.pairwise(run)]
        if row_type == "tool-call-chunks":
            data["id"] = c["id"]
            if "name" in c:
                data["name"] = c["name"]
            data["args"] = [e.data["chunk"]["argumentsDelta"] for e in run]
        else:
            data["texts"] = [e.data["chunk"]["text"] for e in run]
        out.append({"type": row_type, "seq0": run[0].seq, "time0": run[0].time, "data": data})
    return out


def exported(events: list[SessionEvent], header: SessionHeader = HDR) -> list[dict[str, Any]]:
    text = "".join(artifact_lines(header, events))
    assert text.endswith("\n")
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0] == {"type": "session", **header.to_json()}
    assert parse_artifact(text).events == tuple(events)  # import gives back the same events
    return lines[1:]


# -- the chunk-row rules --------------------------------------------------------------------


def test_export_a_maximal_run_of_three_or_more_chunks_is_one_row() -> None:
    events = [plain(0), *(text_chunk(s, f"w{s}") for s in range(1, 6)), plain(6)]
    records = exported(events)
    assert [r["type"] for r in records] == ["turn/start", "text-chunks", "turn/start"]
    row = records[1]
    assert row["seq0"] == 1 and row["time0"] == 10
    assert row["data"]["texts"] == ["w1", "w2", "w3", "w4", "w5"]
    assert row["data"]["dt"] == [10, 10, 10, 10]
    assert records == model_records(events)


def test_export_runs_of_two_stay_plain_lines() -> None:
    events = [text_chunk(0), text_chunk(1), plain(2), text_chunk(3), text_chunk(4)]
    assert [r["type"] for r in exported(events)] == [CHUNK, CHUNK, "turn/start", CHUNK, CHUNK]


@pytest.mark.parametrize(
    "breaker",
    [
        lambda s: text_chunk(s, turn=2),
        lambda s: text_chunk(s, step=1),
        lambda s: text_chunk(s, index=1),
        lambda s: text_chunk(s, kind="reasoning-delta"),
        lambda s: tool_chunk(s),
    ],
    ids=["turn", "step", "index", "chunk-type", "tool-call"],
)
def test_export_a_run_ends_where_turn_step_type_or_index_changes(breaker: Any) -> None:
    events = [text_chunk(0), text_chunk(1), text_chunk(2), breaker(3), breaker(4), breaker(5)]
    records = exported(events)
    assert len(records) == 2 and records == model_records(events)
    assert records[0]["seq0"] == 0 and records[1]["seq0"] == 3


def test_export_tool_call_deltas_share_a_row_only_with_the_same_id_and_name_or_none() -> None:
    same = [tool_chunk(s, f"a{s}") for s in range(3)]
    unnamed = [tool_chunk(s, name=None) for s in range(3, 6)]
    other_id = [tool_chunk(6, call="c2"), tool_chunk(7, call="c2"), tool_chunk(8, call="c2")]
    mixed = [tool_chunk(9, call="c3"), tool_chunk(10, call="c3", name=None), tool_chunk(11)]
    events = same + unnamed + other_id + mixed
    records = exported(events)
    assert records == model_records(events)
    rows = [r for r in records if r["type"] == "tool-call-chunks"]
    assert [(r["seq0"], r["data"]["id"], r["data"].get("name")) for r in rows] == [
        (0, "c1", "bash"),
        (3, "c1", None),
        (6, "c2", "bash"),
    ]
    assert "name" not in rows[1]["data"]
    assert [r["type"] for r in records[3:]] == [CHUNK, CHUNK, CHUNK]  # mixed: no row


@pytest.mark.parametrize(
    "odd",
    [
        lambda e: e._replace(ignorable=True),
        lambda e: e._replace(source_event_seqs=(0,)),
        lambda e: e._replace(surface_op="append"),
        lambda e: e._replace(data={**e.data, "extra": 1}),
        lambda e: e._replace(data={**e.data, "chunk": {**e.data["chunk"], "extra": 1}}),
        lambda e: e._replace(data={**e.data, "turn": "1"}),
    ],
    ids=["ignorable", "sources", "surfaceOp", "data-key", "chunk-key", "turn-type"],
)
def test_export_only_records_exactly_type_seq_time_data_turn_step_chunk_are_packed(
    odd: Any,
) -> None:
    events = [text_chunk(s) for s in range(7)]
    events[3] = odd(events[3])  # splits 0..6 into 0..2, the odd one, 4..6
    records = exported(events)
    assert records == model_records(events)
    assert [r["type"] for r in records] == ["text-chunks", CHUNK, "text-chunks"]


def test_export_seqs_must_follow_each_other_and_dt_keeps_negative_gaps() -> None:
    events = [
        text_chunk(0, time=100), text_chunk(1, time=90), text_chunk(2, time=95),
        text_chunk(4), text_chunk(5), text_chunk(6),
    ]  # fmt: skip
    records = exported(events)
    assert records[0]["data"]["dt"] == [-10, 5]
    assert [r["seq0"] for r in records] == [0, 4]


CHUNKS = st.tuples(
    st.sampled_from([1, 1, 1, 1, 2]),
    st.sampled_from(["text-delta", "reasoning-delta"]),
    st.integers(1, 2),
    st.integers(0, 1),
    st.booleans(),
    st.sampled_from(["bash", None]),
    st.sampled_from([None, None, None, None, "plain", "ignorable"]),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(CHUNKS, max_size=30))
def test_export_chunk_rows_equal_the_spec_model(specs: list[Any]) -> None:
    events: list[SessionEvent] = []
    seq = 0
    for gap, kind, turn, index, tool, name, extra in specs:
        seq += gap
        if extra == "plain":
            events.append(plain(seq))
        elif tool:
            events.append(tool_chunk(seq, "a", name=name, index=index))
        else:
            events.append(text_chunk(seq, "t", turn=turn, index=index, kind=kind))
        if extra == "ignorable":
            events[-1] = events[-1]._replace(ignorable=True)
    assert exported(events) == model_records(events)


# -- streamed, through the core ---------------------------------------------------------------


def long_log(n: int) -> list[SessionEvent]:
    return [text_chunk(s, str(s)) if s % 7 else plain(s) for s in range(n)]


async def test_export_streams_a_long_log_a_page_at_a_time(tmp_path: Path) -> None:
    n = 2 * PAGE_EVENTS + 5
    async with sql_backend(tmp_path / "x.db") as db:
        await persist(db, HDR, long_log(n))
        obs = SessionQuery(persistence=db).observe()
        try:
            export = await open_export(obs, "s")
            chunks = [c async for c in export.chunks()]
        finally:
            obs.close()
    assert len(chunks) >= 3, "a page per chunk, not one string"
    text = b"".join(chunks).decode()
    assert parse_artifact(text).events == tuple(long_log(n))
    assert text == "".join(artifact_lines(HDR, long_log(n)))  # a run across pages is one row


async def test_export_of_a_live_session_is_its_live_log_as_of_the_request() -> None:
    store = SessionStore()
    live = store.add(HDR, [text_chunk(s) for s in range(4)])
    obs = SessionQuery(live=[store]).observe()
    try:
        export = await open_export(obs, "s")
        live.append(CHUNK, text_chunk(4).data)  # after the request looked: not in it
        text = b"".join([c async for c in export.chunks()]).decode()
    finally:
        obs.close()
    assert parse_artifact(text).events == tuple(text_chunk(s) for s in range(4))


# -- over HTTP -------------------------------------------------------------------------------

TREE = [
    SessionHeader("root", 10, cwd="/w"),
    SessionHeader("kid/b", 30, cwd="/w", parent_session="root"),
    SessionHeader("kid a", 30, cwd="/w", parent_session="root"),
    SessionHeader("kid-c", 20, cwd="/hidden", parent_session="root"),
    SessionHeader("grand.1", 40, cwd="/w", parent_session="kid a"),
    SessionHeader("other", 50, cwd="/w"),
]


def log_for(header: SessionHeader) -> list[SessionEvent]:
    msg = {"content": [{"type": "text", "text": f"hello from {header.id}"}]}
    return [SessionEvent("user/message", 0, header.created_at, msg, "append"), plain(1)]


@pytest.fixture
async def tree_db(tmp_path: Path) -> Any:
    async with sql_backend(tmp_path / "tree.db") as db:
        for header in TREE:
            await persist(db, header, log_for(header))
        yield db


async def test_export_route_answers_ndjson_with_an_attachment_name(tree_db: SqlPersistence) -> None:
    async with client(create_app(SessionQuery(persistence=tree_db))) as c:
        r = await c.get("/sessions/kid a/export")
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/x-ndjson"
    assert r.headers["content-disposition"] == 'attachment; filename="kid_a.jsonl"'
    parsed = parse_artifact(r.text)
    assert parsed.header == TREE[2] and list(parsed.events) == log_for(TREE[2])


def expected_order(headers: list[SessionHeader], root: str, visible: Any = None) -> list[str]:
    """Depth first from `root`, siblings by createdAt then id, through visible sessions:
    the brute-force walk over the header list."""
    ok = visible or (lambda h: True)
    out: list[str] = []

    def walk(parent: str) -> None:
        kids = sorted(
            (h for h in headers if h.parent_session == parent and ok(h)),
            key=lambda h: (h.created_at, h.id),
        )
        for kid in kids:
            out.append(kid.id)
            walk(kid.id)

    walk(root)
    return out


async def test_export_zip_holds_the_session_then_descendants_depth_first(
    tree_db: SqlPersistence,
) -> None:
    async with client(create_app(SessionQuery(persistence=tree_db))) as c:
        r = await c.get("/sessions/root/export", params={"descendants": "true"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    assert r.headers["content-disposition"] == 'attachment; filename="root.zip"'
    archive = zipfile.ZipFile(io.BytesIO(r.content))
    order = expected_order(TREE, "root")
    assert order == ["kid-c", "kid a", "grand.1", "kid/b"]
    names = ["session.jsonl", *(f"subagents/{safe_name(i)}/session.jsonl" for i in order)]
    assert archive.namelist() == names
    assert names[1:] == [entry_name(i) for i in order]
    assert "subagents/kid_a/session.jsonl" in names and "subagents/kid_b/session.jsonl" in names
    by_id = {h.id: h for h in TREE}
    for name, sid in zip(names, ["root", *order], strict=True):
        parsed = parse_artifact(archive.read(name).decode())
        assert parsed.header == by_id[sid] and list(parsed.events) == log_for(by_id[sid])


async def test_export_404_for_an_invisible_id_is_exactly_the_absent_one(
    tree_db: SqlPersistence, tmp_path: Path
) -> None:
    specs = [("w", ["cwd:/w"], False)]
    async with issued_tokens(tmp_path / "t.db", *specs) as (auth, secret):
        app = create_app(SessionQuery(persistence=tree_db), authenticate=auth)
        async with client(app) as c:
            hidden = await c.get("/sessions/kid-c/export", headers=bearer(secret["w"]))
            absent = await c.get("/sessions/kid-d/export", headers=bearer(secret["w"]))
            archive = await c.get(
                "/sessions/root/export?descendants=true", headers=bearer(secret["w"])
            )
    assert hidden.status_code == absent.status_code == 404
    assert hidden.headers["content-type"] == absent.headers["content-type"]
    one, two = hidden.json(), absent.json()
    assert one["errors"][0]["extensions"]["code"] == "SESSION_QUERY_SESSION_NOT_FOUND"
    assert one["errors"][0]["message"].replace("kid-c", "X") == (
        two["errors"][0]["message"].replace("kid-d", "X")
    )
    names = zipfile.ZipFile(io.BytesIO(archive.content)).namelist()
    visible = expected_order(TREE, "root", lambda h: h.cwd == "/w")
    assert names == ["session.jsonl", *(entry_name(i) for i in visible)]
    assert "subagents/kid-c/session.jsonl" not in names


async def test_export_route_needs_authentication_like_graphql(
    tree_db: SqlPersistence, tmp_path: Path
) -> None:
    async with issued_tokens(tmp_path / "t.db", ("all", ["all"], False)) as (auth, secret):
        app = create_app(SessionQuery(persistence=tree_db), authenticate=auth)
        async with client(app) as c:
            missing = await c.get("/sessions/root/export")
            wrong = await c.get("/sessions/root/export", headers=bearer("nope"))
            ok = await c.get("/sessions/root/export", headers=bearer(secret["all"]))
    for refused in (missing, wrong):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert ok.status_code == 200 and parse_artifact(ok.text).header == TREE[0]


async def test_export_route_counts_against_the_callers_rate_limit(tree_db: SqlPersistence) -> None:
    config = GatewayConfig(rate_limit="2/minute")
    async with client(create_app(SessionQuery(persistence=tree_db), config)) as c:
        graphql = await c.post("/graphql", json={"query": "{ sessions(first: 1) { totalCount } }"})
        export = await c.get("/sessions/root/export")
        refused = await c.get("/sessions/root/export")
    assert graphql.status_code == export.status_code == 200
    assert refused.status_code == 429 and "retry-after" in refused.headers
    assert refused.json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"


async def test_export_route_refuses_a_descendants_value_that_is_not_a_boolean(
    tree_db: SqlPersistence,
) -> None:
    async with client(create_app(SessionQuery(persistence=tree_db))) as c:
        r = await c.get("/sessions/root/export?descendants=maybe")
    assert r.status_code == 400 and r.json()["errors"][0]["extensions"]["code"] == "BAD_REQUEST"


async def test_export_route_of_a_live_session_over_http() -> None:
    store = SessionStore()
    live = store.add(HDR, [text_chunk(s) for s in range(5)])
    async with client(create_app(SessionQuery(live=[store]))) as c:
        first = await c.get("/sessions/s/export")
        live.append(CHUNK, text_chunk(5).data, time=50)
        second = await c.get("/sessions/s/export")
    assert len(parse_artifact(first.text).events) == 5
    assert parse_artifact(second.text).events == tuple(live.events())
    assert [json.loads(x)["type"] for x in second.text.splitlines()] == ["session", "text-chunks"]


async def test_export_an_event_no_line_can_hold_is_refused_before_any_byte() -> None:
    store = SessionStore()
    store.add(HDR, [SessionEvent("text-chunks", 0, 1, {})])
    async with client(create_app(SessionQuery(live=[store]))) as c:
        r = await c.get("/sessions/s/export")
    assert r.status_code == 422
    assert r.json()["errors"][0]["extensions"]["code"] == "EXPORT_UNSUPPORTED"


# -- the command line -------------------------------------------------------------------------


def cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "export", *args], capture_output=True, timeout=60, **kw
    )


def test_export_cli_writes_the_artifact_and_the_zip(
    tree_db: SqlPersistence, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path / "tree.db")
    out = cli("--database", url, "kid a")
    assert out.returncode == 0, out.stderr
    assert parse_artifact(out.stdout.decode()).header == TREE[2]
    target = tmp_path / "root.zip"
    made = cli("--database", url, "root", "--descendants", "-o", str(target))
    assert made.returncode == 0 and made.stdout == b""
    names = zipfile.ZipFile(target).namelist()
    assert names == ["session.jsonl", *(entry_name(i) for i in expected_order(TREE, "root"))]


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope"], "no session 'nope' in"),
        (["--database", "mysql://x/y", "root"], "unsupported database URL scheme"),
        (["--database", "sqlite+aiosqlite:///{tmp}/missing.db", "root"], "no database file"),
        (["--database", "sqlite+aiosqlite:////nonexistent/x.db", "root"], "no such directory"),
        (["root", "-o", "/nonexistent/dir/out.jsonl"], "no such directory"),
    ],
)
def test_export_cli_errors_are_one_clear_line(
    tree_db: SqlPersistence, tmp_path: Path, args: list[str], message: str
) -> None:
    if "--database" not in args:
        args = ["--database", sqlite_url(tmp_path / "tree.db"), *args]
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = cli(*args)
    err = out.stderr.decode()
    assert out.returncode == 2 and out.stdout == b""
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_export_cli_help_explains_the_format_and_the_archive() -> None:
    out = cli("--help")
    text = out.stdout.decode()
    assert out.returncode == 0
    for words in ("dsh JSONL", "--descendants", "subagents/<id>/session.jsonl", "-o FILE", "Exit"):
        assert words in text


def test_export_cli_does_not_leave_a_partial_file(tree_db: SqlPersistence, tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    out = cli("--database", sqlite_url(tmp_path / "tree.db"), "nope", "-o", str(target))
    assert out.returncode == 2 and not target.exists()
    assert list(tmp_path.glob(".out.jsonl.*")) == []


async def test_export_waits_for_nothing_on_the_loop(tree_db: SqlPersistence) -> None:
    """The route's work after its proof is pages off the loop: many exports at once finish."""
    async with client(create_app(SessionQuery(persistence=tree_db))) as c:
        answers = await asyncio.gather(*(c.get("/sessions/root/export") for _ in range(20)))
    assert {r.status_code for r in answers} == {200}
