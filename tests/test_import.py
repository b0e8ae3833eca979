"""`session-gateway import` and `gateway.ingest`, on SQLite and PostgreSQL: what is
imported, unchanged, replaced or refused (and why), the progress bar, the summary,
the exit status, and that bad files never stop good ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from gateway import cli
from gateway.core import SessionEvent, SessionHeader
from gateway.dsh_jsonl import dumps_artifact
from gateway.ingest import collect_files, import_paths
from gateway.persistence import SqlPersistence, migrate
from gateway.persistence.engine import display_url
from tests.core_helpers import ev
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    HEADER,
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
    log_json,
    run,
    sample_log,
)

CORPUS = Path(__file__).parent / "data" / "dsh-jsonl"


def write(path: Path, header: SessionHeader, events: list[SessionEvent]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_artifact(header, events), encoding="utf-8")
    return path


def good(path: Path, sid: str, n: int = 3) -> Path:
    return write(path, SessionHeader(sid, 100), [ev(i, "turn/start", {"i": i}) for i in range(n)])


async def stored(url: str, sid: str) -> tuple[SessionHeader, list[SessionEvent]] | None:
    db = SqlPersistence(url)
    try:
        if await db.load_header(sid) is None:
            return None
        return await db.load(sid)
    finally:
        await db.close()


@pytest.fixture
def migrated(db_url: str) -> str:
    run(migrate(db_url))
    return db_url


def import_(url: str, *args: str) -> int:
    return cli.main(["import", "--database", url, *args])


# -- outcomes ------------------------------------------------------------------------


def test_files_and_directories_are_imported_recursively_in_sorted_order(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good(tmp_path / "d" / "b.jsonl", "b")
    good(tmp_path / "d" / "sub" / "a.jsonl", "a")
    (tmp_path / "d" / "notes.txt").write_text("not an artifact")
    single = good(tmp_path / "single.log", "single")  # a file named on the command line counts
    assert import_(migrated, str(tmp_path / "d"), str(single)) == 0
    out = capsys.readouterr().out
    rows = [line.split()[:2] for line in out.splitlines()[1:-1]]
    assert rows == [["imported", "3"]] * 3
    paths = [line.split()[2] for line in out.splitlines()[1:-1]]
    assert paths == [str(tmp_path / "d/b.jsonl"), str(tmp_path / "d/sub/a.jsonl"), str(single)]
    assert "3 file(s): 3 imported, 0 unchanged, 0 replaced, 0 refused; 9 events written" in out
    assert run(stored(migrated, "a")) is not None


def test_reimporting_identical_content_is_a_no_op(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "s.jsonl", HEADER, sample_log())
    assert import_(migrated, str(path)) == 0
    capsys.readouterr()
    assert import_(migrated, str(path)) == 0
    out = capsys.readouterr().out
    assert "unchanged" in out and "0 events written" in out
    header, events = run(stored(migrated, "full"))
    assert header == HEADER and log_json(events) == log_json(sample_log())


def test_a_different_log_under_an_existing_id_is_refused_unless_replace(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = write(tmp_path / "one.jsonl", HEADER, sample_log())
    second = write(tmp_path / "two.jsonl", HEADER, sample_log()[:5])
    assert import_(migrated, str(first)) == 0
    capsys.readouterr()
    assert import_(migrated, str(second)) == 1
    out = capsys.readouterr().out
    assert "refused" in out
    assert "a different log is already stored (the stored log has 12 events" in out
    assert len(run(stored(migrated, "full"))[1]) == 12  # untouched
    assert import_(migrated, "--replace", str(second)) == 0
    assert "replaced" in capsys.readouterr().out
    assert len(run(stored(migrated, "full"))[1]) == 5


def test_a_json_type_change_is_a_different_log(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header = SessionHeader("t", 1)
    assert import_(migrated, str(write(tmp_path / "a.jsonl", header, [ev(0, data={"v": 1})]))) == 0
    changed = write(tmp_path / "b.jsonl", header, [ev(0, data={"v": 1.0})])
    assert import_(migrated, str(changed)) == 1  # 1 and 1.0 are different JSON values
    assert "event seq 0 differs" in capsys.readouterr().out


def test_bad_files_never_stop_the_good_ones(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "mixed"
    good(d / "01-good.jsonl", "good1")
    (d / "02-not-json.jsonl").write_text(
        '{"type":"session","id":"nj","createdAt":1}\n{"type":"turn/start","seq":0,"time":1}\n'
        "this is not json\n"
    )
    (d / "03-no-header.jsonl").write_text('{"type":"turn/start","seq":0,"time":1,"data":{}}\n')
    (d / "04-bad-header.jsonl").write_text('{"type":"session","id":"","createdAt":1}\n')
    (d / "05-empty.jsonl").write_text("")
    write(d / "06-fold-rule.jsonl", SessionHeader("fold", 1), [ev(0, "user/message", {}, None)])
    write(d / "07-gap.jsonl", SessionHeader("gap", 1), [ev(0), ev(2)])
    (d / "08-torn.jsonl").write_text(
        '{"type":"session","id":"torn","createdAt":1}\n'
        '{"type":"turn/start","seq":0,"time":1,"data":{}}\n'
        '{"type":"turn/start","seq":1,"ti'
    )
    good(d / "09-good.jsonl", "good2")
    code = import_(migrated, str(d))
    out = capsys.readouterr().out
    assert code == 1
    rows = [line.split(maxsplit=3) for line in out.splitlines()[1:-1] if line[0] != " "]
    reasons = {Path(path).name: f"{status} {rest}" for status, _n, path, rest in rows}
    assert "line 3: not a JSON record" in reasons["02-not-json.jsonl"]
    assert 'line 1: header is not tagged "type": "session"' in reasons["03-no-header.jsonl"]
    assert "line 1: invalid session header" in reasons["04-bad-header.jsonl"]
    assert "line 1: empty artifact" in reasons["05-empty.jsonl"]
    assert "breaks surface rule 3" in reasons["06-fold-rule.jsonl"]
    assert "breaks surface rule 1" in reasons["07-gap.jsonl"]
    assert reasons["08-torn.jsonl"].startswith("imported")
    assert "warning: " in out and "discarded a torn final record" in out
    assert reasons["01-good.jsonl"].startswith("imported")
    assert reasons["09-good.jsonl"].startswith("imported")
    assert "9 file(s): 3 imported, 0 unchanged, 0 replaced, 6 refused" in out
    for sid in ("good1", "good2"):
        assert run(stored(migrated, sid)) is not None
    for sid in ("nj", "fold", "gap"):
        assert run(stored(migrated, sid)) is None  # nothing of a refused file was written
    _, torn = run(stored(migrated, "torn"))
    assert [e.seq for e in torn] == [0]  # the torn final record was discarded


def test_progress_bar_is_shown_for_many_files(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(25):
        good(tmp_path / f"s{i:02}.jsonl", f"s{i}", n=2)
    assert import_(migrated, str(tmp_path)) == 0
    err = capsys.readouterr().err
    bars = [line for line in err.splitlines() if line.startswith("[")]
    assert bars[-1] == "[" + "#" * 30 + "] 25/25 files, 50 events"
    assert 2 <= len(bars) <= 11  # one line per tenth of the work when not on a terminal
    # SQLite is shown as its absolute path, PostgreSQL as its URL (password hidden)
    url = make_url(migrated)
    shown = url.database if url.get_backend_name() == "sqlite" else display_url(url)
    assert f"importing 25 file(s) into {shown}" in err


def test_progress_can_be_forced_on_and_off(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = good(tmp_path / "one.jsonl", "one")
    assert import_(migrated, "--progress", str(path)) == 0
    assert "1/1 files, 3 events" in capsys.readouterr().err
    for i in range(25):
        good(tmp_path / f"m{i}.jsonl", f"m{i}")
    assert import_(migrated, "--no-progress", str(tmp_path)) == 0
    assert "files," not in capsys.readouterr().err


def test_the_database_defaults_to_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'env' / 'sessions.db'}"
    (tmp_path / "env").mkdir()  # only the embedded default's directory is ever created
    monkeypatch.setenv("SESSION_GATEWAY_DATABASE_URL", url)
    assert cli.main(["import", str(good(tmp_path / "a.jsonl", "a"))]) == 0
    assert run(stored(url, "a")) is not None  # the fresh embedded file was migrated


@pytest.mark.postgres
def test_an_unmigrated_postgres_database_is_refused_with_the_command(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert import_(postgres_url, str(good(tmp_path / "a.jsonl", "a"))) == 2
    assert f"session-gateway migrate --database {postgres_url}" in capsys.readouterr().err


def test_import_help_explains_the_rules(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["import", "--help"])
    out = capsys.readouterr().out
    for phrase in ("torn final record", "--replace", "unchanged", "Exit status"):
        assert phrase in out


# -- the Python API --------------------------------------------------------------------


async def test_import_paths_returns_a_report_per_file(db: SqlPersistence, tmp_path: Path) -> None:
    shutil.copy(CORPUS / "scripts-snapshots--advanced.jsonl", tmp_path / "adv.jsonl")
    (tmp_path / "bad.jsonl").write_text("nope\n")
    seen: list[tuple[int, int]] = []
    summary = await import_paths(
        db, [tmp_path], progress=lambda done, total, _r: seen.append((done, total))
    )
    assert [(r.path.rsplit("/", 1)[1], r.status) for r in summary.reports] == [
        ("adv.jsonl", "imported"),
        ("bad.jsonl", "refused"),
    ]
    adv = summary.reports[0]
    assert adv.session_id == "scripts-snapshots--advanced" and adv.events == 84
    assert summary.reports[1].reason == "line 1 is not JSON; expected the session header"
    assert seen == [(1, 2), (2, 2)] and not summary.ok and summary.events_written == 84
    again = await import_paths(db, [tmp_path / "adv.jsonl"])
    assert [r.status for r in again.reports] == ["unchanged"] and again.ok


def test_collect_files_drops_duplicates_and_reports_missing_paths(tmp_path: Path) -> None:
    a = good(tmp_path / "a.jsonl", "a")
    files, missing = collect_files([tmp_path, a, tmp_path / "gone"])
    assert files == [a]
    assert [(m.status, m.reason) for m in missing] == [("refused", "no such file or directory")]


def test_progress_bar_redraws_in_place_on_a_terminal() -> None:
    import io

    from gateway.commands.importer import ProgressBar
    from gateway.ingest import FileReport

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    bar = ProgressBar(stream, 2)
    bar(1, 2, FileReport("a", "imported", "a", 5))
    bar(2, 2, FileReport("b", "refused", reason="x"))
    assert stream.getvalue() == (
        "\r[" + "#" * 15 + "-" * 15 + "] 1/2 files, 5 events"
        "\r[" + "#" * 30 + "] 2/2 files, 5 events, 1 refused\n"
    )
