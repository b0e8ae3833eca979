"""Hostile files for `import` (issue 9): bounded memory, no hang, every refusal says why.

Files are read line by line with a per-line limit; FIFOs, devices and other
non-regular files are refused before they are opened; a UTF-8 BOM, a second
header and text outside the policy (`gateway.core.ids`) are named by line;
database refusals print the driver's message, not SQL. Both engines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import StatementError

from gateway.dsh_jsonl import ArtifactError, read_artifact
from gateway.persistence import SqlPersistence
from gateway.persistence.errors import describe_failure
from tests.test_import import import_, migrated, stored
from tests.test_persistence_fixtures import (
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
    run,
)

__all__ = ["db_fixture", "db_url_fixture", "engine_name_fixture", "migrated"]

HEADER = '{"type":"session","id":"%s","createdAt":1}\n'
EVENT = '{"type":"turn/start","seq":%d,"time":1,"data":%s}\n'


def artifact(path: Path, sid: str, *lines: str) -> Path:
    path.write_text(HEADER % sid + "".join(lines), encoding="utf-8")
    return path


def refusal(out: str, name: str) -> str:
    line = next(line for line in out.splitlines() if name in line)
    assert line.startswith("refused"), line
    return line


def test_a_fifo_is_refused_without_blocking(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    assert import_(migrated, str(fifo), str(artifact(tmp_path / "ok.jsonl", "ok"))) == 1
    out = capsys.readouterr().out
    assert "not a regular file (a FIFO)" in refusal(out, "pipe.jsonl")
    assert run(stored(migrated, "ok")) is not None  # the other file still went in


@pytest.mark.parametrize(
    ("device", "kind"), [("/dev/zero", "a character device"), ("/dev/null", "a character device")]
)
def test_devices_are_refused(
    migrated: str, device: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert import_(migrated, device) == 1
    assert f"not a regular file ({kind})" in refusal(capsys.readouterr().out, device)


def test_read_artifact_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"not a regular file \(a directory\)"):
        read_artifact(tmp_path)


def test_a_line_over_the_limit_is_refused_naming_it(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = artifact(tmp_path / "long.jsonl", "long", EVENT % (0, '"' + "a" * 5_000 + '"'))
    fits = artifact(tmp_path / "fits.jsonl", "fits", EVENT % (0, '"' + "a" * 4_000 + '"'))
    assert import_(migrated, "--max-line-bytes", "4100", str(long), str(fits)) == 1
    out = capsys.readouterr().out
    assert "line 2: line is longer than the limit of 4,100 bytes" in refusal(out, "long.jsonl")
    assert run(stored(migrated, "fits")) is not None and run(stored(migrated, "long")) is None


def test_an_unterminated_line_over_the_limit_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(HEADER % "x" + "a" * 300, encoding="utf-8")
    with pytest.raises(ArtifactError, match="longer than the limit of 200") as info:
        read_artifact(path, max_line_bytes=200)
    assert info.value.line == 2


def test_a_huge_line_is_streamed_not_copied(tmp_path: Path) -> None:
    """Reading a 50 MB line peaked at 165 MiB (file bytes, text, split lines, JSON); now
    one copy at a time is held besides what JSON makes of it (about 120 MiB)."""
    path = tmp_path / "big.jsonl"
    with path.open("w", encoding="utf-8") as f:
        f.write(HEADER % "big")
        f.write(EVENT % (0, '"' + "a" * 50_000_000 + '"'))
    code = (  # VmHWM, not ru_maxrss: Linux carries the parent's peak over exec into the latter
        "from pathlib import Path; from gateway.dsh_jsonl import read_artifact; "
        f"a = read_artifact({str(path)!r}); "
        "print(next(l for l in Path('/proc/self/status').read_text().splitlines() "
        "if l.startswith('VmHWM')).split()[1])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak_mib = int(done.stdout.strip()) / 1024
    assert peak_mib < 150, f"peak RSS {peak_mib:.0f} MiB"


def test_a_bom_and_a_second_header_are_named(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + (HEADER % "bom").encode())
    twice = artifact(tmp_path / "twice.jsonl", "twice", EVENT % (0, "{}"), HEADER % "twice")
    assert import_(migrated, str(bom), str(twice)) == 1
    out = capsys.readouterr().out
    assert "byte order mark" in refusal(out, "bom.jsonl")
    assert "line 3: a second session header" in refusal(out, "twice.jsonl")


@pytest.mark.parametrize(
    ("header", "event_type", "words"),
    [
        ('"a\\u0000b"', "turn/start", "line 1: header field id contains a NUL character"),
        ('"a\\ud800b"', "turn/start", "line 1: header field id contains a lone surrogate"),
        ('"ok"', "turn\\u0000start", "line 2: event type contains a NUL character"),
        ('"ok"', "turn/\\udfff", "line 2: event type contains a lone surrogate"),
    ],
)
def test_text_outside_the_policy_is_refused_by_line_on_both_engines(
    migrated: str,
    tmp_path: Path,
    header: str,
    event_type: str,
    words: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        f'{{"type":"session","id":{header},"createdAt":1}}\n'
        f'{{"type":"{event_type}","seq":0,"time":1,"data":{{}}}}\n',
        encoding="utf-8",
    )
    assert import_(migrated, str(path)) == 1
    assert words in refusal(capsys.readouterr().out, "t.jsonl")


def test_payloads_with_nul_and_lone_surrogates_import_on_both_engines(
    migrated: str, tmp_path: Path
) -> None:
    path = artifact(tmp_path / "p.jsonl", "p", EVENT % (0, '{"a":"x\\u0000y","b":"\\ud83d"}'))
    assert import_(migrated, str(path)) == 0
    found = run(stored(migrated, "p"))
    assert found is not None and found[1][0].data == {"a": "x\x00y", "b": "\ud83d"}


async def test_database_refusals_are_described_without_sql(db: SqlPersistence) -> None:
    engine = db._engine  # a real driver error, from the engine under test
    with pytest.raises(StatementError) as info:
        async with engine.connect() as conn:
            await conn.execute(
                text("SELECT no_such_column FROM sessions WHERE id = :id"), {"id": "x"}
            )
    described = describe_failure(info.value)
    assert "SELECT" not in described and "no_such_column" in described
    assert "[SQL:" in str(info.value)  # what SQLAlchemy would otherwise have printed
