"""Whether the package index answers: checks that need it skip, with the reason, when not."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

DEFAULT_INDEX = "https://pypi.org/simple/"


def index_url() -> str:
    """The index pip would use: PIP_INDEX_URL, else pip's configuration, else PyPI."""
    if url := os.environ.get("PIP_INDEX_URL"):
        return url
    configured = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
        capture_output=True,
        text=True,
    )
    return configured.stdout.strip() if configured.returncode == 0 else DEFAULT_INDEX


def package_index_unreachable(timeout: float = 10) -> str | None:
    """None when the index answers; otherwise why not, as a skip reason."""
    url = index_url().rstrip("/") + "/pip/"
    try:
        answer = httpx.get(url, timeout=timeout, follow_redirects=True)
    except httpx.HTTPError as exc:
        return f"the package index {url} cannot be reached ({type(exc).__name__}: {exc})"
    if answer.status_code >= 400:
        return f"the package index {url} answered {answer.status_code}"
    return None
