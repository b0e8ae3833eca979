"""`serve` end to end with every access option: a trusted-only token made with
`token create`, `--trusted-documents` from `documents hash`, CORS origins from the
environment, and `--rate-limit`, all through the real command in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
ORIGIN = "http://tools.example:5173"
DOCUMENT = "query Count { sessions(first: 1) { totalCount } }\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_serve_wires_tokens_trusted_documents_cors_and_rate_limit(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("SESSION_GATEWAY_TOKEN_KEY", None)
    env["SESSION_GATEWAY_CORS_ORIGINS"] = ORIGIN
    db = f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}"
    made = _cli(env, "token", "create", "--database", db, "--name", "kiosk", "--grant", "all",
                "--trusted-documents-only")  # fmt: skip
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    (tmp_path / "count.graphql").write_text(DOCUMENT)
    hashed = _cli(env, "documents", "hash", str(tmp_path / "count.graphql"))
    assert hashed.returncode == 0, hashed.stderr
    (tmp_path / "docs.json").write_text(hashed.stdout)
    (doc_id,) = json.loads(hashed.stdout)

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--database", db, "--port", str(port),
         "--auth", "tokens", "--trusted-documents", str(tmp_path / "docs.json"),
         "--rate-limit", "3/minute", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {secret}", "Origin": ORIGIN}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "serve did not become ready"
            time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=10) as c:
            preflight = c.options("/graphql", headers={
                "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"})  # fmt: skip
            by_id = c.post("/graphql", json={"documentId": doc_id}, headers=auth)
            adhoc = c.post("/graphql", json={"query": DOCUMENT}, headers=auth)
            third = c.get("/graphql", params={"documentId": doc_id}, headers=auth)
            limited = c.post("/graphql", json={"documentId": doc_id}, headers=auth)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert by_id.status_code == 200, by_id.text
    assert by_id.json() == {"data": {"sessions": {"totalCount": 0}}}
    assert by_id.headers["access-control-allow-origin"] == ORIGIN
    assert adhoc.status_code == 403
    assert adhoc.json()["errors"][0]["extensions"]["code"] == "TRUSTED_DOCUMENT_REQUIRED"
    assert third.status_code == 200
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert limited.headers["access-control-allow-origin"] == ORIGIN
    assert proc.returncode in (0, 130), out
