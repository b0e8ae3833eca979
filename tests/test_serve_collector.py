"""`serve` sets the cyclic collector for serving (gateway.server.collector): the
start-up heap frozen, the young-generation threshold raised; a host that only
imports the library keeps its own collector settings."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import gc, json
before = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
import gateway, gateway.server.app
imported = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
from gateway.server.collector import YOUNG_THRESHOLD, tune_for_serving
tune_for_serving()
after = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(), "young": YOUNG_THRESHOLD}
print(json.dumps([before, imported, after]))
"""


def test_serving_freezes_the_start_up_heap_and_raises_the_young_threshold() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout
    before, imported, after = json.loads(out)
    assert imported == before, "importing the library changed the host's collector"
    assert after["threshold"][0] == after["young"] > before["threshold"][0]
    assert after["threshold"][1:] == before["threshold"][1:]
    assert after["frozen"] > 10_000  # the modules, the schema's types: not walked again


def test_serve_tunes_the_collector_before_it_serves() -> None:
    """The call sits in serve's start-up, before uvicorn serves (not in create_app)."""
    from pathlib import Path

    import gateway.commands.serve as serve
    import gateway.server.app as app

    source = Path(serve.__file__).read_text()
    assert source.index("tune_for_serving()") < source.index("await server.serve(")
    assert "tune_for_serving" not in Path(app.__file__).read_text()
