"""A throwaway PostgreSQL cluster for tests.

Persistence tests must run against a real server, so each test run gets its own
cluster in a temporary directory on a free loopback port. Nothing is shared with
a system PostgreSQL install except the Debian server binaries.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from .apt import AptUnavailable, ensure_packages

DEBIAN_PG_ROOT = Path("/usr/lib/postgresql")
SERVER_USER = "postgres"
DIR_PREFIX = "session-gateway-pg-"
# Creating a database writes ~300 small files; on tmpfs that is ~15x faster than on disk.
SHM_DIR = Path("/dev/shm")
SHM_MIN_FREE = 1 << 30
_TOOLS = ("initdb", "pg_ctl", "postgres", "psql")
_DB_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# Durability is worthless for a throwaway cluster; turning it off makes DDL-heavy tests fast.
_SETTINGS = """
listen_addresses = '127.0.0.1'
unix_socket_directories = '{socket_dir}'
fsync = off
synchronous_commit = off
full_page_writes = off
"""


class PostgresServer:
    """One throwaway cluster: `start()` creates it (or restarts it), `cleanup()` removes it.

    `stop()` followed by `start()` brings back the same data directory on the same
    port, so tests can simulate a database outage and check recovery.
    """

    host = "127.0.0.1"

    def __init__(self, *, base_dir: Path | None = None, timeout: float = 30.0) -> None:
        self.bindir = self.ensure_binaries()
        self.base_dir = base_dir or _default_base_dir()
        self.timeout = timeout
        self.port = 0
        self.root: Path | None = None
        self._user = _server_user()

    # -- discovery ---------------------------------------------------------------

    @staticmethod
    def ensure_binaries() -> Path:
        """Return the newest Debian PostgreSQL bin dir, installing the package if we can.

        PATH is deliberately ignored: /usr/local/bin/pg_ctl and initdb may be hand-made
        symlinks pinned to one version (on the dev image, into .../15/bin), and Debian's
        /usr/bin wrappers need a configured cluster. Using one versioned bin dir keeps
        initdb, pg_ctl, postgres and psql consistent.
        """
        if (found := _find_bindir()) is not None:
            return found
        with contextlib.suppress(AptUnavailable):  # the error below says what to do
            ensure_packages("postgresql", present=lambda: _find_bindir() is not None)
        if (found := _find_bindir()) is not None:
            return found
        raise RuntimeError(
            f"PostgreSQL server binaries not found under {DEBIAN_PG_ROOT}/<version>/bin; "
            "install the Debian package: `apt-get install postgresql` (needs root)"
        )

    # -- lifecycle ---------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self._root() / "data"

    @property
    def log_path(self) -> Path:
        return self._root() / "server.log"

    def start(self) -> None:
        """Create and start the cluster, or restart it on the same data dir and port."""
        if self.root is None:
            _reap_stale_clusters({SHM_DIR, Path(tempfile.gettempdir()), self.base_dir})
            self._initdb()
        elif self.is_running():
            return
        fresh = self.port == 0
        result = None
        for _attempt in range(3 if fresh else 1):
            if fresh:  # Another process may grab the port between probe and bind: retry.
                self.port = _free_port()
            log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            result = self._pg_ctl(
                "start", "-w", "-t", str(int(self.timeout)), "-l", str(self.log_path),
                "-o", f"-p {self.port}",
            )  # fmt: skip
            if result.returncode == 0:
                return
            if "could not bind" not in self.log_tail(since=log_offset):
                break
        assert result is not None
        raise RuntimeError(
            f"PostgreSQL failed to start on {self.host}:{self.port} "
            f"(pg_ctl exit {result.returncode}): {result.stdout}{result.stderr}\n"
            f"--- server log tail ({self.log_path}) ---\n{self.log_tail()}"
        )

    def stop(self) -> None:
        """Fast shutdown: open connections are terminated, like a real outage."""
        if not self.is_running():
            return
        result = self._pg_ctl("stop", "-m", "fast", "-w", "-t", str(int(self.timeout)))
        if result.returncode != 0:
            raise RuntimeError(
                f"pg_ctl stop failed (exit {result.returncode}): {result.stdout}{result.stderr}\n"
                f"--- server log tail ---\n{self.log_tail()}"
            )

    def is_running(self) -> bool:
        return self.root is not None and _postmaster_alive(self.data_dir)

    def cleanup(self) -> None:
        """Stop the server (forcefully if need be) and delete the cluster. Idempotent."""
        atexit.unregister(self.cleanup)
        if self.root is None:
            return
        try:
            self.stop()
        except Exception:
            _kill_postmaster(self.data_dir)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.cleanup()  # __exit__ won't run if __enter__ raises.
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    # -- databases ---------------------------------------------------------------

    def url(self, dbname: str = "postgres", driver: str | None = "asyncpg") -> str:
        """SQLAlchemy URL; `driver=None` gives the plain DSN that asyncpg/psql accept."""
        if not self.port:
            raise RuntimeError("PostgresServer.url() called before start()")
        scheme = f"postgresql+{driver}" if driver else "postgresql"
        return f"{scheme}://{SERVER_USER}@{self.host}:{self.port}/{dbname}"

    def create_database(self, name: str) -> None:
        self.psql(f'CREATE DATABASE "{_check_db_name(name)}"')

    def drop_database(self, name: str) -> None:
        """Drop even if a test leaked connections (FORCE terminates them)."""
        self.psql(f'DROP DATABASE IF EXISTS "{_check_db_name(name)}" WITH (FORCE)')

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run SQL with the matching psql client over TCP; return its (unaligned) output."""
        cmd = [
            str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
            "-h", self.host, "-p", str(self.port), "-U", SERVER_USER, "-d", dbname, "-c", sql,
        ]  # fmt: skip
        env = {**_clean_env(), "PGCONNECT_TIMEOUT": "5"}
        try:
            result = subprocess.run(
                cmd, env=env, capture_output=True, text=True, timeout=self.timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"psql timed out after {self.timeout}s running {sql!r}") from exc
        if result.returncode != 0:
            raise RuntimeError(f"psql failed running {sql!r}: {result.stderr.strip()}")
        return result.stdout

    def log_tail(self, lines: int = 40, since: int = 0) -> str:
        """Last lines of the server log (from byte offset `since`), for error messages."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(since)
                return _tail(f.read().decode(errors="replace"), lines)
        except (OSError, RuntimeError):
            return "<no server log>"

    # -- internals ---------------------------------------------------------------

    def _root(self) -> Path:
        if self.root is None:
            raise RuntimeError("PostgresServer has not been started (or was cleaned up)")
        return self.root

    def _initdb(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=self.base_dir))
        atexit.register(self.cleanup)  # Fallback if the fixture finalizer never runs.
        (self.root / "owner.pid").write_text(str(os.getpid()))
        if self._user is not None:
            os.chown(self.root, self._user.pw_uid, self._user.pw_gid)
        result = self._run(
            "initdb", "-D", str(self.data_dir), "-U", SERVER_USER, "--auth=trust",
            "--no-sync", "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        if result.returncode != 0:
            message = (
                f"initdb failed (exit {result.returncode}):\n{_tail(result.stdout + result.stderr)}"
            )
            self.cleanup()
            raise RuntimeError(message)
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(_SETTINGS.format(socket_dir=self.root))

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", "-D", str(self.data_dir), *args)

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        """Run a server tool, as the `postgres` user when we are root (initdb refuses root)."""
        prefix = ["runuser", "-u", self._user.pw_name, "--"] if self._user else []
        cmd = [*prefix, str(self.bindir / tool), *args]
        try:
            return subprocess.run(
                cmd,
                env=_clean_env(),
                cwd=self._root(),  # The postgres user may not be able to enter our cwd.
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.timeout + 30,  # pg_ctl -t bounds the wait; this bounds everything.
                start_new_session=True,  # Keep a terminal's Ctrl-C away from the postmaster.
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(
                f"{tool} {' '.join(args)} timed out\n--- server log tail ---\n{self.log_tail()}"
            ) from exc


def _find_bindir() -> Path | None:
    candidates = [
        d / "bin"
        for d in DEBIAN_PG_ROOT.glob("*")
        if all((d / "bin" / tool).is_file() for tool in _TOOLS)
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda b: tuple(int(p) for p in re.findall(r"\d+", b.parent.name)))


def _server_user() -> pwd.struct_passwd | None:
    """The account server processes run as: `postgres` when root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    if not shutil.which("runuser"):
        raise RuntimeError("running as root needs `runuser` (Debian package util-linux)")
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home",
             "--shell", "/usr/sbin/nologin", SERVER_USER],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        return pwd.getpwnam(SERVER_USER)


def _default_base_dir() -> Path:
    """/dev/shm when it is a roomy tmpfs (not the 64 MiB Docker default), else the temp dir."""
    with contextlib.suppress(OSError):
        st = os.statvfs(SHM_DIR)
        if st.f_bavail * st.f_frsize >= SHM_MIN_FREE and os.access(SHM_DIR, os.W_OK):
            return SHM_DIR
    return Path(tempfile.gettempdir())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env() -> dict[str, str]:
    """Our environment minus PG* (e.g. PGDATA, PGPORT would redirect the tools), C locale
    so server messages are predictable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _check_db_name(name: str) -> str:
    if not _DB_NAME.fullmatch(name):
        raise ValueError(f"unsafe database name {name!r}: use [a-z_][a-z0-9_]*, max 63 chars")
    return name


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A dead postmaster can linger as a zombie if PID 1 doesn't reap orphans (containers).
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _postmaster_alive(data_dir: Path) -> bool:
    pid = _postmaster_pid(data_dir)
    return pid is not None and _pid_alive(pid)


def _kill_postmaster(data_dir: Path, grace: float = 5.0) -> bool:
    """Last resort when pg_ctl can't stop it: SIGQUIT (immediate shutdown), then SIGKILL.

    Returns whether the postmaster is gone.
    """
    pid = _postmaster_pid(data_dir)
    if pid is None or not _pid_alive(pid):
        return True
    for sig in (signal.SIGQUIT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # Someone else's server.
        deadline = time.monotonic() + grace
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _pid_alive(pid):
            return True
    return False


def _reap_stale_clusters(base_dirs: set[Path]) -> None:
    """Remove clusters left by runs that died without cleanup (SIGKILL skips atexit)."""
    for root in (root for base in base_dirs for root in base.glob(f"{DIR_PREFIX}*")):
        try:
            owner = int((root / "owner.pid").read_text())
        except (OSError, ValueError):
            continue  # Not ours, or still being created.
        if not _pid_alive(owner) and _kill_postmaster(root / "data"):
            shutil.rmtree(root, ignore_errors=True)
