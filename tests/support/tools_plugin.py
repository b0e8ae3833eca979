"""pytest plugin: install the system tools a run needs up front, where CI logs show it.

Chromium (Debian's package) and the npm test tools are fetched on first use. Done
inside a test, their install ran for a minute or more behind pytest's output capture,
with no word in the log. Here they are installed once, after collection and only
when a selected test needs them, with a progress line before and a timing after.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.support import browser, node_tools
from tests.support.apt import say


def _needs_node(item: pytest.Item) -> bool:
    """The test's module calls into `tests.support.node_tools` (or drives Chromium)."""
    module = getattr(item, "module", None)
    return any(
        getattr(value, "__module__", None) in (node_tools.__name__, "tests.support.access_browser")
        for value in vars(module).values()
    ) if module is not None else False  # fmt: skip


def pytest_collection_finish(session: pytest.Session) -> None:
    items = session.items
    wants_browser = any(item.get_closest_marker("browser") for item in items)
    wants_node = wants_browser or any(_needs_node(item) for item in items)
    capture = session.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        try:
            if wants_browser:
                browser.ensure_chromium()  # announces an install itself
            if wants_node:
                node_tools.ensure_node_modules()  # announces an install itself
        except (browser.ChromiumUnavailable, node_tools.NodeToolsError) as exc:
            say(str(exc))  # the tests that need the tool fail with this message themselves
