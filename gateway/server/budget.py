"""The per-request budget of an answer: bytes (RESPONSE_TOO_LARGE) and listed objects.

The cost estimate (`gateway.server.cost`) refuses before execution what the
document shows to be too large, but it cannot know how long an unpaged list
(`surface`, `children`, lineage lists) is, nor how big a stored payload is.
So every operation's context holds a `ResponseBudget`, charged while the answer
is built, and the answer stops at the first charge past a limit:

* `payload(value)` (the `Event.data` resolver): the payload's JSON length.
  While the answer is small (`FAST_PATH_BYTES`, written in one call) only the
  length is kept (in characters: a lower bound of its bytes); past that the
  bytes are kept too, so the serializer writes them instead of encoding the
  payload again (a payload asked twice is charged twice, encoded once).
  Strings are charged their length.
* `listed(n)` (the resolvers of unpaged lists): objects returned beyond the
  estimate, counted against the cost limit (QUERY_TOO_COSTLY), so 30 aliases
  of a 200,000-event `surface` stop at the first one instead of building six
  million result objects (`Context.surface` counts a long log's surface before
  reading it, from the stored class counts).
* The serializer (`gateway.server.jsonwire.encode_answer`) counts every byte it
  writes; whichever count passes the limit first ends the answer.

A charge past a limit raises `GatewayError` in the resolver and marks the
budget `tripped`: the pipeline then answers with that one error and no data,
whatever partial result the executor assembled. Charges never exceed what the
answer really holds, so an answer just under the budget is served in full.
A subscription's budget is per event (`reset` after each one is written).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from .codes import GatewayCode
from .errors import GatewayError
from .jsonwire import FAST_PATH_BYTES, encode_text

RESPONSE_TOO_LARGE = GatewayCode.RESPONSE_TOO_LARGE
QUERY_TOO_COSTLY = GatewayCode.QUERY_TOO_COSTLY


def _not_json(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def _encoder() -> Callable[[Any], str]:
    """Compact JSON text of a payload, non-ASCII kept: the C encoder made once (no
    circularity markers: a payload came from JSON), about half the time per payload
    of `json.dumps`, which builds an encoder per call."""
    if c_make_encoder is None:  # pragma: no cover - CPython has the accelerator
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    encode = c_make_encoder(None, _not_json, encode_basestring, None, ":", ",", False, False, False)
    return lambda value: "".join(encode(value, 0))


_dumps = _encoder()


@dataclass(slots=True)
class ResponseBudget:
    """What one answer may still hold; see the module docstring. `max_bytes` None:
    unlimited (a context made outside the pipeline)."""

    max_bytes: int | None = None
    max_objects: int | None = None
    spent: int = 0
    """Bytes charged so far (a lower bound of the answer's size)."""
    objects: int = 0
    tripped: GatewayError | None = None
    started: float = field(default_factory=time.thread_time)
    encoded: dict[int, tuple[Any, bytes]] = field(default_factory=dict)
    """Payloads encoded by `payload`, by `id` (the value is kept, so the id stays its own)."""

    # -- charges ---------------------------------------------------------------------

    def payload(self, value: Any) -> Any:
        """`value` (an event payload) as is, its bytes charged."""
        limit = self.max_bytes
        if limit is None:
            return value
        if self.tripped is not None:
            raise self.tripped
        if isinstance(value, dict | list):
            known = self.encoded.get(id(value))
            if known is not None:
                self.spent += len(known[1])
            elif self.spent <= FAST_PATH_BYTES:
                # Still a small answer, written in one call: its length in characters (a
                # lower bound of its bytes) is all it needs, and no copy is kept.
                self.spent += len(_dumps(value))
            else:
                known = self.encoded[id(value)] = (value, encode_text(_dumps(value)))
                self.spent += len(known[1])
        elif isinstance(value, str):
            self.spent += len(value) + 2
        if self.spent > limit:
            raise self.too_large()
        return value

    def charge(self, n: int) -> None:
        """`n` more bytes of the answer; GatewayError(RESPONSE_TOO_LARGE) past the budget."""
        self.spent += n
        if self.max_bytes is not None and self.spent > self.max_bytes:
            raise self.too_large()

    def listed(self, n: int) -> None:
        """`n` objects returned by an unpaged list; GatewayError(QUERY_TOO_COSTLY) once
        the operation's lists hold more objects than the cost limit."""
        if self.tripped is not None:
            raise self.tripped
        self.objects += n
        if self.max_objects is not None and self.objects > self.max_objects:
            self.tripped = GatewayError(
                QUERY_TOO_COSTLY,
                f"the operation's unpaged lists hold more than the limit of {self.max_objects} "
                "objects (ask for a page with `events(first:)`, or split the query)",
            )
            raise self.tripped

    def check(self) -> None:
        """Raise the error that ended this answer, if one did (a cheap guard for
        resolvers that start more work)."""
        if self.tripped is not None:
            raise self.tripped

    def too_large(self) -> GatewayError:
        """The RESPONSE_TOO_LARGE error (the budget is marked tripped)."""
        if self.tripped is None:
            self.tripped = GatewayError(
                RESPONSE_TOO_LARGE,
                f"the answer is larger than the response budget of {self.max_bytes} bytes "
                "(ask for smaller pages with `first`, fewer fields, or split the query)",
            )
        return self.tripped

    def reset(self) -> None:
        """Start the budget again (a subscription's next event)."""
        self.spent = 0
        self.objects = 0
        self.tripped = None
        self.encoded.clear()
        self.started = time.thread_time()


__all__ = ["QUERY_TOO_COSTLY", "RESPONSE_TOO_LARGE", "ResponseBudget"]
