"""Pausing Python's cyclic garbage collector around bulk building of acyclic objects.

Reading, folding and listing a long log allocates 10^5-10^6 small objects,
none of them cyclic; every automatic full collection on the way walks the
whole heap, which roughly doubles the time. Nested and concurrent pauses
(other tasks, other threads) share one pause: the collector is re-enabled when
the last one ends, and only if it was enabled when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic cyclic-GC passes inside the block."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
