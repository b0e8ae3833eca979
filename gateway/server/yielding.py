"""Cooperative yield points: a large answer never holds the event loop for long.

Resolvers of one request run as many asyncio tasks that rarely suspend (a live
session answers from memory; a stored page may come from a batch already
read), and asyncio runs every task that is ready in a loop turn before it
polls sockets again. So an accepted but large query (tens of thousands of
objects) would otherwise hold the loop for its whole execution: `/healthz`
and every other request would wait, and a timed-out operation could not be
cancelled until it finished.

`checkpoint()` is called where resolvers start work that fans out (a view of
a session, a session by id), where they hand a page they read to the executor
(`Context.loaded`), and by the answer's writer between its pieces
(`gateway.server.jsonwire.encode_answer`). Once the current loop turn has been busy for
`SLICE` seconds (measured from its first checkpoint, or from the turn's start
when a checkpoint queued a marker in the turn before), the caller yields and
so does every other caller in the same turn, until the next turn starts: then
the loop polls sockets, serves other requests, and a cancelled (timed-out)
operation stops at its next checkpoint instead of finishing. A request's
first `GRACE` seconds never yield, nor do turns shorter than `SLICE`, so
ordinary requests keep their batched backend calls (`gateway.core.batching`
batches the questions asked in one turn).

Times are the loop thread's CPU time (`time.thread_time()`), not wall time:
waiting for the database is not being busy, and a machine busy with other
processes does not make a small request look long (and split its batches).
The state is per event loop (a weak map), so several loops in one process
(tests, embedding hosts) do not interfere.
"""

from __future__ import annotations

import asyncio
import time
import weakref

SLICE = 0.01
GRACE = 0.05


class _Turn:
    """How long the loop has been busy in the current turn, as checkpoints see it."""

    __slots__ = ("busy_since", "draining", "marked")

    def __init__(self) -> None:
        self.busy_since = 0.0
        self.draining = False
        self.marked = False  # a `mark` is queued: it runs when the next turn starts

    def mark(self) -> None:
        self.busy_since = time.thread_time()
        self.draining = False
        self.marked = False


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turn] = weakref.WeakKeyDictionary()


async def checkpoint(started: float) -> None:
    """Yield to the event loop if the current loop turn has been busy for `SLICE` seconds
    and the loop for `GRACE` seconds since the request began (`started`, a
    `time.thread_time()` of the loop's thread)."""
    if time.thread_time() - started < GRACE:
        return
    loop = asyncio.get_running_loop()
    turn = _turns.get(loop)
    if turn is None:
        turn = _turns[loop] = _Turn()
    while True:
        if not turn.draining:
            if not turn.marked:  # first checkpoint of this turn: measure from now
                turn.marked = True
                turn.busy_since = time.thread_time()
                loop.call_soon(turn.mark)
                return
            if time.thread_time() - turn.busy_since < SLICE:
                return
            turn.draining = True  # the queued `mark` ends the drain next turn
        await asyncio.sleep(0)
