"""The response budget (issue 20, point 1) against real served apps on a real SQLite file.

* An answer past `max_response_bytes` is RESPONSE_TOO_LARGE naming the budget, on
  POST, GET, SSE and WebSocket alike (the pipeline writes every answer).
* An answer exactly at the budget is served in full, byte for byte what the
  stdlib encoder writes; one byte less refuses it (both serializer paths).
* Unpaged lists count against the cost limit as they resolve: 30 aliases of the
  surface of a 20,000-event session are refused quickly, one is served whole.
* The server child's peak RSS stays near the budget under parallel oversized
  requests (unbudgeted they would hold the whole answers, hundreds of MB).
* Writing a large answer yields to the loop and stops at the operation timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect

from gateway import SessionQuery, SessionStore, create_app
from gateway.commands import serve as serve_command
from gateway.core import SessionEvent, SessionHeader
from gateway.persistence import SqlPersistence
from gateway.server.budget import AnswerBytes, ResponseBudget
from gateway.server.config import DEFAULT_MAX_RESPONSE_BYTES, GatewayConfig, Limits
from gateway.server.errors import GatewayError
from gateway.server.jsonwire import FAST_PATH_BYTES, _pieces, encode_answer, encode_text
from tests.support.server import running_server
from tests.test_graphql_helpers import codes

ROOT = Path(__file__).resolve().parent.parent
BIG = 20_000  # events of "big": all on the surface
FAT = 40  # events of "fat", each with a 64 KB payload
FAT_TEXT = 64 * 1024


def _fat_event(seq: int) -> SessionEvent:
    text = f"{seq:06d}" + "é" * (FAT_TEXT // 2 - 3)  # 64 KB of UTF-8, half the characters
    data = {"message": {"role": "user", "content": [{"type": "text", "text": text}]}}
    return SessionEvent("user/message", seq, 1_000 + seq, data, "append")


async def _fill(url: str) -> None:
    db = SqlPersistence(url)
    try:
        await db.create(SessionHeader("big", 1))
        events = [
            SessionEvent("user/message", seq, 1_000 + seq, {"n": seq}, "append")
            for seq in range(BIG)
        ]
        for start in range(0, BIG, 5_000):
            await db.append("big", events[start : start + 5_000])
        await db.create(SessionHeader("fat", 2), [_fat_event(seq) for seq in range(FAT)])
    finally:
        await db.close()


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("budget") / "sessions.db"
    url = f"sqlite+aiosqlite:///{path}"
    asyncio.run(_fill(url))
    return url


@pytest.fixture
def serve(db_url: str) -> Iterator[Any]:
    """`serve(limits)`: the base URL of a real uvicorn serving the database with them."""
    stack: list[Any] = []

    def start(**limits: Any) -> str:
        app = create_app(
            SessionQuery(persistence=SqlPersistence(db_url)),
            GatewayConfig(limits=Limits(**limits)),
        )
        server = running_server(app)
        stack.append(server)
        return server.__enter__()

    yield start
    for server in reversed(stack):
        server.__exit__(None, None, None)


FAT_PAGE = '{ events(sessionId: "fat", first: 10) { nodes { seq data } } }'
"""About 640 KB of payloads (10 x 64 KB)."""


def _post(base: str, query: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{base}/graphql", json={"query": query}, headers=headers, timeout=60)


def _too_large(errors: list[dict[str, Any]], budget: int) -> None:
    assert [e["extensions"]["code"] for e in errors] == ["RESPONSE_TOO_LARGE"], errors
    assert f"{budget} bytes" in errors[0]["message"]


# -- past the budget, on every transport -----------------------------------------------

BUDGET = 200_000


def _over_post(base: str) -> list[dict[str, Any]]:
    r = _post(base, FAT_PAGE)
    assert r.status_code == 422, r.text[:300]
    body = r.json()
    assert "data" not in body
    return list(body["errors"])


def _over_get(base: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{base}/graphql", params={"query": FAT_PAGE}, timeout=60)
    assert r.status_code == 422, r.text[:300]
    return list(r.json()["errors"])


def _over_sse(base: str) -> list[dict[str, Any]]:
    r = _post(base, FAT_PAGE, accept="text/event-stream")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [block for block in r.text.split("\n\n") if block.startswith("event: next")]
    assert len(events) == 1, r.text[:300]
    payload = json.loads(events[0].split("data: ", 1)[1])
    assert "data" not in payload
    assert "event: complete" in r.text
    return list(payload["errors"])


def _over_websocket(base: str) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        url = base.replace("http://", "ws://") + "/graphql"
        async with connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            message = {"type": "subscribe", "id": "1", "payload": {"query": FAT_PAGE}}
            await ws.send(json.dumps(message))
            got = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert got["type"] == "next" and got["id"] == "1", got
            assert "data" not in got["payload"]
            done = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert done == {"type": "complete", "id": "1"}
            return list(got["payload"]["errors"])

    return asyncio.run(run())


@pytest.mark.parametrize(
    "transport",
    [_over_post, _over_get, _over_sse, _over_websocket],
    ids=["POST", "GET", "SSE", "WebSocket"],
)
def test_an_answer_past_the_budget_is_response_too_large_naming_it(
    serve: Any, transport: Any
) -> None:
    base = serve(max_response_bytes=BUDGET)
    started = time.monotonic()
    _too_large(transport(base), BUDGET)
    assert time.monotonic() - started < 10


# -- at the budget ---------------------------------------------------------------------

SMALL_PAGE = '{ events(sessionId: "big", first: 200) { nodes { seq type data } } }'


@pytest.mark.parametrize(
    "query", [SMALL_PAGE, FAT_PAGE], ids=["one-call path", "piece-by-piece path"]
)
def test_an_answer_at_the_budget_is_served_in_full_and_one_byte_less_is_refused(
    serve: Any, query: str
) -> None:
    unlimited = _post(serve(), query)
    assert unlimited.status_code == 200
    body = unlimited.content
    model = json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":"))
    assert body == model.encode()  # the bytes the stdlib encoder writes
    paged = json.loads(body)["data"]["events"]["nodes"]
    assert [n["seq"] for n in paged] == list(range(len(paged)))
    if query is FAT_PAGE:
        assert len(body) > FAST_PATH_BYTES  # written piece by piece

    exact = _post(serve(max_response_bytes=len(body)), query)
    assert exact.status_code == 200 and exact.content == body
    short = _post(serve(max_response_bytes=len(body) - 1), query)
    assert short.status_code == 422
    _too_large(short.json()["errors"], len(body) - 1)


# -- unpaged lists ---------------------------------------------------------------------


def test_unpaged_lists_count_against_the_cost_limit_as_they_resolve(serve: Any) -> None:
    base = serve()  # the default cost limit: 50,000 objects
    one = _post(base, '{ session(id: "big") { surface { seq } } }')
    assert one.status_code == 200
    assert [e["seq"] for e in one.json()["data"]["session"]["surface"]] == list(range(BIG))

    aliases = " ".join(
        f'a{i}: session(id: "big") {{ surface {{ seq type data }} }}' for i in range(30)
    )
    started = time.monotonic()
    r = _post(base, "{ " + aliases + " }", accept="application/graphql-response+json")
    elapsed = time.monotonic() - started
    body = r.json()
    assert codes(body) == ["QUERY_TOO_COSTLY"], str(body)[:300]
    assert "data" not in body and r.status_code == 400
    assert "50000" in body["errors"][0]["message"]
    assert elapsed < 10


# -- memory ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss(pid: int) -> tuple[int, int]:
    """(current, peak) resident set of `pid`, in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def test_memory_stays_near_the_budget_under_parallel_oversized_answers(db_url: str) -> None:
    budget = 4 << 20
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SESSION_GATEWAY_")}
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "gateway", "serve", "--database", db_url),
            *("--port", str(port), "--max-response-bytes", str(budget), "--log-level", "warning"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        # One ordinary query of each kind first, so the baseline has the fat log's shape.
        ordinary = _post(base, '{ events(sessionId: "fat", first: 2) { nodes { data } } }')
        assert ordinary.status_code == 200
        baseline, _ = _rss(proc.pid)
        # 30 aliases x 40 events x 64 KB: 78 MB of answer per request, 8 at once.
        aliases = " ".join(
            f'a{i}: events(sessionId: "fat", first: {FAT}) {{ nodes {{ data }} }}'
            for i in range(30)
        )
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: _post(base, "{ " + aliases + " }"), range(8)))
        for r in answers:
            assert r.status_code == 422
            _too_large(r.json()["errors"], budget)
        _, peak = _rss(proc.pid)
        # Unbudgeted, each request would hold its 78 MB answer as text and as bytes.
        assert peak - baseline < 120 << 20, (baseline, peak)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


# -- time ------------------------------------------------------------------------------


def test_writing_a_large_answer_yields_to_the_loop_and_stops_at_the_timeout() -> None:
    budget = ResponseBudget(max_bytes=1 << 30)
    payload = budget.payload({"text": "p" * (FAST_PATH_BYTES + 1)})  # charged: piece by piece
    rows = [{"seq": i, "type": "user/message", "tags": ["a", "b"]} for i in range(400_000)]
    answer = {"data": {"first": payload, "rows": rows}}

    async def run() -> tuple[float, float]:
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.perf_counter()
            while True:
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        started = time.perf_counter()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(encode_answer(answer, budget), 0.3)
        stopped = time.perf_counter() - started
        tick.cancel()
        return stopped, max(gaps)

    stopped, slowest_tick = asyncio.run(run())
    assert stopped < 1.5  # writing all of it takes several seconds
    assert slowest_tick < 0.2


def test_an_answer_still_running_at_the_timeout_is_504(serve: Any) -> None:
    """30 pages of ~500 events, each its own read (another `first`): several seconds of
    reading, completing and writing, stopped at the 0.1 s timeout."""
    base = serve(operation_timeout=0.1)
    aliases = " ".join(
        f'a{i}: events(sessionId: "big", first: {500 - i}) {{ nodes {{ seq type time data }} }}'
        for i in range(30)
    )
    started = time.monotonic()
    r = _post(base, "{ " + aliases + " }")
    elapsed = time.monotonic() - started
    assert r.status_code == 504, r.text[:300]
    assert codes(r.json()) == ["OPERATION_TIMEOUT"]
    assert elapsed < 5


# -- the piece-by-piece writer against the stdlib encoder ---------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=40,
)


@given(value=JSON_VALUES, shared=st.booleans())
@settings(max_examples=150, deadline=None)
def test_pieces_write_what_the_stdlib_encoder_writes(value: Any, shared: bool) -> None:
    budget = ResponseBudget(max_bytes=1 << 30)
    pad = budget.payload({"pad": "p" * FAST_PATH_BYTES})  # past it: payloads are kept
    if shared and isinstance(value, dict | list):
        budget.payload(value)  # a charged payload: written from the budget's bytes
        assert id(value) in budget.encoded
    answer = {"data": {"pad": pad, "a": value, "b": [value, {"c": value}]}}
    written = b"".join(_pieces(answer, budget.encoded))
    model = json.dumps(answer, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert written == encode_text(model)


# -- subscriptions: a budget per event -----------------------------------------------------


def test_a_subscription_has_a_budget_per_event_and_an_event_past_it_ends_the_stream() -> None:
    budget = 150_000
    store = SessionStore()
    store.create("live", created_at=1, seed=[_fat_event(seq) for seq in range(4)])  # 4 x 64 KB
    huge = {"message": {"role": "user", "content": [{"type": "text", "text": "h" * budget}]}}
    store.get("live").append("user/message", huge, surface_op="append")
    app = create_app(
        SessionQuery(live=[store]), GatewayConfig(limits=Limits(max_response_bytes=budget))
    )
    query = 'subscription { sessionEvents(sessionId: "live") { seq data } }'

    async def run(url: str) -> list[dict[str, Any]]:
        async with connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            await ws.send(json.dumps({"type": "connection_init"}))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            await ws.send(json.dumps({"type": "subscribe", "id": "s", "payload": {"query": query}}))
            got = []
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                got.append(message)
                if message["type"] in ("error", "complete"):
                    return got

    with running_server(app) as base:
        messages = asyncio.run(run(base.replace("http://", "ws://") + "/graphql"))
    nexts = [m["payload"]["data"]["sessionEvents"] for m in messages if m["type"] == "next"]
    assert [e["seq"] for e in nexts] == [0, 1, 2, 3]  # 256 KB in all, each under the budget
    assert nexts[3]["data"] == _fat_event(3).data
    assert messages[-1]["type"] == "error"
    _too_large(messages[-1]["payload"], budget)


# -- serve's option and variable -----------------------------------------------------------


def test_serve_takes_the_budget_from_its_flag_else_its_variable_else_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    serve_command.add_arguments(parser)
    monkeypatch.delenv("SESSION_GATEWAY_MAX_RESPONSE_BYTES", raising=False)
    limits = serve_command.gateway_config(parser.parse_args([])).limits
    assert limits.max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES == 64 << 20
    monkeypatch.setenv("SESSION_GATEWAY_MAX_RESPONSE_BYTES", "1000")
    assert serve_command.gateway_config(parser.parse_args([])).limits.max_response_bytes == 1000
    args = parser.parse_args(["--max-response-bytes", "2000"])
    assert serve_command.gateway_config(args).limits.max_response_bytes == 2000
    monkeypatch.setenv("SESSION_GATEWAY_MAX_RESPONSE_BYTES", "lots")
    with pytest.raises(ValueError, match="SESSION_GATEWAY_MAX_RESPONSE_BYTES"):
        serve_command.gateway_config(parser.parse_args([]))
    with pytest.raises(ValueError, match="--max-response-bytes"):
        serve_command.gateway_config(parser.parse_args(["--max-response-bytes", "0"]))


def test_lineage_lists_count_against_the_cost_limit_as_they_resolve() -> None:
    store = SessionStore()
    depth = 300
    for i in range(depth):  # a chain: c000 <- c001 <- ... (each forked from the one before)
        store.create(f"c{i:03d}", created_at=i, parent_session=f"c{i - 1:03d}" if i else None)
    app = create_app(SessionQuery(live=[store]), GatewayConfig(limits=Limits(max_cost=5_000)))
    query = "{ sessions(first: %d) { nodes { id lineage { ancestors { id } } } } }"
    with running_server(app) as base:
        few = _post(base, query % 3).json()
        many = _post(base, query % 100, accept="application/graphql-response+json")
    for node in few["data"]["sessions"]["nodes"]:  # the model: the chain above each id
        i = int(node["id"][1:])
        assert [a["id"] for a in node["lineage"]["ancestors"]] == [
            f"c{j:03d}" for j in range(i - 1, -1, -1)
        ]
    # 100 sessions of this chain hold thousands of ancestors; the estimate counts 20 each.
    assert many.status_code == 400
    assert codes(many.json()) == ["QUERY_TOO_COSTLY"]
    assert "5000" in many.json()["errors"][0]["message"]


# -- the server's bytes in flight -------------------------------------------------------


def test_answers_built_at_once_share_the_servers_bytes_in_flight() -> None:
    """Budgets of one app charge one `AnswerBytes`: past its limit the charge that tips it
    is SERVER_BUSY, and what a budget held is given back when it is released."""
    shared = AnswerBytes(1_000)
    first = ResponseBudget(10_000, shared=shared)
    second = ResponseBudget(10_000, shared=shared)
    first.charge(600)
    with pytest.raises(GatewayError) as busy:
        second.charge(600)
    assert busy.value.code == "SERVER_BUSY" and "1000 bytes" in busy.value.message
    first.release()
    second.release()
    assert shared.held == 0
    third = ResponseBudget(10_000, shared=shared)
    third.charge(900)  # fits again once the others are done
    third.reset()  # a subscription's next event gives back the last one's bytes
    assert shared.held == 0


def test_an_answer_past_the_bytes_in_flight_is_503_server_busy_and_gives_them_back(
    serve: Any,
) -> None:
    """An answer bigger than what the server may hold at once is 503 SERVER_BUSY with
    Retry-After; every answer, served or refused, gives its bytes back (a leak would
    refuse the later answers that fit)."""
    base = serve(max_response_bytes=10 << 20, max_response_bytes_in_flight=1 << 20)
    big = " ".join(
        f'a{i}: events(sessionId: "fat", first: 10) {{ nodes {{ data }} }}' for i in range(3)
    )
    for _ in range(3):
        r = _post(base, "{ " + big + " }")  # about 2 MB: past the 1 MiB in flight
        assert r.status_code == 503, r.text[:300]
        assert r.headers["retry-after"] == "1"
        assert [e["extensions"]["code"] for e in r.json()["errors"]] == ["SERVER_BUSY"]
        for _ in range(3):
            ok = _post(base, FAT_PAGE)  # about 640 KB: fits, again and again
            assert ok.status_code == 200, ok.text[:300]
            assert len(ok.json()["data"]["events"]["nodes"]) == 10
