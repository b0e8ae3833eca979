"""An import creates a new SQLite database only when it writes something (issue 22, point
8): an import whose every file is refused leaves no database file (nor the embedded
default's directory) behind; one good file among refused ones creates it."""

from __future__ import annotations

from pathlib import Path

from tests.test_cli_commandline import gateway

GOOD = '{"type":"session","id":"s1","createdAt":1}\n'
REFUSED = "this is not JSON\n"


def test_import_whose_only_file_is_refused_creates_no_database_file(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text(REFUSED)
    db = tmp_path / "x.db"
    result = gateway(tmp_path, "import", "--database", f"sqlite:///{db}", "bad.jsonl")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "refused" in result.stdout and "bad.jsonl" in result.stdout
    assert "was not created" in result.stderr and str(db) in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("x.db")) == []


def test_import_whose_files_are_all_refused_leaves_no_default_database(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / "in" / name).write_text(REFUSED)
    result = gateway(tmp_path, "import", "in")  # the embedded default, under XDG_DATA_HOME
    assert result.returncode == 1, result.stderr
    assert result.stdout.count("refused") >= 2, result.stdout
    assert not (tmp_path / "xdg" / "session-gateway").exists()


def test_import_with_one_good_file_after_refused_ones_creates_the_database(
    tmp_path: Path,
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a-bad.jsonl").write_text(REFUSED)
    (tmp_path / "in" / "b-good.jsonl").write_text(GOOD)
    db = tmp_path / "x.db"
    result = gateway(tmp_path, "import", "--database", f"sqlite:///{db}", "in")
    assert result.returncode == 1, result.stderr  # a file was refused
    assert "1 imported" in result.stdout and "1 refused" in result.stdout, result.stdout
    assert db.exists()
