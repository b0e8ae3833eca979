"""Shared test set-up: the real-PostgreSQL plugin, and the repo's test data location."""

from pathlib import Path

pytest_plugins = ["tests.support.pg_plugin", "tests.support.tools_plugin"]

DATA_DIR = Path(__file__).parent / "data"
