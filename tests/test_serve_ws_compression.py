"""`serve` compresses WebSocket messages only when asked (`--ws-compression`): each
connection compresses its own copy of a shared subscription answer, about a third of
the server's CPU per subscriber and event, so it is off by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.support.serve_process import start_serve


def _negotiated(tmp_path: Path, *flags: str) -> tuple[str | None, dict]:
    """The extensions the server accepted for a client that offers permessage-deflate
    (the `websockets` client's default), and the ack it then sends."""
    served = start_serve(tmp_path, "--demo", *flags)
    try:
        assert served.readyz() == 200, served.err
        url = served.base.replace("http", "ws") + "/graphql"
        with connect(url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            assert ws.response is not None
            accepted = ws.response.headers.get("Sec-WebSocket-Extensions")
            ws.send(json.dumps({"type": "connection_init", "payload": {}}))
            ack = json.loads(ws.recv(timeout=10))
        return accepted, ack
    finally:
        served.stop()


@pytest.mark.parametrize("flags", [(), ("--ws-compression",)], ids=["default", "flag"])
def test_serve_compresses_websocket_messages_only_with_ws_compression(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    accepted, ack = _negotiated(tmp_path, *flags)
    assert ack == {"type": "connection_ack"}
    if flags:
        assert accepted is not None and "permessage-deflate" in accepted, accepted
    else:
        assert accepted is None or "permessage-deflate" not in accepted, accepted


def test_serve_help_explains_ws_compression() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--ws-compression" in out and "permessage-deflate" in out
