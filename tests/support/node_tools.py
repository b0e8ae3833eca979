"""Run the Node-based test tools in ``tests/js`` from Python.

* :func:`ensure_node_modules` installs ``tests/js/node_modules`` with ``npm ci`` from
  the committed lock file when it is missing or stale;
* :func:`run_audit` runs the graphql-http server audit (``audit.mjs``);
* :func:`run_browser_check` drives GraphiQL in headless Chromium
  (``browser_check.mjs``);
* :func:`run_ui_check` drives the viewer page (/ui) through a scenario
  (``ui_check.mjs``);
* :func:`run_subscription` subscribes with the npm ``graphql-ws`` client
  (``subscribe.mjs``);
* :func:`run_ui_modules` runs the viewer's pure modules on cases (``ui_modules.mjs``).

Every subprocess is bounded by a timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .apt import file_lock, say
from .browser import ensure_chromium

JS_DIR = Path(__file__).resolve().parents[1] / "js"
NODE_MODULES = JS_DIR / "node_modules"
# Written after a successful `npm ci`: a hash of package.json + package-lock.json.
STAMP = NODE_MODULES / ".installed-from-lock.sha256"

NPM_CI_TIMEOUT_S = 600
AUDIT_TIMEOUT_S = 180
BROWSER_TIMEOUT_S = 180
MIN_NODE_MAJOR = 20  # playwright-core's engines field


class NodeToolsError(RuntimeError):
    """Node/npm are missing, or a Node tool failed or produced unusable output."""


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise NodeToolsError(
            f"`{name}` not found on PATH: the JS test tools in {JS_DIR} need Node.js "
            f">= {MIN_NODE_MAJOR} with npm on PATH"
        )
    return path


def _check_node_version(node: str) -> None:
    try:
        out = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError) as exc:
        raise NodeToolsError(f"`{node} --version` failed: {exc}") from exc
    major = int(out.lstrip("v").split(".", 1)[0] or 0)
    if major < MIN_NODE_MAJOR:
        raise NodeToolsError(f"Node.js {out} is too old; need >= {MIN_NODE_MAJOR}")


def _lock_digest() -> str:
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        path = JS_DIR / name
        if not path.exists():
            raise NodeToolsError(f"{path} is missing")
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _is_fresh(expected: str) -> bool:
    try:
        return STAMP.read_text(encoding="utf-8").strip() == expected
    except OSError:
        return False


def _install_lock() -> contextlib.AbstractContextManager[None]:
    """Serialise installs between concurrent test processes (pytest-xdist workers)."""
    key = hashlib.sha256(str(JS_DIR).encode()).hexdigest()[:16]
    return file_lock(Path(tempfile.gettempdir()) / f"session-gateway-npm-ci-{key}.lock")


def ensure_node_modules() -> Path:
    """Make ``tests/js/node_modules`` match the lock file; return its path.

    Runs ``npm ci --no-audit --no-fund`` when node_modules is missing or was installed
    from a different package.json/package-lock.json. Raises :class:`NodeToolsError`
    with a clear message when node/npm are missing or the install fails.
    """
    node = _require_tool("node")
    npm = _require_tool("npm")
    _check_node_version(node)
    expected = _lock_digest()
    if _is_fresh(expected):
        return NODE_MODULES
    with _install_lock():
        if _is_fresh(expected):  # another process installed while we waited
            return NODE_MODULES
        say("installing the npm test tools with `npm ci` (one-time, ~30 s) ...")
        started = time.monotonic()
        try:
            result = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=JS_DIR,
                capture_output=True,
                text=True,
                timeout=NPM_CI_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise NodeToolsError(
                f"`npm ci` in {JS_DIR} timed out after {NPM_CI_TIMEOUT_S}s"
            ) from exc
        if result.returncode != 0:
            raise NodeToolsError(
                f"`npm ci` in {JS_DIR} failed (exit {result.returncode}):\n"
                f"{(result.stdout + result.stderr)[-4000:]}"
            )
        STAMP.write_text(expected + "\n", encoding="utf-8")
        say(f"installed the npm test tools in {time.monotonic() - started:.0f} s")
    return NODE_MODULES


def _run_node_json(args: list[str], timeout: float, env: dict[str, str] | None = None) -> Any:
    ensure_node_modules()
    node = _require_tool("node")
    command = [node, *args]
    try:
        result = subprocess.run(
            command,
            cwd=JS_DIR,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        raise NodeToolsError(f"{args[0]} timed out after {timeout}s") from exc
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        data = None
    if result.returncode != 0 or not isinstance(data, dict):
        raise NodeToolsError(
            f"`node {' '.join(args)}` failed (exit {result.returncode}):\n"
            f"stdout: {result.stdout[-4000:]}\nstderr: {result.stderr[-4000:]}"
        )
    return data


def run_audit(url: str, timeout: float = AUDIT_TIMEOUT_S) -> dict[str, Any]:
    """Run graphql-http's ``auditServer({url})``.

    Returns ``{"url", "total", "ok": int, "warn": [...], "error": [...], "notice": [...]}``;
    each failed audit is ``{"id", "name", "reason", "httpStatus", "contentType", "body"}``.
    """
    data: dict[str, Any] = _run_node_json(["audit.mjs", url], timeout)
    return data


def run_browser_check(
    url: str,
    query: str,
    expect_text: str,
    screenshot_path: str | os.PathLike[str] | None = None,
    timeout: float = BROWSER_TIMEOUT_S,
    step_timeout_s: float = 30.0,
) -> dict[str, Any]:
    """Open GraphiQL at ``url`` in headless Chromium, run ``query``, wait for ``expect_text``.

    Returns ``{"ok", "resultText", "consoleErrors", "failedRequests", "httpErrors",
    "screenshot", "error", "timingsMs"}``; ``failedRequests`` lists requests to any
    host other than the page's own (they are blocked). A page that fails (no editor,
    no result within ``step_timeout_s``) gives ``ok=False`` and ``error``; only a
    harness crash (no browser, bad arguments) raises :class:`NodeToolsError`.
    """
    chromium = ensure_chromium()
    args = ["browser_check.mjs", url, query, expect_text]
    if screenshot_path is not None:
        args.append(os.fspath(screenshot_path))
    env = {
        "CHROMIUM_PATH": str(chromium),
        "BROWSER_CHECK_STEP_TIMEOUT_MS": str(int(step_timeout_s * 1000)),
    }
    data: dict[str, Any] = _run_node_json(args, timeout, env=env)
    return data


def run_ui_check(
    base: str,
    steps: list[dict[str, Any]],
    timeout: float = BROWSER_TIMEOUT_S,
    step_timeout_s: float = 30.0,
) -> dict[str, Any]:
    """Drive the viewer page through ``steps`` in headless Chromium (``ui_check.mjs``).

    Returns ``{"ok", "results", "consoleErrors", "requests", "offOrigin",
    "httpErrors", "error", "step"}``: ``results`` holds each ``eval`` step's value by
    its ``as`` name; ``requests`` lists every request URL the page made; requests to
    another origin are aborted and listed in ``offOrigin``.
    """
    chromium = ensure_chromium()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"base": base, "steps": steps}, handle)
        scenario = handle.name
    try:
        env = {
            "CHROMIUM_PATH": str(chromium),
            "BROWSER_CHECK_STEP_TIMEOUT_MS": str(int(step_timeout_s * 1000)),
        }
        data: dict[str, Any] = _run_node_json(["ui_check.mjs", scenario], timeout, env=env)
    finally:
        os.unlink(scenario)
    return data


SUBSCRIBE_TIMEOUT_S = 120


def run_subscription(spec: dict[str, Any], timeout: float = SUBSCRIBE_TIMEOUT_S) -> dict[str, Any]:
    """Run one subscription with graphql-ws (see ``subscribe.mjs`` for ``spec``).

    Returns ``{"results": [...], "completed": bool, "error": ..., "closeCode": ...}``.
    """
    data: dict[str, Any] = _run_node_json(["subscribe.mjs", json.dumps(spec)], timeout)
    return data


UI_MODULES_TIMEOUT_S = 60


def run_ui_modules(cases: dict[str, Any], timeout: float = UI_MODULES_TIMEOUT_S) -> dict[str, Any]:
    """Run the viewer's DOM-free modules (highlight, filters, export) on ``cases``
    (see ``ui_modules.mjs``) in Node; returns their answers by kind."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(cases, f)
        path = f.name
    try:
        data: dict[str, Any] = _run_node_json(["ui_modules.mjs", path], timeout)
    finally:
        os.unlink(path)
    return data
