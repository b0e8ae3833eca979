"""`serve` refuses a database that answers with a schema it cannot use (issue 22, point 8):
an unmigrated PostgreSQL database is refused at start, with one line naming the `migrate`
command and exit 2, as the README's Upgrades section says; after `migrate` it serves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.serve_process import ROOT, free_port, start_serve


def _gateway(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_refuses_an_unmigrated_postgresql_database(tmp_path: Path, postgres_url: str) -> None:
    result = _gateway(
        tmp_path, "serve", "--database", postgres_url, "--port", str(free_port()),
        "--log-level", "warning",
    )  # fmt: skip
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("session-gateway serve: ") and "no session-gateway schema" in line
    assert "session-gateway migrate --database" in line
    assert "GraphiQL" not in result.stdout  # refused before the banner

    migrated = _gateway(tmp_path, "migrate", "--database", postgres_url)
    assert migrated.returncode == 0, migrated.stderr
    served = start_serve(tmp_path, "--database", postgres_url, "--log-level", "warning")
    try:
        assert served.readyz() == 200
    finally:
        served.stop()
