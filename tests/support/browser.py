"""Make sure a headless Chromium is available for the browser tests.

We use Debian's ``chromium`` package (the machine may reach no other source of
browser builds; playwright's own browser download is never used).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM_PATH = Path("/usr/bin/chromium")
APT_TIMEOUT_S = 900


class ChromiumUnavailable(RuntimeError):
    """Chromium is missing and could not be installed."""


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _apt(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(
        ["apt-get", *args],
        capture_output=True,
        text=True,
        timeout=APT_TIMEOUT_S,
        env=env,
        check=False,
    )


def ensure_chromium() -> Path:
    """Return the path of a usable Chromium, installing Debian's package if needed.

    Installs ``chromium`` with apt-get when ``/usr/bin/chromium`` is missing and we
    run as root; otherwise raises :class:`ChromiumUnavailable` with a clear message.
    """
    if CHROMIUM_PATH.exists():
        return CHROMIUM_PATH
    if not _is_root():
        raise ChromiumUnavailable(
            f"{CHROMIUM_PATH} is missing and we are not root; install it with "
            "`sudo apt-get install -y --no-install-recommends chromium`"
        )
    if shutil.which("apt-get") is None:
        raise ChromiumUnavailable(f"{CHROMIUM_PATH} is missing and apt-get is not available")

    install = ["install", "-y", "--no-install-recommends", "chromium"]
    try:
        result = _apt(install)
        if result.returncode != 0:
            # Package lists may be absent or stale on a fresh machine: refresh once.
            update = _apt(["update"])
            if update.returncode != 0:
                raise ChromiumUnavailable(
                    f"`apt-get update` failed ({update.returncode}):\n{update.stderr[-2000:]}"
                )
            result = _apt(install)
    except subprocess.TimeoutExpired as exc:
        raise ChromiumUnavailable(f"apt-get timed out after {exc.timeout}s") from exc
    if result.returncode != 0 or not CHROMIUM_PATH.exists():
        raise ChromiumUnavailable(
            f"`apt-get {' '.join(install)}` failed ({result.returncode}):\n{result.stderr[-2000:]}"
        )
    return CHROMIUM_PATH
