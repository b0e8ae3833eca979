"""A clean stop (issue 22, point 8): `serve` stopped with Ctrl-C (SIGINT) or SIGTERM after
use, with a WebSocket subscription open and pooled database connections, shuts down, closes
its database, and says nothing alarming: no traceback, no ERROR line (the pool once logged
`ERROR sqlalchemy.pool ... Exception closing connection` with a CancelledError). Both
engines, both signals, a real `serve` subprocess each time."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.conftest import DATA_DIR
from tests.support.serve_process import ROOT, ServeProcess, start_serve

SIGNALS = [signal.SIGINT, signal.SIGTERM]
ARTIFACT = DATA_DIR / "dsh-jsonl" / "apps-web--approval-composer.jsonl"
CLOSED_LINE = "database connections closed"


def _query(base: str, query: str) -> dict:
    import urllib.request

    req = urllib.request.Request(
        f"{base}/graphql",
        json.dumps({"query": query}).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _use(served: ServeProcess, session_id: str, *, stays_open: bool) -> object:
    """Queries (so the pool holds connections), then a graphql-transport-ws subscription
    left open; the socket, to be closed after the server has stopped."""
    for _ in range(3):
        body = _query(
            served.base, "{ sessions(first: 5) { totalCount nodes { id title { title } } } }"
        )
        assert "errors" not in body, body
    ws = connect(
        served.base.replace("http", "ws") + "/graphql", subprotocols=["graphql-transport-ws"]
    )
    ws.send(json.dumps({"type": "connection_init", "payload": {}}))
    assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
    query = "subscription ($id: ID!) { sessionEvents(sessionId: $id) { seq type } }"
    ws.send(
        json.dumps(
            {
                "id": "1",
                "type": "subscribe",
                "payload": {"query": query, "variables": {"id": session_id}},
            }
        )
    )
    first = json.loads(ws.recv(timeout=10))
    assert first["type"] == "next" and first["payload"]["data"]["sessionEvents"]["seq"] == 0, first
    if stays_open:  # a live session: the subscription is still running at the stop
        assert json.loads(ws.recv(timeout=10))["type"] == "next"
    return ws


def _assert_clean(served: ServeProcess, signum: int, code: int) -> None:
    err = served.err
    assert code == 128 + signum, (code, err)
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if re.search(r"\bERROR\b|CancelledError", line)]
    assert errors == [], err
    assert CLOSED_LINE in err, err  # the backend was closed, after uvicorn's shutdown
    assert err.index("Application shutdown complete") < err.index(CLOSED_LINE), err


def _open_stream(base: str, session_id: str) -> tuple[threading.Thread, list[bytes]]:
    """A GraphQL-over-SSE subscription read in a thread until the server ends it."""
    import urllib.request

    body = json.dumps(
        {"query": f'subscription {{ sessionEvents(sessionId: "{session_id}") {{ seq }} }}'}
    ).encode()
    req = urllib.request.Request(
        f"{base}/graphql",
        body,
        {"Accept": "text/event-stream", "Content-Type": "application/json"},
    )
    stream = urllib.request.urlopen(req, timeout=60)
    got: list[bytes] = [stream.readline()]

    def read() -> None:
        with contextlib.suppress(OSError, http.client.HTTPException):
            while line := stream.readline():
                got.append(line)
        stream.close()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_stop_on_sqlite_closes_the_backend_without_a_traceback(tmp_path: Path, signum: int) -> None:
    """With a running WebSocket subscription and a running SSE stream of a live session,
    which never end by themselves: the stop still comes (about 3.5 s on an idle machine)."""
    served = start_serve(tmp_path, "--demo", "--agent-interval", "0.05", "--log-level", "info")
    ws = None
    try:
        assert served.readyz() == 200
        ws = _use(served, "demo-agent-live", stays_open=True)
        reader, lines = _open_stream(served.base, "demo-agent-live")
        time.sleep(0.5)
        began = time.monotonic()
        code = served.stop(signum)
        took = time.monotonic() - began
        reader.join(timeout=10)
    finally:
        served.stop()
        if ws is not None:
            ws.close()
    _assert_clean(served, signum, code)
    assert took < 20, took  # ~3.5 s idle (STREAM_GRACE); without the drop, never (60 s)
    assert any(line.startswith(b"event: next") for line in lines)  # the stream was running
    assert not reader.is_alive()  # and the stop ended it
    (database,) = re.findall(r"Database:  (\S+) \(temporary", served.out)
    assert not Path(database).parent.exists()  # the demo's temporary directory was removed


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_stop_on_postgresql_closes_the_backend_without_a_traceback(
    tmp_path: Path, postgres_url: str, signum: int
) -> None:
    for args in (("migrate",), ("import", str(ARTIFACT))):
        done = _cli(tmp_path, *args, "--database", postgres_url)
        assert done.returncode == 0, done.stderr
    session_id = json.loads(ARTIFACT.read_text(encoding="utf-8").splitlines()[0])["id"]
    served = start_serve(tmp_path, "--database", postgres_url, "--log-level", "info")
    ws = None
    try:
        assert served.readyz() == 200
        ws = _use(served, session_id, stays_open=False)
        code = served.stop(signum)
    finally:
        served.stop()
        if ws is not None:
            ws.close()
    _assert_clean(served, signum, code)
