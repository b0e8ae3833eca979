"""Connection limits under the app: a header timeout, a connection cap, throttled accept errors.

`serve` runs uvicorn with `limited_protocol(limits)` as its HTTP protocol and
`AcceptErrorLog` as the loop's exception handler. Written by hand because uvicorn
(0.30-0.54) has none of it:

* no header timeout: `timeout_keep_alive` is armed only after a response, so a
  connection that never finishes its first request's headers (slowloris) is kept
  forever; `h11_max_incomplete_event_size` bounds the bytes, not the time.
* no connection cap: `limit_concurrency` answers a request past it with a plain-text
  503 (and counts `/healthz` like the rest), but accepts and keeps every idle
  connection, each holding a file descriptor until `accept` fails with EMFILE.
* asyncio's accept loop, out of descriptors, calls the loop's exception handler for
  each of up to `backlog` (2,048) accepts per loop turn, each a traceback block at
  ERROR (312,543 of them in a minute of ~21,000 idle connections).

The protocol is uvicorn's h11 one (the one installed here; httptools' callbacks
differ), with three additions: a timer armed when a connection opens and when the
first byte of a later request arrives, cancelled once the request's headers are in
(`limits.header_timeout`; it closes the connection only if, when it fires, the
connection is still waiting for headers); a check at `connection_made` that answers
one connection past `limits.max_connections` with a 503 and closes it at once; and
`limits.keep_alive_timeout` as uvicorn's own idle timeout. Each limit logs at most
one line per `limits.log_interval`, with how many times it acted meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import resource
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .codes import GatewayCode
from .config import ConnectionLimits
from .errors import simple_error
from .inflight import RETRY_AFTER_SECONDS

logger = logging.getLogger("gateway.server.connections")

ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""The accept errors asyncio reports and retries (`BaseSelectorEventLoop._accept_connection`)."""
MAX_RESERVED_FDS = 256
"""File descriptors kept for the database pool, static files, logs and the loop itself."""


def fd_soft_limit() -> int:
    """This process's file-descriptor limit (RLIMIT_NOFILE, soft); a large number if none."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def reserved_fds(soft: int) -> int:
    """The descriptors not given to connections: 256, or a quarter of a small limit."""
    return min(MAX_RESERVED_FDS, soft // 4)


def connection_cap(requested: int, soft: int) -> int:
    """The connections served at once: `requested`, at most `soft - reserved_fds(soft)`
    (at least 1), so accepting never runs out of descriptors the rest needs."""
    return max(1, min(requested, soft - reserved_fds(soft)))


class ThrottledLog:
    """One log line per `interval` about one recurring event: the first occurrence at
    once, then, when the interval ends, how many more there were (if any)."""

    def __init__(self, level: int, text: str, interval: float) -> None:
        self.level = level
        self.text = text
        self.interval = interval
        self.pending = 0
        self.total = 0
        self.detail = ""
        self._timer: asyncio.TimerHandle | None = None

    def note(self, detail: str = "") -> None:
        self.total += 1
        self.detail = detail
        if self._timer is None:
            logger.log(
                self.level,
                "%s%s (more in the next %g s are counted, not logged)",
                self.text,
                f": {detail}" if detail else "",
                self.interval,
            )
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._flush)
        else:
            self.pending += 1

    def _flush(self) -> None:
        self._timer = None
        if not self.pending:
            return
        logger.log(
            self.level,
            "%s%s: %d more in the last %g s",
            self.text,
            f": {self.detail}" if self.detail else "",
            self.pending,
            self.interval,
        )
        self.pending = 0
        self._timer = asyncio.get_running_loop().call_later(self.interval, self._flush)


class AcceptErrorLog:
    """The loop's exception handler: accept errors (EMFILE, ...) are one WARNING line
    per interval with their count, no traceback; anything else goes to the handler that
    was there before (asyncio's default, which logs it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.previous = loop.get_exception_handler()
        self.log = ThrottledLog(
            logging.WARNING,
            "cannot accept connections (out of file descriptors or memory; they wait "
            "in the listen queue)",
            interval,
        )

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.set_exception_handler(self)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in ACCEPT_ERRNOS and "socket" in context:
            self.log.note(f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}")
            return
        if self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)


def busy_response(cap: int) -> bytes:
    """The whole HTTP answer to a connection past the cap: 503 SERVER_BUSY, then close."""
    message = f"the server holds {cap} connections already, its limit; retry later"
    body = json.dumps({"errors": [simple_error(GatewayCode.SERVER_BUSY, message)]}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "content-type: application/json; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\n"
        f"retry-after: {RETRY_AFTER_SECONDS}\r\n"
        "cache-control: no-store\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout and a connection cap (module docstring).

    Use `limited_protocol(limits)`, which makes a subclass holding the limits and the
    log lines every connection of one server shares."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    cap: ClassVar[int] = ConnectionLimits().max_connections
    refusals: ClassVar[ThrottledLog]
    header_timeouts: ClassVar[ThrottledLog]
    busy: ClassVar[bytes]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.limits.keep_alive_timeout  # type: ignore[assignment]
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.cap:
            self._refused = True
            self.transport = transport
            self.refusals.note()
            transport.write(self.busy)
            transport.close()
            return
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self.transport.is_closing() or not self._waiting_for_headers():
            self._cancel_header_timer()
        elif self._header_timer is None:  # the first bytes of a later request
            self._arm_header_timer()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._cancel_header_timer()
        super().handle_websocket_upgrade(event)

    def _waiting_for_headers(self) -> bool:
        """Whether this connection's next request has not yet sent all its headers."""
        return self.conn.their_state is h11.IDLE and (
            self.cycle is None or self.cycle.response_complete
        )

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._waiting_for_headers():
            return
        self.header_timeouts.note()
        with contextlib.suppress(h11.LocalProtocolError):
            self.conn.send(h11.ConnectionClosed())
        self.transport.close()


def limited_protocol(limits: ConnectionLimits, cap: int | None = None) -> type[H11Protocol]:
    """The protocol class for one server: `limits`, the connection cap `cap` (default
    `limits.max_connections`; `serve` passes `connection_cap(...)`), and its log lines."""
    cap = cap if cap is not None else limits.max_connections
    return type(
        "ServedH11Protocol",
        (LimitedH11Protocol,),
        {
            "limits": limits,
            "cap": cap,
            "busy": busy_response(cap),
            "refusals": ThrottledLog(
                logging.WARNING,
                f"refused a connection past the cap of {cap:,} open connections "
                "(answered 503 and closed)",
                limits.log_interval,
            ),
            "header_timeouts": ThrottledLog(
                logging.INFO,
                "closed a connection that sent no complete request headers within "
                f"{limits.header_timeout:g} s",
                limits.log_interval,
            ),
        },
    )


__all__ = [
    "AcceptErrorLog",
    "LimitedH11Protocol",
    "ThrottledLog",
    "busy_response",
    "connection_cap",
    "fd_soft_limit",
    "limited_protocol",
    "reserved_fds",
]
