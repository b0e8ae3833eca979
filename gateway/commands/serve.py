"""Run the GraphQL gateway over HTTP (uvicorn).

GraphiQL is at http://HOST:PORT/graphql in a browser; clients POST (or GET)
GraphQL there. /healthz says the process is up; /readyz that the database
answers. /mcp serves agents the read-only session tools over MCP streamable
HTTP, under the same access rules as /graphql (`session-gateway mcp` is the
stdio form).

The database is --database URL, else $SESSION_GATEWAY_DATABASE_URL, else the
embedded SQLite file $XDG_DATA_HOME/session-gateway/sessions.db
(~/.local/share/session-gateway/sessions.db), created on first use. Any other
SQLite file must exist and hold only the gateway's tables, unless --create
(a typo would otherwise serve a new empty database). The banner shows the
resolved location (the absolute path for SQLite). A database that does not
answer at start gets a warning line; the gateway serves anyway and /readyz
says 503 until it answers. A database that answers with a schema this version
cannot use (an unmigrated PostgreSQL database, one behind or ahead of this
version) is refused with one line naming the `migrate` command to run (exit 2).

--demo serves a demo corpus (forks, a missing parent, nested compactions, a
tool-result rewrite, a session both live and persisted, and a live session a
simulated agent keeps appending to) from a fresh temporary SQLite database,
always: --demo with --database is refused, and $SESSION_GATEWAY_DATABASE_URL
is not used. --demo --auth tokens makes two tokens in that database (one `all`,
one `cwd:/work/release`) and prints them: `token create` writes another database.

Access: with --auth tokens (or SESSION_GATEWAY_AUTH=tokens) /graphql, /mcp and
/metrics need `Authorization: Bearer TOKEN`, a token made with `session-gateway
token create`, and each caller sees only the sessions its grants allow. The
tokens' hashing key comes from $SESSION_GATEWAY_TOKEN_KEY, else the key file
`token create` wrote. Without --auth the gateway serves everyone everything, so
it binds loopback (127.0.0.1) by default; binding another address needs
--allow-remote, which also needs --auth tokens (or --insecure-no-auth when
something in front of the gateway authenticates).

On a loopback bind only requests whose Host header is localhost, 127.0.0.1,
[::1] or the bind address are served (421 otherwise: DNS-rebinding
protection); --allowed-host adds names. --max-cost bounds the objects one
operation may return (gateway.server.cost); --max-response-bytes (or
$SESSION_GATEWAY_MAX_RESPONSE_BYTES) the bytes of one answer
(gateway.server.budget: RESPONSE_TOO_LARGE past it).

Connections (gateway.server.connections, gateway.server.inflight): at most
--max-in-flight HTTP requests are worked on at once (past it 503 SERVER_BUSY with
Retry-After; /healthz is never refused); a connection must send its request
headers within --header-timeout and is closed after --keep-alive-timeout idle; at
most --max-connections are open (at most the file-descriptor limit less a reserve:
one more is answered 503 and closed); an accept that fails for lack of descriptors
is one log line per 10 s, with a count.

Ctrl-C (SIGINT) and SIGTERM stop it gracefully: open WebSockets are closed, HTTP
responses still streaming after a few seconds are dropped, the database
connections are closed, and the exit status is 128 + the signal (130, 143).

Tracing (OpenTelemetry, the `otel` extra): on with --otel, or when the standard
environment asks for it ($OTEL_TRACES_EXPORTER other than `none`, or
$OTEL_EXPORTER_OTLP_ENDPOINT / $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set);
OTEL_SDK_DISABLED=true keeps it off whatever else says. The SDK reads the rest of
its OTEL_* variables itself (gateway.observability.tracing.provider_from_env).
--otel without the extra is refused; the environment alone without it gets a
warning line and no tracing.

--workers N runs N worker processes on the one port, for deployments whose live
stores are not in the serving process (persisted-only; the container image):
the parent binds N SO_REUSEPORT sockets, migrates once, forks the workers and
supervises them (SIGINT/SIGTERM stop them all; one worker exiting stops the
rest). Each worker opens its own database engine, keeps its own /metrics
(`gateway_worker{worker,pid}` names it) and flushes token last-used times
itself. Live stores (--demo) are single-process: asking for both is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.commands import add_database_argument
from gateway.commands.database import DatabaseRefused, check_serve_target, resolve
from gateway.commands.serve_access import access_options, add_access_arguments, manifest_path
from gateway.observability.logging import add_logging_arguments
from gateway.server.config import (
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_COST,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES_IN_FLIGHT,
)

if TYPE_CHECKING:
    from gateway.commands.database import ResolvedDatabase
    from gateway.server.config import ConnectionLimits, GatewayConfig

logger = logging.getLogger("gateway.serve")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
ENV_CURSOR_SECRET = "SESSION_GATEWAY_CURSOR_SECRET"
ENV_AUTH = "SESSION_GATEWAY_AUTH"
ENV_MAX_RESPONSE_BYTES = "SESSION_GATEWAY_MAX_RESPONSE_BYTES"
AUTH_MODES = ("none", "tokens")
OTEL_EXTRA = "pip install 'session-query-gateway[otel]'"
OTEL_SWITCHES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
"""Standard variables whose presence means "export traces" (besides $OTEL_TRACES_EXPORTER)."""
STREAM_GRACE = 3.0
"""Seconds a stop waits for open HTTP responses (event streams) before dropping them,
well inside `docker stop`'s 10 s."""
STARTUP_PROBE_TIMEOUT = 10.0
"""Seconds the start-up check waits for the database before warning and serving anyway."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_database_argument(parser)
    parser.add_argument(
        "--create",
        action="store_true",
        help="serve a SQLite file that does not exist yet (created empty) or that holds "
        "other tables too (the gateway's are added)",
    )
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to bind (default {DEFAULT_PORT})"
    )
    parser.add_argument("--demo", action="store_true", help="serve the demo corpus")
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow binding a non-loopback address (needs --auth tokens or --insecure-no-auth)",
    )
    parser.add_argument(
        "--auth",
        choices=AUTH_MODES,
        default=None,
        help=f"`tokens`: require a bearer token (see `token create`); default ${ENV_AUTH}, "
        "else none",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="with --allow-remote: serve without auth (only behind a proxy that authenticates)",
    )
    parser.add_argument(
        "--max-cost",
        type=int,
        default=DEFAULT_MAX_COST,
        metavar="N",
        help=f"refuse operations estimated to return more than N objects "
        f"(QUERY_TOO_COSTLY; default {DEFAULT_MAX_COST:,})",
    )
    parser.add_argument(
        "--max-response-bytes",
        type=int,
        default=None,
        metavar="N",
        help=f"refuse answers larger than N bytes, counted as they are built "
        f"(RESPONSE_TOO_LARGE; default ${ENV_MAX_RESPONSE_BYTES}, else "
        f"{DEFAULT_MAX_RESPONSE_BYTES:,} = {DEFAULT_MAX_RESPONSE_BYTES >> 20} MiB)",
    )
    parser.add_argument(
        "--max-response-bytes-in-flight",
        type=int,
        default=DEFAULT_MAX_RESPONSE_BYTES_IN_FLIGHT,
        metavar="N",
        help=f"bytes of all the answers being built at once, the server's memory for "
        f"answers; past it 503 SERVER_BUSY with Retry-After (default "
        f"{DEFAULT_MAX_RESPONSE_BYTES_IN_FLIGHT:,} = "
        f"{DEFAULT_MAX_RESPONSE_BYTES_IN_FLIGHT >> 20} MiB)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="also serve requests whose Host header names HOST (repeatable; any port; "
        "'*.example.com' for subdomains). On a loopback bind only localhost, 127.0.0.1 "
        "and [::1] are served otherwise (DNS-rebinding protection); on another bind "
        "without this option, any Host is served",
    )
    parser.add_argument(
        "--agent-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="--demo: seconds between the simulated agent's appends (default 1)",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="trace requests, operations and database calls with OpenTelemetry (needs "
        f"{OTEL_EXTRA}; configured by the standard OTEL_* variables, OTLP over HTTP to "
        "$OTEL_EXPORTER_OTLP_ENDPOINT by default). Also on when $OTEL_TRACES_EXPORTER or "
        "$OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT is set; OTEL_SDK_DISABLED=true turns it off",
    )
    add_connection_arguments(parser)
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="serve from N worker processes sharing the port (persisted sessions only; "
        "refused with --demo, whose live store is single-process; default 1)",
    )
    add_access_arguments(parser)
    add_logging_arguments(parser)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of the connection limits (issue 20): in-flight requests, header and
    idle timeouts, open connections."""
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=DEFAULT_MAX_IN_FLIGHT,
        metavar="N",
        help=f"HTTP requests worked on at once; past it 503 SERVER_BUSY with Retry-After "
        f"(/healthz is never refused; an SSE stream counts until it starts; "
        f"default {DEFAULT_MAX_IN_FLIGHT})",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT,
        metavar="SECONDS",
        help="close a connection that has not sent complete request headers this long "
        f"after it opened (or after a later request's first byte) (default "
        f"{DEFAULT_HEADER_TIMEOUT:g})",
    )
    parser.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=DEFAULT_KEEP_ALIVE_TIMEOUT,
        metavar="SECONDS",
        help=f"close a keep-alive connection idle this long after a response (default "
        f"{DEFAULT_KEEP_ALIVE_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help=f"open connections, HTTP and WebSocket (default {DEFAULT_MAX_CONNECTIONS:,}); "
        "never more than the file-descriptor limit (ulimit -n) less those open at start "
        "and a reserve of 256 (a quarter of a small limit); one more is answered 503 "
        "SERVER_BUSY and closed",
    )
    parser.add_argument(
        "--http",
        choices=("auto", "httptools", "h11"),
        default="auto",
        help="uvicorn's HTTP parser: httptools (C) when installed, else h11 (default auto); "
        "the connection limits hold with either",
    )
    parser.add_argument(
        "--ws-compression",
        action="store_true",
        help="compress WebSocket messages (permessage-deflate) for clients that offer it: "
        "less bandwidth for large events, at about a third more server CPU per subscriber "
        "and event (each connection compresses its own copy of a shared answer) and a "
        "compression context per connection (default off)",
    )
    parser.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="the event loop: uvloop when installed, else asyncio's own (default auto)",
    )


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine (127.0.0.0/8, ::1 or localhost)."""
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(bind: str, extra: list[str]) -> tuple[str, ...] | None:
    """The Host names `serve` answers: the loopback names and the bind address itself,
    plus `extra`; None (any Host) on a non-loopback bind when `extra` is empty."""
    from gateway.server.host_check import LOOPBACK_HOSTS

    if not is_loopback(bind) and not extra:
        return None
    own = f"[{bind.strip('[]')}]" if ":" in bind else bind  # e.g. 127.0.0.2 itself
    return tuple(dict.fromkeys((*LOOPBACK_HOSTS, own.lower(), *extra)))


def remote_refusal(host: str) -> str:
    return (
        f"refusing to bind {host}: it is not a loopback address. The gateway is trusted "
        "infrastructure, so anyone who can reach that address could read every session. "
        "Bind 127.0.0.1 (the default), or pass --allow-remote with --auth tokens "
        "(or --insecure-no-auth if something in front of it authenticates)."
    )


def remote_without_auth_refusal(host: str) -> str:
    return (
        f"refusing to bind {host} without authentication: anyone who can reach it could "
        "read every session. Add --auth tokens (create tokens with `session-gateway token "
        "create`), or --insecure-no-auth if something in front of the gateway authenticates."
    )


def auth_mode(args: argparse.Namespace) -> str | None:
    """The --auth mode, else $SESSION_GATEWAY_AUTH, else "none"; None if the env is bad."""
    mode = args.auth or os.environ.get(ENV_AUTH, "").strip().lower() or "none"
    return mode if mode in AUTH_MODES else None


def tracing_requested(flag: bool, environ: Mapping[str, str]) -> bool:
    """Whether to trace: --otel, or the standard environment asking for an exporter;
    OTEL_SDK_DISABLED=true wins over both."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if flag:
        return True
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return any(environ.get(name, "").strip() for name in OTEL_SWITCHES)


def tracer_provider(flag: bool, environ: Mapping[str, str]) -> tuple[Any, str | None]:
    """`(provider or None, banner text)`; raises `TracingUnavailable` with the line to print
    when tracing is asked for and cannot be had (a warning when only the env asked)."""
    if not tracing_requested(flag, environ):
        return None, None
    try:
        import gateway.observability.tracing as tracing
    except ImportError as exc:
        missing = exc.name or "opentelemetry"
        raise TracingUnavailable(
            f"tracing needs the otel extra (no module {missing!r}): {OTEL_EXTRA}",
            fatal=flag,
        ) from None
    try:
        provider = tracing.provider_from_env(environ)
    except tracing.TracingConfigError as exc:
        raise TracingUnavailable(str(exc), fatal=True) from None
    return provider, tracing.exporter_description(environ)


class TracingUnavailable(Exception):
    def __init__(self, message: str, *, fatal: bool) -> None:
        super().__init__(message)
        self.fatal = fatal


def _open_backend(url: str) -> Any:
    from gateway.persistence import SqlPersistence

    return SqlPersistence(url)


def banner(
    base: str,
    demo: bool,
    auth: str = "none",
    database: str | None = None,
    tracing: str | None = None,
    demo_tokens: Sequence[tuple[str, tuple[str, ...], str]] = (),
    limits: str | None = None,
) -> str:
    lines = [
        "",
        f"  GraphiQL:  {base}/graphql   (open it in a browser)",
        f"  Viewer:    {base}/ui        (sessions, lineage, surface)",
        f"  GraphQL:   POST/GET {base}/graphql",
        f"  Health:    {base}/healthz   Readiness: {base}/readyz",
        f"  MCP:       {base}/mcp       (agents: MCP streamable HTTP)",
    ]
    if database is not None:
        lines.append(f"  Database:  {database}")
    if auth == "tokens" and demo:
        lines += [
            "  Auth:      bearer tokens; the demo made these two (send `Authorization: Bearer "
            "TOKEN`):",
            *(
                f"             {secret}   ({name}: {' '.join(grants)})"
                for name, grants, secret in demo_tokens
            ),
            "             The demo's database is temporary (removed on exit): `session-gateway "
            "token create` writes another database, so its tokens are refused here.",
        ]
    elif auth == "tokens":
        lines.append("  Auth:      bearer tokens (`session-gateway token create` makes one)")
    if tracing is not None:
        lines.append(f"  Tracing:   {tracing}")
    if limits is not None:
        lines.append(f"  Limits:    {limits}")
    if demo:
        from gateway.demo import EXAMPLE_QUERIES

        lines += ["", "  Demo corpus loaded; a simulated agent appends to demo-agent-live.", ""]
        lines.append("  Queries to paste into GraphiQL:")
        for name, text in EXAMPLE_QUERIES.items():
            lines += ["", f"  # {name}", *("  " + line for line in text.rstrip().splitlines())]
    lines.append("")
    return "\n".join(lines)


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is printed, so a busy port fails with
    one line and no banner (uvicorn would bind only after our banner)."""
    bare = host.strip("[]")
    infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class SchemaRefused(Exception):
    """The database answers but its schema is not this version's (unmigrated, behind, newer
    or unknown): serving could never become ready without an operator, so `serve` refuses."""


async def probe_database(backend: Any, shown: str) -> str | None:
    """None when the database answers (its schema checked, and for SQLite migrated) at
    start, else the warning line to print; the gateway serves anyway (/readyz says 503).
    A database that answers with a schema this version cannot use raises SchemaRefused
    (the message names the `migrate` command to run)."""
    from gateway.persistence.errors import SchemaVersionError

    try:
        await asyncio.wait_for(backend.ensure_schema(), STARTUP_PROBE_TIMEOUT)
    except SchemaVersionError as exc:
        raise SchemaRefused(str(exc)) from None
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else ""
        detail = f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__
        return (
            f"session-gateway serve: warning: the database {shown} does not answer "
            f"({detail}); serving anyway, /readyz says 503 until it does"
        )
    return None


def gateway_config(args: argparse.Namespace) -> GatewayConfig:
    """The app's settings from the flags and the environment, checked once (by
    `GatewayConfig`); ValueError naming the option that is wrong."""
    from gateway.server.config import GatewayConfig, Limits
    from gateway.server.documents import ManifestError

    options = access_options(args)
    response_bytes = max_response_bytes(args)
    try:
        limits = Limits(max_cost=args.max_cost, max_response_bytes=response_bytes)
    except ValueError:
        raise ValueError(f"--max-cost must be a positive integer, got {args.max_cost}") from None
    in_flight = getattr(args, "max_response_bytes_in_flight", limits.max_response_bytes_in_flight)
    if type(in_flight) is not int or in_flight < 1:
        raise ValueError(
            f"--max-response-bytes-in-flight must be a positive integer, got {in_flight!r}"
        )
    limits = dataclasses.replace(limits, max_response_bytes_in_flight=in_flight)
    if args.demo:
        from gateway.demo import DEFAULT_DEMO_QUERY

        options["default_query"] = DEFAULT_DEMO_QUERY
    secret = os.environ.get(ENV_CURSOR_SECRET)
    if secret:
        options["cursor_secret"] = secret
    if type(args.max_in_flight) is not int or args.max_in_flight < 1:
        raise ValueError(f"--max-in-flight must be a positive integer, got {args.max_in_flight}")
    try:
        return GatewayConfig(
            limits=limits,
            allowed_hosts=allowed_hosts(args.host, args.allowed_host),
            max_requests_in_flight=args.max_in_flight,
            **options,
        )
    except ManifestError as exc:
        raise ValueError(f"--trusted-documents {manifest_path(args)}: {exc}") from None


def connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    """The connection limits from the flags; ValueError naming the option that is wrong."""
    from gateway.server.config import ConnectionLimits

    for flag, value in (
        ("--header-timeout", args.header_timeout),
        ("--keep-alive-timeout", args.keep_alive_timeout),
    ):
        if not value > 0 or value == float("inf"):
            raise ValueError(f"{flag} must be a positive number of seconds, got {value:g}")
    if args.max_connections < 1:
        raise ValueError(
            f"--max-connections must be a positive integer, got {args.max_connections}"
        )
    return ConnectionLimits(
        header_timeout=args.header_timeout,
        keep_alive_timeout=args.keep_alive_timeout,
        max_connections=args.max_connections,
    )


def max_response_bytes(args: argparse.Namespace) -> int:
    """--max-response-bytes, else $SESSION_GATEWAY_MAX_RESPONSE_BYTES, else the default;
    ValueError naming the option (or the variable) when it is not a positive integer."""
    given: Any = getattr(args, "max_response_bytes", None)
    name = "--max-response-bytes"
    if given is None:
        raw = os.environ.get(ENV_MAX_RESPONSE_BYTES, "").strip()
        if not raw:
            return DEFAULT_MAX_RESPONSE_BYTES
        name = f"${ENV_MAX_RESPONSE_BYTES}"
        try:
            given = int(raw.replace("_", ""))
        except ValueError:
            given = raw
    if type(given) is not int or given < 1:
        raise ValueError(f"{name} must be a positive integer, got {given!r}")
    return given


async def serve(
    args: argparse.Namespace,
    db: ResolvedDatabase | None,
    sock: socket.socket,
    provider: Any = None,
    tracing: str | None = None,
    settings: GatewayConfig | None = None,
    worker: int | None = None,
) -> int:
    """Serve until told to stop. As worker `worker` of `--workers N` the parent has
    already probed (and migrated) the database and printed the banner."""
    import uvicorn

    from gateway.core import SessionQuery, SessionStore
    from gateway.observability import (
        GatewayMetrics,
        configure_logging,
        instrument_backend,
    )
    from gateway.server.app import create_app

    handler = configure_logging(json=args.log_format == "json", level=args.log_level)
    if provider is not None:
        from gateway.observability.tracing import TraceIdFilter

        handler.addFilter(TraceIdFilter())  # JSON lines inside a span name its trace
    metrics = GatewayMetrics()
    if worker is not None:
        name_worker(metrics, worker)

    tmp: tempfile.TemporaryDirectory[str] | None = None
    if db is not None:
        url: Any = db.url
        shown = db.shown
    else:
        tmp = tempfile.TemporaryDirectory(prefix="session-gateway-demo-")
        path = Path(tmp.name) / "demo.db"
        url, shown = f"sqlite+aiosqlite:///{path}", f"{path} (temporary, removed on exit)"
    raw_backend = _open_backend(url)
    backend = instrument_backend(raw_backend, metrics)
    started = False
    stopped_by: int | None = None
    try:
        warning = None
        if worker is None:  # the parent of workers probed (and migrated) once for them all
            try:
                warning = await probe_database(raw_backend, shown)
            except SchemaRefused as exc:
                print(f"session-gateway serve: {exc}", file=sys.stderr, flush=True)
                return 2
        if warning:
            print(warning, file=sys.stderr, flush=True)
        store = SessionStore()
        query = SessionQuery(live=[store], persistence=backend)
        background = []
        if args.demo:
            from gateway.demo import load_demo

            demo = await load_demo(backend, store, agent_interval=args.agent_interval)
            background.append(demo.agent.run)
        authenticate = None
        demo_tokens: list[tuple[str, tuple[str, ...], str]] = []
        mode = auth_mode(args) or "none"
        if mode == "tokens":
            from gateway.persistence.tokens import TokenError, TokenStore, load_token_key
            from gateway.server.auth import token_authenticator

            if args.demo:
                # The demo's database is temporary: a key of its own, and its own tokens.
                import secrets

                key = secrets.token_hex(32).encode("ascii")
            else:
                try:
                    key = load_token_key()
                except TokenError as exc:
                    print(f"session-gateway serve: --auth tokens: {exc}", file=sys.stderr)
                    return 2
            tokens = TokenStore(raw_backend, key)
            if args.demo:
                from gateway.demo import create_demo_tokens

                demo_tokens = await create_demo_tokens(tokens)
            authenticate = token_authenticator(tokens)
            background.append(tokens.run_last_used_flusher)  # last_used_at, off the request path
        app = create_app(
            query,
            settings,
            authenticate=authenticate,
            metrics=metrics,
            tracer_provider=provider,
            background=background,
        )
        from gateway.server.connections import (
            AcceptErrorLog,
            connection_cap,
            fd_soft_limit,
            gated_listener,
            http_protocol,
            limited_protocol,
            open_fds,
        )

        limits = connection_limits(args)
        soft = fd_soft_limit()
        cap = connection_cap(limits.max_connections, soft, open_fds())
        http = http_protocol() if args.http == "auto" else args.http
        protocol = limited_protocol(limits, cap, http)
        logging.getLogger("gateway.serve").info(
            "HTTP stack: %s parser (%s), %s event loop",
            http,
            protocol.__name__,
            type(asyncio.get_running_loop()).__module__.split(".")[0],
        )
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level.lower(),
            log_config=None,  # configure_logging above owns the handlers and the format
            lifespan="on",
            # httptools (or h11) with a header timeout, a connection cap and our keep-alive
            # timeout (uvicorn has the last only: gateway.server.connections says why)
            http=protocol,
            ws_per_message_deflate=args.ws_compression,
        )
        server = _stopping_server_class()(config)
        loop = asyncio.get_running_loop()
        AcceptErrorLog(loop, limits.log_interval).install(loop)
        host = f"[{args.host.strip('[]')}]" if ":" in args.host else args.host
        port = sock.getsockname()[1]
        shown_limits = (
            f"{cap:,} connections (file descriptors: {soft:,}), "
            f"{settings.max_requests_in_flight if settings else DEFAULT_MAX_IN_FLIGHT} "
            f"requests in flight, headers within {limits.header_timeout:g} s, "
            f"idle {limits.keep_alive_timeout:g} s"
        )
        if worker is None:  # the parent of workers printed the banner for them all
            print(
                banner(
                    f"http://{host}:{port}",
                    args.demo,
                    mode,
                    shown,
                    tracing,
                    demo_tokens,
                    limits=shown_limits,
                ),
                flush=True,
            )
        from gateway.server.collector import tune_for_serving

        tune_for_serving()  # the start-up heap frozen, fewer young collections: why there
        # past the cap a connection is refused as it is accepted (no descriptor kept)
        await server.serve(sockets=[gated_listener(sock, protocol.gate)])
        started = server.started
        stopped_by = server.stopped_by
    finally:
        await _close_backend(backend)
        if tmp is not None:
            tmp.cleanup()
    if stopped_by is not None:
        return 128 + stopped_by  # what a shell reports for that signal, after a clean stop
    return 0 if started else 1


async def _finish_despite_cancel(work: Coroutine[Any, Any, Any]) -> None:
    """Await `work` to its end even if this task is cancelled meanwhile, then re-raise.

    On Ctrl-C uvicorn shuts down and raises SIGINT again, which asyncio.run turns into a
    cancel of this task: closing the pool would stop half-way, and SQLAlchemy log an
    ERROR traceback per pooled connection."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    task.result()


async def _close_backend(backend: Any) -> None:
    """Close the pooled connections inside the loop that opened them (closed later, by the
    garbage collector or `asyncio.run`'s cancelling, the pool logs a CancelledError)."""
    close = getattr(backend, "close", None)
    if not callable(close):
        return
    try:
        await _finish_despite_cancel(close())
    except Exception as exc:
        logger.warning("closing the database connections failed: %s: %s", type(exc).__name__, exc)
    else:
        logger.info("database connections closed")


def _stopping_server_class() -> type[Any]:
    import uvicorn

    class StoppingServer(uvicorn.Server):
        """uvicorn's server, except that a signal that stopped it is recorded rather than
        raised again at the end of `serve()`: uvicorn re-raises it so the default handler
        ends the process, which for SIGTERM kills it before the database is closed and for
        SIGINT throws KeyboardInterrupt through the closing code. `serve` closes the backend,
        then exits 128 + the signal."""

        stopped_by: int | None = None

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            """uvicorn's graceful shutdown, except that connections still open after
            `STREAM_GRACE` seconds are dropped: an event stream (SSE) of a live session
            never ends by itself, and uvicorn would wait for its client forever. Dropping
            the connection is a client disconnect to the app, which ends the stream."""

            async def drop_streams() -> None:
                await asyncio.sleep(STREAM_GRACE)
                for connection in list(self.server_state.connections):
                    transport = getattr(connection, "transport", None)
                    if transport is not None and not transport.is_closing():
                        transport.close()

            dropping = asyncio.create_task(drop_streams())
            try:
                await super().shutdown(sockets)
            finally:
                dropping.cancel()

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.stopped_by is None:
                self.stopped_by = sig
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            signals = (signal.SIGINT, signal.SIGTERM)
            original = {sig: signal.signal(sig, self.handle_exit) for sig in signals}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return StoppingServer


def run(args: argparse.Namespace) -> int:
    mode = auth_mode(args)
    if mode is None:
        print(
            f"session-gateway serve: ${ENV_AUTH} must be one of {', '.join(AUTH_MODES)}",
            file=sys.stderr,
        )
        return 2
    if not is_loopback(args.host) and not args.allow_remote:
        print(f"session-gateway serve: {remote_refusal(args.host)}", file=sys.stderr)
        return 2
    if not is_loopback(args.host) and mode == "none" and not args.insecure_no_auth:
        print(f"session-gateway serve: {remote_without_auth_refusal(args.host)}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"session-gateway serve: --port must be 0..65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        settings = gateway_config(args)  # checked before anything starts
        connection_limits(args)
    except ValueError as exc:
        print(f"session-gateway serve: {exc}", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"session-gateway serve: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    if args.workers > 1 and (live := live_store_option(args)) is not None:
        print(
            f"session-gateway serve: --workers {args.workers} with {live} is refused: live "
            "stores are single-process (a worker would see only its own appends). Drop "
            "--workers, or serve persisted sessions only",
            file=sys.stderr,
        )
        return 2
    if args.workers > 1 and not (hasattr(os, "fork") and hasattr(socket, "SO_REUSEPORT")):
        print(
            "session-gateway serve: --workers needs fork() and SO_REUSEPORT (Linux); "
            "run one process per port behind a load balancer instead",
            file=sys.stderr,
        )
        return 2
    if args.demo and args.database:
        print(
            "session-gateway serve: --demo always serves from a temporary database (so the "
            "demo sessions never land in a real one); drop --database, or drop --demo",
            file=sys.stderr,
        )
        return 2
    try:
        provider, tracing = tracer_provider(args.otel, os.environ)
    except TracingUnavailable as exc:
        print(
            f"session-gateway serve: {'' if exc.fatal else 'warning: '}{exc}",
            file=sys.stderr,
            flush=True,
        )
        if exc.fatal:
            return 2
        provider, tracing = None, None
    if provider is not None:
        _exit_on_sigterm()
    try:
        return _run(args, provider, tracing, settings)
    finally:
        if provider is not None:
            provider.shutdown()  # flushes the spans still batched (the loop has ended)


def _exit_on_sigterm() -> None:
    """Make SIGTERM a SystemExit, so the spans still batched are flushed on `docker stop`.

    While uvicorn serves, its handler (kept from re-raising by `StoppingServer`) stops
    it gracefully; this one covers a SIGTERM before or after that (while the database
    is probed or the demo loaded), which the default handler would turn into a kill
    before any `finally` runs. Exit status 143 is what a shell reports for SIGTERM."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        signal.signal(signal.SIGTERM, stop)


def _run(
    args: argparse.Namespace, provider: Any, tracing: str | None, settings: GatewayConfig
) -> int:
    db = None
    try:
        if not args.demo:
            db = resolve(args.database)
            check_serve_target(db, create=args.create)
    except DatabaseRefused as exc:
        print(f"session-gateway serve: {exc}", file=sys.stderr)
        return 2
    if args.workers > 1:
        assert db is not None  # live-store modes (--demo) were refused with --workers
        return _run_workers(args, db, provider, tracing, settings)
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(
            f"session-gateway serve: cannot listen on {args.host}:{args.port}: {reason.lower()}",
            file=sys.stderr,
        )
        return 1
    try:
        with asyncio.Runner(loop_factory=event_loop_factory(args.loop)) as runner:
            return runner.run(serve(args, db, sock, provider, tracing, settings))
    finally:
        sock.close()


# -- worker processes (--workers N) ---------------------------------------------------


def live_store_option(args: argparse.Namespace) -> str | None:
    """The option asking for a live store in the serving process (single-process only)."""
    return "--demo" if args.demo else None


def name_worker(metrics: Any, worker: int) -> None:
    """`gateway_worker{worker,pid} 1` on this worker's own /metrics: which process answered."""
    from prometheus_client import Gauge

    gauge = Gauge(
        "gateway_worker",
        "This worker process of serve --workers (metrics are per worker).",
        ("worker", "pid"),
        registry=metrics.registry,
    )
    gauge.labels(str(worker), str(os.getpid())).set(1)


def bind_worker_sockets(host: str, port: int, n: int) -> list[socket.socket]:
    """N listening sockets on one port with SO_REUSEPORT, one per worker, all bound here
    so a busy port fails before the banner. The kernel spreads new connections over
    them by hash; a single shared socket would let whichever worker wakes first accept
    a whole burst of keep-alive connections and leave the other cores idle."""
    bare = host.strip("[]")
    infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:  # SO_REUSEPORT would share a busy
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # port with another
        probe.bind(address)  # serve of ours; a plain bind fails on it as it should
        address = probe.getsockname()
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.socket(family, kind, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            address = sock.getsockname()  # port 0: the rest join the port the first got
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def _probe_once(db: ResolvedDatabase) -> None:
    """Probe (and for SQLite migrate) once in the parent, so workers never race a migration."""

    async def probe() -> None:
        backend = _open_backend(str(db.url))
        try:
            warning = await probe_database(backend, db.shown)  # SchemaRefused: the caller's
            if warning:
                print(warning, file=sys.stderr, flush=True)
        finally:
            await backend.close()

    asyncio.run(probe())


def _die_with_parent() -> None:
    """Linux: SIGTERM this worker if the parent dies (even by SIGKILL): no orphans."""
    import ctypes

    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _worker_main(
    args: argparse.Namespace,
    db: ResolvedDatabase,
    sock: socket.socket,
    provider: Any,
    tracing: str | None,
    settings: GatewayConfig,
    worker: int,
    parent: int,
) -> int:
    """One worker, in the forked child: its own loop, engine and metrics. The parent
    forwards the stop signal; uvicorn re-raises it after its graceful shutdown, so the
    handler it finds here ignores it (the spans still batched are flushed below)."""
    os.setpgid(0, 0)  # Ctrl-C reaches the parent only; it stops each worker once
    _die_with_parent()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: None)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if os.getppid() != parent:
        return 1
    try:
        with asyncio.Runner(loop_factory=event_loop_factory(args.loop)) as runner:
            return runner.run(serve(args, db, sock, provider, tracing, settings, worker=worker))
    finally:
        if provider is not None:
            provider.shutdown()


_STOPPED_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM)
"""What a worker exits with after a clean stop by a signal (as a single serve does)."""


def _run_workers(
    args: argparse.Namespace,
    db: ResolvedDatabase,
    provider: Any,
    tracing: str | None,
    settings: GatewayConfig,
) -> int:
    """Fork `args.workers` workers and supervise them: the first SIGINT/SIGTERM stops
    each gracefully (SIGTERM), a second one forces them (SIGINT); a worker that exits
    on its own stops the rest (a supervisor or orchestrator restarts the whole)."""
    n = args.workers
    if auth_mode(args) == "tokens":  # checked once here, not once per worker
        from gateway.persistence.tokens import TokenError, load_token_key

        try:
            load_token_key()
        except TokenError as exc:
            print(f"session-gateway serve: --auth tokens: {exc}", file=sys.stderr)
            return 2
    try:
        socks = bind_worker_sockets(args.host, args.port, n)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(
            f"session-gateway serve: cannot listen on {args.host}:{args.port}: {reason.lower()}",
            file=sys.stderr,
        )
        return 1
    pids: dict[int, int] = {}
    stops = 0

    first_stop: int | None = None

    def stop(signum: int, frame: object) -> None:
        nonlocal stops, first_stop
        stops += 1
        if first_stop is None and frame is not None:  # a signal, not a worker gone
            first_stop = signum
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM if stops == 1 else signal.SIGINT)

    try:
        try:
            _probe_once(db)
        except SchemaRefused as exc:
            print(f"session-gateway serve: {exc}", file=sys.stderr, flush=True)
            return 2
        mode = auth_mode(args) or "none"
        host = f"[{args.host.strip('[]')}]" if ":" in args.host else args.host
        base = f"http://{host}:{socks[0].getsockname()[1]}"
        text = banner(base, False, mode, db.shown, tracing)
        print(text.rstrip("\n") + f"\n  Workers:   {n} processes\n", flush=True)
        parent = os.getpid()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for worker, sock in enumerate(socks):
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        for other in socks:
                            if other is not sock:
                                other.close()
                        code = _worker_main(
                            args, db, sock, provider, tracing, settings, worker, parent
                        )
                    except BaseException:
                        import traceback

                        traceback.print_exc()
                    finally:
                        sys.stdout.flush()
                        sys.stderr.flush()
                        os._exit(code)
                pids[pid] = worker
            signal.signal(signal.SIGINT, stop)
            signal.signal(signal.SIGTERM, stop)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        for sock in socks:
            sock.close()
        status = 0
        while pids:
            pid, wait_status = os.waitpid(-1, 0)
            if pids.pop(pid, None) is None:
                continue
            code = os.waitstatus_to_exitcode(wait_status)
            stopped = code < 0 or code in _STOPPED_CODES  # by the signal sent, or after it
            if code != 0 and not (stops and stopped):
                status = status or 1
            if not stops:  # a worker went away by itself: stop the others
                stop(signal.SIGTERM, None)
                status = status or 1
        if status == 0 and first_stop is not None:
            return 128 + first_stop  # as a single serve reports a clean stop by a signal
        return status
    finally:
        for sock in socks:
            sock.close()


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop `serve` runs on: uvloop's (libuv; less CPU per request) for "uvloop", or
    for "auto" when installed; None (asyncio's own) otherwise."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise SystemExit(
                "session-gateway serve: --loop uvloop: uvloop is not installed"
            ) from None
        return None
    return uvloop.new_event_loop
