"""SPEC §3a (live sessions keep their fold) and §2: every per-session view answers
exactly as the fold of the log it saw, including a live view made before more appends.

The reference is always `fold_surface` of the prefix the view saw, so these tests
fail if a view answers from the state after later appends or from a wrong index.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import SessionQueryError, SessionStore
from gateway.core import EventSurface, SessionHeader, fold_surface
from gateway.core.fold import iter_citations
from gateway.core.observation import Observation
from gateway.core.stored_view import StoredView
from gateway.core.views import FoldedView, SessionView
from gateway.persistence import SqlPersistence
from tests.test_fold_properties import logs
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)
from tests.test_pushdown import clear

ALL = (EventSurface.CURRENT, EventSurface.SHADOWED, EventSurface.LOG_ONLY)


def valid_prefix(events):
    """The longest prefix of `events` that folds (the generator may add a bad tail)."""
    try:
        fold_surface(events)
        return list(events)
    except SessionQueryError:
        return list(events[:-1])


async def expect_view_equals_fold(view: SessionView, prefix, page_size: int) -> None:
    fold = fold_surface(prefix)
    n = len(prefix)
    assert view.length == n
    classes = fold.classes()
    # every event's class, and the whole list
    assert [c for _, c in await view.classes()] == classes
    # unfiltered and filtered pages, walked to the end
    filters = [None, *({w} for w in ALL), {EventSurface.CURRENT, EventSurface.SHADOWED}]
    for wanted in filters:
        expected = [s for s in range(n) if wanted is None or classes[s] in wanted]
        got, after, first_page = [], None, True
        while True:
            page = await view.page(after, page_size, None if wanted is None else frozenset(wanted))
            assert page.total == len(expected)
            assert page.has_previous == (not first_page and bool(got))
            got.extend(item.event.seq for item in page.items)
            for item in page.items:
                assert item.surface == classes[item.event.seq]
            first_page = False
            if not page.has_next:
                break
            assert page.items, "has_next on an empty page"
            after = page.items[-1].event.seq
        assert got == expected
    # the surface in model order, and every event's relations
    assert [item.event.seq for item in await view.surface()] == list(fold.nodes)
    for seq in range(n):
        relations = await view.relations(seq)
        own = fold.replacement(seq)
        assert relations.replacement_chain == fold.replacement_chain(seq)
        assert relations.replaced == (list(own.shadowed) if own else [])
        assert relations.derived == iter_citations(prefix, seq)
    assert [e.seq for e in await view.window(n - 3, n + 3)] == list(range(max(n - 3, 0), n))
    picked = list(range(0, n, 3))
    assert [(i.event.seq, i.surface) for i in await view.events_at(picked)] == [
        (s, classes[s]) for s in picked
    ]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(max_size=50), st.integers(1, 7), st.data())
def test_live_view_answers_as_the_fold_of_the_prefix_it_saw(events, page_size, data):
    events = valid_prefix(events)
    cut = data.draw(st.integers(0, len(events)))
    store = SessionStore()
    session = store.create("s", created_at=1, seed=events[:cut])
    view = session.view()
    for event in events[cut:]:  # appends after the view was made: it must not see them
        session.append(
            event.type,
            event.data,
            surface_op=event.surface_op,
            source_event_seqs=event.source_event_seqs,
            time=event.time,
        )
    asyncio.run(expect_view_equals_fold(view, events[:cut], page_size))
    asyncio.run(expect_view_equals_fold(session.view(), events, page_size))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(max_size=50), st.integers(1, 7))
def test_folded_view_answers_as_the_fold(events, page_size):
    events = valid_prefix(events)
    store = SessionStore()
    header = store.create("s", created_at=1).header
    view = FoldedView(header, events, fold_surface(events), live=False)
    asyncio.run(expect_view_equals_fold(view, events, page_size))


def test_live_view_does_not_copy_the_log():
    store = SessionStore()
    session = store.create("s", created_at=1)
    for _ in range(3):
        session.append("user/message", {}, surface_op="append")
    view = session.view()
    _, events, _, _ = session.locked_state()
    assert view._events is events  # the view shares the append-only list, never a copy


STORED = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@STORED
@given(events=logs(max_size=40), page_size=st.integers(1, 7), data=st.data())
async def test_stored_view_answers_as_the_fold_of_the_prefix_it_saw(
    db: SqlPersistence, events, page_size, data
) -> None:
    events = valid_prefix(events)
    cut = data.draw(st.integers(0, len(events)))
    await clear(db)
    await db.create(SessionHeader("s", 1), events[:cut])
    obs = Observation([], db)
    view = await obs.view("s")
    assert isinstance(view, StoredView)  # answered from the stored derivations
    if events[cut:]:
        await db.append("s", events[cut:])  # later appends: the view must not see them
    await expect_view_equals_fold(view, events[:cut], page_size)
    await expect_view_equals_fold(await Observation([], db).view("s"), events, page_size)
