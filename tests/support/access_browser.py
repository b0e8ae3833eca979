"""Run ``tests/js/access_check.mjs`` (CORS from another origin's page, GraphiQL with a token)."""

from __future__ import annotations

import json
import os
from typing import Any

from .browser import ensure_chromium
from .node_tools import BROWSER_TIMEOUT_S, _run_node_json


def run_access_check(*args: str, step_timeout_s: float = 30.0) -> dict[str, Any]:
    """``node access_check.mjs ARGS...``: its JSON report (see the script's header)."""
    env = {
        "CHROMIUM_PATH": str(ensure_chromium()),
        "ACCESS_CHECK_STEP_TIMEOUT_MS": str(int(step_timeout_s * 1000)),
    }
    data: dict[str, Any] = _run_node_json(["access_check.mjs", *args], BROWSER_TIMEOUT_S, env=env)
    return data


def fetch_from_page(page_url: str, plan: list[dict[str, Any]]) -> dict[str, Any]:
    """Open ``page_url`` and run each request of ``plan`` with ``fetch()`` from it."""
    return run_access_check("fetch", page_url, json.dumps(plan))


def graphiql_with_token(
    url: str, token: str, query: str, expect: str, screenshot: str | os.PathLike[str]
) -> dict[str, Any]:
    """Run ``query`` in GraphiQL at ``url`` without a token, then with ``token`` typed in."""
    return run_access_check("graphiql", url, token, query, expect, os.fspath(screenshot))
