"""Host allow-list: a page rebound to 127.0.0.1 by DNS cannot read the gateway.

DNS rebinding: a web page on `attacker.example` makes its name resolve to
127.0.0.1, and the victim's browser then sends the page's requests to a
gateway bound to loopback, same-origin as far as the browser knows. What
gives it away is the `Host` header, which still says `attacker.example`. So
every HTTP and WebSocket request must name an allowed host (any port):
`serve` on a loopback address allows `localhost`, `127.0.0.1` and `[::1]`
(`LOOPBACK_HOSTS`) plus each `--allowed-host`; other requests get 421
Misdirected Request with a GraphQL-style error naming the host and the option.

Not Starlette's `TrustedHostMiddleware`: it answers a plain-text "Invalid host
header" 400 that says neither which host nor what to do about it; the matching
rule here is the same (exact names, `*.example.com` wildcards, `*` for any).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from .codes import GatewayCode
from .errors import send_error, simple_error

LOOPBACK_HOSTS: tuple[str, ...] = ("localhost", "127.0.0.1", "[::1]")
MISDIRECTED_REQUEST = GatewayCode.MISDIRECTED_REQUEST


def host_name(header: str) -> str | None:
    """The host of a Host header without its port, lowercased (None when malformed)."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1 :] and not value[end + 1 :].startswith(":")):
            return None
        name, port = value[: end + 1], value[end + 2 :]
    else:
        name, _, port = value.partition(":")
    if not name or (port and not port.isdigit()):
        return None
    return name.rstrip(".") if name != "." else None


class HostAllowList:
    """ASGI middleware: serve only requests whose Host is in `allowed` (see module doc)."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str]) -> None:
        self.app = app
        self.allow_any = "*" in allowed
        self.exact = {h.lower().rstrip(".") for h in allowed if not h.startswith("*")}
        self.suffixes = tuple(h.lower()[1:] for h in allowed if h.startswith("*."))

    def allows(self, header: str | None) -> bool:
        if self.allow_any:
            return True
        name = host_name(header) if header is not None else None
        if name is None:
            return False
        return name in self.exact or name.endswith(self.suffixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allow_any:
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"host":
                header = value.decode("latin-1")
                break
        if self.allows(header):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        shown = json.dumps(header[:200]) if header is not None else "(none)"
        message = (
            f"this gateway does not serve the host {shown}: only "
            f"{', '.join(sorted(self.exact | {'*' + s for s in self.suffixes}))} (any port). "
            "A page that reached it under another name may be a DNS-rebinding attack; "
            "to serve another name on purpose, start it with --allowed-host NAME"
        )
        await send_error(scope, send, 421, simple_error(MISDIRECTED_REQUEST, message))
