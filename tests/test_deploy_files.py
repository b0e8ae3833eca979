"""The container files, checked quickly and without a container engine.

The image itself is built and run by a real engine in tests/test_container_image.py
(`slow`: minutes). Here, in seconds:

* `docker/compose.yaml` is validated against the Compose Specification's JSON
  schema (`tests/data/compose-spec.json`, see its README) and checked for
  internal consistency (services, volumes, the database URL vs the PostgreSQL
  service's settings, ports vs the image's command);
* `docker/Dockerfile` is parsed and checked statically (multi-stage, non-root,
  HEALTHCHECK on /healthz, ENTRYPOINT), and every COPY source must exist and
  survive `.dockerignore`;
* every command the two files run is run here as written (only the port, the
  database URL and `/data` are swapped for test ones): the image's
  ENTRYPOINT + CMD serves, the HEALTHCHECK one-liner passes against it, the
  compose `migrate` command migrates a real PostgreSQL database, and the
  gateway then serves that database with the compose service's environment;
* `slow`: the dependencies resolve to binary wheels for linux/arm64 too (this
  one needs the package index, and skips saying so when it cannot be reached).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml

from gateway.cli import build_parser
from tests.support.network import package_index_unreachable

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"
SCHEMA = Path(__file__).parent / "data" / "compose-spec.json"
BIN = Path(sys.executable).parent

DB_ENV = "SESSION_GATEWAY_DATABASE_URL"
HEALTHCHECK_ENV = "SESSION_GATEWAY_HEALTHCHECK_URL"
TOKEN_KEY_ENV = "SESSION_GATEWAY_TOKEN_KEY"
DEFAULT_HEALTH_URL = "http://127.0.0.1:8000/healthz"


# ------------------------------------------------------------------- Dockerfile


@dataclass(frozen=True)
class Instruction:
    keyword: str
    flags: dict[str, str]
    args: str
    line: int
    stage: int

    def exec_form(self) -> list[str]:
        value = json.loads(self.args)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), self
        return value


@dataclass
class Dockerfile:
    instructions: list[Instruction]
    stages: list[tuple[str, str | None]] = field(default_factory=list)  # (image, name)

    def in_stage(self, stage: int, keyword: str | None = None) -> list[Instruction]:
        return [
            i
            for i in self.instructions
            if i.stage == stage and (keyword is None or i.keyword == keyword)
        ]

    @property
    def final(self) -> int:
        return len(self.stages) - 1

    def stage_index(self, name: str) -> int:
        for index, (_, stage_name) in enumerate(self.stages):
            if stage_name == name:
                return index
        raise AssertionError(f"no build stage named {name!r}")

    def last(self, keyword: str, stage: int | None = None) -> Instruction:
        found = self.in_stage(self.final if stage is None else stage, keyword)
        assert found, f"no {keyword} in the stage"
        return found[-1]


def _split_flags(rest: str) -> tuple[dict[str, str], str]:
    flags: dict[str, str] = {}
    rest = rest.strip()
    while rest.startswith("--"):
        token, _, rest = rest.partition(" ")
        name, _, value = token[2:].partition("=")
        flags[name] = value
        rest = rest.strip()
    return flags, rest


def parse_dockerfile(text: str) -> Dockerfile:
    """Instructions with continuations joined and comments dropped (no heredocs needed)."""
    result = Dockerfile([])
    buffer, start, stage = "", 0, -1
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not buffer and not stripped):
            continue
        if not buffer:
            start = number
        if raw.rstrip().endswith("\\"):
            buffer += raw.rstrip()[:-1] + " "
            continue
        buffer += raw
        keyword, _, rest = buffer.strip().partition(" ")
        keyword = keyword.upper()
        flags, args = _split_flags(rest)
        if keyword == "FROM":
            stage += 1
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            result.stages.append((words[0], name))
        result.instructions.append(Instruction(keyword, flags, args, start, stage))
        buffer = ""
    assert not buffer, "the Dockerfile ends inside a line continuation"
    return result


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DOCKERFILE.read_text())


def env_of(instructions: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in instructions:
        for token in shlex.split(instruction.args):
            name, sep, value = token.partition("=")
            assert sep, f"line {instruction.line}: use ENV KEY=VALUE, not {token!r}"
            env[name] = value
    return env


def entrypoint_and_cmd(df: Dockerfile) -> tuple[list[str], list[str]]:
    return df.last("ENTRYPOINT").exec_form(), df.last("CMD").exec_form()


def healthcheck_argv(df: Dockerfile) -> list[str]:
    instruction = df.last("HEALTHCHECK")
    kind, _, command = instruction.args.partition(" ")
    assert kind == "CMD", "HEALTHCHECK must run a command (exec form)"
    return json.loads(command)


# ------------------------------------------------------------------ .dockerignore


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore matching: `**` any directories, `*`/`?` within one name."""
    out, i = "", 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                out += "(?:.*/)?"
                i += 1
            else:
                out += ".*"
            continue
        if char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "[":
            end = pattern.index("]", i)
            body = pattern[i + 1 : end]
            out += "[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]"
            i = end + 1
            continue
        else:
            out += re.escape(char)
        i += 1
    return re.compile(out)


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if negated else line).lstrip("/")
        rules.append((negated, _pattern_regex(pattern)))
    return rules


def is_ignored(relpath: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Last matching rule wins; a rule matching a parent directory matches its contents."""
    parts = relpath.strip("/").split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for negated, regex in rules:
        if any(regex.fullmatch(candidate) for candidate in candidates):
            ignored = not negated
    return ignored


@pytest.fixture(scope="module")
def ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    return dockerignore_rules(DOCKERIGNORE.read_text())


def context_files(source: Path, rules: list[tuple[bool, re.Pattern[str]]]) -> list[Path]:
    """Files under `source` (a file or directory of the repo) that reach the build context."""
    paths = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    return [p for p in paths if not is_ignored(p.relative_to(ROOT).as_posix(), rules)]


# ----------------------------------------------------------------------- compose

_INTERPOLATION = re.compile(
    r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\})"
)


def interpolate(value: Any, environ: dict[str, str]) -> Any:
    """Compose's `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?err}`, `$$`."""
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        current = environ.get(name)
        if op in (":-", "-"):
            missing = current is None or (op == ":-" and current == "")
            return arg if missing else str(current)
        if op in (":?", "?"):
            if current is None or (op == ":?" and current == ""):
                raise AssertionError(f"compose needs {name} set: {arg}")
            return current
        if current is None:
            raise AssertionError(f"${{{name}}} has no default: `docker compose config` warns")
        return current

    return _INTERPOLATION.sub(substitute, value)


@pytest.fixture(scope="module")
def compose_raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose(compose_raw: dict[str, Any]) -> dict[str, Any]:
    """The compose file as `docker compose config` would see it with no .env file."""
    return interpolate(compose_raw, {})


def argv_of_compose_test(test: list[str] | str) -> list[str]:
    if isinstance(test, str):
        return ["/bin/sh", "-c", test]
    assert test[0] in ("CMD", "CMD-SHELL"), test
    return list(test[1:]) if test[0] == "CMD" else ["/bin/sh", "-c", test[1]]


# --------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test's environment without SESSION_GATEWAY_* settings, venv first on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SESSION_GATEWAY_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp_path / "home")
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    env.update(extra)
    return env


def run(
    argv: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=env["HOME"], capture_output=True, text=True, timeout=timeout
    )


def with_port(cmd: list[str], port: int) -> list[str]:
    index = cmd.index("--port")
    return [*cmd[: index + 1], str(port), *cmd[index + 2 :]]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


class Served:
    """A `session-gateway` process started from an argv, stopped with SIGTERM like `docker stop`."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.log = Path(env["HOME"]) / "serve.log"
        self._log = self.log.open("w")
        self.proc = subprocess.Popen(
            argv, env=env, cwd=env["HOME"], stdout=self._log, stderr=subprocess.STDOUT
        )

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log.read_text()

    def wait_healthy(self, health_argv: list[str], env: dict[str, str], limit: float = 30) -> None:
        deadline = time.monotonic() + limit
        while True:
            assert self.proc.poll() is None, f"serve exited early:\n{self.output()}"
            if run(health_argv, env, timeout=15).returncode == 0:
                return
            assert time.monotonic() < deadline, f"never healthy:\n{self.output()}"
            time.sleep(0.2)

    def stop(self) -> int:
        """SIGTERM, then the exit status (143 = 128 + SIGTERM after a graceful shutdown
        and the database closed, which is what `docker stop` reports for a clean stop)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"serve ignored SIGTERM:\n{self.output()}") from None
        self._log.close()
        return self.proc.returncode

    def stopped_gracefully(self) -> bool:
        return self.stop() == 128 + signal.SIGTERM and "shutdown complete" in self.output()


@pytest.fixture
def serving() -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for served in started:
        served.stop()


# ==================================================================== the tests


def assert_ready_and_empty(port: int, token: str | None = None) -> None:
    """The served gateway is ready (its database answers) and answers a query: no sessions."""
    ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text
    answer = httpx.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": "{ sessions(first: 5) { totalCount pageInfo { hasNextPage } } }"},
        headers={"Authorization": f"Bearer {token}"} if token else {},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["sessions"]["totalCount"] == 0


def test_dockerignore_matcher_follows_docker_semantics():
    rules = dockerignore_rules("**/__pycache__\n*.egg-info\ntests\n**/*.py[cod]\nlogs\n!logs/keep")
    assert is_ignored("gateway/core/__pycache__/fold.cpython-311.pyc", rules)
    assert is_ignored("__pycache__/x", rules)
    assert is_ignored("pkg.egg-info/PKG-INFO", rules)
    assert not is_ignored("gateway/pkg.egg-info", rules)  # `*` is anchored at the root
    assert is_ignored("tests/test_x.py", rules)
    assert not is_ignored("gateway/tests.py", rules)
    assert is_ignored("gateway/a.pyc", rules) and not is_ignored("gateway/a.py", rules)
    assert is_ignored("logs/x", rules) and not is_ignored("logs/keep", rules)


# -- Dockerfile: static -------------------------------------------------------


def test_dockerfile_is_multi_stage_on_slim_python(dockerfile: Dockerfile):
    assert len(dockerfile.stages) == 2, dockerfile.stages
    builder, runtime = dockerfile.stages
    assert builder == ("python:3.11-slim", "builder")
    assert runtime[0] == "python:3.11-slim"
    # The runtime stage installs wheels only: no compilers, no index, no apt.
    runtime_runs = " ".join(i.args for i in dockerfile.in_stage(dockerfile.final, "RUN"))
    assert "apt-get" not in runtime_runs and "gcc" not in runtime_runs
    assert (
        "pip install --no-index --find-links=/wheels 'session-query-gateway[otel]'" in runtime_runs
    ), "the image installs the project with its tracing extra, offline from the wheels"
    mounts = [i.flags.get("mount", "") for i in dockerfile.in_stage(dockerfile.final, "RUN")]
    wheel_mounts = [m for m in mounts if "source=/wheels" in m]
    assert wheel_mounts, "the runtime stage mounts the builder's wheels"
    for mount in wheel_mounts:
        stage = dict(part.split("=", 1) for part in mount.split(","))["from"]
        assert dockerfile.stage_index(stage) < dockerfile.final
    # The project's own name, as the wheel spells it.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "session-query-gateway"


def test_dockerfile_runs_as_a_fixed_non_root_user(dockerfile: Dockerfile):
    user = dockerfile.last("USER").args
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {user}: numeric and not root"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    creates = " ".join(i.args for i in dockerfile.in_stage(dockerfile.final, "RUN"))
    assert f"useradd --system --uid {uid} " in creates and " gateway" in creates
    if gid:
        assert f"groupadd --system --gid {gid} gateway" in creates
    # The data directory the default database lives in belongs to that user.
    assert "install -d -o gateway -g gateway" in creates and "/data" in creates


def test_dockerfile_configures_through_the_environment(dockerfile: Dockerfile):
    from gateway.persistence.engine import normalize_url, sqlite_file

    env = env_of(dockerfile.in_stage(dockerfile.final, "ENV"))
    url = normalize_url(env[DB_ENV])
    path = sqlite_file(url)
    assert path is not None and path.parent == Path("/data"), env[DB_ENV]
    volumes = json.loads(dockerfile.last("VOLUME").args)
    assert "/data" in volumes
    assert env.get("PYTHONUNBUFFERED") == "1"  # logs reach `docker logs` at once
    assert env.get("SESSION_GATEWAY_LOG_FORMAT") in ("json", "plain")


def test_dockerfile_entrypoint_is_the_cli_and_cmd_serves_on_all_interfaces(
    dockerfile: Dockerfile,
):
    entrypoint, cmd = entrypoint_and_cmd(dockerfile)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint == ["session-gateway"] and "session-gateway" in scripts
    assert cmd[0] == "serve"
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert "--allow-remote" in cmd  # serve refuses a non-loopback host without it
    port = cmd[cmd.index("--port") + 1]
    assert dockerfile.last("EXPOSE").args.split() == [port]


def test_dockerfile_healthcheck_probes_healthz(dockerfile: Dockerfile):
    instruction = dockerfile.last("HEALTHCHECK")
    argv = healthcheck_argv(dockerfile)
    assert argv[:2] == ["python", "-c"]  # slim images have no curl
    assert f"'{DEFAULT_HEALTH_URL}'" in argv[2]
    assert HEALTHCHECK_ENV in argv[2]
    _, cmd = entrypoint_and_cmd(dockerfile)
    assert f":{cmd[cmd.index('--port') + 1]}/" in DEFAULT_HEALTH_URL
    # The probe's own timeout fits in Docker's.
    probe_timeout = float(re.search(r"timeout=(\d+(?:\.\d+)?)\)", argv[2]).group(1))
    assert probe_timeout < float(instruction.flags["timeout"].rstrip("s"))


def test_every_copy_source_exists_and_reaches_the_build_context(
    dockerfile: Dockerfile, ignore_rules: list[tuple[bool, re.Pattern[str]]]
):
    copies = [i for i in dockerfile.instructions if i.keyword in ("COPY", "ADD")]
    assert copies
    for copy in copies:
        if "from" in copy.flags:
            assert dockerfile.stage_index(copy.flags["from"]) < copy.stage
            continue
        *sources, _dest = shlex.split(copy.args)
        for source in sources:
            path = ROOT / source
            assert path.exists(), f"line {copy.line}: COPY {source}: not in the repository"
            assert not is_ignored(source, ignore_rules), f"COPY {source}: .dockerignore drops it"
            files = context_files(path, ignore_rules)
            assert files, f"COPY {source}: nothing of it reaches the build context"
            if path.is_dir():
                dropped = [
                    p
                    for p in path.rglob("*")
                    if p.is_file()
                    and p not in files
                    and "__pycache__" not in p.parts
                    and p.suffix not in (".pyc", ".pyo")
                ]
                assert not dropped, f".dockerignore drops files COPY {source} needs: {dropped}"


def test_dockerignore_keeps_the_checkout_clutter_out(
    ignore_rules: list[tuple[bool, re.Pattern[str]]],
):
    for path in (".git/config", ".venv/bin/python", "tests/conftest.py", "x.egg-info/PKG-INFO"):
        assert is_ignored(path, ignore_rules), path
    for path in ("gateway/core/__pycache__/a.pyc", "sessions.db", ".env"):
        assert is_ignored(path, ignore_rules), path
    for path in ("pyproject.toml", "README.md", "gateway/cli.py", "migrations/env.py"):
        assert not is_ignored(path, ignore_rules), path


# -- Dockerfile: its dependencies on linux/arm64 ------------------------------------
# Building and running the image itself: tests/test_container_image.py (podman).


@pytest.mark.slow
def test_dependencies_are_binary_wheels_on_arm64_too(tmp_path: Path):
    """The builder's `--only-binary=:all:` must also hold for linux/arm64 builds."""
    if (reason := package_index_unreachable()) is not None:
        pytest.skip(reason)
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", f"--wheel-dir={wheels}", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (project_wheel,) = wheels.glob("session_query_gateway-*.whl")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--only-binary=:all:",
            "--python-version=3.11",
            "--implementation=cp",
            "--abi=cp311",
            "--platform=manylinux_2_36_aarch64",
            "--platform=manylinux2014_aarch64",
            f"--target={tmp_path / 'arm64'}",
            f"{project_wheel}[otel]",  # the image installs the tracing extra too
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- commands: parse and --help -----------------------------------------------


def _commands(df: Dockerfile, compose: dict[str, Any]) -> dict[str, list[str]]:
    entrypoint, cmd = entrypoint_and_cmd(df)
    out = {"image CMD": [*entrypoint, *cmd]}
    for name, service in compose["services"].items():
        if "command" in service and "build" in service:
            out[f"compose {name}"] = [*entrypoint, *service["command"]]
    return out


def test_every_command_is_a_real_subcommand_with_valid_flags(
    dockerfile: Dockerfile, compose: dict[str, Any], home: Path
):
    commands = _commands(dockerfile, compose)
    assert set(commands) == {"image CMD", "compose migrate"}
    env = process_env(home.parent)
    for label, argv in commands.items():
        assert argv[0] == "session-gateway"
        args = build_parser().parse_args(argv[1:])  # SystemExit on an unknown flag
        assert args.command == argv[1], label
        helped = run([*argv, "--help"], env)
        assert helped.returncode == 0, f"{label}: {helped.stderr}"
        assert f"session-gateway {argv[1]}" in helped.stdout


# -- HEALTHCHECK against a stub server -------------------------------------------


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = type(self).status if self.path == "/healthz" else 404
        body = b'{"status":"ok"}'
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stub_health() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("Health", (_Health,), {"status": 200})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/healthz", handler
    finally:
        server.shutdown()
        server.server_close()


def test_healthchecks_pass_on_200_and_fail_otherwise(
    dockerfile: Dockerfile, compose: dict[str, Any], stub_health, home: Path
):
    url, handler = stub_health
    probes = {
        "Dockerfile": healthcheck_argv(dockerfile),
        "compose gateway": argv_of_compose_test(
            compose["services"]["gateway"]["healthcheck"]["test"]
        ),
    }
    assert probes["Dockerfile"] == probes["compose gateway"], "keep the two probes identical"
    env = process_env(home.parent, **{HEALTHCHECK_ENV: url})
    for label, argv in probes.items():
        handler.status = 200
        assert run(argv, env).returncode == 0, label
        handler.status = 503
        assert run(argv, env).returncode == 1, label  # 1 = unhealthy (2 is reserved)
        down = process_env(
            home.parent, **{HEALTHCHECK_ENV: f"http://127.0.0.1:{free_port()}/healthz"}
        )
        assert run(argv, down).returncode == 1, label


# -- the image's default command, served outside a container ----------------------


def test_image_command_serves_the_embedded_database_and_passes_its_healthcheck(
    dockerfile: Dockerfile, home: Path, serving: list[Served]
):
    """`docker run IMAGE`: ENTRYPOINT + CMD with the image's ENV (/data -> a temp dir)."""
    data = home.parent / "data"
    data.mkdir()
    env = {
        k: v.replace("////data/", f"///{data}/")
        for k, v in env_of(dockerfile.in_stage(dockerfile.final, "ENV")).items()
    }
    port = free_port()
    entrypoint, cmd = entrypoint_and_cmd(dockerfile)
    assert env.get("SESSION_GATEWAY_AUTH") == "tokens", "the image serves with bearer tokens"
    bare = process_env(home.parent, **env)
    refused = run([*entrypoint, *with_port(cmd, port)], bare, timeout=60)
    assert refused.returncode == 2 and TOKEN_KEY_ENV in refused.stderr, refused.stderr
    proc_env = process_env(home.parent, **env, **{TOKEN_KEY_ENV: "k" * 40})  # docker run -e
    served = Served([*entrypoint, *with_port(cmd, port)], proc_env)
    serving.append(served)
    probe_env = {**proc_env, HEALTHCHECK_ENV: f"http://127.0.0.1:{port}/healthz"}
    served.wait_healthy(healthcheck_argv(dockerfile), probe_env)
    anonymous = httpx.post(
        f"http://127.0.0.1:{port}/graphql", json={"query": "{ __typename }"}, timeout=10
    )
    assert anonymous.status_code == 401, anonymous.text
    made = run([*entrypoint, "token", "create", "--name", "ops", "--grant", "all"], proc_env)
    assert made.returncode == 0, made.stderr
    assert_ready_and_empty(port, made.stdout.strip())
    assert (data / "sessions.db").is_file(), "the default database lives under /data"
    assert served.stopped_gracefully(), served.output()


# -- the compose stack, outside a container, on a real PostgreSQL ---------------------


def _compose_database_url(compose: dict[str, Any]) -> str:
    command = compose["services"]["migrate"]["command"]
    assert command[:2] == ["migrate", "--database"], command
    return command[2]


def test_compose_services_fit_together(compose_raw: dict[str, Any], compose: dict[str, Any]):
    from gateway.persistence.engine import normalize_url

    schema = json.loads(SCHEMA.read_text())
    assert "draft-07" in schema["$schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(compose_raw)
    jsonschema.Draft7Validator(schema).validate(compose)

    services = compose["services"]
    assert set(services) == {"postgres", "migrate", "gateway"}
    postgres, migrate, gateway = services["postgres"], services["migrate"], services["gateway"]

    # PostgreSQL: pinned major version, data on a declared named volume, a readiness probe.
    assert postgres["image"] == "postgres:16"
    volume, _, mount = postgres["volumes"][0].partition(":")
    assert volume in compose["volumes"] and mount == "/var/lib/postgresql/data"
    pg_env = postgres["environment"]
    probe = argv_of_compose_test(postgres["healthcheck"]["test"])
    assert probe[0] == "pg_isready"
    assert f"--username={pg_env['POSTGRES_USER']}" in probe
    assert f"--dbname={pg_env['POSTGRES_DB']}" in probe

    # One URL, pointing at that service with its credentials, for migrate and gateway.
    url = normalize_url(_compose_database_url(compose))
    assert url.drivername == "postgresql+asyncpg"
    assert (url.host, url.port) == ("postgres", 5432)
    assert (url.username, url.password) == (pg_env["POSTGRES_USER"], pg_env["POSTGRES_PASSWORD"])
    assert url.database == pg_env["POSTGRES_DB"]
    assert gateway["environment"][DB_ENV] == _compose_database_url(compose)

    # Ordering: migrate after PostgreSQL is healthy, once; the gateway after both.
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no"
    assert gateway["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }

    # Both run the image built from this repository's Dockerfile.
    for service in (migrate, gateway):
        build = service["build"]
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == ROOT and (context / build["dockerfile"]).resolve() == DOCKERFILE
        assert service["image"] == gateway["image"]

    # Published on the host's loopback only, on the port the image's CMD serves.
    cmd = parse_dockerfile(DOCKERFILE.read_text()).last("CMD").exec_form()
    (published,) = gateway["ports"]
    host_ip, host_port, container_port = published.split(":")
    assert host_ip == "127.0.0.1" and container_port == cmd[cmd.index("--port") + 1]
    assert host_port.isdigit()
    assert gateway["deploy"]["replicas"] >= 1
    # Replicas must share the cursor key (see gateway.server.cursors) and the token key.
    assert gateway["environment"]["SESSION_GATEWAY_CURSOR_SECRET"]
    assert len(gateway["environment"][TOKEN_KEY_ENV]) >= 32


def test_compose_schema_check_rejects_a_broken_file(compose_raw: dict[str, Any]):
    """The validation above is not vacuous: a misspelt key or a bad condition fails it."""
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    broken = json.loads(json.dumps(compose_raw))
    broken["services"]["gateway"]["depends_on"]["migrate"]["condition"] = "service_done"
    assert list(validator.iter_errors(broken))
    broken = json.loads(json.dumps(compose_raw))
    broken["services"]["gateway"]["helthcheck"] = broken["services"]["gateway"].pop("healthcheck")
    assert list(validator.iter_errors(broken))


def test_compose_migrate_command_migrates_a_real_postgresql(
    dockerfile: Dockerfile, compose: dict[str, Any], postgres_url: str, home: Path
):
    """compose `migrate`: ENTRYPOINT + its command, the URL swapped for a test database.
    Compose re-runs it at every `up`, so a second run must succeed and change nothing."""
    entrypoint, _ = entrypoint_and_cmd(dockerfile)
    command = compose["services"]["migrate"]["command"]
    argv = [*entrypoint, *command[:2], postgres_url]
    env = process_env(home.parent)
    first = run(argv, env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "migrated" in first.stdout
    again = run(argv, env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already at revision" in again.stdout


def test_compose_gateway_serves_the_migrated_postgresql(
    dockerfile: Dockerfile,
    compose: dict[str, Any],
    postgres_url: str,
    home: Path,
    serving: list[Served],
):
    """compose `up`: migrate, then the image's CMD with the gateway service's environment;
    its healthcheck passes, /readyz reaches PostgreSQL, and a query answers."""
    entrypoint, cmd = entrypoint_and_cmd(dockerfile)
    command = compose["services"]["migrate"]["command"]
    base_env = process_env(home.parent)
    migrated = run([*entrypoint, *command[:2], postgres_url], base_env)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr

    gateway = compose["services"]["gateway"]
    # A container's environment: the image's ENV, then the service's.
    service_env = dict(env_of(dockerfile.in_stage(dockerfile.final, "ENV")))
    service_env.update({k: str(v) for k, v in gateway["environment"].items()})
    service_env[DB_ENV] = postgres_url
    port = free_port()
    proc_env = process_env(home.parent, **service_env)
    served = Served([*entrypoint, *with_port(gateway.get("command", cmd), port)], proc_env)
    serving.append(served)
    probe = argv_of_compose_test(gateway["healthcheck"]["test"])
    served.wait_healthy(probe, {**proc_env, HEALTHCHECK_ENV: f"http://127.0.0.1:{port}/healthz"})
    # `docker compose run --rm gateway token create ...`
    made = run([*entrypoint, "token", "create", "--name", "ops", "--grant", "all"], proc_env)
    assert made.returncode == 0, made.stderr
    assert_ready_and_empty(port, made.stdout.strip())
    assert served.stopped_gracefully(), served.output()
