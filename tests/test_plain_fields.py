"""Plain fields (`gateway.server.types.plain`) and the plain-list path
(`gateway.server.execution`): cheaper, and answering exactly as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import strawberry
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from gateway import SessionQuery, SessionStore, create_app
from gateway.demo import load_demo
from gateway.server import execution
from gateway.server.execution import GatewayExecutionContext
from gateway.server.schema import build_schema
from gateway.server.types.plain import install_plain_resolvers, is_plain_resolver, plain
from tests.support.sqlite_backend import sql_backend
from tests.test_graphql_helpers import gql


@strawberry.type
class Item:
    n: int | None
    m: int
    s: str

    @plain("twice n")
    def twice(self) -> int | None:
        return None if self.n is None else 2 * self.n

    @strawberry.field
    def times(self, k: int) -> int:
        return self.m * k


@strawberry.type
class Root:
    @strawberry.field
    def items(self) -> list[Item]:
        return [Item(n=1, m=2, s="a"), Item(n=None, m=3, s="b"), Item(n=2**40, m=4, s="c")]

    @strawberry.field
    def strict(self) -> list[Item | None]:
        return [Item(n=1, m=2, s="a"), Item(n=1, m=None, s="b"), None]  # type: ignore[arg-type]


def _toy(context_class: Any) -> strawberry.Schema:
    schema = strawberry.Schema(query=Root, execution_context_class=context_class)
    install_plain_resolvers(schema._schema)
    return schema


def _answer(schema: strawberry.Schema, query: str) -> Any:
    result = schema.execute_sync(query)
    errors = [(e.message, e.path) for e in result.errors or []]
    return result.data, errors


@pytest.mark.parametrize(
    "query",
    [
        "{ items { n m s twice __typename } }",
        "{ items { a: m b: m s } }",
        "{ items { m ... on Item { s } } }",
        "{ items { m times(k: 3) } }",
        "{ strict { n m s } }",
        "{ items { m s @skip(if: true) twice @include(if: false) } }",
    ],
)
def test_plain_list_path_answers_what_graphql_core_answers(query: str) -> None:
    """Errors included (an Int past 32 bits, null where non-null): the item that the
    loop cannot finish is completed by graphql-core's own path."""
    fast = _answer(_toy(GatewayExecutionContext), query)
    slow = _answer(_toy(StrawberryGraphQLCoreExecutionContext), query)
    assert fast == slow


def test_plain_fields_lose_strawberry_wrapper_only_without_arguments() -> None:
    fields = _toy(GatewayExecutionContext)._schema.type_map["Item"].fields  # type: ignore[union-attr]
    assert all(is_plain_resolver(fields[name].resolve) for name in ("n", "m", "s", "twice"))
    assert not is_plain_resolver(fields["times"].resolve)


@strawberry.type
class Bad:
    @plain("needs info")
    def f(self, info: strawberry.Info) -> int:
        return 1


@strawberry.type
class BadRoot:
    @strawberry.field
    def bad(self) -> Bad:
        return Bad()


def test_plain_resolver_with_info_is_refused() -> None:
    schema = strawberry.Schema(query=BadRoot)
    with pytest.raises(TypeError, match="@plain"):
        install_plain_resolvers(schema._schema)


def test_schema_resolves_event_leaves_plainly() -> None:
    fields = build_schema()._schema.type_map["Event"].fields  # type: ignore[union-attr]
    for name in ("id", "seq", "type", "time", "ignorable", "data", "surface", "surfaceOp"):
        assert is_plain_resolver(fields[name].resolve), name


async def test_event_pages_answer_the_same_without_the_plain_list_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with sql_backend(tmp_path / "x.db") as backend:
        store = SessionStore()
        demo = await load_demo(backend, store)
        for _ in range(20):
            demo.agent.step()
        app = create_app(SessionQuery(live=[store], persistence=backend))
        ids = [
            s["id"]
            for s in (await gql(app, "{ sessions(first: 50) { nodes { id } } }"))["data"][
                "sessions"
            ]["nodes"]
        ]
        query = (
            "query($id: ID!) { events(sessionId: $id, first: 200) { nodes { __typename id "
            "sessionId seq type time ignorable data surface surfaceOp { kind start end } "
            "sourceEventSeqs } edges { cursor node { seq surface data } } "
            "pageInfo { endCursor } } }"
        )
        fast = [await gql(app, query, {"id": sid}) for sid in ids]
        monkeypatch.setattr(execution.GatewayExecutionContext, "_make_plan", lambda *a: None)
        slow = [await gql(app, query, {"id": sid}) for sid in ids]
        assert fast == slow
        assert any(page["data"]["events"]["nodes"] for page in fast)


def test_a_page_of_events_is_built_as_each_event_alone() -> None:
    """`Event.of_all` (a page's loop) builds what `Event.of` builds, node ids included."""
    from gateway.core import Classified, EventSurface, SessionEvent
    from gateway.server.types.events import Event
    from gateway.server.types.node import event_node_id

    items = [
        Classified(SessionEvent("user/message", 0, 5, {"a": 1}, "append", None, False), s)
        for s in EventSurface
    ] + [Classified(SessionEvent("t", 12, 7, None, None, (0,), True), EventSurface.SHADOWED)]
    built = Event.of_all("s\u00e9", items)
    assert [e.__dict__ for e in built] == [Event.of("s\u00e9", i).__dict__ for i in items]
    assert [e.id for e in built] == [event_node_id("s\u00e9", i.event.seq) for i in items]


def test_a_stored_page_classifies_each_row_as_alone() -> None:
    """`StoredView._classified` (a page's loop) answers `_classify` of each row: a SHADOWED
    row whose replacer is past the view's length (or unknown) is CURRENT."""
    from gateway.core.backend import StoredEvent
    from gateway.core.fold import CURRENT_CODE, SHADOWED_CODE
    from gateway.core.model import SessionEvent
    from gateway.core.stored_view import StoredView

    view = object.__new__(StoredView)
    view.length = 10
    stored = [(0, None), (CURRENT_CODE, None), (SHADOWED_CODE, 3), (SHADOWED_CODE, 10)]
    stored += [(SHADOWED_CODE, None), (SHADOWED_CODE, 9)]
    rows = [
        StoredEvent(SessionEvent("t", seq, 0), code, replaced_by)
        for seq, (code, replaced_by) in enumerate(stored)
    ]
    assert view._classified(rows) == [view._classify(r) for r in rows]
    assert all(type(c) is type(view._classify(rows[0])) for c in view._classified(rows))
