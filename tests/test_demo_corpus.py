"""The demo corpus is worth searching and titling (issue 19): titles of every source kind,
text in the shapes SPEC §13 reads (errors such as ECONNREFUSED among them), todo lists,
several working directories, creation times spread over weeks, and it exports and
imports back unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import SessionQuery, SessionStore
from gateway.core.event_text import event_text
from gateway.core.titles import TitleSource
from gateway.demo import (
    AGENT,
    DAY,
    FORK_A_SUB_CHECK,
    PERSISTED,
    RESUMED,
    RESUMED_PERSISTED_PREFIX,
    ROOT,
    demo_sessions,
    load_demo,
)
from gateway.dsh_export import open_export
from gateway.dsh_jsonl import parse_artifact
from gateway.persistence import SqlPersistence
from tests.support.sqlite_backend import sql_backend


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[tuple[SessionQuery, SessionStore]]:
    async with sql_backend(tmp_path / "demo.db") as db:
        store = SessionStore()
        loaded = await load_demo(db, store, agent_interval=0.01)
        for _ in range(40):  # a few turns of the simulated agent: its titles and its error
            loaded.agent.step()
        yield SessionQuery(live=[store], persistence=db), store


async def test_demo_titles_have_every_source_kind_and_one_session_has_none(demo) -> None:
    query, _ = demo
    titles = {r.id: await query.session_title(r.id) for r in await query.list_sessions()}
    kinds = {t.source_kind for t in titles.values() if t is not None}
    assert kinds == set(TitleSource)
    assert titles[FORK_A_SUB_CHECK] is None
    assert titles[ROOT].source_kind is TitleSource.PROVIDER and titles[ROOT].provider
    assert titles[AGENT] is not None  # the simulated agent titles its session too


async def test_demo_resumed_title_is_only_in_its_live_copy(demo) -> None:
    query, _ = demo
    live = await query.session_title(RESUMED)
    assert live is not None and live.source_kind is TitleSource.USER
    assert live.event_seq >= RESUMED_PERSISTED_PREFIX
    stored_only = SessionQuery(persistence=query.persistence)
    assert await stored_only.session_title(RESUMED) is None


def test_demo_text_is_worth_searching() -> None:
    texts = {
        (sid, e.seq): event_text(e.type, e.data)
        for sid, s in demo_sessions().items()
        for e in s.events
    }
    joined = "\n".join(texts.values())
    for words in ("ECONNREFUSED", "ENOENT", "test_nested_quotes", "split_fields", "pytest"):
        assert words in joined, words
    by_type = {}
    for sid, s in demo_sessions().items():
        for e in s.events:
            if event_text(e.type, e.data):
                by_type.setdefault(e.type, set()).add(sid)
    assert set(by_type) >= {
        "user/message",
        "assistant/message",
        "tool/call",
        "tool/result",
        "todo/write",
        "turn/end",
    }


def test_demo_spans_weeks_and_several_working_directories() -> None:
    headers = [s.header for s in demo_sessions().values()]
    times = [h.created_at for h in headers]
    assert max(times) - min(times) >= 14 * DAY
    assert len({h.cwd for h in headers}) >= 3
    assert sum(h.parent_session is not None for h in headers) >= 5  # forks


async def test_demo_sessions_export_and_read_back_unchanged(demo) -> None:
    query, _ = demo
    for sid in (*PERSISTED, AGENT):
        obs = query.observe()
        try:
            export = await open_export(obs, sid)
            text = b"".join([c async for c in export.chunks()]).decode()
            header, length = await obs.log_extent(sid)
            events = await obs.log_slice(sid, 0, length - 1)
        finally:
            obs.close()
        parsed = parse_artifact(text)
        assert parsed.header == header and list(parsed.events) == events, sid
        if sid == ROOT:
            assert '"type":"text-chunks"' in text  # the streamed answers are packed rows


async def test_demo_backend_has_the_persisted_sessions(demo) -> None:
    query, _ = demo
    backend = query.persistence
    assert isinstance(backend, SqlPersistence)
    assert {h.id for h in await backend.list()} == set(PERSISTED)
