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

The protocol is uvicorn's httptools one (`LimitedHttpToolsProtocol`, its C parser) or,
where httptools is missing, its h11 one (`LimitedH11Protocol`), with a timer armed
when a connection opens and when the first byte of a later request arrives,
cancelled once the request's headers are in (`limits.header_timeout`; it closes the
connection only if, when it fires, the connection still waits for headers), and
`limits.keep_alive_timeout` as uvicorn's own idle timeout. The cap is a
`ConnectionGate` the protocol shares with a `GatedListener`, the listening socket whose
`accept` answers a connection past `limits.max_connections` with a 503 and closes it
there: asyncio accepts up to 2,048 connections per loop turn before any protocol
starts, so a check in `connection_made` alone would let a burst reach EMFILE.
`connection_cap` keeps the cap below the file-descriptor limit. Each limit logs at
most one line per `limits.log_interval`, with how many times it acted meanwhile.

Not a limit, but the same protocol classes: each request's cycle writes through a
`HeadWithBody`, so a response's head leaves with its body in one `send` (uvicorn
writes them apart on either parser).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import resource
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # the C parser (the `standard` extra); h11 where it is missing
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is a base dependency
    HttpToolsProtocol = H11Protocol  # type: ignore[misc, assignment]

from .codes import GatewayCode
from .config import ConnectionLimits
from .errors import simple_error
from .inflight import RETRY_AFTER_SECONDS

logger = logging.getLogger("gateway.server.connections")

ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""The accept errors asyncio reports and retries (`BaseSelectorEventLoop._accept_connection`)."""
MAX_RESERVED_FDS = 256
"""File descriptors kept, besides those open at start, for the database pool, static
files and exports."""


def http_protocol() -> str:
    """uvicorn's HTTP protocol `serve` runs: "httptools" (its C parser, about a quarter
    less CPU per small request than pure-Python h11) when installed, else "h11"."""
    try:
        import httptools  # noqa: F401
    except ImportError:  # pragma: no cover - httptools is a base dependency
        return "h11"
    return "httptools"


def fd_soft_limit() -> int:
    """This process's file-descriptor limit (RLIMIT_NOFILE, soft); a large number if none."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def open_fds() -> int:
    """How many file descriptors this process holds now (0 where /proc does not say)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def reserved_fds(soft: int) -> int:
    """The descriptors kept from connections besides those open at start: 256, or a
    quarter of a small limit."""
    return min(MAX_RESERVED_FDS, soft // 4)


def connection_cap(requested: int, soft: int, in_use: int = 0) -> int:
    """The connections served at once: `requested`, at most `soft - in_use -
    reserved_fds(soft)` (at least 1), so accepting never takes the descriptors the
    database and the rest need (nor runs into EMFILE, whose retry loop is costly)."""
    return max(1, min(requested, soft - in_use - reserved_fds(soft)))


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


class ConnectionGate:
    """The open connections of one server against its cap: uvicorn's own set of them
    (HTTP and WebSocket) plus those accepted whose protocol has not started yet."""

    def __init__(self, cap: int, refusals: ThrottledLog) -> None:
        self.cap = cap
        self.refusals = refusals
        self.busy = busy_response(cap)
        self.connections: set[Any] = set()
        """uvicorn's `server_state.connections` (the protocol hands it over)."""
        self.pending = 0
        self.this_turn = 0
        """Connections admitted in this loop turn (see `ACCEPTS_PER_TURN`)."""
        self.closes = PacedCalls(CLOSES_PER_TURN)
        """The header timeouts' closes, paced."""

    def open(self) -> int:
        return len(self.connections) + self.pending

    def admit(self) -> bool:
        """Whether one more accepted connection may be served (counted if so)."""
        if self.open() >= self.cap:
            return False
        self.pending += 1
        if self.this_turn == 0:
            asyncio.get_running_loop().call_soon(self._new_turn)
        self.this_turn += 1
        return True

    def turn_is_full(self) -> bool:
        return self.this_turn >= ACCEPTS_PER_TURN

    def _new_turn(self) -> None:
        self.this_turn = 0

    def started(self) -> None:
        """An admitted connection's protocol started (it is in `connections` now)."""
        self.pending = max(0, self.pending - 1)

    def refuse(self, conn: socket.socket) -> None:
        """Answer `conn` 503 SERVER_BUSY and close it, now, without the loop."""
        self.refusals.note()
        with contextlib.suppress(OSError):
            conn.setblocking(False)
            conn.send(self.busy)
            conn.recv(65536)  # what it sent already, so the close is a FIN, not a reset
        conn.close()


class PacedCalls:
    """Calls run at most `per_turn` per event-loop turn, in the order they came."""

    def __init__(self, per_turn: int) -> None:
        self.per_turn = per_turn
        self.due: deque[Callable[[], None]] = deque()
        self._scheduled = False

    def add(self, call: Callable[[], None]) -> None:
        self.due.append(call)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        for _ in range(min(self.per_turn, len(self.due))):
            self.due.popleft()()
        if self.due:
            asyncio.get_running_loop().call_soon(self._run)
        else:
            self._scheduled = False


CLOSES_PER_TURN = 64
"""Connections closed by the header timeout per loop turn: a burst that opened together
times out together (4,096 closes in one turn held `/healthz` for most of a second)."""
MAX_REFUSALS_PER_ACCEPT = 256
"""Connections past the cap refused in one accept call before the loop runs again."""
ACCEPTS_PER_TURN = 16
"""Connections admitted per loop turn: asyncio would take up to 2,048 at once and start
them all before anything else runs (a `/healthz` waited 1.1 s behind 3,000 of them)."""


class GatedListener(socket.socket):
    """A listening socket whose `accept` refuses connections past the gate's cap itself.

    asyncio's accept loop takes up to `backlog` (2,048) connections per loop turn
    before any protocol starts, so a cap checked in `connection_made` alone would let a
    burst past the file-descriptor limit (EMFILE). Here a connection past the cap is
    answered and closed inside `accept`, holding its descriptor for microseconds. At
    most `ACCEPTS_PER_TURN` are admitted per loop turn, so a flood of connections
    shares the loop with the requests already in."""

    gate: ConnectionGate

    def accept(self) -> tuple[socket.socket, Any]:
        if self.gate.turn_is_full():
            raise BlockingIOError  # the rest next turn (the listener stays readable)
        for _ in range(MAX_REFUSALS_PER_ACCEPT):
            conn, address = super().accept()  # BlockingIOError when the queue is empty
            if self.gate.admit():
                return conn, address
            self.gate.refuse(conn)
        raise BlockingIOError  # the loop serves others, then comes back (still readable)


def gated_listener(sock: socket.socket, gate: ConnectionGate) -> GatedListener:
    """`sock` (bound) as a `GatedListener` of `gate`; `sock` itself is left detached."""
    listener = GatedListener(sock.family, sock.type, sock.proto, fileno=sock.detach())
    listener.gate = gate
    return listener


class _ConnectionLimits:
    """What both protocols add to uvicorn's (module docstring): the cap checked as a
    connection starts, the header timer, and the keep-alive timeout. A subclass says
    when its connection waits for headers and how it closes one that timed out."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    gate: ClassVar[ConnectionGate]
    header_timeouts: ClassVar[ThrottledLog]
    # uvicorn's protocols hold these
    connections: set[Any]
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    cycle: Any  # the current request's RequestResponseCycle (each parser has its own)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # uvicorn's protocol, next in the MRO
        # uvicorn types it int (whole seconds), but it only passes it to call_later
        setattr(self, "timeout_keep_alive", self.limits.keep_alive_timeout)  # noqa: B010
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False
        self.gate.connections = self.connections

    def _coalesce_cycle(self) -> None:
        """Give the current request's cycle a `HeadWithBody`, once: a cycle that still
        writes to the protocol's own transport has none yet."""
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = cast(asyncio.Transport, HeadWithBody(self.transport))

    # uvicorn's protocol hooks, wrapped (each calls the protocol's own through super())

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._refuse_if_full(cast(asyncio.Transport, transport)):
            return
        super().connection_made(transport)  # type: ignore[misc]
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._cancel_header_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)  # type: ignore[misc]
        self._after_data()

    def _refuse_if_full(self, transport: asyncio.Transport) -> bool:
        """Whether the connection is past the cap (then answered 503 and closed)."""
        self.gate.started()
        # a listener that is not a GatedListener (or a race) can still bring one too many
        if len(self.connections) < self.gate.cap:
            return False
        self._refused = True
        self.transport = transport
        self.gate.refusals.note()
        transport.write(self.gate.busy)
        transport.close()
        return True

    def _after_data(self) -> None:
        if self.transport.is_closing() or not self._waiting_for_headers():
            self._cancel_header_timer()
        elif self._header_timer is None:  # the first bytes of a later request
            self._arm_header_timer()

    def _waiting_for_headers(self) -> bool:
        """Whether this connection's next request has not yet sent all its headers."""
        raise NotImplementedError

    def _close_timed_out(self) -> None:
        self.transport.close()

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.limits.header_timeout, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        self.gate.closes.add(self._close_if_still_waiting)  # a burst over several turns

    def _close_if_still_waiting(self) -> None:
        if self._header_timer is not None:  # headers came, and a later request began
            return
        if self.transport.is_closing() or not self._waiting_for_headers():
            return
        self.header_timeouts.note()
        self._close_timed_out()


class LimitedH11Protocol(_ConnectionLimits, H11Protocol):
    """uvicorn's h11 protocol with a header timeout and a connection cap (module docstring).

    Use `limited_protocol(limits)`, which makes a subclass holding the limits, the
    connection gate and the log lines every connection of one server shares."""

    def handle_events(self) -> None:
        super().handle_events()
        self._coalesce_cycle()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._cancel_header_timer()
        super().handle_websocket_upgrade(event)

    def _waiting_for_headers(self) -> bool:
        return self.conn.their_state is h11.IDLE and (
            self.cycle is None or self.cycle.response_complete
        )

    def _close_timed_out(self) -> None:
        with contextlib.suppress(h11.LocalProtocolError):
            self.conn.send(h11.ConnectionClosed())
        self.transport.close()


class HeadWithBody:
    """A response's transport that sends its head with the first body write, in one
    `send`: uvicorn (httptools and h11 alike) writes the status line and headers, then
    the body, each its own syscall and TCP segment, and the client wakes for the head
    only to wait again for the body. Measured on the 2-core VM (`wrk -c1`,
    `{__typename}`, httptools): the two `send`s were ~27 % of the server's samples,
    and one request at a time ran at about twice the rate with one. The head is held
    only until the end of the loop turn it was written in (a streaming response, SSE,
    still sends its head at once), and `close` sends it first."""

    __slots__ = ("_held", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = b""
        """The head while held; b"" before it, None once sent."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is None:
            self._transport.write(data)
        elif held:
            self._held = None
            self._transport.write(held + data)
        else:  # the head: held for the body of the same turn
            self._held = bytes(data)
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class LimitedHttpToolsProtocol(_ConnectionLimits, HttpToolsProtocol):
    """uvicorn's httptools protocol with the same limits as `LimitedH11Protocol`.

    httptools parses in C and calls back per request; a connection waits for headers
    while as many requests' headers have completed as responses have, so the count of
    each is kept (pipelined requests included)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._heads = 0  # requests whose headers are complete
        self._answered = 0  # responses complete

    def on_headers_complete(self) -> None:
        self._heads += 1
        super().on_headers_complete()
        self._coalesce_cycle()

    def on_response_complete(self) -> None:
        self._answered += 1
        super().on_response_complete()

    def handle_websocket_upgrade(self) -> None:
        self._cancel_header_timer()
        super().handle_websocket_upgrade()

    def _waiting_for_headers(self) -> bool:
        return self._heads == self._answered


def limited_protocol(
    limits: ConnectionLimits, cap: int | None = None, http: str = "h11"
) -> type[LimitedH11Protocol] | type[LimitedHttpToolsProtocol]:
    """The protocol class for one server: `limits`, its `ConnectionGate` (of `cap`,
    default `limits.max_connections`; `serve` passes `connection_cap(...)`) and its log
    lines, on uvicorn's `http` protocol ("h11" or "httptools", see `http_protocol`).
    `serve` listens through `gated_listener(sock, protocol.gate)`."""
    cap = cap if cap is not None else limits.max_connections
    refusals = ThrottledLog(
        logging.WARNING,
        f"refused a connection past the cap of {cap:,} open connections (answered 503 and closed)",
        limits.log_interval,
    )
    header_timeouts = ThrottledLog(
        logging.INFO,
        "closed a connection that sent no complete request headers within "
        f"{limits.header_timeout:g} s",
        limits.log_interval,
    )
    base: type[LimitedH11Protocol] | type[LimitedHttpToolsProtocol] = (
        LimitedHttpToolsProtocol if http == "httptools" else LimitedH11Protocol
    )
    return type(
        f"Served{base.__name__.removeprefix('Limited')}",
        (base,),
        {
            "limits": limits,
            "gate": ConnectionGate(cap, refusals),
            "header_timeouts": header_timeouts,
        },
    )


__all__ = [
    "AcceptErrorLog",
    "ConnectionGate",
    "GatedListener",
    "LimitedH11Protocol",
    "LimitedHttpToolsProtocol",
    "ThrottledLog",
    "busy_response",
    "connection_cap",
    "fd_soft_limit",
    "gated_listener",
    "http_protocol",
    "limited_protocol",
    "open_fds",
    "reserved_fds",
]
