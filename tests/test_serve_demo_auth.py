"""`serve --demo --auth tokens` (issue 22, point 4): the banner prints two working tokens,
one `all` and one scoped to a demo cwd, and says the demo's database is temporary."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

from gateway.demo import DEMO_TOKENS, demo_sessions
from tests.support.serve_process import start_serve

TOKEN_LINE = re.compile(r"(sgw_[0-9a-f]{12}_[A-Za-z0-9_-]{43})\s+\(([\w.-]+): ([^)]*)\)")
SESSIONS = "{ sessions(first: 50) { totalCount nodes { id header { cwd } } } }"


def _post(base: str, query: str, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(f"{base}/graphql", json.dumps({"query": query}).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_demo_with_auth_prints_an_all_token_and_a_cwd_token_that_work(tmp_path: Path) -> None:
    served = start_serve(tmp_path, "--demo", "--auth", "tokens", "--log-level", "warning")
    try:
        assert served.readyz() == 200
        banner = served.out
        printed = {name: (token, grants) for token, name, grants in TOKEN_LINE.findall(banner)}
        assert set(printed) == {name for name, _ in DEMO_TOKENS}, banner
        assert "temporary" in banner and "token create" in banner
        status, _ = _post(served.base, SESSIONS, None)
        assert status == 401  # auth is really on

        everything, scoped_name = printed["demo-all"], "demo-release"
        assert everything[1] == "all"
        status, body = _post(served.base, SESSIONS, everything[0])
        assert status == 200 and "errors" not in body, body
        assert body["data"]["sessions"]["totalCount"] == 9  # eight persisted, one live-only

        token, grants = printed[scoped_name]
        prefix = grants.removeprefix("cwd:")
        assert grants.startswith("cwd:")
        status, body = _post(served.base, SESSIONS, token)
        assert status == 200 and "errors" not in body, body
        seen = {n["id"] for n in body["data"]["sessions"]["nodes"]}
        model = {
            sid
            for sid, demo in demo_sessions().items()
            if demo.header.cwd == prefix or (demo.header.cwd or "").startswith(prefix + "/")
        }
        assert seen == model and body["data"]["sessions"]["totalCount"] == len(model)
        assert model and len(model) < 9  # the scope shows some sessions, not all
    finally:
        served.stop()
    assert not (tmp_path / "xdg-config" / "session-gateway").exists()  # no key file written
    assert not (tmp_path / "xdg-data" / "session-gateway").exists()  # nor a real database


def test_serve_with_auth_outside_the_demo_still_points_at_token_create(tmp_path: Path) -> None:
    from gateway.commands.serve import banner

    text = banner("http://127.0.0.1:8000", False, "tokens", "/tmp/x.db")
    assert "token create" in text and "temporary" not in text
