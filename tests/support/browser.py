"""Make sure a headless Chromium is available for the browser tests.

We use Debian's ``chromium`` package (the machine may reach no other source of
browser builds; playwright's own browser download is never used).
"""

from __future__ import annotations

from pathlib import Path

from .apt import AptUnavailable, ensure_packages

CHROMIUM_PATH = Path("/usr/bin/chromium")


class ChromiumUnavailable(RuntimeError):
    """Chromium is missing and could not be installed."""


def ensure_chromium() -> Path:
    """Return the path of a usable Chromium, installing Debian's package if needed.

    Raises :class:`ChromiumUnavailable` with a clear message when it is missing and
    cannot be installed (not root, no apt-get, the install failed).
    """
    try:
        ensure_packages("chromium", present=CHROMIUM_PATH.exists)
    except AptUnavailable as exc:
        raise ChromiumUnavailable(str(exc)) from exc
    return CHROMIUM_PATH
