"""The viewer's search, titles, filters and export (SPEC §12-§15) in headless
Chromium, against a served demo corpus, compared with the API's own answers.

Each scenario asks the API the same question the page asks (same query, filter
and page size) and checks that the page shows exactly that: the same sessions
in the same order, the same snippet text, and highlighted pieces that are the
code-point slices `snippet[start:start + length]`; the export the browser
downloads is byte for byte what `GET /sessions/{id}/export` answers. Beside the
demo, the corpus holds sessions whose text puts emoji and accents before the
matches (so a UTF-16 offset used as a code-point one would mark the wrong
characters) and enough matches for a second page of results.
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import SessionQuery, SessionStore, create_app
from gateway.demo import T0, load_demo
from gateway.persistence import SqlPersistence
from gateway.persistence.tokens import TokenStore
from gateway.server.auth import token_authenticator
from tests.support.server import running_server
from tests.support.sqlite_backend import sqlite_url
from tests.test_ui_browser import Gateway, _drive, _with_csp

pytestmark = pytest.mark.browser

TOKEN_KEY = b"s" * 40
WORD = "ECONNREFUSED"
UNICODE = "search-unicode"
FORK = "search-unicode-fork"  # untitled, beside its titled parent in the lineage
MANY = 24  # with search-unicode, more sessions match WORD than one page of 20 shows
DAY = 86_400_000
SEARCH_PAGE = 20  # the page's page size (search.js), asked of the API here too


def _user(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def _assistant(text: str) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}


def _title(text: str, kind: str, seqs: list[int]) -> dict[str, Any]:
    source: dict[str, Any] = {"kind": kind}
    if kind == "provider":
        source["provider"] = "demo-llm"
    return {"title": text, "messageSeqs": seqs, "source": source}


def _add_search_sessions(store: SessionStore) -> None:
    """Live sessions with text worth searching: astral characters before matches,
    a snippet window that starts past them, ties in match counts, titles."""
    s = store.create(UNICODE, created_at=T0 + 3 * DAY, cwd="/srv/app")
    s.append(
        "user/message", _user(f"🙂🙂 naïve café: connect {WORD} 127.0.0.1:5432 🙂 {WORD}"), "append"
    )
    s.append("session/title", _title("Café 🙂 outage: connection refused", "user", [0]), None)
    long = (
        "🧪 " * 120
        + f"the database said {WORD} (errno 111) while \U0001d400\U0001d401 retried "
        + "é " * 150
    )
    s.append("assistant/message", _assistant(long), "append")
    for i in range(24):  # more hits than one page of searchEvents
        s.append("assistant/message", _assistant(f"retry #{i} 👩‍💻: {WORD} again"), "append")
    fork = store.create(FORK, created_at=T0 + 3 * DAY + 1, cwd="/srv/app", parent_session=UNICODE)
    fork.append("user/message", _user("and without a title"), "append")
    for i in range(MANY):
        other = store.create(
            f"search-many-{i:02d}",
            created_at=T0 - i * DAY,
            cwd="/srv/app" if i % 2 else "/srv/other",
        )
        other.append("user/message", _user(" ".join([f"{WORD} x{i}"] * (i % 4 + 1))), "append")
        if i % 3 == 0:
            other.append(
                "session/title", _title(f"Refused connection nº{i}", "provider", [0]), None
            )


async def _load(backend: SqlPersistence, store: SessionStore) -> str:
    try:
        await load_demo(backend, store)
        _add_search_sessions(store)
        _, token = await TokenStore(backend, TOKEN_KEY).create("viewer-tree", ["tree:demo-root"])
        return token
    finally:
        await backend.close()  # the servers run on their own loop: keep no connection


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Gateway, Gateway]]:
    """The corpus served open, with bearer tokens, and open under a strict CSP."""
    backend = SqlPersistence(sqlite_url(tmp_path_factory.mktemp("ui-search") / "x.db"))
    store = SessionStore()
    token = asyncio.run(_load(backend, store))
    query = SessionQuery(live=[store], persistence=backend)
    open_app = create_app(query)
    auth_app = create_app(query, authenticate=token_authenticator(TokenStore(backend, TOKEN_KEY)))
    try:
        with (
            running_server(open_app) as url,
            running_server(auth_app) as auth_url,
            running_server(_with_csp(open_app)) as csp_url,
        ):
            yield Gateway(url), Gateway(auth_url, token), Gateway(csp_url)
    finally:
        asyncio.run(backend.close())


def _schema(gateway: Gateway) -> tuple[set[str], set[str], set[str]]:
    data = gateway.gql(
        """{ __schema { queryType { fields { name } } }
             session: __type(name: "Session") { fields { name } }
             sessions: __type(name: "Query") { fields { name args { name } } } }"""
    )
    query = {f["name"] for f in data["__schema"]["queryType"]["fields"]}
    session = {f["name"] for f in data["session"]["fields"]}
    sessions_args = {
        a["name"] for f in data["sessions"]["fields"] if f["name"] == "sessions" for a in f["args"]
    }
    return query, session, sessions_args


def _require(
    gateway: Gateway, *, query: str = "", session: str = "", sessions_arg: str = ""
) -> None:
    """Skip, saying exactly what is missing, while the API is not merged yet."""
    have_query, have_session, have_args = _schema(gateway)
    if query and query not in have_query:
        pytest.skip(f"the API has no Query.{query} yet (SPEC §13 not merged)")
    if session and session not in have_session:
        pytest.skip(f"the API has no Session.{session} yet (SPEC §14 not merged)")
    if sessions_arg and sessions_arg not in have_args:
        pytest.skip(f"the API's Query.sessions has no `{sessions_arg}` argument yet (SPEC §12)")


def _cp_marks(hit: dict[str, Any]) -> list[str]:
    """The highlighted pieces of an API hit, cut in code points (Python's str indexing)."""
    snippet: str = hit["snippet"]
    return [snippet[h["start"] : h["start"] + h["length"]] for h in hit["highlights"]]


SEARCH = """query($q: String!, $first: Int!, $after: String) {
  searchSessions(query: $q, first: $first, after: $after) {
    pageInfo { hasNextPage endCursor }
    nodes { session { id title { title } }
      bestMatch { event { seq } snippet highlights { start length } } } } }"""

SHOWN_HITS = """[...document.querySelectorAll("#search-results button.hit")].map((b) => ({
  id: b.dataset.sessionId, seq: Number(b.dataset.seq),
  title: b.querySelector(".label").dataset.title ?? null,
  idShown: b.querySelector(".label .sid").textContent,
  snippet: b.querySelector(".snippet").textContent,
  marks: [...b.querySelectorAll(".snippet mark")].map((m) => m.textContent) }))"""


def _api_search_pages(gateway: Gateway, q: str, pages: int) -> list[list[dict[str, Any]]]:
    """The first `pages` pages of `searchSessions(q)`, as the page shows a hit (the
    page asks for titles only where the schema has them, and so does this)."""
    query = SEARCH if "title" in _schema(gateway)[1] else SEARCH.replace(" title { title }", "")
    out = []
    after = None
    for _ in range(pages):
        conn = gateway.gql(query, q=q, first=SEARCH_PAGE, after=after)["searchSessions"]
        out.append(
            [
                {
                    "id": n["session"]["id"],
                    "seq": n["bestMatch"]["event"]["seq"],
                    "title": (n["session"].get("title") or {}).get("title"),
                    "idShown": n["session"]["id"],
                    "snippet": n["bestMatch"]["snippet"],
                    "marks": _cp_marks(n["bestMatch"]),
                }
                for n in conn["nodes"]
            ]
        )
        if not conn["pageInfo"]["hasNextPage"]:
            break
        after = conn["pageInfo"]["endCursor"]
    return out


def test_search_box_shows_the_apis_ranked_sessions_snippets_and_highlights_page_by_page(
    served: tuple[Gateway, Gateway, Gateway],
) -> None:
    gateway = served[2]  # under the strict CSP: a violation is a console error, refused
    _require(gateway, query="searchSessions", session="title")
    truth = _api_search_pages(gateway, WORD, 2)
    assert len(truth) == 2 and len(truth[0]) == SEARCH_PAGE and truth[1]
    got = _drive(
        gateway,
        [
            {"goto": "/ui"},
            {"waitFor": "#search-form:not([hidden])"},
            {"fill": ["#search-input", f"  {WORD} "]},
            {"click": "#search-form button[type=submit]"},
            {"waitFor": '#search-results[data-page="0"]'},
            {"eval": SHOWN_HITS, "as": "page0"},
            {"eval": "document.getElementById('list-view').hidden", "as": "listHidden"},
            {"click": "#search-next"},
            {"waitFor": '#search-results[data-page="1"]'},
            {"eval": SHOWN_HITS, "as": "page1"},
            {"click": "#search-prev"},
            {"waitFor": '#search-results[data-page="0"]'},
            {"eval": SHOWN_HITS, "as": "back0"},
            {"click": "#search-clear"},
            {"waitFor": "#search-view[hidden]", "state": "attached"},
            {"eval": "document.getElementById('list-view').hidden", "as": "listBack"},
        ],
    )
    assert got["page0"] == truth[0]
    assert got["page1"] == truth[1]
    assert got["back0"] == truth[0]
    assert got["listHidden"] is True and got["listBack"] is False
    # the corpus makes the conversion matter: a mark right after astral characters
    unicode_hit = next(h for page in truth for h in page if h["id"] == UNICODE)
    before = unicode_hit["snippet"][: unicode_hit["snippet"].index(unicode_hit["marks"][0])]
    assert any(ord(c) > 0xFFFF for c in before), unicode_hit
    assert all(m.casefold() == WORD.casefold() for page in truth for h in page for m in h["marks"])


def test_a_search_hit_opens_its_session_with_the_best_match_selected(
    served: tuple[Gateway, Gateway, Gateway],
) -> None:
    gateway = served[0]
    _require(gateway, query="searchSessions")
    first = _api_search_pages(gateway, WORD, 1)[0]
    target = next(h for h in first if h["id"] == UNICODE)
    seq = target["seq"]
    got = _drive(
        gateway,
        [
            {"goto": "/ui"},
            {"waitFor": "#search-form:not([hidden])"},
            {"fill": ["#search-input", WORD]},
            {"press": "Enter"},
            {"waitFor": '#search-results[data-page="0"]'},
            {"click": f'#search-results button.hit[data-session-id="{UNICODE}"]'},
            {"waitFor": f'#event-detail[data-seq="{seq}"]'},
            {"waitFor": f'#timeline-view .row.selected[data-seq="{seq}"]'},
            {"eval": "location.search", "as": "url"},
            {"eval": "document.querySelector('#event-detail pre.json').textContent", "as": "data"},
            {"back": True},  # to the search alone: its results are still shown
            {"eval": "location.search", "as": "searchUrl"},
            {"eval": SHOWN_HITS, "as": "afterBack"},
            {"back": True},  # to before the search: the list again
            {"waitFor": "#search-view[hidden]", "state": "attached"},
            {
                "eval": "[location.search, document.getElementById('search-input').value]",
                "as": "start",
            },
            {"goto": f"/ui?q={WORD}"},  # a search is a shareable URL
            {"waitFor": '#search-results[data-page="0"]'},
            {"eval": SHOWN_HITS, "as": "shared"},
        ],
    )
    event = gateway.gql(
        "query($id: ID!, $seq: Int!) { event(sessionId: $id, seq: $seq) { data } }",
        id=UNICODE,
        seq=seq,
    )["event"]
    assert got["url"] == f"?session={UNICODE}&seq={seq}&q={WORD}"
    assert json.loads(got["data"]) == event["data"]
    assert got["searchUrl"] == f"?q={WORD}"
    assert got["afterBack"] == got["shared"] == first
    assert got["start"] == ["", ""]


def test_with_auth_the_search_shows_only_what_the_token_may_see(
    served: tuple[Gateway, Gateway, Gateway],
) -> None:
    gateway = served[1]  # its token sees demo-root's tree only (scope applies first)
    _require(gateway, query="searchSessions")
    phrase = "escaped quote"  # said in demo-root's tree, and in no session of ours
    truth = _api_search_pages(gateway, phrase, 1)[0]
    visible = {
        s["id"]
        for s in gateway.gql("{ sessions(first: 100) { nodes { id } } }")["sessions"]["nodes"]
    }
    assert truth and {h["id"] for h in truth} <= visible and UNICODE not in visible
    got = _drive(
        gateway,
        [
            {"goto": "/ui"},
            {"waitFor": "#token-form:not([hidden])"},
            {"fill": ["#token-input", gateway.token]},
            {"press": "Enter"},
            {"waitFor": "#search-form:not([hidden])"},
            {"fill": ["#search-input", phrase]},
            {"press": "Enter"},
            {"waitFor": '#search-results[data-page="0"]'},
            {"eval": SHOWN_HITS, "as": "hits"},
        ],
    )
    assert got["hits"] == truth


FIND = """query($id: ID!, $q: String!, $first: Int!, $after: String) {
  searchEvents(sessionId: $id, query: $q, first: $first, after: $after) {
    pageInfo { hasNextPage endCursor }
    nodes { event { seq } snippet highlights { start length } } } }"""

SHOWN_FINDS = """[...document.querySelectorAll("#event-search-results button.hit")].map((b) => ({
  seq: Number(b.dataset.seq), snippet: b.querySelector(".snippet").textContent,
  marks: [...b.querySelectorAll(".snippet mark")].map((m) => m.textContent) }))"""


def test_find_in_session_lists_the_apis_hits_and_a_click_selects_the_event(
    served: tuple[Gateway, Gateway, Gateway],
) -> None:
    gateway = served[0]
    _require(gateway, query="searchEvents")
    truth: list[dict[str, Any]] = []
    after = None
    while True:
        conn = gateway.gql(FIND, id=UNICODE, q=WORD.lower(), first=20, after=after)
        page = conn["searchEvents"]
        truth += [
            {"seq": n["event"]["seq"], "snippet": n["snippet"], "marks": _cp_marks(n)}
            for n in page["nodes"]
        ]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert len(truth) > 20  # a second page, appended by "More hits"
    pick = truth[-1]["seq"]
    got = _drive(
        gateway,
        [
            {"goto": f"/ui?session={UNICODE}"},
            {"waitFor": '#timeline-view[data-state="complete"]'},
            {"waitFor": "#event-search-form:not([hidden])"},
            {"fill": ["#event-search-input", WORD.lower()]},
            {"click": "#event-search-form button[type=submit]"},
            {"waitFor": '#event-search-results[data-count="20"]'},
            {"click": "#event-search-more"},
            {"waitFor": f'#event-search-results[data-count="{len(truth)}"]'},
            {"eval": SHOWN_FINDS, "as": "hits"},
            {"click": f'#event-search-results button.hit[data-seq="{pick}"]'},
            {"waitFor": f'#event-detail[data-seq="{pick}"]'},
            {"waitFor": f'#timeline-view .row.selected[data-seq="{pick}"]'},
            {"eval": "location.search", "as": "url"},
        ],
    )
    assert got["hits"] == truth
    assert got["url"] == f"?session={UNICODE}&seq={pick}"


SHOWN_LABELS = """[...document.querySelectorAll("#sessions-list button.session")].map((b) => ({
  id: b.dataset.sessionId, title: b.querySelector(".label").dataset.title ?? null,
  titleShown: b.querySelector(".label .title")?.textContent ?? null,
  idShown: b.querySelector(".label .sid").textContent }))"""

LINEAGE_TITLES = """[...document.querySelectorAll("#lineage-view .node:not([data-ghost])")]
  .map((n) => ({
  id: n.dataset.sessionId, title: n.dataset.title ?? null,
  shown: [...n.querySelectorAll("text.node-title")].map((t) => t.textContent).join("")
    || null }))"""


def test_titles_label_sessions_in_the_list_and_the_lineage_with_the_id_beside(
    served: tuple[Gateway, Gateway, Gateway],
) -> None:
    gateway = served[0]
    _require(gateway, session="title")
    page = gateway.gql("{ sessions(first: 25) { nodes { id title { title } } } }")
    listed = [
        {"id": s["id"], "title": (s["title"] or {}).get("title")} for s in page["sessions"]["nodes"]
    ]
    trace = gateway.gql(
        """query($id: ID!) { traceSession(sessionId: $id) {
            graph { nodes { id title { title } } } } }""",
        id=FORK,
    )["traceSession"]["graph"]["nodes"]
    got = _drive(
        gateway,
        [
            {"goto": f"/ui?session={FORK}"},
            {"waitFor": '#sessions-list[data-page="0"] button.session'},
            {"waitFor": '#lineage-view[data-state="complete"]'},
            {"eval": SHOWN_LABELS, "as": "list"},
            {"eval": LINEAGE_TITLES, "as": "lineage"},
        ],
    )
    assert [{"id": r["id"], "title": r["title"]} for r in got["list"]] == listed
    assert any(r["title"] for r in listed) and any(not r["title"] for r in listed)
    for row in got["list"]:
        assert row["idShown"] == row["id"]  # the id is always there, beside a title
        assert row["titleShown"] == row["title"]
    titles = {n["id"]: (n["title"] or {}).get("title") for n in trace}
    assert {n["id"]: n["title"] for n in got["lineage"]} == titles
    assert titles[UNICODE] and titles[FORK] is None
    for node in got["lineage"]:
        if node["title"]:  # wrapped onto lines as the box needs, never cut (issue 22)
            assert node["shown"] == node["title"]


SESSIONS_FILTERED = """query($filter: SessionFilter) {
  sessions(first: 25, filter: $filter) { totalCount nodes { id } } }"""


def _day_ms(day: datetime) -> int:
    return (day - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def test_filters_narrow_the_list_to_the_apis_filtered_page(
    served: tuple[Gateway, Gateway, Gateway],
) -> None:
    gateway = served[0]
    _require(gateway, sessions_arg="filter")
    first = datetime.fromtimestamp((T0 - 12 * DAY) / 1000, UTC).date()
    last = datetime.fromtimestamp((T0 - 2 * DAY) / 1000, UTC).date()
    start = _day_ms(datetime(first.year, first.month, first.day, tzinfo=UTC))
    end = _day_ms(datetime(last.year, last.month, last.day, tzinfo=UTC)) + DAY - 1
    wanted = {
        "cwd": ["/srv/app"],
        "createdAt": {"from": start, "to": end},
        "availability": ["LIVE"],
    }
    truth = gateway.gql(SESSIONS_FILTERED, filter=wanted)["sessions"]
    assert 0 < len(truth["nodes"]) < MANY
    nothing = gateway.gql(SESSIONS_FILTERED, filter={"availability": []})["sessions"]
    persisted = gateway.gql(SESSIONS_FILTERED, filter={"availability": ["PERSISTED"]})["sessions"]
    everything = gateway.gql(SESSIONS_FILTERED, filter=None)["sessions"]
    list_filter = "document.getElementById('sessions-list').dataset.filter"

    def shown(value: object) -> str:  # the list's data-filter once it shows `value`
        return f"{list_filter} === {json.dumps(json.dumps(value, separators=(',', ':')))}"

    ids = """[...document.querySelectorAll('#sessions-list button.session')]
        .map((b) => b.dataset.sessionId)"""
    got = _drive(
        gateway,
        [
            {"goto": "/ui"},
            {"waitFor": "#session-filters:not([hidden])"},
            {"click": "#session-filters summary"},
            {"fill": ["#filter-cwd", "/srv/app"]},
            {"fill": ["#filter-from", first.isoformat()]},
            {"fill": ["#filter-to", last.isoformat()]},
            {"click": "#filter-persisted"},
            {"click": "#filters-form button[type=submit]"},
            {"waitForFunction": shown(wanted)},
            {"eval": ids, "as": "filtered"},
            {"eval": "document.getElementById('sessions-count').textContent", "as": "count"},
            {"eval": "document.getElementById('filters-summary').textContent", "as": "summary"},
            {"click": "#filter-live"},  # neither box: the empty list, which matches nothing
            {"fill": ["#filter-cwd", ""]},
            {"fill": ["#filter-from", ""]},
            {"fill": ["#filter-to", ""]},
            {"click": "#filters-form button[type=submit]"},
            {"waitForFunction": shown({"availability": []})},
            {"eval": ids, "as": "none"},
            {"click": "#filter-persisted"},
            {"click": "#filters-form button[type=submit]"},
            {"waitForFunction": shown({"availability": ["PERSISTED"]})},
            {"eval": ids, "as": "persisted"},
            {"click": "#filters-reset"},
            {"waitForFunction": shown(None)},
            {"eval": ids, "as": "reset"},
        ],
    )
    assert got["filtered"] == [s["id"] for s in truth["nodes"]]
    assert got["count"] == f"{truth['totalCount']} match"
    assert "/srv/app" in got["summary"] and first.isoformat() in got["summary"]
    assert got["none"] == [] == [s["id"] for s in nothing["nodes"]]
    assert got["persisted"] == [s["id"] for s in persisted["nodes"]]
    assert got["reset"] == [s["id"] for s in everything["nodes"]]


def _export_available(gateway: Gateway) -> None:
    headers = {"Authorization": f"Bearer {gateway.token}"} if gateway.token else {}
    r = httpx.get(f"{gateway.url}/sessions/demo-root/export", headers=headers, timeout=30)
    if r.status_code == 404 and "SESSION_QUERY_SESSION_NOT_FOUND" not in r.text:
        pytest.skip("the API has no GET /sessions/{id}/export yet (SPEC §15 not merged)")


def _zip_entries(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {name: z.read(name) for name in z.namelist()}


def _export_steps(tmp_path: Path) -> list[dict[str, Any]]:
    return [
        {"waitFor": "#export-session:not([hidden])"},
        {"download": "#export-session", "saveAs": str(tmp_path / "one"), "as": "one"},
        {"download": "#export-tree", "saveAs": str(tmp_path / "tree"), "as": "tree"},
    ]


def test_export_buttons_download_what_the_export_route_answers(
    served: tuple[Gateway, Gateway, Gateway], tmp_path: Path
) -> None:
    gateway = served[0]
    _export_available(gateway)
    one = httpx.get(f"{gateway.url}/sessions/demo-root/export", timeout=30)
    tree = httpx.get(f"{gateway.url}/sessions/demo-root/export?descendants=true", timeout=30)
    assert one.status_code == tree.status_code == 200
    got = _drive(
        gateway,
        [{"goto": "/ui?session=demo-root"}, *_export_steps(tmp_path)],
    )
    assert (tmp_path / "one").read_bytes() == one.content
    assert _zip_entries((tmp_path / "tree").read_bytes()) == _zip_entries(tree.content)
    assert got["one"]["url"] == f"{gateway.url}/sessions/demo-root/export"
    assert got["tree"]["url"] == f"{gateway.url}/sessions/demo-root/export?descendants=true"
    assert got["one"]["filename"].endswith(".jsonl") and got["tree"]["filename"].endswith(".zip")


def test_with_auth_the_export_is_fetched_with_the_token_and_saved_from_a_blob(
    served: tuple[Gateway, Gateway, Gateway], tmp_path: Path
) -> None:
    gateway = served[1]
    _export_available(gateway)
    headers = {"Authorization": f"Bearer {gateway.token}"}
    one = httpx.get(f"{gateway.url}/sessions/demo-root/export", headers=headers, timeout=30)
    tree = httpx.get(
        f"{gateway.url}/sessions/demo-root/export?descendants=true", headers=headers, timeout=30
    )
    assert one.status_code == tree.status_code == 200
    assert httpx.get(f"{gateway.url}/sessions/demo-root/export", timeout=30).status_code == 401
    got = _drive(
        gateway,
        [
            {"goto": "/ui?session=demo-root"},
            {"waitFor": "#token-form:not([hidden])"},
            {"fill": ["#token-input", gateway.token]},
            {"press": "Enter"},
            {"waitFor": '#timeline-view[data-state="complete"]'},
            *_export_steps(tmp_path),
        ],
    )
    assert (tmp_path / "one").read_bytes() == one.content
    assert _zip_entries((tmp_path / "tree").read_bytes()) == _zip_entries(tree.content)
    assert got["one"]["url"].startswith("blob:") and got["tree"]["url"].startswith("blob:")
    disposition = one.headers.get("content-disposition", "")
    if "filename=" in disposition:  # the server's name is kept
        assert got["one"]["filename"] in disposition
