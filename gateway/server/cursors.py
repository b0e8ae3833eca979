"""Opaque, tamper-evident keyset cursors.

A cursor is `base64url(JSON payload) "." base64url(HMAC-SHA256(key, payload)[:12])`.
The payload is versioned and names what it points into:

* sessions: `[1, "s", createdAt, id]`, the last session of a page in the list
  order (newest first, ties by id); the next page starts strictly after it;
* events: `[1, "e", sessionId, seq]`; the next page starts at the first event
  (matching the filter) with a greater seq;
* search hits: `[1, "qs" | "qe", binding, matchCount, length, time, sessionId, seq]`,
  the last hit's `RankKey` (SPEC §13); `binding` is a digest of what the ranking
  is of (the normalized query, the filters and, for `searchEvents`, the session
  id), so a cursor of another search is refused rather than paging a different
  ranking.

A page asked with a `filter` (SPEC §12) adds the digest of its normalized form
(`gateway.core.filters.filter_key`) as a last element; a cursor is accepted only
under the filter it was made under (an unfiltered page's cursors have none), so
another filter's cursor is refused like any foreign cursor.

Keyset cursors hold positions, not offsets, so a page stays correct when
sessions are added (or events appended) between requests: nothing is skipped or
repeated.

Key: `create_app(cursor_secret=...)` (or `SESSION_GATEWAY_CURSOR_SECRET` for
`serve`) sets it; several replicas behind one balancer, or a server that must
honour cursors across restarts, share one secret. Without one, each process
draws a random key, so a restart invalidates outstanding cursors: the client
gets a clear BAD_USER_INPUT error and starts paging again from the top. The
HMAC is not about secrecy (the payload is readable); it makes a forged or
altered cursor an explicit error rather than a silently wrong page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from typing import Any

from gateway.core.matching import RankKey

from .errors import GatewayError, bad_input

VERSION = 1
SESSION = "s"
EVENT = "e"
SEARCH_SESSIONS = "qs"
SEARCH_EVENTS = "qe"
_KINDS = {
    SESSION: "a list of sessions",
    EVENT: "a list of events",
    SEARCH_SESSIONS: "a session search",
    SEARCH_EVENTS: "an event search",
}
_MAC_BYTES = 12


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorCodec:
    """Encodes and checks cursors with one HMAC key (random per process unless given)."""

    def __init__(self, secret: bytes | str | None = None) -> None:
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        self._key = (
            hashlib.sha256(b"session-gateway cursor v1\0" + secret).digest()
            if secret
            else (secrets.token_bytes(32))
        )

    def for_audience(self, audience: str) -> CursorCodec:
        """A codec whose cursors only it accepts: the key is bound to `audience` (a
        token's name), so a cursor issued to one token is refused for another."""
        bound = CursorCodec.__new__(CursorCodec)
        bound._key = hmac.new(
            self._key, b"audience\0" + audience.encode("utf-8"), hashlib.sha256
        ).digest()
        return bound

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:_MAC_BYTES]

    def _encode(self, values: list[Any]) -> str:
        payload = json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def _decode(self, cursor: str, kind: str, argument: str) -> list[Any]:
        def invalid(why: str) -> GatewayError:
            return bad_input(
                f"`{argument}` is not a valid cursor ({why}); use a cursor this server returned "
                "in pageInfo.endCursor or edges.cursor, or start again without `after`",
                argument,
            )

        if not isinstance(cursor, str) or cursor.count(".") != 1 or len(cursor) > 4096:
            raise invalid("malformed")
        body, mac = cursor.split(".")
        try:
            payload, given = _unb64(body), _unb64(mac)
        except (binascii.Error, ValueError) as exc:
            raise invalid("malformed") from exc
        if not hmac.compare_digest(given, self._mac(payload)):
            raise invalid(
                "it was altered, or issued by another server, before a restart or to another token"
            )
        try:
            values = json.loads(payload)
        except ValueError as exc:  # pragma: no cover - a valid MAC implies our own JSON
            raise invalid("malformed") from exc
        if not isinstance(values, list) or len(values) < 2 or values[0] != VERSION:
            raise invalid("unknown cursor version")
        if values[1] != kind:
            raise invalid(f"it is not a cursor into {_KINDS[kind]}")
        return values[2:]

    @staticmethod
    def _bound(values: list[Any], digest: str, argument: str) -> list[Any]:
        """The position in `values`, refused unless made under the filter of `digest`."""
        made_under = values[2] if len(values) == 3 else ""
        if made_under != digest:
            raise bad_input(
                f"`{argument}` is a cursor of a page asked with another filter; "
                "page on with the filter it came from, or start again without `after`",
                argument,
            )
        return values[:2]

    # -- sessions --------------------------------------------------------------

    def session(self, created_at: int, session_id: str, digest: str = "") -> str:
        values: list[Any] = [VERSION, SESSION, created_at, session_id]
        return self._encode([*values, digest] if digest else values)

    def decode_session(
        self, cursor: str, argument: str = "after", digest: str = ""
    ) -> tuple[int, str]:
        values = self._bound(self._decode(cursor, SESSION, argument), digest, argument)
        created_at, session_id = values
        return int(created_at), str(session_id)

    # -- events ----------------------------------------------------------------

    def event(self, session_id: str, seq: int, digest: str = "") -> str:
        values: list[Any] = [VERSION, EVENT, session_id, seq]
        return self._encode([*values, digest] if digest else values)

    def decode_event(
        self, cursor: str, session_id: str, argument: str = "after", digest: str = ""
    ) -> int:
        values = self._bound(self._decode(cursor, EVENT, argument), digest, argument)
        cursor_session, seq = values
        if cursor_session != session_id:
            raise bad_input(
                f"`{argument}` is a cursor into the events of session {cursor_session!r}, "
                f"not {session_id!r}",
                argument,
            )
        return int(seq)

    # -- search hits -------------------------------------------------------------

    def search_hit(self, kind: str, binding: str, key: RankKey) -> str:
        """The cursor of a hit of the search bound to `binding` (see `search_binding`)."""
        return self._encode([VERSION, kind, binding, *key])

    def decode_search_hit(
        self, cursor: str, kind: str, binding: str, argument: str = "after"
    ) -> RankKey:
        """The key a search cursor points at; BAD_USER_INPUT for a cursor of another
        search (query, filters, session) as for any foreign cursor."""
        values = self._decode(cursor, kind, argument)
        if len(values) != 6 or values[0] != binding:
            raise bad_input(
                f"`{argument}` is a cursor of another search (another query, filter or "
                "session); page a search with the cursors it returned, or start again "
                "without `after`",
                argument,
            )
        match_count, length, time, session_id, seq = values[1:]
        return RankKey(int(match_count), int(length), int(time), str(session_id), int(seq))


def search_binding(*parts: object) -> str:
    """A digest of what a search ranks: its normalized query, its filters (frozen core
    values, whose `repr` is canonical) and, for `searchEvents`, the session id."""
    return hashlib.sha256(repr(parts).encode("utf-8", "surrogatepass")).hexdigest()[:24]


def filter_digest(key: str) -> str:
    """A short digest of a normalized filter (`filter_key`; "" for no filter)."""
    return _b64(hashlib.sha256(key.encode("utf-8")).digest()[:9]) if key else ""
