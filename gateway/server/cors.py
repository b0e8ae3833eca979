"""CORS (SPEC §10): which browser origins may call the gateway from their pages.

Starlette's `CORSMiddleware` does the protocol (preflights, `Vary: Origin`,
echoing an allowed origin); this module only says what is allowed: the
configured origins (none by default: no middleware at all, and a browser on
another origin cannot call), `GET` and `POST`, the `Authorization` and
`Content-Type` request headers, and the response headers a client needs to
read (`Retry-After` on a 429, `WWW-Authenticate` on a 401, `X-Request-Id`).
No cookies are involved (tokens travel in `Authorization`), so credentials
mode stays off and `*` is allowed as an origin.

An origin is `scheme://host[:port]` exactly as a browser sends it in
`Origin`; `check_origins` refuses anything else at start (a trailing slash or a
path would never match, silently).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from gateway.observability.request_id import REQUEST_ID_HEADER

ALLOW_METHODS = ("GET", "POST")
ALLOW_HEADERS = ("Authorization", "Content-Type")
EXPOSE_HEADERS = ("Retry-After", "WWW-Authenticate", REQUEST_ID_HEADER)
PREFLIGHT_MAX_AGE = 600
_DEFAULT_PORTS = {"http": 80, "https": 443}


def check_origin(origin: str) -> str:
    """`origin` in the form browsers send (lower-case, no default port); ValueError if not one."""
    text = origin.strip()
    if text == "*":
        return text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or not parts.scheme
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or parts.username is not None
        or text.endswith(("?", "#"))
    ):
        raise ValueError(
            f"CORS origin {origin!r} is not an origin: write scheme://host[:port] with no "
            "path or trailing slash (e.g. https://tools.example.com), or *"
        )
    scheme = parts.scheme.lower()
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return f"{scheme}://{host}"


def check_origins(origins: Iterable[str]) -> tuple[str, ...]:
    """Every origin checked (`check_origin`), duplicates dropped, order kept."""
    return tuple(dict.fromkeys(check_origin(o) for o in origins))


def origin_allowed(origin: str | None, host: str | None, allowed: Iterable[str]) -> bool:
    """Whether a WebSocket handshake's `Origin` may open a socket: absent (not a
    browser), the request's own origin (its host:port equal to `Host`), or allowed as
    a CORS origin (`*` allows every one). Browsers do not preflight WebSockets, so
    this is the check CORS would otherwise make."""
    if origin is None:
        return True
    allowed = tuple(allowed)
    if "*" in allowed:
        return True
    try:
        normal = check_origin(origin)
    except ValueError:
        return False  # "null" (a sandboxed page, a file) or something that is no origin
    if normal in allowed:
        return True
    if host is None:
        return False
    scheme = normal.partition("://")[0]
    try:
        own = check_origin(f"{scheme}://{host}")
    except ValueError:
        return False
    return normal == own


def cors_middleware(allowed: tuple[str, ...]) -> list[Middleware]:
    """The CORS middleware for `allowed` origins (checked: `GatewayConfig` normalises
    them once), or none when no origin is allowed."""
    if not allowed:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=allowed,
            allow_methods=ALLOW_METHODS,
            allow_headers=ALLOW_HEADERS,
            expose_headers=EXPOSE_HEADERS,
            allow_credentials=False,
            # A listed origin is trusted to call wherever the gateway runs, also
            # from a public page to a private address (Chrome's Private Network Access).
            allow_private_network=True,
            max_age=PREFLIGHT_MAX_AGE,
        )
    ]


__all__ = [
    "ALLOW_HEADERS",
    "ALLOW_METHODS",
    "check_origin",
    "check_origins",
    "cors_middleware",
    "origin_allowed",
]
