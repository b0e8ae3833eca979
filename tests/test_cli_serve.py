"""`session-gateway serve`: loopback by default, refuses remote hosts, serves the demo."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.commands.serve import is_loopback

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com", ""])
def test_non_loopback_host_is_refused_without_allow_remote(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not is_loopback(host)
    assert main(["serve", "--host", host]) == 2
    err = capsys.readouterr().err
    assert "--allow-remote" in err and "--auth tokens" in err


def test_defaults_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for text in (
        "--database",
        "--host",
        "--port",
        "--demo",
        "--allow-remote",
        "127.0.0.1",
        "8000",
        "GraphiQL",
        "SESSION_GATEWAY_DATABASE_URL",
    ):
        assert text in out, text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, query: str) -> dict:
    req = urllib.request.Request(
        url, json.dumps({"query": query}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_serve_demo_end_to_end(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    env.pop("SESSION_GATEWAY_DATABASE_URL", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--demo",
            "--port",
            str(port),
            "--agent-interval",
            "0.1",
            "--log-level",
            "warning",
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
                with urllib.request.urlopen(f"{base}/readyz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "serve --demo did not become ready"
                time.sleep(0.1)
        q = '{ session(id: "demo-agent-live") { events(first: 0) { totalCount } } }'
        before = _post(f"{base}/graphql", q)["data"]["session"]["events"]["totalCount"]
        time.sleep(0.6)
        after = _post(f"{base}/graphql", q)["data"]["session"]["events"]["totalCount"]
        assert after > before  # the simulated agent keeps appending
        sessions = _post(f"{base}/graphql", "{ sessions { totalCount } }")
        assert sessions["data"]["sessions"]["totalCount"] == 9
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode in (0, 130), out  # uvicorn re-raises SIGINT after a clean shutdown
    assert f"{base}/graphql" in out and "GraphiQL" in out
    assert "query LineageGraph" in out and "query CurrentSurface" in out
    assert "query EventTrace" in out
    assert not (tmp_path / "session-gateway").exists()  # the demo used a temporary database
