"""Install Debian packages the tests need (PostgreSQL, Chromium, podman), one at a time.

Every system tool the suite uses comes from Debian's archive and is installed on
first use when we run as root. Installs are serialised with a lock file, because
test processes running side by side (pytest-xdist workers) would otherwise race
for apt's own lock, and each announces itself on the real stderr (around pytest's
capture) with a line before and the time it took after: a one-time install can
take a minute, and a silent minute in a CI log looks like a hang.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

TIMEOUT_S = 900
_LOCK = Path(tempfile.gettempdir()) / "session-gateway-tests-apt.lock"


class AptUnavailable(RuntimeError):
    """The packages are missing and cannot be installed here (the message says how to)."""


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if absent) across test processes."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def say(message: str) -> None:
    """A progress line on the process's real stderr, whatever pytest captures."""
    os.write(2, f"\ntests: {message}\n".encode())


def ensure_packages(*packages: str, present: Callable[[], bool], about: str = "~1 min") -> None:
    """Install `packages` with apt-get unless `present()` says they are there already."""
    if present():
        return
    with file_lock(_LOCK):
        if present():  # another test process installed them while we waited
            return
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise AptUnavailable(
                f"{' '.join(packages)} missing; install with "
                f"`sudo apt-get install --no-install-recommends {' '.join(packages)}`"
            )
        names = " ".join(packages)
        say(f"installing {names} with apt-get (one-time, {about}) ...")
        started = time.monotonic()
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]

        def apt(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["apt-get", *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S
            )

        try:
            done = apt(*install[1:])
            if done.returncode != 0:  # package lists absent or stale on a fresh machine
                update = apt("update", "-q")
                if update.returncode != 0:
                    raise AptUnavailable(f"`apt-get update` failed:\n{update.stderr[-2000:]}")
                done = apt(*install[1:])
        except subprocess.TimeoutExpired as exc:
            raise AptUnavailable(f"apt-get timed out after {exc.timeout:.0f} s") from exc
        if done.returncode != 0 or not present():
            raise AptUnavailable(
                f"`{' '.join(install)}` failed (exit {done.returncode}):\n"
                f"{(done.stdout + done.stderr)[-2000:]}"
            )
        say(f"installed {names} in {time.monotonic() - started:.0f} s")
