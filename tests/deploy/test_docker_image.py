"""The worker image recipe (deploy/docker/Dockerfile): what it runs parses as the worker command,
and that command, run here with the same flags (on 127.0.0.1, a free port), serves and passes
the image's healthcheck. The image itself is not built: that needs a Docker daemon and the base
image from a registry."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from datafusion_distributed.cli import build_parser
from datafusion_distributed.protocol.auth import TOKEN_ENV
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"  # the build context is the repository root
START_SECONDS = 60


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, with `\\` continuations joined and comments dropped."""
    instructions, current = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        keyword, _, arguments = current.strip().partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        current = ""
    return instructions


def _one(instructions: list[tuple[str, str]], keyword: str) -> str:
    found = [arguments for k, arguments in instructions if k == keyword]
    assert len(found) == 1, f"expected one {keyword}, found {found}"
    return found[0]


INSTRUCTIONS = dockerfile_instructions(DOCKERFILE)
ENTRYPOINT = json.loads(_one(INSTRUCTIONS, "ENTRYPOINT"))
CMD = json.loads(_one(INSTRUCTIONS, "CMD"))
HEALTHCHECK = _one(INSTRUCTIONS, "HEALTHCHECK")


def image_worker_args() -> list[str]:
    """The arguments the image's entry point runs with by default."""
    return list(CMD)


def _option(args: list[str], flag: str, value: str) -> list[str]:
    """`args` with `flag`'s value replaced (written `--flag value` or `--flag=value`)."""
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == flag:
            out += [flag, value]
            skip = i + 1 < len(args)
        elif arg.startswith(flag + "="):
            out.append(f"{flag}={value}")
        else:
            out.append(arg)
    return out


def test_the_image_is_python_311_slim_and_runs_as_a_user():
    assert _one(INSTRUCTIONS, "FROM") == "python:3.11-slim"
    user = _one(INSTRUCTIONS, "USER").split(":")[0]
    assert user not in ("root", "0")
    assert any(k == "RUN" and "useradd" in a for k, a in INSTRUCTIONS)


def test_the_package_comes_from_the_build_context_and_dockerignore_keeps_what_it_copies():
    copied = [a.split()[:-1] for k, a in INSTRUCTIONS if k == "COPY"]
    sources = [s for sources in copied for s in sources]
    assert sources == ["pyproject.toml", "README.md", "src"]
    assert any(k == "RUN" and "pip install ." in a for k, a in INSTRUCTIONS)
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "everything else (data, .venv) stays out of the build context"
    for source in sources:
        assert f"!{source}" in patterns or f"!{source}/" in patterns, f"{source} is excluded from the context"


def test_the_command_is_the_installed_worker_command_with_the_exposed_port():
    (script,) = entry_points(group="console_scripts", name="datafusion-distributed")
    assert ENTRYPOINT == [script.name]
    args = build_parser().parse_args(image_worker_args())
    assert args.command == "worker"
    assert args.host == "0.0.0.0"
    assert str(args.port) == _one(INSTRUCTIONS, "EXPOSE")
    assert args.auth_token is None and not args.insecure_no_auth, "the token comes from the environment"
    assert re.search(rf"'127\.0\.0\.1', {args.port}\)", HEALTHCHECK), (
        "the healthcheck probes the worker's port"
    )


def _healthcheck_command(port: int) -> list[str]:
    exec_form = json.loads(HEALTHCHECK[HEALTHCHECK.index("CMD ") + 4 :])
    assert exec_form[0] == "python"
    return [sys.executable, *(part.replace("50051", str(port)) for part in exec_form[1:])]


def _run_image_command(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """The image's command, here: only the address (loopback), port (free) and spool folder differ."""
    args = _option(
        _option(_option(image_worker_args(), "--host", "127.0.0.1"), "--port", "0"),
        "--spool-dir",
        str(tmp_path),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "datafusion_distributed", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAFUSION_DISTRIBUTED_")}
    return {**env, **extra}


def test_the_image_command_serves_with_the_token_from_the_environment(tmp_path):
    worker = _run_image_command(tmp_path, _environment(**{TOKEN_ENV: "image-test-token"}))
    try:
        line = worker.stdout.readline().strip()  # the first line, printed once it serves
        assert line.startswith("listening on grpc://127.0.0.1:"), line + worker.stderr.read()
        url = line.removeprefix("listening on ")
        port = int(url.rsplit(":", 1)[1])
        healthcheck = subprocess.run(_healthcheck_command(port), capture_output=True, timeout=START_SECONDS)
        assert healthcheck.returncode == 0, healthcheck.stderr
        client = WorkerClient(url, ClientConfig(timeout=10, auth_token="image-test-token"))
        try:
            assert client.health()["spool_files"] == 0
        finally:
            client.close()
        worker.send_signal(signal.SIGTERM)  # what `docker stop` and Kubernetes send
        assert worker.wait(timeout=START_SECONDS) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=START_SECONDS)
        worker.stdout.close()
        worker.stderr.close()


@pytest.mark.parametrize("token", [None, ""], ids=["unset", "empty"])
def test_the_image_command_refuses_to_start_without_a_token(tmp_path, token):
    """An empty token is what the Kubernetes Secret's placeholder gives: the worker must not serve."""
    env = _environment() if token is None else _environment(**{TOKEN_ENV: token})
    worker = _run_image_command(tmp_path, env)
    try:
        out, err = worker.communicate(timeout=START_SECONDS)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=START_SECONDS)
    assert worker.returncode != 0
    assert "listening" not in out
    assert f"refusing to start a worker without authentication: set {TOKEN_ENV}" in err
