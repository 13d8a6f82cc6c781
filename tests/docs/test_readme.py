"""Every example in the README runs, so the README never lies.

- ``curl`` lines run against a real ``python -m service`` on loopback (``localhost:8000`` is
  rewritten to its port), with ``--fail-with-body`` so an HTTP error fails the test;
- ``posenc`` command lines run with the installed entry point, in a temporary folder;
- Python blocks run in a fresh interpreter against the same server;
- Docker lines cannot run here (no engine): each build argument and compose profile they name
  must exist in the Dockerfile and compose file;
- the Quick start's two lines are the ones ``run.sh`` implements and ``.ci/run`` calls;
- the configuration table lists exactly the service's settings.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, clean_env

README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def fenced_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def shell_commands() -> list[str]:
    """Every command of the README's sh blocks: continuations joined, comments dropped."""
    commands = []
    for block in fenced_blocks("sh"):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def commands_starting(prefix: str) -> list[str]:
    return [c for c in shell_commands() if c.startswith(prefix)]


def test_readme_has_examples_of_every_kind():
    assert len(commands_starting("curl ")) >= 14
    assert commands_starting(".venv/bin/posenc ")
    assert commands_starting("docker ")
    assert len(fenced_blocks("python")) >= 2


def test_quick_start_is_what_ci_runs():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    lines = [line for line in block.splitlines() if line.strip()]
    assert lines == ["./run.sh serve", "./run.sh test"]
    assert "./run.sh test" in (ROOT / ".ci" / "run").read_text()
    run_sh = (ROOT / "run.sh").read_text()
    assert "-m service" in run_sh and "-m pytest" in run_sh


@pytest.mark.parametrize("command", commands_starting("curl "))
def test_curl_example(command: str, live_server: str, tmp_path: Path):
    port = live_server.rsplit(":", 1)[1]
    command = re.sub(r"(localhost|127\.0\.0\.1):8000", f"127.0.0.1:{port}", command)
    command = command.replace("curl ", "curl --fail-with-body --max-time 60 ", 1)
    result = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, timeout=120)
    assert result.returncode == 0, (command, result.stdout[:500], result.stderr[:500])
    written = [p for p in tmp_path.iterdir() if p.stat().st_size > 0]
    assert result.stdout or written, f"{command} gave no body"


def run_python(code: str, live_server: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = code.replace("http://127.0.0.1:8000", live_server)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("index", range(len(fenced_blocks("python"))))
def test_python_example(index: int, live_server: str, tmp_path: Path):
    code = fenced_blocks("python")[index]
    result = run_python(code, live_server, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip(), "the example prints what it computed"


@pytest.mark.parametrize("command", commands_starting(".venv/bin/posenc "))
def test_cli_example(command: str, live_server: str, tmp_path: Path):
    argv = shlex.split(command.replace("http://127.0.0.1:8000", live_server))
    exe = BIN / "posenc"
    if not exe.exists():
        pytest.skip(f"the posenc entry point is not installed beside {sys.executable}")
    result = subprocess.run(
        [str(exe), *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    output = tmp_path / argv[argv.index("-o") + 1]
    assert output.stat().st_size > 0


@pytest.mark.parametrize("command", commands_starting("docker "))
def test_docker_example_names_what_exists(command: str):
    """No Docker engine runs here: check what the line relies on instead."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    argv = shlex.split(command)
    for i, word in enumerate(argv):
        if word == "--build-arg":
            name = argv[i + 1].split("=", 1)[0]
            assert re.search(rf"^ARG {name}\b", dockerfile, re.M), f"Dockerfile has no ARG {name}"
        if word == "--profile":
            profiles = {
                p for service in compose["services"].values() for p in service.get("profiles", [])
            }
            assert argv[i + 1] in profiles, f"compose has no profile {argv[i + 1]!r}"
    if argv[1] == "build":
        assert argv[-1] == "." and (ROOT / "Dockerfile").exists()


def test_bench_example_runs_its_help():
    (command,) = commands_starting("./run.sh bench")
    assert "bench" in (ROOT / "run.sh").read_text()
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    for flag in re.findall(r"--[a-z-]+", command):
        assert flag in result.stdout, f"python -m bench has no {flag}"


def test_configuration_table_lists_every_setting():
    from service.config import Settings

    documented = set(re.findall(r"^\| `(POSENC_[A-Z_]+)` \|", README, re.M))
    actual = {f"POSENC_{name.upper()}" for name in Settings.model_fields}
    assert documented == actual
    for name, field in Settings.model_fields.items():
        row = re.search(rf"^\| `POSENC_{name.upper()}` \| (.*?) \|", README, re.M)
        assert row is not None
        default = row.group(1).strip("`")
        if field.default in (None, ""):
            assert default in ("unset", "empty")
        elif isinstance(field.default, bool):
            assert default == str(field.default).lower(), (name, default, field.default)
        else:
            assert default == str(field.default), (name, default, field.default)


def test_readme_picture_exists_and_is_a_png():
    match = re.search(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert match, "the README shows a heatmap"
    picture = ROOT / match.group(1)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
