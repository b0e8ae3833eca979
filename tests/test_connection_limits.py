"""Connections are bounded (issue 20, point 2's HTTP part and point 5), against a real `serve`.

A connection that does not finish its request headers in time is closed (slowloris);
an idle keep-alive connection is closed after the idle timeout; HTTP requests past the
in-flight cap get 503 SERVER_BUSY with Retry-After while `/healthz` answers; a
connection past the connection cap is answered 503 and closed, and the server serves
once they go; a flood past a small file-descriptor limit is a bounded number of log
lines; asyncio's accept errors are one line per interval (against asyncio's own accept
loop out of descriptors, beside what it logs without the handler); a client that
disconnects mid-body is no ERROR and no traceback.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.server.connections import connection_cap, reserved_fds

ROOT = Path(__file__).resolve().parents[1]
QUERY = b'{"query":"{ __typename }"}'


@dataclass
class Served:
    base: str
    port: int
    log: Path

    def lines(self) -> list[str]:
        """The log while serving (what `serve` logs once told to stop is not the test's)."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return text.split("uvicorn.error [-] Shutting down")[0].splitlines()

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("connection-limits") / "gw.db"
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "migrate", "--database", f"sqlite+aiosqlite:///{path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return path


@contextmanager
def serving(db: Path, tmp_path: Path, *flags: str, nofile: int | None = None) -> Iterator[Served]:
    """`serve` in a subprocess on a copy of `db`, stderr (the log) to a file; with
    `nofile`, the child's RLIMIT_NOFILE is set to it before Python starts."""
    copy = tmp_path / "served.db"
    copy.write_bytes(db.read_bytes())
    port = _free_port()
    log = tmp_path / "serve.log"

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--database",
             f"sqlite+aiosqlite:///{copy}", "--port", str(port), *flags],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=limit,
        )  # fmt: skip
    served = Served(f"http://127.0.0.1:{port}", port, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{served.base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
        yield served
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def closed_after(sock: socket.socket, limit: float) -> float | None:
    """Seconds until the server closes `sock` (reading and dropping what it sends), or
    None if it is still open after `limit`."""
    started = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - started < limit:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - started
    return None


def request(path: str = "/healthz", method: str = "GET", body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n"
    if method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length, read off `sock`."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk
        rest += chunk
    return int(status_line.split()[1]), headers, rest[:length]


def no_traceback(lines: list[str]) -> None:
    assert not [line for line in lines if "Traceback" in line or " ERROR " in line], lines[-20:]


# -- the header timeout ------------------------------------------------------------------


def test_slowloris_connections_are_closed_by_the_header_timeout(
    migrated_db: Path, tmp_path: Path
) -> None:
    flags = ("--header-timeout", "1.5", "--keep-alive-timeout", "30")
    with serving(migrated_db, tmp_path, *flags) as served:
        silent = [served.connect() for _ in range(20)]
        halves = [served.connect() for _ in range(20)]
        for sock in halves:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: local")
        trickler = served.connect()
        trickler.sendall(b"GET /healthz HTTP/1.1\r\n")
        # a keep-alive connection idle for longer than the header timeout is kept, and its
        # next request's headers are timed from their first byte
        later = served.connect()
        later.sendall(request())
        assert read_response(later)[0] == 200
        started = time.monotonic()
        while time.monotonic() - started < 1.4:  # a header line every 0.3 s: never done
            trickler.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.3)
        times = [closed_after(sock, 5) for sock in [*silent, *halves, trickler]]
        assert all(t is not None for t in times), times
        assert closed_after(later, 0.5) is None  # idle 2 s, past the header timeout: kept
        later.sendall(b"GET /healthz HTTP/1.1\r\n")
        reopened = time.monotonic()
        assert closed_after(later, 5) is not None
        assert 1.0 <= time.monotonic() - reopened <= 3.5
        fresh = served.connect()
        fresh.sendall(request())
        assert read_response(fresh)[0] == 200  # complete headers are served as before
        for sock in [*silent, *halves, trickler, later, fresh]:
            sock.close()
    elapsed = [t for t in times if t is not None]
    assert max(elapsed) <= 3.5  # 1.5 s after they opened, give or take the test's own pace
    lines = served.lines()
    no_traceback(lines)
    assert any("no complete request headers within 1.5 s" in line for line in lines)


# -- the idle timeout --------------------------------------------------------------------


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    migrated_db: Path, tmp_path: Path
) -> None:
    with serving(migrated_db, tmp_path, "--keep-alive-timeout", "1") as served:
        busy = served.connect()
        for _ in range(3):  # used more often than the idle timeout: kept open
            busy.sendall(request())
            assert read_response(busy)[0] == 200
            time.sleep(0.5)
        idle = served.connect()
        idle.sendall(request())
        assert read_response(idle)[0] == 200
        answered = time.monotonic()
        closed = closed_after(idle, 5)
        waited = time.monotonic() - answered
        busy.close()
        idle.close()
    assert closed is not None and 0.8 <= waited <= 2.5, waited


# -- requests in flight ------------------------------------------------------------------


def test_requests_past_the_in_flight_cap_get_503_with_retry_after_while_healthz_answers(
    migrated_db: Path, tmp_path: Path
) -> None:
    with serving(migrated_db, tmp_path, "--max-in-flight", "2") as served:
        held = [served.connect() for _ in range(2)]
        for sock in held:  # in flight: the app is waiting for the rest of the body
            sock.sendall(request("/graphql", "POST", QUERY)[: -len(QUERY) + 5])
        time.sleep(0.3)
        with httpx.Client(base_url=served.base, timeout=10) as client:
            refused = client.post("/graphql", json={"query": "{ __typename }"})
            refused_get = client.get("/graphql", params={"query": "{ __typename }"})
            health = [client.get("/healthz") for _ in range(5)]
            for sock in held:
                sock.sendall(QUERY[5:])
            answers = [read_response(sock) for sock in held]
            after = client.post("/graphql", json={"query": "{ __typename }"})
        for sock in held:
            sock.close()
    assert refused.status_code == 503 and refused_get.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"].startswith("application/json")
    (error,) = refused.json()["errors"]
    assert error["extensions"]["code"] == "SERVER_BUSY" and "2 requests" in error["message"]
    assert [r.status_code for r in health] == [200] * 5
    assert [status for status, _, _ in answers] == [200, 200]
    assert all(json.loads(body)["data"] == {"__typename": "Query"} for _, _, body in answers)
    assert after.status_code == 200


def test_an_sse_stream_gives_its_in_flight_slot_back_when_it_starts(tmp_path: Path) -> None:
    """A subscription stream is bounded by the subscription limits, not the in-flight cap:
    with a cap of 1, a query still answers while a live stream runs."""
    port = _free_port()
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    env.pop("SESSION_GATEWAY_DATABASE_URL", None)
    with (tmp_path / "serve.log").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--demo", "--port", str(port),
             "--max-in-flight", "1", "--agent-interval", "0.2"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    sub = 'subscription { sessionEvents(sessionId: "demo-agent-live") { seq } }'
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        with (
            httpx.Client(base_url=base, timeout=10) as client,
            client.stream(
                "POST", "/graphql", json={"query": sub}, headers={"Accept": "text/event-stream"}
            ) as stream,
        ):
            assert stream.status_code == 200
            first = next(stream.iter_lines())
            query = client.post("/graphql", json={"query": "{ __typename }"})
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    assert first.startswith(("event:", ":", "data:")), first
    assert query.status_code == 200 and query.json()["data"] == {"__typename": "Query"}


# -- the connection cap ------------------------------------------------------------------


def test_the_connection_cap_refuses_extras_and_the_server_answers_after_they_go(
    migrated_db: Path, tmp_path: Path
) -> None:
    flags = ("--max-connections", "20", "--header-timeout", "30", "--keep-alive-timeout", "30")
    with serving(migrated_db, tmp_path, *flags) as served:
        held = [served.connect() for _ in range(20)]
        for sock in held:  # each one served once, so accepted: then idle, kept alive
            sock.sendall(request())
            assert read_response(sock)[0] == 200
        extras = [served.connect() for _ in range(5)]
        refusals = [read_response(sock) for sock in extras]
        closed = [closed_after(sock, 3) for sock in extras]
        for sock in [*held, *extras]:
            sock.close()
        time.sleep(0.3)
        with httpx.Client(base_url=served.base, timeout=10) as client:
            after = client.post("/graphql", json={"query": "{ __typename }"})
            health = client.get("/healthz")
    assert [status for status, _, _ in refusals] == [503] * 5
    _status, headers, body = refusals[0]
    assert headers["retry-after"] == "1" and headers["connection"] == "close"
    assert json.loads(body)["errors"][0]["extensions"]["code"] == "SERVER_BUSY"
    assert all(t is not None for t in closed)
    assert after.status_code == 200 and after.json()["data"] == {"__typename": "Query"}
    assert health.status_code == 200
    lines = served.lines()
    no_traceback(lines)
    assert len([line for line in lines if "past the cap of 20" in line]) == 1  # throttled


def test_the_connection_cap_stays_below_the_file_descriptor_limit() -> None:
    assert connection_cap(4096, 20_000, 12) == 4096
    assert connection_cap(50_000, 20_000, 12) == 20_000 - 12 - 256
    assert connection_cap(4096, 1024, 12) == 1024 - 12 - 256
    assert connection_cap(4096, 64, 12) == 64 - 12 - 16 and reserved_fds(64) == 16
    assert connection_cap(4096, 10, 12) == 1


def test_a_flood_past_a_small_file_descriptor_limit_gives_a_bounded_number_of_log_lines(
    migrated_db: Path, tmp_path: Path
) -> None:
    with serving(migrated_db, tmp_path, nofile=96) as served:
        probe = served.connect()  # opened before the flood, kept alive by use
        flood: list[socket.socket] = []
        slowest = 0.0
        started = time.monotonic()
        while time.monotonic() - started < 4:
            while len(flood) < 400:
                flood.append(socket.create_connection(("127.0.0.1", served.port), timeout=10))
            sent = time.monotonic()
            probe.sendall(request())
            assert read_response(probe)[0] == 200
            slowest = max(slowest, time.monotonic() - sent)
            for sock in flood[:100]:  # some go, others come
                sock.close()
            del flood[:100]
            time.sleep(0.05)
        for sock in flood:
            sock.close()
        time.sleep(0.5)
        with httpx.Client(base_url=served.base, timeout=10) as client:
            after = client.post("/graphql", json={"query": "{ sessions { totalCount } }"})
        probe.close()
    assert after.status_code == 200 and after.json()["data"] == {"sessions": {"totalCount": 0}}
    assert slowest < 3.0  # the probe's connection kept being served (a loaded CI box)
    lines = served.lines()
    no_traceback(lines)
    about = [line for line in lines if "gateway.server.connections" in line or "asyncio" in line]
    assert 1 <= len(about) <= 6, about
    assert any("refused a connection past the cap" in line for line in about)


# -- accept errors -----------------------------------------------------------------------

ACCEPT_CHILD = textwrap.dedent(
    """
    import asyncio, logging, os, resource, sys
    from gateway.server.connections import AcceptErrorLog

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if sys.argv[1] == "throttled":
            AcceptErrorLog(loop, interval=1.0).install(loop)
        held = []

        class Hold(asyncio.Protocol):
            def connection_made(self, transport):
                held.append(transport)

        server = await loop.create_server(Hold, "127.0.0.1", 0, backlog=2048)
        in_use = len(os.listdir("/proc/self/fd"))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 10, hard))
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.sleep(2.5)
        print(f"held {len(held)}", flush=True)

    asyncio.run(main())
    """
)


def _accept_flood(mode: str, tmp_path: Path) -> tuple[list[str], str]:
    err = tmp_path / f"{mode}.log"
    with err.open("wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", ACCEPT_CHILD, mode],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
    assert child.stdout is not None
    port = int(child.stdout.readline())
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    out, _ = child.communicate(timeout=30)
    for sock in clients:
        sock.close()
    return err.read_text().splitlines(), out


@pytest.mark.parametrize("mode", ["throttled", "asyncio-default"])
def test_accept_errors_are_one_line_per_interval_with_a_count(mode: str, tmp_path: Path) -> None:
    lines, out = _accept_flood(mode, tmp_path)
    assert "held " in out and int(out.split("held ")[1]) < 200  # it did run out
    tracebacks = sum("Traceback" in line for line in lines)
    if mode == "asyncio-default":  # the model: asyncio alone logs each failed accept
        assert tracebacks >= 20
        return
    assert tracebacks == 0
    accept = [line for line in lines if "cannot accept connections" in line]
    assert 1 <= len(accept) <= 4, lines[:10]  # 2.5 s at one line per second, plus the first
    assert "EMFILE" in accept[0]
    assert len(accept) == 1 or "more in the last 1 s" in accept[1]


# -- client disconnects ------------------------------------------------------------------


@pytest.mark.parametrize("cut", [5, len(QUERY) - 1], ids=["early", "last-byte"])
def test_a_client_that_disconnects_mid_body_gives_no_error_and_no_traceback(
    cut: int, migrated_db: Path, tmp_path: Path
) -> None:
    with serving(migrated_db, tmp_path) as served:
        for _ in range(3):
            sock = served.connect()
            sock.sendall(request("/graphql", "POST", QUERY)[: -len(QUERY) + cut])
            time.sleep(0.2)
            sock.close()
        time.sleep(0.3)
        with httpx.Client(base_url=served.base, timeout=10) as client:
            after = client.post("/graphql", json={"query": "{ __typename }"})
    assert after.status_code == 200
    lines = served.lines()
    no_traceback(lines)
    disconnects = [line for line in lines if "client disconnected" in line]
    assert len(disconnects) == 3 and all(" INFO " in line for line in disconnects)
