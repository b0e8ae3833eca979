"""The project's own checks run with the tests: ruff over everything, mypy strict on gateway/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    result = run(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = run(str(BIN / "ruff"), "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_gateway_passes():
    result = run(str(BIN / "mypy"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_imports_nothing_of_graphql_or_sql():
    code = (
        "import sys, gateway.core; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('strawberry', 'graphql', 'sqlalchemy', 'alembic', 'asyncpg', 'aiosqlite', 'starlette')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_gc_pause_is_never_held_across_an_await():
    """gc_paused() switches the collector off for the whole process: a block that awaits
    would keep it off while other requests run (issue 8). Every such block must be sync."""
    import ast

    held = []
    for path in (ROOT / "gateway").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.With, ast.AsyncWith)):
                continue
            pauses = any("gc_paused" in ast.unparse(item.context_expr) for item in node.items)
            awaits = any(
                isinstance(n, (ast.Await, ast.AsyncFor, ast.AsyncWith)) for n in ast.walk(node)
            )
            if pauses and awaits:
                held.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not held, held


def test_the_core_modules_import_one_another_without_a_circle():
    """Within gateway/core a module imports only modules below it (TYPE_CHECKING imports
    included): an import circle is a piece that calls back into what built it."""
    import ast

    core = ROOT / "gateway" / "core"
    imports: dict[str, set[str]] = {}
    for path in core.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found.update([node.module.split(".")[0]] if node.module else [])
                found.update(a.name for a in node.names if node.module is None)
        imports[path.stem] = found - {"__init__"}

    def circle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            module, path = stack.pop()
            for dep in imports.get(module, ()):
                if dep == start:
                    return [*path, dep]
                if dep not in path:
                    stack.append((dep, [*path, dep]))
        return None

    circles = [c for m in sorted(imports) if m != "__init__" and (c := circle_from(m))]
    assert not circles, circles
