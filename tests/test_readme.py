"""The README's promises hold: its Python example runs, and its test command is CI's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks, "the README shows at least one Python example"
    for code in blocks:
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        assert result.returncode == 0, result.stderr


def test_readme_test_command_is_exactly_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci in README


async def test_readme_graphql_queries_answer_without_errors_on_the_demo(tmp_path):
    from gateway import SessionQuery, SessionStore, create_app
    from gateway.demo import load_demo
    from tests.support.sqlite_backend import sql_backend
    from tests.test_graphql_helpers import gql

    queries = re.findall(r"```graphql\n(.*?)```", README, re.S)
    assert len(queries) >= 3, "the README shows the three demo queries"
    async with sql_backend(tmp_path / "demo.db") as db:
        store = SessionStore()
        await load_demo(db, store)
        app = create_app(SessionQuery(live=[store], persistence=db))
        for query in queries:
            body = await gql(app, query)
            assert "errors" not in body, body
            assert body["data"] and all(v is not None for v in body["data"].values())
