"""Run an attack against a real server while `/healthz` is polled: did the server keep serving?"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx


def healthz_while(base: str, attack: Callable[[httpx.Client], Any]) -> tuple[Any, float]:
    """Run `attack(client)` in a thread; poll `base`/healthz until it ends.

    Returns what the attack returned and the slowest `/healthz` answer meanwhile
    (the time a probe waited, or 30 s when one never answered).
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            try:
                outcome["value"] = attack(client)
            except BaseException as exc:  # re-raised in the test's thread
                outcome["error"] = exc

    thread = threading.Thread(target=run)
    slowest = 0.0
    with httpx.Client(base_url=base, timeout=30) as probe:
        probe.get("/healthz")  # connect before the attack starts
        thread.start()
        while thread.is_alive():
            started = time.perf_counter()
            try:
                assert probe.get("/healthz").status_code == 200
                slowest = max(slowest, time.perf_counter() - started)
            except httpx.TimeoutException:
                slowest = 30.0
            time.sleep(0.02)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], slowest
