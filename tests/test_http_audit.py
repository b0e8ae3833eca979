"""The graphql-http audit (GraphQL over HTTP spec) against the real app under uvicorn."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway import SessionQuery, SessionStore, create_app
from tests.support.node_tools import run_audit
from tests.support.server import running_server
from tests.test_graphql_helpers import simple_log


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    store = SessionStore()
    store.create("a", created_at=1, seed=simple_log(5))
    with running_server(create_app(SessionQuery(live=[store]))) as url:
        yield url


def test_graphql_http_audit_has_no_errors_or_warnings(server_url: str) -> None:
    report = run_audit(f"{server_url}/graphql")
    failures = [
        f"{kind}: {e['id']} {e['name']}: {e['reason']} ({e.get('httpStatus')} {e.get('body')})"
        for kind in ("error", "warn")
        for e in report[kind]
    ]
    print(
        f"\ngraphql-http audit: {report['ok']}/{report['total']} ok, "
        f"{len(report['notice'])} notices"
    )
    assert failures == []
    assert report["ok"] == report["total"] - len(report["notice"])
