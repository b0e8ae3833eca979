"""A real container engine for the image tests: Debian's podman, set up for this kind of machine.

Why each step is here:

* **podman + runc, from Debian's packages**, installed on first use when we are root
  (like PostgreSQL and Chromium). runc rather than crun, podman's default: these
  machines run cgroups in hybrid mode, which crun refuses ("cgroups in hybrid mode
  not supported"); runc accepts it.
* **A containers.conf of the tests' own** (`CONTAINERS_CONF`): runc, the cgroupfs
  manager (no systemd here), file events, and modest default ulimits: the sandbox
  withholds CAP_SYS_RESOURCE, so podman's defaults (RLIMIT_NOFILE 1048576, a high
  RLIMIT_NPROC) fail with "setrlimit: Operation not permitted".
* **A storage of the tests' own** (`CONTAINERS_STORAGE_CONF`, under the user's cache
  directory): the tests may tag a stand-in base image as `python:3.11-slim` there,
  which must never shadow the real image in the user's own podman storage. It is
  kept between runs, so the base and the pip cache mount are made once.
* **The base image**: `docker.io/library/python:3.11-slim` is pulled when a registry
  answers. Where none does (this machine reaches only package registries), a
  stand-in is built once with debootstrap from Debian's own archive: bookworm (the
  slim image's Debian release) with Debian's Python 3.11, `python` and `pip` on
  PATH as the slim image has them, and the host's local CA certificates (a TLS
  inspecting egress proxy must be trusted inside the build as it is outside). The
  Dockerfile itself is built unchanged.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .apt import AptUnavailable, ensure_packages, say

BASE_IMAGE = "docker.io/library/python:3.11-slim"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "session-gateway-tests"
STANDIN_PACKAGES = "python3,python3-venv,python3-pip,ca-certificates"


class ContainerUnavailable(RuntimeError):
    """No container engine could be had here (the message says why)."""


def _log(message: str) -> None:
    say(message)


def _apt_install(*packages: str) -> None:
    def present() -> bool:
        return all(shutil.which(p) is not None for p in packages)

    try:
        ensure_packages(*packages, present=present)
    except AptUnavailable as exc:
        raise ContainerUnavailable(str(exc)) from exc


class Podman:
    """podman with the tests' own configuration and storage (see the module docstring)."""

    def __init__(self) -> None:
        missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
        if missing:
            _apt_install(*missing)
        self.home = CACHE / "podman"
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(self._write_containers_conf()),
            "CONTAINERS_STORAGE_CONF": str(self._write_storage_conf()),
        }

    def _write_containers_conf(self) -> Path:
        # podman's own defaults (1048576 files, the host's process limit) cannot be set
        # here; this process's open-file limit and 4096 processes are plenty for the image.
        nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 65536)
        nproc = 4096
        path = self.home / "containers.conf"
        path.write_text(
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n',
            encoding="utf-8",
        )
        return path

    def _write_storage_conf(self) -> Path:
        path = self.home / "storage.conf"
        path.write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{self.home / "storage"}"\n'
            f'runroot = "{self.home / "run"}"\n',
            encoding="utf-8",
        )
        return path

    def run(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"`podman {' '.join(args)}` exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        return done

    def has_image(self, name: str) -> bool:
        return self.run("image", "exists", name, check=False).returncode == 0

    def ensure_base_image(self) -> str:
        """`python:3.11-slim` from a registry, else the stand-in; says which it used."""
        if self.has_image(BASE_IMAGE):
            return self._base_origin()
        pulled = self.run("pull", "-q", BASE_IMAGE, timeout=600, check=False)
        if pulled.returncode == 0:
            return "pulled from its registry"
        _log(f"no registry answers for {BASE_IMAGE}; building a Debian stand-in (one-time) ...")
        started = time.monotonic()
        self.run(
            "import", "-q",
            "--change", "CMD [\"python3\"]",
            "--change", "LABEL org.session-gateway.tests.standin=debootstrap",
            str(_standin_tarball()), BASE_IMAGE,
            timeout=600,
        )  # fmt: skip
        _log(f"stand-in base ready in {time.monotonic() - started:.0f} s")
        return self._base_origin()

    def _base_origin(self) -> str:
        labels = self.run("image", "inspect", "--format", "{{json .Labels}}", BASE_IMAGE).stdout
        return "a Debian stand-in (debootstrap)" if "standin" in labels else "the registry's image"


def _standin_tarball() -> Path:
    """A root filesystem standing for python:3.11-slim, made with debootstrap."""
    tarball = CACHE / "python-3.11-slim-standin.tar"
    if tarball.exists():
        return tarball
    if shutil.which("debootstrap") is None:
        _apt_install("debootstrap")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        root = Path(scratch) / "root"
        made = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={STANDIN_PACKAGES}",
             "bookworm", str(root), DEBIAN_MIRROR],
            capture_output=True, text=True, timeout=1200,
        )  # fmt: skip
        if made.returncode != 0:
            raise ContainerUnavailable(f"debootstrap failed:\n{made.stdout[-2000:]}")
        # The slim image's layout: `python` and `pip` on PATH, pip free to install.
        (root / "usr/local/bin/python").symlink_to("/usr/bin/python3")
        (root / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
        for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
            shutil.copy2(cert, root / "usr/local/share/ca-certificates" / cert.name)
        subprocess.run(["chroot", str(root), "update-ca-certificates"], capture_output=True)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(root / cache, ignore_errors=True)
        partial = tarball.with_suffix(".partial")
        packed = subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."],
                                capture_output=True, text=True)  # fmt: skip
        if packed.returncode != 0:
            raise ContainerUnavailable(f"tar of the stand-in failed: {packed.stderr[-2000:]}")
        partial.rename(tarball)  # whole or absent: an interrupted run leaves no half base
    return tarball
