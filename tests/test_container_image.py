"""The container image, built from `docker/Dockerfile` by a real engine and run.

podman (Debian's package) builds the Dockerfile as written and the tests run what
comes out: its default command with bearer tokens, its HEALTHCHECK, its non-root
user and `/data` volume, `import` into that volume, and the compose flow (`migrate`,
then serve) against the suite's real PostgreSQL. See `tests/support/container.py`
for why podman is set up the way it is and where the base image comes from.

Marked `slow` (a first run installs podman and builds a base, ~3 min; later runs
build in ~1 min): `python -m pytest -m slow` runs them. The quick checks of the same
files (static Dockerfile and compose checks, every command run outside a container)
are in tests/test_deploy_files.py and run by default.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import tomllib
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import DATA_DIR
from tests.support.container import ContainerUnavailable, Podman
from tests.test_deploy_files import DOCKERFILE, ROOT, free_port

pytestmark = [pytest.mark.slow, pytest.mark.container]

TAG = "localhost/session-gateway:tests"
TOKEN_KEY = "container-tests-" + "k" * 32
UID = 10001  # docker/Dockerfile's fixed user


@pytest.fixture(scope="module")
def podman(request: pytest.FixtureRequest) -> Podman:
    # Uncaptured: a one-time install or base build prints its progress lines.
    capture = request.config.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            engine = Podman()
            engine.ensure_base_image()
        return engine
    except ContainerUnavailable as exc:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"no container engine: {exc}", pytrace=False)
        pytest.skip(f"no container engine: {exc}")


@pytest.fixture(scope="module")
def image(podman: Podman) -> str:
    """`podman build` of docker/Dockerfile, unchanged, from the repository root."""
    print(f"\nbase image: python:3.11-slim, {podman.ensure_base_image()}")
    started = time.monotonic()
    # --no-cache: Debian's buildah (1.28) reuses the runtime stage's cached
    # `RUN --mount=type=bind,from=builder` layer when only the builder's wheels changed
    # (seen here: a module added to the checkout was missing from the image). pip's
    # own cache mount still spares the downloads.
    podman.run(
        "build", "--no-cache", "--format", "docker",  # docker format keeps HEALTHCHECK
        "--pull=never", "--network", "host", "-f", str(DOCKERFILE), "-t", TAG, str(ROOT),
        timeout=1200,
    )  # fmt: skip
    print(f"image built in {time.monotonic() - started:.0f} s")
    return TAG


@pytest.fixture
def containers(podman: Podman) -> Iterator[list[str]]:
    """Names of containers a test started; removed (with their volumes) afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        podman.run("rm", "--force", "--volumes", name, check=False)


def _name() -> str:
    return f"sgw-test-{uuid.uuid4().hex[:10]}"


def _wait_healthy(podman: Podman, name: str, url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = podman.run("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
        if state != "running":
            logs = podman.run("logs", name, check=False)
            raise AssertionError(f"container {state}:\n{logs.stdout}{logs.stderr}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout} s")


def _query(port: int, token: str, query: str) -> dict[str, object]:
    answer = httpx.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": query},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert "errors" not in body, body
    return body["data"]


def _files_of_the_package() -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files", "gateway", "migrations"], cwd=ROOT, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    files = set()
    for path in listed.stdout.split():
        if path.startswith("migrations/"):
            if path.endswith(".py"):
                files.add("gateway/_migrations/" + path.removeprefix("migrations/"))
        elif path.endswith(".py") or "/static/" in path:
            files.add(path)
    return files


def test_image_installs_the_package_with_its_data_and_runs_as_a_fixed_non_root_user(
    podman: Podman, image: str
):
    listing = podman.run(
        "run", "--rm", "--entrypoint", "python", image, "-c",
        "import gateway, pathlib; root = pathlib.Path(gateway.__file__).parent; "
        "print('\\n'.join(p.relative_to(root.parent).as_posix() "
        "for p in root.rglob('*') if p.is_file()))",
    ).stdout.split()  # fmt: skip
    missing = sorted(_files_of_the_package() - set(listing))
    assert not missing, f"the image's package lacks {missing}"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version in podman.run("run", "--rm", image, "--version").stdout
    assert podman.run("run", "--rm", "--entrypoint", "id", image, "-u").stdout.strip() == str(UID)
    assert (
        "gcc"
        not in podman.run(
            "run", "--rm", "--entrypoint", "sh", image, "-c", "command -v gcc || echo none"
        ).stdout
    ), "build tools stay in the builder stage"


def test_image_without_a_token_key_refuses_to_serve_in_one_line(podman: Podman, image: str):
    done = podman.run("run", "--rm", image, check=False, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "SESSION_GATEWAY_TOKEN_KEY" in done.stderr
    assert "Traceback" not in done.stderr


def test_image_command_serves_with_tokens_passes_its_healthcheck_and_stops_gracefully(
    podman: Podman, image: str, containers: list[str]
):
    name = _name()
    containers.append(name)
    port = free_port()
    podman.run(
        "run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8000",
        "--env", f"SESSION_GATEWAY_TOKEN_KEY={TOKEN_KEY}", image,
    )  # fmt: skip
    _wait_healthy(podman, name, f"http://127.0.0.1:{port}/healthz")
    assert podman.run("healthcheck", "run", name, check=False).returncode == 0
    anonymous = httpx.post(
        f"http://127.0.0.1:{port}/graphql", json={"query": "{ __typename }"}, timeout=10
    )
    assert anonymous.status_code == 401, anonymous.text
    token = podman.run(
        "exec", name, "session-gateway", "token", "create", "--name", "ops", "--grant", "all"
    ).stdout.strip()
    assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
    data = _query(port, token, "{ sessions(first: 5) { totalCount } }")
    assert data == {"sessions": {"totalCount": 0}}
    page = httpx.get(f"http://127.0.0.1:{port}/graphql", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "graphiql.min.js" in page.text
    listing = podman.run("exec", name, "ls", "-ln", "/data").stdout
    assert "sessions.db" in listing and f" {UID} " in listing, listing

    podman.run("stop", "--time", "15", name, timeout=60)
    assert podman.run("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0"
    logs = podman.run("logs", name).stderr.splitlines()
    records = [json.loads(line) for line in logs if line.startswith("{")]
    assert records, "SESSION_GATEWAY_LOG_FORMAT=json: the logs are JSON lines"
    assert any(r.get("request_id") for r in records), records[-5:]


def test_image_imports_artifacts_into_its_volume_and_serves_them(
    podman: Podman, image: str, containers: list[str]
):
    volume = _name()
    podman.run("volume", "create", volume)
    try:
        artifacts = DATA_DIR / "dsh-jsonl"
        expected = len(list(artifacts.glob("*.jsonl")))
        imported = podman.run(
            "run", "--rm", "--volume", f"{volume}:/data", "--volume", f"{artifacts}:/in:ro",
            image, "import", "/in", "--no-progress", timeout=300,
        )  # fmt: skip
        assert "/data/sessions.db" in imported.stdout + imported.stderr, "the summary names it"
        name = _name()
        containers.append(name)
        port = free_port()
        podman.run(
            "run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8000",
            "--volume", f"{volume}:/data", "--env", f"SESSION_GATEWAY_TOKEN_KEY={TOKEN_KEY}",
            image,
        )  # fmt: skip
        _wait_healthy(podman, name, f"http://127.0.0.1:{port}/healthz")
        token = podman.run(
            "exec", name, "session-gateway", "token", "create", "--name", "t", "--grant", "all"
        ).stdout.strip()
        data = _query(port, token, "{ sessions(first: 1) { totalCount } }")
        assert data["sessions"]["totalCount"] >= expected - 5  # type: ignore[index]
    finally:
        for name in containers:
            podman.run("rm", "--force", name, check=False)
        podman.run("volume", "rm", "--force", volume, check=False)


@pytest.mark.postgres
def test_image_migrates_postgresql_then_serves_it_as_compose_does(
    podman: Podman, image: str, containers: list[str], postgres_url: str
):
    """compose `migrate` then `gateway`, as containers on the host's network (the
    suite's PostgreSQL listens on loopback; the postgres:16 image is not needed)."""
    migrate = ["run", "--rm", "--network", "host", image, "migrate", "--database", postgres_url]
    first = podman.run(*migrate, timeout=120)
    assert "migrated" in first.stdout, first.stdout
    again = podman.run(*migrate, timeout=120)
    assert "already at revision" in again.stdout, again.stdout
    name = _name()
    containers.append(name)
    port = free_port()
    podman.run(
        "run", "--detach", "--name", name, "--network", "host",
        "--env", f"SESSION_GATEWAY_DATABASE_URL={postgres_url}",
        "--env", f"SESSION_GATEWAY_TOKEN_KEY={TOKEN_KEY}",
        "--env", f"SESSION_GATEWAY_HEALTHCHECK_URL=http://127.0.0.1:{port}/healthz",
        image, "serve", "--host", "127.0.0.1", "--port", str(port),
    )  # fmt: skip
    _wait_healthy(podman, name, f"http://127.0.0.1:{port}/healthz")
    assert podman.run("healthcheck", "run", name, check=False).returncode == 0
    ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text
    token = podman.run(
        "exec", name, "session-gateway", "token", "create", "--name", "ops", "--grant", "all"
    ).stdout.strip()
    assert _query(port, token, "{ sessions(first: 1) { totalCount } }") == {
        "sessions": {"totalCount": 0}
    }


def test_image_traces_a_request_when_the_environment_asks(
    podman: Podman, image: str, containers: list[str]
):
    """The image carries the `otel` extra: OTEL_TRACES_EXPORTER=console is enough, and the
    spans still batched are written when the container is stopped."""
    trace_id = uuid.uuid4().hex
    name = _name()
    containers.append(name)
    port = free_port()
    podman.run(
        "run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8000",
        "--env", f"SESSION_GATEWAY_TOKEN_KEY={TOKEN_KEY}",
        "--env", "OTEL_TRACES_EXPORTER=console", image,
    )  # fmt: skip
    _wait_healthy(podman, name, f"http://127.0.0.1:{port}/healthz")
    token = podman.run(
        "exec", name, "session-gateway", "token", "create", "--name", "t", "--grant", "all"
    ).stdout.strip()
    answer = httpx.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": "query Traced { sessions(first: 1) { totalCount } }"},
        headers={
            "Authorization": f"Bearer {token}",
            "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01",
        },
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    podman.run("stop", "--time", "15", name, timeout=60)
    out = podman.run("logs", name).stdout
    assert "Tracing:" in out, out[:2000]
    assert '"name": "query Traced"' in out and f"0x{trace_id}" in out, out[-3000:]
