"""The real corpus through SqlPersistence, on SQLite and PostgreSQL: all 120 dsh JSONL
artifacts import; for each, `list_events` equals folding the file directly and
`read_event` gives back every stored payload equal as a JSON value (types included)."""

from __future__ import annotations

from pathlib import Path

from gateway import SessionQuery
from gateway.core import fold_surface
from gateway.dsh_jsonl import read_artifact
from gateway.ingest import import_paths
from gateway.persistence import SqlPersistence
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    canonical,
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)

CORPUS = Path(__file__).parent / "data" / "dsh-jsonl"
WINDOW = 50


async def test_the_whole_corpus_round_trips(db: SqlPersistence) -> None:
    files = sorted(CORPUS.glob("*.jsonl"))
    assert len(files) == 120
    summary = await import_paths(db, [CORPUS])
    assert [r.status for r in summary.reports] == ["imported"] * 120, summary.refused
    query = SessionQuery(persistence=db)
    listed = {r.header.id: r.header for r in await query.list_sessions()}
    problems: list[str] = []
    for path in files:
        artifact = read_artifact(path)
        sid, events = artifact.header.id, artifact.events
        if listed[sid].to_json() != artifact.header.to_json():
            problems.append(f"{path.name}: header {listed[sid].to_json()}")
        classes = fold_surface(events).classes()
        expected = [(e.seq, e.type, e.time, c) for e, c in zip(events, classes, strict=True)]
        got = [(r.seq, r.type, r.time, r.surface) for r in await query.list_events(sid)]
        if got != expected:
            problems.append(f"{path.name}: list_events differs from the file's fold")
        seen = set()
        for center in range(WINDOW, len(events) + WINDOW, 2 * WINDOW + 1):
            window = await query.read_event(sid, min(center, len(events) - 1), WINDOW, WINDOW)
            for event in window.events:
                seen.add(event.seq)
                if canonical(event.to_json()) != canonical(events[event.seq].to_json()):
                    problems.append(f"{path.name}: read_event seq {event.seq} differs")
        if seen != set(range(len(events))):
            problems.append(f"{path.name}: windows missed {set(range(len(events))) - seen}")
    assert not problems, "\n".join(problems[:20])
    assert (await import_paths(db, [CORPUS])).count("unchanged") == 120
