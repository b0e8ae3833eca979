"""Security headers: every response says nosniff and no-referrer; HTML pages get a CSP.

The only HTML the gateway serves is the GraphiQL page (`gateway.web.graphiql`),
which loads its scripts and styles from the gateway itself and bootstraps from
one inline script. Its Content-Security-Policy allows exactly that: scripts
from 'self' plus the SHA-256 of each inline script, computed here from the
page as it is sent (so the page can change without this module knowing);
styles from 'self' and inline (GraphiQL's editor styles elements at run
time); fetches to 'self'; no framing (`frame-ancestors 'none'` and
`X-Frame-Options: DENY`), no plugins, no base-URI tricks.
"""

from __future__ import annotations

import base64
import hashlib
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COMMON_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
_INLINE_SCRIPT = re.compile(rb"<script(?P<attrs>[^>]*)>(?P<body>.*?)</script>", re.DOTALL)
_SRC = re.compile(rb"\bsrc\s*=")
_TYPE = re.compile(rb"""\btype\s*=\s*["']?([^"'\s>]+)""")
_JS_TYPES = {b"text/javascript", b"application/javascript", b"module"}


def inline_script_hashes(page: bytes) -> list[str]:
    """CSP source expressions ('sha256-...') for the inline scripts a browser would run."""
    hashes = []
    for match in _INLINE_SCRIPT.finditer(page):
        attrs = match.group("attrs")
        if _SRC.search(attrs):
            continue
        kind = _TYPE.search(attrs)
        if kind is not None and kind.group(1).lower() not in _JS_TYPES:
            continue  # a data block (e.g. application/json) is never executed
        digest = base64.b64encode(hashlib.sha256(match.group("body")).digest()).decode()
        hashes.append(f"'sha256-{digest}'")
    return hashes


def content_security_policy(page: bytes) -> str:
    scripts = " ".join(["'self'", *inline_script_hashes(page)])
    return (
        "default-src 'none'; "
        f"script-src {scripts}; "
        "style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; object-src 'none'; frame-ancestors 'none'"
    )


def _is_html(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"content-type" and value.lower().startswith(b"text/html"):
            return True
    return False


class SecurityHeaders:
    """ASGI middleware adding the headers above (HTML bodies are buffered to hash them)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def guarded_send(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                html = _is_html(headers)
                headers += COMMON_HEADERS
                if not html:
                    await send({**message, "headers": headers})
                    return
                start = {**message, "headers": headers}
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            page = b"".join(chunks)
            headers = [
                *start["headers"],
                (b"content-security-policy", content_security_policy(page).encode()),
                (b"x-frame-options", b"DENY"),
            ]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, guarded_send)
