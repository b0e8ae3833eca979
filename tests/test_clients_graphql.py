"""Real GraphQL clients against a served gateway, with the README's code as written.

The README's "Clients" section is the contract here: each test extracts its
blocks (the Relay environment and fragments, Apollo's type policies, the
codegen config, the urql and graphql-request clients, the Python `gql`
example) and runs them, unedited but for the gateway's URL, against the demo
corpus served over real HTTP (uvicorn on a free port). The npm packages are
pinned in `tests/js/package.json`; `tests/support/node_tools.py` installs them.

Node ids (`gateway/server/types/node.py`; not in SPEC §7) are checked here
too: unique across types, decoded back by `node(id:)`, scoped like every read,
and `nodes(ids:)` bounded and loading each session once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from graphql import FragmentDefinitionNode, GraphQLError, OperationDefinitionNode, parse
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.node_tools import JS_DIR, NodeToolsError, ensure_node_modules

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SCHEMA = ROOT / "schema.graphql"
README_URL = "http://127.0.0.1:8000"
NODE_TIMEOUT_S = 180

# -- the README, taken apart -------------------------------------------------------------

_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)


def readme_blocks(*langs: str) -> list[str]:
    """The README's fenced code blocks in these languages, in order."""
    return [body for lang, body in _FENCE.findall(README) if lang in langs]


def readme_file(name: str) -> str:
    """The README block that opens with the comment `// NAME` (a file the reader saves)."""
    found = [b for b in readme_blocks("js", "ts") if b.startswith(f"// {name}\n")]
    assert len(found) == 1, f"the README shows {name} once (found {len(found)})"
    return found[0]


@dataclass(frozen=True)
class Document:
    """One GraphQL document found in the README, and where."""

    text: str
    where: str  # "graphql", "string" (inside curl/JS/Python), "relay" (a graphql`` tag)

    @property
    def definitions(self) -> list[Any]:
        return list(parse(self.text).definitions)


_JSON_QUERY = re.compile(r'"query"\s*:\s*("(?:[^"\\]|\\.)*")')
_JS_QUERY = re.compile(r'\bquery:\s*("(?:[^"\\]|\\.)*")')
_TEMPLATE = re.compile(r"(?:\bquery:\s*|\bgql|\bgraphql)`([^`]*)`")
_PY_TRIPLE = re.compile(r'"""(.*?)"""', re.S)


def _graphql(text: str) -> bool:
    """Whether a string holds a GraphQL document (an operation or a fragment)."""
    try:
        return bool(parse(text).definitions)
    except GraphQLError:
        return False


def readme_documents() -> list[Document]:
    """Every GraphQL document the README shows: its graphql blocks, and the operations
    inside its curl, JS, TypeScript and Python blocks (JSON `"query"` strings, JS
    `query:` strings and template literals, `gql`/`graphql` tags, Python triple quotes)."""
    found = [Document(b, "graphql") for b in readme_blocks("graphql")]
    for lang, body in _FENCE.findall(README):
        if lang in ("graphql", "json", "text"):
            continue
        for m in _JSON_QUERY.finditer(body):
            found.append(Document(json.loads(m.group(1)), "string"))
        for m in _JS_QUERY.finditer(body):
            found.append(Document(json.loads(m.group(1)), "string"))
        for m in _TEMPLATE.finditer(body):
            where = "relay" if m.group(0).startswith("graphql") else "string"
            found.append(Document(m.group(1), where))
        if lang == "python":
            for m in _PY_TRIPLE.finditer(body):
                if _graphql(m.group(1)):
                    found.append(Document(m.group(1), "string"))
    return found


def readme_operations(*, relay: bool = False) -> list[tuple[OperationDefinitionNode, str]]:
    """(operation, its document's text) for every README operation; Relay's documents
    (fragment spreads, Relay directives) only when asked for."""
    out = []
    for doc in readme_documents():
        if doc.where == "relay" and not relay:
            continue
        for d in doc.definitions:
            if isinstance(d, OperationDefinitionNode):
                out.append((d, doc.text))
    return out


def _name(op: OperationDefinitionNode) -> str:
    return op.name.value if op.name else ""


# -- serving the demo ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo corpus (persisted and live, no simulated agent) served over real HTTP."""
    from gateway import SessionQuery, SessionStore, create_app
    from gateway.demo import load_demo
    from gateway.persistence import SqlPersistence
    from tests.support.server import running_server
    from tests.support.sqlite_backend import sqlite_url

    db = SqlPersistence(sqlite_url(tmp_path_factory.mktemp("demo") / "demo.db"))
    store = SessionStore()
    asyncio.run(load_demo(db, store))
    asyncio.run(db.close())  # the server's loop opens its own connections
    app = create_app(SessionQuery(live=[store], persistence=db))
    try:
        with running_server(app) as base:
            yield base
    finally:
        asyncio.run(db.close())


@pytest.fixture(scope="module")
def node_modules() -> Path:
    try:
        return ensure_node_modules()
    except NodeToolsError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def js_work(node_modules: Path) -> Iterator[Path]:
    """A scratch directory inside tests/js (so `import "relay-runtime"` resolves there)."""
    base = JS_DIR / ".tmp"
    base.mkdir(exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="clients-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_node(args: list[str], *, cwd: Path = JS_DIR, node_options: tuple[str, ...] = ()) -> Any:
    """Run a Node script that prints one JSON document; its answer."""
    node = shutil.which("node")
    assert node is not None, "node is on PATH (ensure_node_modules checked)"
    result = subprocess.run(
        [node, *node_options, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"node {args} failed:\n{result.stdout}\n{result.stderr}"
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"node {args} printed no JSON:\n{result.stdout}\n{result.stderr}")


def _pointed(code: str, base: str) -> str:
    """A README block with the gateway's URL made the served one's."""
    assert README_URL in code, "the block names the gateway's URL"
    return code.replace(README_URL, base)


# -- operations: named, unique, and codegen ------------------------------------------------


def test_every_readme_graphql_operation_is_named_and_names_are_unique():
    docs = readme_documents()
    operations = [
        d for doc in docs for d in doc.definitions if isinstance(d, OperationDefinitionNode)
    ]
    # every place that holds an operation was found: the curl, JS and Python strings too
    assert {doc.where for doc in docs} == {"graphql", "string", "relay"}
    code = "\n".join(b for lang, b in _FENCE.findall(README) if lang != "graphql")
    keys = len(re.findall(r'(?:"query"|\bquery)\s*:\s*["`]', code))
    parsed = len(_JSON_QUERY.findall(code)) + len(_JS_QUERY.findall(code))
    parsed += len(re.findall(r"\bquery:\s*`[^`]*`", code))
    assert keys == parsed >= 6, "every quoted query in curl and JS examples is parsed"
    anonymous = [op.loc.source.body[:60] for op in operations if op.name is None]  # type: ignore[union-attr]
    assert not anonymous, f"anonymous operations in the README: {anonymous}"
    names = [_name(op) for op in operations]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    kinds = {op.operation.value for op in operations}
    assert kinds == {"query", "subscription"}
    fragments = [
        d for doc in docs for d in doc.definitions if isinstance(d, FragmentDefinitionNode)
    ]
    assert {f.name.value for f in fragments} >= {"SessionCard_session", "EventRow_event"}


def test_readme_codegen_config_types_every_readme_operation_with_mapped_scalars(js_work):
    """graphql-codegen (typescript + typescript-operations) with the README's config, on
    schema.graphql and every README operation as one set of documents."""
    (js_work / "src").mkdir()
    shutil.copy(SCHEMA, js_work / "schema.graphql")
    (js_work / "codegen.ts").write_text(readme_file("codegen.ts"), encoding="utf-8")
    (js_work / "src" / "json.ts").write_text(readme_file("src/json.ts"), encoding="utf-8")
    operations = readme_operations()
    for i, (op, _) in enumerate(operations):
        from graphql import print_ast

        (js_work / "src" / f"op{i:02d}.graphql").write_text(print_ast(op), encoding="utf-8")
    cli = JS_DIR / "node_modules" / "@graphql-codegen" / "cli" / "cjs" / "bin.js"
    result = subprocess.run(
        [shutil.which("node") or "node", str(cli), "--config", "codegen.ts"],
        cwd=js_work,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = (js_work / "src" / "gateway.generated.ts").read_text(encoding="utf-8")
    assert re.search(r"EpochMillis: \{ input: number; output: number; \}", out), out[:2000]
    assert re.search(r"JSON: \{ input: JsonValue; output: JsonValue; \}", out), out[:2000]
    assert "from './json'" in out or 'from "./json"' in out
    assert "unknown; output: unknown" not in out, "no scalar is left unmapped"
    for op, _ in operations:
        suffix = "Subscription" if op.operation.value == "subscription" else "Query"
        assert f"export type {_name(op)}{suffix} = " in out, _name(op)
    # a field of a mapped scalar is typed by the mapping
    assert re.search(r"createdAt: number", out)


# -- Apollo Client 4 ------------------------------------------------------------------------

_VARIABLES: dict[str, dict[str, Any]] = {"EventById": {"id": "demo-root\x001"}}


def _variables(op: OperationDefinitionNode) -> dict[str, Any]:
    if _name(op) in _VARIABLES:
        return _VARIABLES[_name(op)]
    wanted = {v.variable.name.value for v in op.variable_definitions or ()}
    return {k: v for k, v in {"id": "demo-root", "first": 5}.items() if k in wanted}


def test_apollo_cache_with_the_readme_type_policies_rereads_without_a_request_or_a_warning(
    demo_url, js_work
):
    """InMemoryCache with only the README's policies: every README query twice (the
    second pass all from the cache), and two queries selecting different fields of one
    session's lineage and event(seq:) re-read without a request; no warning. The same
    two without the policies warn and miss, so the check can fail."""
    from graphql import print_ast

    (js_work / "apollo.js").write_text(_pointed(readme_file("apollo.js"), demo_url), "utf-8")
    lineage = readme_file("lineage.js")
    (js_work / "lineage.js").write_text(lineage, encoding="utf-8")
    queries = [
        {"name": _name(op), "document": print_ast(op), "variables": _variables(op)}
        for op, _ in readme_operations()
        if op.operation.value == "query"
    ]
    two = [
        {"name": m.group(1), "document": m.group(0), "variables": {"id": "demo-root"}}
        for m in re.finditer(r"query (Session\w+)\(\$id: ID!\) \{.*?\n  \}\n", lineage, re.S)
    ]
    assert [t["name"] for t in two] == ["SessionLineage", "SessionGraph"]
    spec = {
        "url": demo_url + "/graphql",
        "apollo": str(js_work / "apollo.js"),
        "lineage": str(js_work / "lineage.js"),
        "lineageId": "demo-fork-a-sub",
        "operations": queries,
        "control": [*two, two[0]],
    }
    (js_work / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    out = run_node(
        ["apollo_check.mjs", str(js_work / "spec.json")], node_options=("--conditions=development",)
    )
    assert out["errors"] == [], out["errors"]
    assert out["warnings"] == [], out["warnings"]
    first, second = out["passes"]
    assert len(queries) >= 10 and 0 < first["requests"] <= len(queries)
    assert second["requests"] == 0 and second["sameData"], second
    assert set(first["data"]) == {q["name"] for q in queries}
    assert first["data"]["EventTrace"]["event"]["id"] == "demo-root\x001"

    got = out["lineage"]
    assert got["requests"] == 2, got
    result = got["result"]
    assert result["again"] == result["first"] and result["graphAgain"] == result["graph"]
    session = result["first"]["session"]
    assert session["id"] == "demo-fork-a-sub"
    assert session["lineage"]["complete"] is True
    assert session["lineage"]["root"]["id"] == "demo-root"
    assert [a["id"] for a in session["lineage"]["ancestors"]] == ["demo-fork-a", "demo-root"]
    assert session["event"]["id"] == "demo-fork-a-sub\x001"
    graph = result["graph"]["session"]["lineage"]["graph"]
    assert {
        "parentId": "demo-fork-a",
        "childId": "demo-fork-a-sub",
        "__typename": "LineageEdge",
    } in graph["edges"]

    control = out["control"]
    assert any("Cache data may be lost" in w for w in control["warnings"]), control
    assert control["requests"] == 3, "without the policies the re-read misses"


# -- Relay ---------------------------------------------------------------------------------


def _relay_config() -> dict[str, Any]:
    (config,) = [json.loads(b) for b in readme_blocks("json") if '"artifactDirectory"' in b]
    return config


def test_relay_compiler_compiles_the_readme_fragments_and_relay_runtime_refetches_via_node(
    demo_url, js_work
):
    """relay-compiler (the pinned npm package) compiles the README's refetchable fragments
    on Session and Event against schema.graphql; relay-runtime, with the README's
    environment and getDataID, fetches the screen query from the served gateway and
    refetches both fragments through node(id:), without a store warning. Without that
    getDataID the same query warns about the header's id (the control)."""
    config = _relay_config()
    (js_work / "relay.config.json").write_text(json.dumps(config), encoding="utf-8")
    shutil.copy(SCHEMA, js_work / config["schema"])
    src = js_work / config["src"]
    (js_work / config["artifactDirectory"]).mkdir(parents=True)
    (src / "environment.js").write_text(
        _pointed(readme_file("src/environment.js"), demo_url), encoding="utf-8"
    )
    (src / "SessionScreen.js").write_text(readme_file("src/SessionScreen.js"), encoding="utf-8")
    compiler = JS_DIR / "node_modules" / "relay-compiler" / "cli.js"
    version = subprocess.run(
        [shutil.which("node") or "node", str(compiler), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert re.search(r"\bv?2[01]\.\d+\.\d+", version.stdout + version.stderr), version
    compiled = subprocess.run(
        [shutil.which("node") or "node", str(compiler)],
        cwd=js_work,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    (js_work / "spec.json").write_text(
        json.dumps({"app": str(js_work), "url": demo_url + "/graphql", "sessionId": "demo-root"}),
        encoding="utf-8",
    )
    out = run_node(["relay_check.mjs", str(js_work / "spec.json")])
    assert out["errors"] == [], out["errors"]
    assert out["warnings"] == [], out["warnings"]
    card_text, row_text = out["refetchTexts"]
    assert "node(id: $id)" in card_text and "...SessionCard_session" in card_text
    assert "node(id: $id)" in row_text and "...EventRow_event" in row_text
    card = out["card"]
    assert card["id"] == "demo-root" and card["live"] is False
    assert card["header"]["cwd"] and isinstance(card["header"]["createdAt"], int)
    assert card["title"] is not None  # demo-root has a provider's title
    assert out["cardAgain"] == card
    event = out["event"]
    assert event == {"id": "demo-root\x001", "seq": 1, "type": event["type"], "surface": "SHADOWED"}
    assert out["eventAgain"] == event
    assert out["requests"] == 3, "the screen, then one refetch each"
    control = out["control"]["warnings"]
    assert any("conflicting types" in w and "SessionHeader" in w for w in control), control


# -- urql and graphql-request --------------------------------------------------------------

URQL_ACCEPT = (
    "application/graphql-response+json, application/graphql+json, application/json, "
    "text/event-stream, multipart/mixed"
)


def test_urql_with_its_default_headers_and_graphql_request_answer_the_readme_queries(
    demo_url, js_work
):
    """urql (@urql/core) sends its default Accept, which lists text/event-stream, and gets
    one JSON answer for a query; graphql-request fetches an Event by node id."""
    for name in ("urql.js", "graphql-request.js"):
        (js_work / name).write_text(_pointed(readme_file(name), demo_url), encoding="utf-8")
    spec = {
        "urql": str(js_work / "urql.js"),
        "graphqlRequest": str(js_work / "graphql-request.js"),
        "eventId": "demo-root\x001",
    }
    (js_work / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    out = run_node(["clients_check.mjs", str(js_work / "spec.json")])
    assert out["errors"] == [], out["errors"]
    urql = out["urql"]
    assert urql["error"] is None, urql
    assert [s["accept"] for s in urql["sent"]] == [URQL_ACCEPT], urql["sent"]
    page = urql["data"]["sessions"]
    assert len(page["nodes"]) == 5 and page["totalCount"] > 5
    created = [n["header"]["createdAt"] for n in page["nodes"]]
    assert created == sorted(created, reverse=True), "newest first"
    request = out["graphqlRequest"]
    assert request["data"]["node"] == {
        "id": "demo-root\x001",
        "sessionId": "demo-root",
        "seq": 1,
        "type": request["data"]["node"]["type"],
        "surface": "SHADOWED",
    }
    assert len(request["sent"]) == 1


# -- Python gql ------------------------------------------------------------------------------


def test_python_gql_example_queries_over_http_and_subscribes_over_websocket(demo_url):
    """The README's `gql` example, run as written: a query over httpx, then the
    subscription over graphql-transport-ws, which replays a stored session and completes."""
    (code,) = [b for b in readme_blocks("python") if "from gql import" in b]
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "GATEWAY_URL": demo_url},
    )
    assert result.returncode == 0, result.stderr
    first, seqs = result.stdout.strip().splitlines()
    assert first.split()[0] == "demo-root"
    replayed = json.loads(seqs)
    assert replayed[0] == 61 and replayed == list(range(61, 61 + len(replayed)))
    assert len(replayed) > 5


# -- node ids: unique, decoded, scoped, bounded, batched ---------------------------------------

_SESSION_IDS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(sid=_SESSION_IDS, seq=st.integers(min_value=0, max_value=2**53), other=_SESSION_IDS)
def test_node_ids_are_unique_across_types_and_decode_back(sid: str, seq: int, other: str):
    from gateway.core.ids import can_exist
    from gateway.server.types.node import (
        EventNodeId,
        SessionNodeId,
        decode_node_id,
        event_node_id,
    )

    event_id = event_node_id(sid, seq)
    assert can_exist(sid) and not can_exist(event_id), "no Event id is a session id"
    assert decode_node_id(sid) == SessionNodeId(sid)
    assert decode_node_id(event_id) == EventNodeId(sid, seq)
    assert decode_node_id(other) == SessionNodeId(other)
    if other != sid:
        assert event_node_id(other, seq) != event_id
    # only canonical seqs decode: no second id names the same event
    for alias in (f"{sid}\x000{seq}", f"{sid}\x00+{seq}", f"{sid}\x00{seq} ", f"\x00{seq}"):
        assert decode_node_id(alias) is None


@pytest.fixture
async def demo_app(tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """(app, counting backend) over the demo corpus, persisted and live, in process."""
    from gateway import SessionQuery, SessionStore, create_app
    from gateway.demo import load_demo
    from tests.backends import Counting
    from tests.support.sqlite_backend import sql_backend

    async with sql_backend(tmp_path / "demo.db") as db:
        store = SessionStore()
        await load_demo(db, store)
        backend = Counting(db)
        yield create_app(SessionQuery(live=[store], persistence=backend)), backend


SESSION_FIELDS = "id live persisted header { id cwd parentSessionId } title { title }"
EVENT_FIELDS = "id sessionId seq type surface data session { id }"


def _expected(node_id: str) -> str:
    """The field `node(id:)` must answer like, written out."""
    sid, sep, seq = node_id.partition("\x00")
    if not sep:
        return f"session(id: {json.dumps(node_id)}) {{ {SESSION_FIELDS} }}"
    return f"event(sessionId: {json.dumps(sid)}, seq: {int(seq)}) {{ {EVENT_FIELDS} }}"


NODE_SELECTION = (
    f"__typename ... on Session {{ {SESSION_FIELDS} }} ... on Event {{ {EVENT_FIELDS} }}"
)


async def test_node_answers_exactly_what_session_and_event_answer(demo_app):
    """node(id:) and nodes(ids:) read each id as session(id:) / event(sessionId:, seq:):
    the same data, or null with the same error code and message, in order."""
    from tests.test_graphql_helpers import gql

    app, _ = demo_app
    ids = [
        "demo-root",
        "demo-agent-live",  # live only
        "demo-resumed",  # live and persisted
        "demo-root\x001",
        "demo-resumed\x000",
        "demo-root\x0099999",  # no such seq
        "no-such-session",
        "no-such-session\x003",
        "x" * 2000,  # cannot be a session id
    ]
    for node_id in ids:
        mine = await gql(
            app,
            "query N($id: ID!) { node(id: $id) { " + NODE_SELECTION + " } }",
            {"id": node_id},
        )
        theirs = await gql(app, "query E { it: " + _expected(node_id) + " }")
        assert mine["data"]["node"] == (
            None
            if theirs["data"]["it"] is None
            else {"__typename": "Event" if "\x00" in node_id else "Session", **theirs["data"]["it"]}
        ), node_id
        mine_errors = [(e["extensions"]["code"], e["message"]) for e in mine.get("errors", [])]
        their_errors = [(e["extensions"]["code"], e["message"]) for e in theirs.get("errors", [])]
        assert mine_errors == their_errors, node_id
    together = await gql(
        app,
        "query M($ids: [ID!]!) { nodes(ids: $ids) { " + NODE_SELECTION + " } }",
        {"ids": ids},
    )
    one_by_one = [
        (
            await gql(
                app, "query N($id: ID!) { node(id: $id) { " + NODE_SELECTION + " } }", {"id": i}
            )
        )
        for i in ids
    ]
    assert together["data"]["nodes"] == [b["data"]["node"] for b in one_by_one]
    assert sorted((e["path"][1], e["extensions"]["code"]) for e in together["errors"]) == sorted(
        (i, b["errors"][0]["extensions"]["code"]) for i, b in enumerate(one_by_one) if "errors" in b
    )
    assert all(e["path"][0] == "nodes" for e in together["errors"])


async def test_node_id_with_a_nul_that_does_not_decode_names_no_event(demo_app):
    from tests.test_graphql_helpers import codes, gql

    app, _ = demo_app
    for bad in (
        "demo-root\x0001",
        "demo-root\x00-1",
        "demo-root\x00",
        "\x001",
        "demo-root\x001\x002",
    ):
        body = await gql(app, "query N($id: ID!) { node(id: $id) { id } }", {"id": bad})
        assert body["data"]["node"] is None and codes(body) == ["SESSION_QUERY_EVENT_NOT_FOUND"]


async def test_node_and_nodes_are_scoped_an_invisible_id_is_null_like_an_absent_one(
    tmp_path: Path,
):
    """A token sees node ids exactly as it sees session(id:): an invisible session or an
    event of one is null with the message an absent id gets."""
    from gateway import SessionQuery, SessionStore, create_app
    from gateway.demo import load_demo
    from tests.support.sqlite_backend import sql_backend
    from tests.support.tokens import bearer, issued_tokens
    from tests.test_graphql_helpers import client

    query = "query M($ids: [ID!]!) { nodes(ids: $ids) { id } }"
    async with (
        sql_backend(tmp_path / "demo.db") as db,
        issued_tokens(tmp_path / "t.db", ("fork", ["tree:demo-fork-a"], False)) as (auth, secret),
    ):
        store = SessionStore()
        await load_demo(db, store)
        app = create_app(SessionQuery(live=[store], persistence=db), authenticate=auth)
        ids = [
            "demo-fork-a",
            "demo-fork-a\x001",
            "demo-root",
            "demo-root\x001",
            "gone",
            "gone\x001",
        ]
        async with client(app) as c:
            r = await c.post(
                "/graphql",
                json={"query": query, "variables": {"ids": ids}},
                headers=bearer(secret["fork"]),
            )
    body = r.json()
    assert body["data"]["nodes"] == [
        {"id": "demo-fork-a"},
        {"id": "demo-fork-a\x001"},
        None,
        None,
        None,
        None,
    ]
    errors = {e["path"][1]: e for e in body["errors"]}
    assert sorted(errors) == [2, 3, 4, 5]
    for invisible, absent in ((2, 4), (3, 5)):
        a, b = errors[invisible], errors[absent]
        assert (
            a["extensions"]["code"] == b["extensions"]["code"] == "SESSION_QUERY_SESSION_NOT_FOUND"
        )
        assert a["message"].replace("demo-root", "gone") == b["message"]


async def test_nodes_is_bounded_in_length_and_in_cost(demo_app):
    from gateway.server.types.node import MAX_NODE_IDS
    from tests.test_graphql_helpers import codes, gql

    app, _ = demo_app
    q = "query M($ids: [ID!]!) { nodes(ids: $ids) { id } }"
    full = await gql(app, q, {"ids": ["demo-root"] * MAX_NODE_IDS})
    assert "errors" not in full and len(full["data"]["nodes"]) == MAX_NODE_IDS
    over = await gql(app, q, {"ids": ["demo-root"] * (MAX_NODE_IDS + 1)})
    assert codes(over) == ["BAD_USER_INPUT"] and over["data"] is None
    # each id counts as one object with what it selects: 100 pages of 500 is too costly
    costly = await gql(
        app,
        'query C { nodes(ids: ["demo-root"]) { ... on Session { events(first: 500) { nodes { id } } } } }',  # noqa: E501
        status=None,
    )
    assert codes(costly) == ["QUERY_TOO_COSTLY"]


async def test_nodes_loads_each_session_once_however_many_ids_name_it(
    demo_app, monkeypatch: pytest.MonkeyPatch
):
    """Backend calls for nodes(ids:) do not follow the ids: the reads of the sessions it
    names are batched (three sessions cost what one costs), and a session and its events
    named many times cost what naming them once costs."""
    from gateway.server import yielding
    from tests.test_graphql_helpers import gql

    # batching is under test, not yielding: a yield on a loaded machine splits a batch
    monkeypatch.setattr(yielding, "GRACE", 60.0)
    app, backend = demo_app
    q = "query M($ids: [ID!]!) { nodes(ids: $ids) { id ... on Event { type surface } } }"
    sessions = ["demo-root", "demo-fork-a", "demo-fork-b"]

    async def calls(ids: list[str]) -> int:
        backend.reset()
        body = await gql(app, q, {"ids": ids})
        assert "errors" not in body, body["errors"][:2]
        return backend.total

    single = await calls(["demo-root", "demo-root\x001"])
    once = await calls([*sessions, *(f"{s}\x001" for s in sessions)])
    assert once == single, "the sessions' reads are batched: three cost what one costs"

    many = await calls(
        [*sessions * 5, *(f"{s}\x00{n}" for s in sessions for n in range(1, 8)), *sessions]
    )
    assert many == once, (once, many)
    assert backend.calls["load"] == 0


def test_every_object_type_a_cache_meets_has_an_id_or_a_documented_apollo_policy():
    """Each object type of the schema is keyed by its `id`, merged by a README type
    policy, or named in the README as living only in lists (where Apollo replaces the
    list whole); a type both in lists and in a single-object field needs the policy."""
    from graphql import GraphQLList, GraphQLObjectType, build_schema, get_named_type
    from graphql.type.definition import get_nullable_type

    schema = build_schema(SCHEMA.read_text(encoding="utf-8"))
    apollo = readme_file("apollo.js")
    body = apollo[apollo.index("export const typePolicies = {") :]
    policies = set(re.findall(r"^  (\w+): value,$", body[: body.index("};")], re.M))
    listed = re.search(r"Objects only ever in lists \(([^)]*)\)", apollo.replace("\n//", ""))
    assert listed is not None
    in_lists = {name.strip() for name in listed.group(1).split(",")}
    roots = {"Query", "Subscription"}
    objects = {
        name
        for name, t in schema.type_map.items()
        if isinstance(t, GraphQLObjectType) and not name.startswith("__") and name not in roots
    }
    with_id = {name for name in objects if "id" in schema.type_map[name].fields}  # type: ignore[attr-defined]
    assert with_id == {"Session", "Event", "SessionHeader"}
    assert objects == (with_id - {"SessionHeader"}) | policies | in_lists, (
        "undocumented: " + ", ".join(sorted(objects - with_id - policies - in_lists))
    )
    assert not policies & in_lists
    # a type named as list-only is never the value of a single-object field of a kept
    # (keyed or merged) object: inside a list's items it goes with its list
    for t in schema.type_map.values():
        if not isinstance(t, GraphQLObjectType) or t.name in in_lists or t.name.startswith("__"):
            continue
        for field_name, field in t.fields.items():
            named = get_named_type(field.type).name
            if named in in_lists:
                assert isinstance(get_nullable_type(field.type), GraphQLList), (t.name, field_name)
