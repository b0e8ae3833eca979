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
        if "GATEWAY_URL" in code:
            continue  # a client example: run against a served demo below
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


def test_readme_client_example_pages_through_a_served_demo(tmp_path):
    """The "Calling it" Python client, run as written against a real served demo."""
    import asyncio
    import os

    from gateway import SessionQuery, SessionStore, create_app
    from gateway.demo import load_demo
    from gateway.persistence import SqlPersistence
    from tests.support.server import running_server
    from tests.support.sqlite_backend import sqlite_url

    (code,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", README, re.S)
        if "GATEWAY_URL" in b and "from gql" not in b  # gql: tests/test_clients_graphql.py
    ]
    db = SqlPersistence(sqlite_url(tmp_path / "demo.db"))
    store = SessionStore()
    asyncio.run(load_demo(db, store))
    asyncio.run(db.close())  # the server's loop opens its own connections
    app = create_app(SessionQuery(live=[store], persistence=db))
    try:
        with running_server(app) as base:
            result = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
                env={**os.environ, "GATEWAY_URL": base},
            )
    finally:
        asyncio.run(db.close())
    assert result.returncode == 0, result.stderr
    count, _, rest = result.stdout.partition(" events; ")
    assert int(count) > 50 and rest.strip().endswith("on the surface"), result.stdout


def test_readme_sse_sample_is_what_serve_demo_sends(tmp_path):
    """The Live tail curl sample: its request, sent to a real `serve --demo`, answers the
    `event:`/`data:` lines the README shows, in order (comment lines aside)."""
    import json
    import shlex
    import urllib.request

    from tests.support.serve_process import start_serve

    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", README, re.S) if "event-stream" in b]
    command, _, sample = block.partition("\n# ")
    argv = shlex.split(command.replace("\\\n", " "))
    body = argv[argv.index("-d") + 1]
    shown = [
        line.removeprefix("# ")
        for line in ("# " + sample).splitlines()
        if line.startswith(("# event:", "# data:"))
    ]
    assert shown and shown[0] == "event: next", block
    served = start_serve(tmp_path, "--demo", "--agent-interval", "0.05", "--log-level", "warning")
    try:
        assert served.readyz() == 200
        req = urllib.request.Request(
            f"{served.base}/graphql",
            body.encode(),
            {"Accept": "text/event-stream", "Content-Type": "application/json"},
        )
        got: list[str] = []
        with urllib.request.urlopen(req, timeout=30) as stream:
            while len(got) < len(shown):
                line = stream.readline().decode().rstrip("\n")
                if line.startswith(("event:", "data:")):
                    got.append(line)
    finally:
        served.stop()
    for real, readme in zip(got, shown, strict=True):
        if real.startswith("data:"):
            assert json.loads(real[5:]) == json.loads(readme[5:]), (real, readme)
        else:
            assert real == readme


def test_readme_python_examples_need_only_what_the_quickstart_installs():
    """`pip install -e .` (no extras) must bring every module the README's Python imports:
    each is the standard library's, the gateway's, or a base dependency's, unless the
    prose just before its example says to `pip install` it."""
    import ast
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    owners = packages_distributions()
    imported: set[str] = set()
    for block in re.finditer(r"```python\n(.*?)```", README, re.S):
        before = README[: block.start()].rsplit("```", 1)[-1]  # the prose since the last block
        said = re.findall(r"pip install\s+'?([A-Za-z0-9_.-]+)", before)
        for node in ast.walk(ast.parse(block.group(1))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module.split(".")[0]]
            imported |= {name for name in names if name not in said}
    assert "httpx" in imported  # the client example
    for module in sorted(imported - set(sys.stdlib_module_names) - {"gateway"}):
        dists = {d.lower() for d in owners.get(module, [module])}
        assert dists & base, f"the README imports {module}, which `pip install -e .` lacks"
