"""The cyclic garbage collector of a `serve` process, set for serving.

Measured on `serve` (SQLite, `session(id)` under `wrk -c32`): about a fifth of the
process's CPU went to the cyclic GC. A request no longer leaves reference cycles
(`tests/test_request_cycles.py`; it left ~90 objects in them), but with 32
requests in flight the young generation is still collected while most of its
objects are in use, so they are promoted and die later in older generations,
whose full collections walk the whole heap: the schema, the type maps, every
imported module, ~150k objects that live as long as the process.

So `serve` does two things, once, before it starts serving (never around an
`await`, and never in a host that embeds the library: that process's collector
is its own):

- `gc.freeze()`: what exists after start-up (the app, the schema, the modules)
  moves to the permanent generation, which collections never walk;
- a young-generation threshold of `YOUNG_THRESHOLD` allocations instead of 700:
  a request's objects are mostly freed by reference counting before the next
  collection, so fewer survive into the older generations.

What it trades: up to `YOUNG_THRESHOLD` container objects (a few MB at most) may
wait for a collection a little longer, and cyclic garbage among the frozen
start-up objects is never collected (there is none to speak of: it is built once).
`session(id)` under wrk, three alternating runs each: 1,950 -> 1,600 us CPU per
request before the cycles were removed, 1,740-1,860 -> 1,240-1,580 us after.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def tune_for_serving() -> None:
    """Freeze the start-up heap and raise the young-generation threshold (above)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
