"""SPEC §10, the scoped corpus: a scoped query answers exactly as the unscoped core
run on the corpus restricted to the visible sessions.

The reference filters the corpus with its own reading of the grants (written here
from the SPEC's words, not with `gateway.core.scope`) and runs the unscoped core
over it through `list()`/`load()` only. The scoped side runs on the real backend
with every pushdown (pages, counts, children, lineage), on SQLite and PostgreSQL,
and on the list-only path.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import SessionQuery, SessionQueryError, SessionStore
from gateway.core import ErrorCode, InvalidGrant, Scope, SessionHeader
from gateway.core.observation import Observation
from gateway.persistence import SqlPersistence
from tests.backends import persist
from tests.core_helpers import ev
from tests.test_persistence_fixtures import (  # noqa: F401  (fixtures)
    db_fixture,
    db_url_fixture,
    engine_name_fixture,
)
from tests.test_pushdown import ListOnly, build, clear, every_page

SLOW = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CWDS = [None, "/a", "/a/b", "/ab", "/b", "/a/b/c"]
PREFIXES = ["s", "x_", "p%", "q[", "S"]


# -- the reference reading of the grants -----------------------------------------------


def glob_match(pattern: str, value: str) -> bool:
    """`*` and `?` wild, everything else literal: fnmatch with its `[` classes escaped."""
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def reference_visible(grants: list[str], corpus: dict[str, SessionHeader]) -> set[str]:
    """The ids a token with these grants sees, read straight from SPEC §10."""
    seen = set()
    for sid, header in corpus.items():
        for grant in grants:
            kind, _, arg = grant.partition(":")
            if grant == "all":
                ok = True
            elif kind == "cwd":
                cwd = header.cwd
                ok = cwd is not None and (cwd == arg or cwd.startswith(arg + "/"))
            elif kind == "id":
                ok = glob_match(arg, sid)
            else:  # tree: walk up through the whole corpus
                ok, node, walked = False, header, set()
                while True:
                    if node.id == arg or node.parent_session == arg:
                        ok = True
                        break
                    walked.add(node.id)
                    parent = node.parent_session
                    if parent is None or parent in walked or parent not in corpus:
                        break
                    node = corpus[parent]
            if ok:
                seen.add(sid)
                break
    return seen


class Filtered:
    """The reference corpus: a backend's `list()`/`load()` restricted to some ids."""

    def __init__(self, inner: SqlPersistence, ids: set[str]) -> None:
        self._inner = inner
        self._ids = ids

    async def list(self) -> list[SessionHeader]:
        return [h for h in await self._inner.list() if h.id in self._ids]

    async def load(self, session_id: str) -> Any:
        if session_id not in self._ids:
            raise KeyError(session_id)
        return await self._inner.load(session_id)


# -- random corpora and grants -----------------------------------------------------------


@st.composite
def scoped_corpora(draw: Any) -> tuple[list[SessionHeader], list[SessionHeader], list[str]]:
    """(persisted, live, grants): forks across cwds, parents outside the corpus, live-only
    links in chains, ids with GLOB/LIKE metacharacters, and grants of every kind."""
    n = draw(st.integers(0, 12))
    ids = [f"{draw(st.sampled_from(PREFIXES))}{i:02d}" for i in range(n)]
    headers = []
    for i, sid in enumerate(ids):
        parent = draw(st.one_of(st.none(), st.sampled_from(ids[:i] or ["gone"]), st.just("gone")))
        headers.append(
            SessionHeader(
                sid, draw(st.integers(1, 4)), cwd=draw(st.sampled_from(CWDS)), parent_session=parent
            )
        )
    where = [draw(st.sampled_from(["db", "live", "both"])) for _ in headers]
    persisted = [h for h, w in zip(headers, where, strict=True) if w != "live"]
    live = [h for h, w in zip(headers, where, strict=True) if w != "db"]
    choices = [
        "cwd:/a",
        "cwd:/a/b",
        "cwd:/b",
        "id:s0*",
        "id:x_?1",
        "id:p%*",
        "id:q[0?",
        "id:*1",
        "tree:gone",
        *(f"tree:{i}" for i in ids),
    ]
    grants = draw(st.lists(st.sampled_from(choices), min_size=1, max_size=3, unique=True))
    return persisted, live, grants


def not_found_shape(exc: SessionQueryError, session_id: str) -> tuple[Any, str]:
    return exc.code, str(exc).replace(repr(session_id), "<id>")


async def failure(call: Any) -> tuple[Any, str] | None:
    try:
        await call
    except SessionQueryError as exc:
        return exc.code, str(exc)
    return None


async def assert_same_answers(scoped: Any, reference: SessionQuery, ids: list[str]) -> None:
    """Every operation of `scoped` equals `reference`'s, for visible and invisible ids."""
    assert await scoped.list_sessions() == await reference.list_sessions()
    visible = {r.id for r in await reference.list_sessions()}
    for sid in [*ids, "gone"]:
        if sid in visible:
            assert await scoped.list_events(sid) == await reference.list_events(sid)
        for op in ("trace_session", "list_events"):
            got = await failure(getattr(scoped, op)(sid))
            want = await failure(getattr(reference, op)(sid))
            if sid in visible:
                assert got == want
                if got is None:
                    assert await getattr(scoped, op)(sid) == await getattr(reference, op)(sid)
            else:  # invisible: the same failure as an id nobody has
                assert got is not None and got[0] is ErrorCode.SESSION_NOT_FOUND
                absent = await failure(getattr(scoped, op)("nobody-has-this"))
                assert absent is not None
                assert got[1].replace(repr(sid), "<id>") == absent[1].replace(
                    repr("nobody-has-this"), "<id>"
                )


async def assert_same_pages_and_children(
    obs: Observation, ref: Observation, ids: list[str], page_size: int
) -> None:
    expected = await ref.records()
    got, totals = await every_page(obs, page_size)
    assert got == expected and totals == {len(expected)}
    for sid in ids:
        if await ref.record(sid) is not None:
            assert await obs.children(sid) == await ref.children(sid)
        assert await obs.record(sid) == await ref.record(sid)


@SLOW
@given(corpus=scoped_corpora(), page_size=st.sampled_from([1, 2, 5]))
async def test_scoped_corpus_every_operation_equals_the_core_on_the_filtered_corpus(
    db: SqlPersistence, corpus: Any, page_size: int
) -> None:
    persisted, live, grants = corpus
    store = await build(db, persisted, live)
    everything = {h.id: h for h in [*persisted, *live]}
    visible = reference_visible(grants, everything)
    filtered_store = SessionStore()
    for header in live:
        if header.id in visible:
            filtered_store.add(header)
    reference = SessionQuery(live=[filtered_store], persistence=Filtered(db, visible))
    ids = sorted(everything)
    for backend in (db, ListOnly(db)):  # pushed down to SQL, and from the listing
        scoped = SessionQuery(live=[store], persistence=backend).scoped(grants)
        await assert_same_answers(scoped, reference, ids)
        await assert_same_pages_and_children(scoped.observe(), reference.observe(), ids, page_size)


async def test_scoped_corpus_tree_grant_reaches_stored_sessions_below_a_live_only_one(
    db: SqlPersistence,
) -> None:
    # root (stored) <- L (live only) <- c (stored) <- d (stored); other (stored) elsewhere
    await db.create(SessionHeader("root", 1, cwd="/x"))
    await db.create(SessionHeader("c", 3, cwd="/y", parent_session="L"))
    await db.create(SessionHeader("d", 4, cwd="/y", parent_session="c"))
    await db.create(SessionHeader("other", 5, cwd="/y"))
    store = SessionStore()
    store.create("L", created_at=2, cwd="/z", parent_session="root")
    scoped = SessionQuery(live=[store], persistence=db).scoped(["tree:root"])
    page = await scoped.observe().sessions_page(None, 10)
    assert [r.id for r in page.records] == ["d", "c", "L", "root"] and page.total == 4
    trace = await scoped.trace_session("d")
    assert [r.id for r in trace.ancestors] == ["c", "L", "root"] and trace.complete


async def test_scoped_corpus_ancestor_chain_stops_at_the_first_invisible_parent(
    db: SqlPersistence,
) -> None:
    # a (/p) <- b (/q) <- c (/p): c sees its chain cut at b, though a is visible
    await persist(db, SessionHeader("a", 1, cwd="/p"))
    await persist(db, SessionHeader("b", 2, cwd="/q", parent_session="a"))
    await persist(db, SessionHeader("c", 3, cwd="/p", parent_session="b"), [ev(0), ev(1)])
    scoped = SessionQuery(persistence=db).scoped(["cwd:/p"])
    trace = await scoped.trace_session("c")
    assert trace.ancestors == [] and not trace.complete and trace.unresolved_parent_id == "b"
    top = await scoped.trace_session("a")
    assert top.descendants == []  # c is visible but reached only through b
    assert [e.seq for e in await scoped.list_events("c")] == [0, 1]
    with pytest.raises(SessionQueryError) as info:
        await scoped.list_events("b")
    assert info.value.code is ErrorCode.SESSION_NOT_FOUND


def test_scoped_corpus_grants_are_parsed_with_clear_errors() -> None:
    assert Scope.parse(["all", "cwd:/x"]).sees_all
    scope = Scope.parse(["cwd:/srv/app", "id:run-*", "tree:s1"])
    assert scope.cwd_prefixes == ("/srv/app",) and scope.trees == frozenset({"s1"})
    for bad in ("everything", "cwd:", "cwd:/srv/", "id:", "tree:", "tree"):
        with pytest.raises(InvalidGrant, match="grant"):
            Scope.parse([bad])


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        ("q[0?", ["q[01"]),
        ("p%*", ["p%02"]),
        ("x_?3", ["x_03"]),
        ("s*", ["s04"]),
        ("*0?", ["q[01", "p%02", "x_03", "s04", "S05", "x-06", "px02"]),
        ("x_*", ["x_03"]),
    ],
)
async def test_scoped_corpus_id_globs_treat_only_star_and_question_mark_as_wildcards(
    db: SqlPersistence, glob: str, expected: list[str]
) -> None:
    ids = ["q[01", "p%02", "x_03", "s04", "S05", "x-06", "px02"]
    for i, sid in enumerate(ids):
        await db.create(SessionHeader(sid, 100 - i))
    for backend in (db, ListOnly(db)):
        scoped = SessionQuery(persistence=backend).scoped([f"id:{glob}"])
        page = await scoped.observe().sessions_page(None, 20)
        assert [r.id for r in page.records] == expected and page.total == len(expected)


async def test_scoped_corpus_cwd_prefixes_with_pattern_characters_match_literally(
    db: SqlPersistence,
) -> None:
    cwds = ["/a*b", "/a*b/x", "/aXb/x", "/a_b/y", "/a-b/y", "/a%b", "/azzb", "/a[b]/z", "/ab]/z"]
    for i, cwd in enumerate(cwds):
        await db.create(SessionHeader(f"s{i}", 100 - i, cwd=cwd))
    for prefix, expected in (
        ("/a*b", ["/a*b", "/a*b/x"]),
        ("/a_b", ["/a_b/y"]),
        ("/a%b", ["/a%b"]),
        ("/a[b]", ["/a[b]/z"]),
        ("/a", []),
    ):
        for backend in (db, ListOnly(db)):
            scoped = SessionQuery(persistence=backend).scoped([f"cwd:{prefix}"])
            page = await scoped.observe().sessions_page(None, 20)
            assert [r.header.cwd for r in page.records] == expected, (prefix, backend)
            assert page.total == len(expected)


async def test_scoped_corpus_cwd_counts_are_kept_by_the_database_whoever_writes(
    db: SqlPersistence,
) -> None:
    """A `cwd:` scope counts from `cwd_stats` (no scan); after every kind of write it must
    equal counting the rows themselves: create, import (new and replaced), import_many,
    delete, raw SQL inserts, updates of cwd, and NULL cwds."""
    from sqlalchemy import text

    from gateway.core.backend import ScopeFilter

    async def both(prefixes: tuple[str, ...]) -> tuple[int, int]:
        where = ScopeFilter(cwd_prefixes=prefixes)
        fast = await db.count_sessions(where)
        async with db.engine.connect() as conn:
            rows = (await conn.execute(text("SELECT cwd FROM sessions"))).all()
        slow = sum(
            1
            for (cwd,) in rows
            if cwd is not None and any(cwd == p or cwd.startswith(p + "/") for p in prefixes)
        )
        return fast, slow

    async def check() -> None:
        for prefixes in (("/a",), ("/a/b",), ("/a", "/a/b"), ("/b", "/a"), ("/c",)):
            fast, slow = await both(prefixes)
            assert fast == slow, prefixes

    await db.create(SessionHeader("x1", 1, cwd="/a"))
    await db.create(SessionHeader("x2", 1, cwd="/a/b"))
    await db.create(SessionHeader("x3", 1))
    await db.import_log(SessionHeader("x4", 2, cwd="/b"), [])
    await db.import_log(SessionHeader("x4", 2, cwd="/b"), [], replace=True)
    await db.import_many([(SessionHeader(f"m{i}", 3, cwd="/a/b/c"), []) for i in range(4)])
    await check()
    await db.delete("x2")
    async with db.engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO sessions (id, version, created_at, cwd, event_count, "
                "current_count, shadowed_count, derived_count) VALUES "
                "('r1', 0, 9, '/a', 0, 0, 0, 0), ('r2', 0, 9, NULL, 0, 0, 0, 0)"
            )
        )
        await conn.execute(text("UPDATE sessions SET cwd = '/c' WHERE id = 'm0'"))
        await conn.execute(text("UPDATE sessions SET cwd = NULL WHERE id = 'm1'"))
        await conn.execute(text("UPDATE sessions SET cwd = '/a' WHERE id = 'r2'"))
        await conn.execute(text("UPDATE sessions SET event_count = 0"))  # no cwd change
    await check()
    await clear(db)
    assert await both(("/a",)) == (0, 0)


@pytest.mark.parametrize("live_root", [False, True])
async def test_scoped_corpus_descendants_enter_a_granted_tree_below_a_cwd_visible_session(
    db: SqlPersistence, live_root: bool
) -> None:
    """a (/p) has children r (/q, a granted tree root) and b (/q, invisible); below r,
    c (/q) is visible only as r's descendant, and d (/p) below c both ways."""
    store = SessionStore()
    await db.create(SessionHeader("a", 1, cwd="/p"))
    await db.create(SessionHeader("b", 2, cwd="/q", parent_session="a"))
    if live_root:
        store.create("r", created_at=3, cwd="/q", parent_session="a")
    else:
        await db.create(SessionHeader("r", 3, cwd="/q", parent_session="a"))
    await db.create(SessionHeader("c", 4, cwd="/q", parent_session="r"))
    await db.create(SessionHeader("d", 5, cwd="/p", parent_session="c"))
    await db.create(SessionHeader("e", 6, cwd="/q", parent_session="b"))
    scoped = SessionQuery(live=[store], persistence=db).scoped(["cwd:/p", "tree:r"])
    trace = await scoped.trace_session("a")
    from gateway.core.lineage import flatten

    assert [n.session.id for n in flatten(trace.descendants)] == ["r", "c", "d"]
    obs = scoped.observe()
    assert [r.id for r in await obs.children("a")] == ["r"]
    assert [r.id for r in await obs.children("r")] == ["c"]
    assert [r.id for r in await obs.children("b")] == []
    page = await obs.sessions_page(None, 10)
    assert [r.id for r in page.records] == ["d", "c", "r", "a"] and page.total == 4
