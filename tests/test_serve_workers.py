"""`serve --workers N`: N worker processes on one port, persisted sessions only.

A real `session-gateway serve --workers 2` child on a real SQLite file (two real
artifacts imported by `session-gateway import`): both workers answer, from two
distinct PIDs (each worker's /metrics names its own), the stop signals stop them
all with no orphan and no traceback, and a live store (--demo) with workers is
refused.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "tests" / "data" / "dsh-jsonl"
SESSIONS = ("apps-web--approval-composer", "apps-web--code-mode-round")
WORKER_LINE = re.compile(r'^gateway_worker\{pid="(\d+)",worker="(\d+)"\} 1\.0$', re.M)
OPERATIONS = re.compile(r"^graphql_operations_total\{[^}]*\} (\d+)\.0$", re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    env.pop("SESSION_GATEWAY_DATABASE_URL", None)
    env.pop("SESSION_GATEWAY_AUTH", None)
    return env


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("workers")
    url = f"sqlite+aiosqlite:///{tmp / 'sessions.db'}"
    files = [str(ARTIFACTS / f"{sid}.jsonl") for sid in SESSIONS]
    subprocess.run(
        [sys.executable, "-m", "gateway", "import", "--database", url, *files],
        check=True,
        capture_output=True,
        env=_env(tmp),
        timeout=120,
    )
    return url


def _get(url: str) -> str:
    req = urllib.request.Request(url, headers={"Connection": "close"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return str(r.read().decode())


def _post(url: str, query: str) -> dict:
    req = urllib.request.Request(
        url,
        json.dumps({"query": query}).encode(),
        {"Content-Type": "application/json", "Connection": "close"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


def _cwd_of(sid: str) -> str:
    first = (ARTIFACTS / f"{sid}.jsonl").read_text(encoding="utf-8").splitlines()[0]
    return str(json.loads(first)["cwd"])


def _start(database: str, port: int, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "gateway", "serve", "--database", database,
            "--port", str(port), "--workers", "2", "--log-level", "WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(tmp_path),
        start_new_session=True,  # its own process group: killpg is a terminal's Ctrl-C
    )  # fmt: skip


def _wait_ready(base: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            _get(f"{base}/healthz")
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("serve --workers 2 did not answer /healthz within 60 s")


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("stop", ["SIGTERM", "Ctrl-C"])
def test_workers_answer_from_two_pids_and_stop_cleanly(
    database: str, tmp_path: Path, stop: str
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start(database, port, tmp_path)
    try:
        _wait_ready(base, proc)
        workers = _children(proc.pid)
        assert len(workers) == 2, workers

        # Which worker accepts a connection is the kernel's choice, so keep asking
        # (GraphQL, then /metrics) until each worker has both shown its own /metrics
        # and counted a GraphQL operation of its own, or the deadline passes.
        seen: dict[int, int] = {}  # pid -> worker index, from each worker's own /metrics
        answered: set[int] = set()  # pids whose own operations counter moved
        deadline = time.monotonic() + 30
        i = 0
        while time.monotonic() < deadline:
            sid = SESSIONS[i % 2]
            i += 1
            answer = _post(
                f"{base}/graphql", f'{{ session(id: "{sid}") {{ id header {{ cwd }} }} }}'
            )
            assert answer == {"data": {"session": {"id": sid, "header": {"cwd": _cwd_of(sid)}}}}
            text = _get(f"{base}/metrics")
            for pid, index in WORKER_LINE.findall(text):
                seen[int(pid)] = int(index)
            (pid, _index), *_ = WORKER_LINE.findall(text)
            if sum(int(n) for n in OPERATIONS.findall(text)) > 0:
                answered.add(int(pid))
            if set(seen) == workers and answered == workers and i >= 20:
                break
        assert set(seen) == workers, (seen, workers)
        assert sorted(seen.values()) == [0, 1]
        assert answered == workers, (answered, workers)
    finally:
        if proc.poll() is None:
            if stop == "SIGTERM":
                proc.send_signal(signal.SIGTERM)
            else:
                os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    # 128 + the signal, as a single serve exits after a clean stop (130 Ctrl-C, 143 SIGTERM)
    assert proc.returncode == 128 + (signal.SIGTERM if stop == "SIGTERM" else signal.SIGINT), out
    assert "Traceback" not in out and "Error" not in out, out
    assert "Workers:   2 processes" in out
    assert not any(_alive(pid) for pid in workers), "a worker outlived serve"


def test_workers_refuse_a_busy_port(database: str, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable, "-m", "gateway", "serve", "--database", database,
                "--port", str(port), "--workers", "2",
            ],
            capture_output=True, text=True, env=_env(tmp_path), timeout=60,
        )  # fmt: skip
    assert result.returncode == 1
    assert "cannot listen" in result.stderr and "GraphiQL" not in result.stdout


def test_demo_with_workers_is_refused_live_stores_are_single_process(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--demo", "--workers", "2"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert result.returncode == 2
    assert "live stores are single-process" in result.stderr
    assert "GraphiQL" not in result.stdout


def test_workers_below_one_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--workers", "0"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert result.returncode == 2 and "--workers must be >= 1" in result.stderr


def test_workers_check_the_token_key_once_before_forking(database: str, tmp_path: Path) -> None:
    env = {**_env(tmp_path), "SESSION_GATEWAY_AUTH": "tokens"}
    env.pop("SESSION_GATEWAY_TOKEN_KEY", None)
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--database", database, "--workers", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.count("--auth tokens") == 1, result.stderr
    assert "GraphiQL" not in result.stdout
