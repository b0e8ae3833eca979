"""A real `session-gateway serve` subprocess for tests: its stdout and stderr go to files
(read while it runs, without a pipe that could fill), ready once /readyz answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServeProcess:
    proc: subprocess.Popen[bytes]
    base: str
    out_path: Path
    err_path: Path

    @property
    def out(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def readyz(self, timeout: float = 30) -> int:
        """/readyz's status once the server answers at all (200 or 503)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.base}/readyz", timeout=5) as r:
                    return int(r.status)
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:
                assert self.proc.poll() is None, (self.out, self.err)
                assert time.monotonic() < deadline, "serve did not start"
                time.sleep(0.1)

    def stop(self, signum: int = signal.SIGINT, timeout: float = 30) -> int:
        """Send `signum` and wait for the exit; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"serve did not stop on signal {signum}: {self.err}") from None


def start_serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> ServeProcess:
    """Start `session-gateway serve --port FREE ARGS...` with its data and config homes
    under `tmp_path` (so nothing of the user's is read or written)."""
    port = free_port()
    environ = {
        **os.environ,
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    for name in ("SESSION_GATEWAY_DATABASE_URL", "SESSION_GATEWAY_TOKEN_KEY"):
        if name not in (env or {}):
            environ.pop(name, None)
    n = len(list(tmp_path.glob("serve-*.out")))
    out_path, err_path = tmp_path / f"serve-{n}.out", tmp_path / f"serve-{n}.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--port", str(port), *args],
            cwd=tmp_path,
            env=environ,
            stdout=out,
            stderr=err,
        )
    return ServeProcess(proc, f"http://127.0.0.1:{port}", out_path, err_path)
