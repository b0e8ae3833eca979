"""The real corpus (tests/data/dsh-jsonl) under the core: every artifact folds, and the
live store accepts each one appended event by event with the same result."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import SessionStore
from gateway.core import fold_surface
from gateway.dsh_jsonl import read_artifact

CORPUS = sorted((Path(__file__).parent / "data" / "dsh-jsonl").glob("*.jsonl"))


def test_corpus_is_present():
    assert len(CORPUS) == 120


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_artifact_folds_whole_and_incrementally_alike(path):
    artifact = read_artifact(path)
    whole = fold_surface(artifact.events)
    store = SessionStore()
    session = store.add(artifact.header)
    for e in artifact.events:
        session.append(e.type, e.data, e.surface_op, e.source_event_seqs, e.time, e.ignorable)
    assert session.snapshot()[1] == artifact.events
    assert fold_surface(session.snapshot()[1]) == whole


def test_corpus_contains_the_two_compactions():
    replaced = {p.stem: len(fold_surface(read_artifact(p).events).replacements) for p in CORPUS}
    assert {k: v for k, v in replaced.items() if v} == {
        "examples-acp-agent--agent-instructions": 1,
        "examples-headless-agent--compaction-recovery": 1,
    }
