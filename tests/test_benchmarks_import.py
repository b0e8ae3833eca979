"""Benchmarks are not run by the tests (figures belong in benchmarks/), but they must
keep importing: a refactor that breaks one should fail here, not on the next run."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted(
    p.stem
    for p in (Path(__file__).parent.parent / "benchmarks").glob("*.py")
    if p.stem != "__init__"
)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_module_imports(name):
    module = importlib.import_module(f"benchmarks.{name}")
    assert module.__doc__, f"benchmarks/{name}.py says what it measures"
