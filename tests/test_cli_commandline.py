"""The command line as an operator meets it (issue 12): every bad URL, path or option
gets one clean line and exit 2 (never a traceback); `serve` binds before its banner,
refuses a missing or foreign SQLite file without --create, never mixes --demo into a
real database, warns when the database does not answer, and shows the resolved
database; `--version`; `--help` loads none of the heavy libraries."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.metadata import version
from pathlib import Path

import pytest

from gateway.commands import serve as serve_command

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "sqlalchemy",
    "alembic",
    "strawberry",
    "graphql",
    "uvicorn",
    "starlette",
    "asyncpg",
    "opentelemetry",
    "prometheus_client",
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg"), **extra}
    if "SESSION_GATEWAY_DATABASE_URL" not in extra:
        env.pop("SESSION_GATEWAY_DATABASE_URL", None)
    return env


def gateway(
    tmp_path: Path, *args: str, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd or tmp_path,
        env={**_env(tmp_path, **env), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_clean_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ help and version


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["import", "--help"]])
def test_help_imports_no_database_or_graphql_library(tmp_path: Path, argv: list[str]) -> None:
    result = gateway(tmp_path, *argv)  # the real `python -m gateway ...`
    assert result.returncode == 0 and "usage: session-gateway" in result.stdout
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gateway", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    imported = {line.split("|")[-1].strip() for line in probe.stderr.splitlines() if "|" in line}
    assert "gateway.cli" in imported  # the probe saw the imports at all
    loaded = sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert loaded == [], f"`{' '.join(argv)}` imported {loaded[:5]}"


def test_serve_help_shows_the_one_default_max_cost(tmp_path: Path) -> None:
    """The default lives once, in `gateway.server.config` (light enough for --help):
    the cost limit and serve's help both read it, with no copy to keep equal."""
    from gateway.server import config

    assert serve_command.DEFAULT_MAX_COST is config.DEFAULT_MAX_COST
    result = gateway(tmp_path, "serve", "--help")
    assert f"default {config.DEFAULT_MAX_COST:,}" in " ".join(result.stdout.split())


def test_version_is_the_installed_distribution_s(tmp_path: Path) -> None:
    result = gateway(tmp_path, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"session-gateway {version('session-query-gateway')}"


# ---------------------------------------------------------------- bad input: one line


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--port", "eighty"],
        ["serve", "--no-such-option"],
        ["no-such-command"],
        ["import"],
        ["migrate", "--database", "notaurl"],
        ["import", "--database", "notaurl", "x.jsonl"],
        ["token", "list", "--database", "mysql://x/y"],
        ["export-schema", "-o", "/nonexistent/dir/schema.graphql"],
        ["migrate", "--database", "sqlite:////nonexistent/dir/x.db"],
    ],
)
def test_bad_option_or_url_is_one_line_and_exit_2(tmp_path: Path, argv: list[str]) -> None:
    assert_one_clean_line(gateway(tmp_path, *argv), 2)


def test_serve_bad_database_url_is_one_line_from_option_and_env(tmp_path: Path) -> None:
    line = assert_one_clean_line(gateway(tmp_path, "serve", "--database", "notaurl"), 2)
    assert "not a database URL" in line and "notaurl" in line
    env_line = assert_one_clean_line(
        gateway(tmp_path, "serve", SESSION_GATEWAY_DATABASE_URL="notaurl"), 2
    )
    assert env_line == line


def test_serve_refuses_a_missing_sqlite_file_naming_its_absolute_path(tmp_path: Path) -> None:
    line = assert_one_clean_line(
        gateway(tmp_path, "serve", "--database", "sqlite:///typo.db", "--port", "0"), 2
    )
    assert str(tmp_path / "typo.db") in line and "--create" in line
    assert not (tmp_path / "typo.db").exists()


def test_serve_refuses_a_sqlite_file_with_foreign_tables(tmp_path: Path) -> None:
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    line = assert_one_clean_line(
        gateway(tmp_path, "serve", "--database", f"sqlite:///{path}", "--port", "0"), 2
    )
    assert "invoices" in line and "--create" in line
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"invoices"}  # nothing of ours was added


def test_serve_demo_with_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "real.db"
    line = assert_one_clean_line(
        gateway(tmp_path, "serve", "--demo", "--database", f"sqlite:///{path}"), 2
    )
    assert "temporary database" in line
    assert not path.exists()


def test_import_creates_no_directory_but_the_default_s(tmp_path: Path) -> None:
    target = tmp_path / "nonexistent" / "dir" / "x.db"
    (tmp_path / "a.jsonl").write_text("")
    line = assert_one_clean_line(
        gateway(tmp_path, "import", "--database", f"sqlite:///{target}", "a.jsonl"), 2
    )
    assert str(target.parent) in line
    assert not (tmp_path / "nonexistent").exists()


def test_import_of_a_missing_path_is_a_plain_error_line(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    result = gateway(tmp_path, "import", "--database", f"sqlite:///{db}", "gone.jsonl")
    line = assert_one_clean_line(result, 2)
    assert "gone.jsonl" in line and "no such file" in line
    assert result.stdout == "" and not db.exists()


def test_import_of_a_directory_without_jsonl_files_exits_1(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    db = tmp_path / "x.db"
    result = gateway(tmp_path, "import", "--database", f"sqlite:///{db}", "empty")
    line = assert_one_clean_line(result, 1)
    assert "no *.jsonl files" in line and "empty" in line
    assert not db.exists()


def test_import_summary_names_the_absolute_database_path(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"type":"session","id":"s1","createdAt":1}\n')
    result = gateway(tmp_path, "import", "--database", "sqlite:///rel.db", "a.jsonl")
    assert result.returncode == 0, result.stderr
    assert f"into {tmp_path / 'rel.db'}" in result.stdout.splitlines()[-1]


def test_migrate_status_of_a_missing_sqlite_file_creates_nothing(tmp_path: Path) -> None:
    from gateway import cli

    target = tmp_path / "typo.db"
    assert cli.main(["migrate", "--status", "--database", f"sqlite:///{target}"]) == 2
    assert not target.exists()


async def test_the_library_creates_no_directory_but_the_embedded_default_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.persistence.engine import default_database_path
    from gateway.persistence.migrations import migrate

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    stray = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(Exception, match="unable to open database file"):
        await migrate(f"sqlite+aiosqlite:///{stray}")
    assert not (tmp_path / "no").exists()
    await migrate(f"sqlite+aiosqlite:///{default_database_path()}")
    assert default_database_path().is_file()


# --------------------------------------------------------------------- serve starts


def test_serve_on_a_busy_port_is_one_line_and_no_banner(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = gateway(tmp_path, "serve", "--port", str(port))
    line = assert_one_clean_line(result, 1)
    assert "address already in use" in line and str(port) in line
    assert "GraphiQL" not in result.stdout


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port), *args],
        cwd=tmp_path,
        env={**_env(tmp_path), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, f"http://127.0.0.1:{port}"


def _readyz(base: str, proc: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{base}/readyz", timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    return proc.communicate(timeout=20)


def test_serve_warns_when_the_database_does_not_answer_and_keeps_serving(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    url = f"postgresql://nobody@127.0.0.1:{dead}/sessions"
    proc, base = _start(tmp_path, "--database", url, "--log-level", "warning")
    try:
        assert _readyz(base, proc) == 503
    finally:
        out, err = _stop(proc)
    warnings = [line for line in err.splitlines() if "does not answer" in line]
    assert len(warnings) == 1 and f"127.0.0.1:{dead}/sessions" in warnings[0]
    assert "does not answer" in err.splitlines()[0]  # said at start, before any request
    assert f"Database:  postgresql+asyncpg://nobody@127.0.0.1:{dead}/sessions" in out


def test_serve_create_makes_the_file_and_the_banner_shows_its_absolute_path(
    tmp_path: Path,
) -> None:
    proc, base = _start(
        tmp_path, "--database", "sqlite:///new.db", "--create", "--log-level", "warning"
    )
    try:
        assert _readyz(base, proc) == 200
    finally:
        out, err = _stop(proc)
    assert f"Database:  {tmp_path / 'new.db'}" in out, (out, err)
    assert (tmp_path / "new.db").exists()
    assert "does not answer" not in err


def test_token_list_needs_no_key_and_says_when_there_are_none(tmp_path: Path) -> None:
    """Listing hashes no secret: it works before any key exists, and an empty list says so."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    url = f"sqlite+aiosqlite:///{tmp_path / 't.db'}"
    clean = {k: v for k, v in os.environ.items() if k != "SESSION_GATEWAY_TOKEN_KEY"}

    def command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway", *args, "--database", url],
            cwd=tmp_path,
            env={**clean, **env, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
        )

    migrated = command("migrate")
    assert migrated.returncode == 0, migrated.stderr
    listed = command("token", "list")
    assert listed.returncode == 0, listed.stderr
    assert "no tokens" in listed.stdout
    assert not (tmp_path / "config").exists()  # no key file was made to list


def test_every_subcommand_s_help_has_a_description() -> None:
    import argparse

    from gateway.cli import build_parser

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> list[str]:
        missing = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if not sub.description:
                        missing.append(" ".join([*path, name]))
                    missing += walk(sub, [*path, name])
        return missing

    assert walk(build_parser(), ["session-gateway"]) == []


@pytest.mark.parametrize(
    ("argv", "unknown", "command"),
    [
        (["serve", "--prot", "8000"], "--prot", "session-gateway serve"),
        (["import", "--no-such-flag", "x.jsonl"], "--no-such-flag", "session-gateway import"),
        (["token", "list", "--bogus"], "--bogus", "session-gateway token list"),
    ],
)
def test_an_unknown_option_points_at_its_own_command_s_help(
    argv: list[str], unknown: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{command}: error: unrecognized arguments: {unknown}"), err
    assert err.endswith(f"(see {command} --help)") and "\n" not in err


def test_documents_hash_of_a_missing_path_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.cli import main

    missing = tmp_path / "nope.graphql"
    assert main(["documents", "hash", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and str(missing) in err
