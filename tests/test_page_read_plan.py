"""A plain page of events (every class, one session) is one index range read in seq
order: no subquery sorted again in a temporary B-tree (`derived._events_statement`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gateway.core import SessionEvent, SessionHeader
from gateway.core.backend import EventQuery
from gateway.persistence import derived
from gateway.persistence.readers import sqlite_sql
from tests.support.sqlite_backend import sql_backend


def _plan(path: Path, queries: list[EventQuery]) -> tuple[list[str], list[tuple[object, ...]]]:
    shapes = tuple(derived._shape(q) for q in queries)
    statement = derived._events_statement(shapes)
    params: dict[str, object] = {}
    for k, q in enumerate(queries):
        params.update(derived._event_params(q, k))
    sql, args = sqlite_sql(statement, params)
    with sqlite3.connect(path) as conn:
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args)]
        rows = conn.execute(sql, args).fetchall()
    return plan, rows


async def test_plain_page_read_is_one_ordered_range_without_a_sort(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    log = [SessionEvent("user/message", i, 1000 + i, {"i": i}, "append") for i in range(30)]
    async with sql_backend(path) as db:
        await db.create(SessionHeader(id="s", created_at=1), log)
        await db.create(SessionHeader(id="t", created_at=2), log[:5])
        page = EventQuery("s", 3, 29, 30, limit=11)
        got = (await db.read_events([page]))[page]
        two = [page, EventQuery("t", 0, 4, 5, limit=3)]
        both = await db.read_events(two)
    assert [r.event.seq for r in got] == list(range(3, 14))
    assert got[0].event == log[3]
    assert [r.event.seq for r in both[two[1]]] == [0, 1, 2]
    plan, rows = _plan(path, [page])
    assert not any("TEMP B-TREE" in step for step in plan), plan
    assert [row[1] for row in rows] == list(range(3, 14))
    # several pages at once keep the compound form, ordered by key and seq
    _, rows = _plan(path, two)
    assert [(row[0], row[1]) for row in rows] == [(0, s) for s in range(3, 14)] + [
        (1, 0),
        (1, 1),
        (1, 2),
    ]
