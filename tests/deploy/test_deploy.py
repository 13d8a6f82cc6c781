"""The deployment files: Dockerfile, .dockerignore, docker-compose.yml, deploy/nginx.conf and
docs/deployment.md (the Kubernetes manifests have tests/deploy/test_kubernetes.py).

No Docker engine runs here (the image itself is built and started by ../shared/tools/container-check),
so these tests read the files and check what a build or `docker compose up` would rely on: the
compose file against the Compose JSON schema, the image's start command against the service's
own CLI, every COPY source against the build context, and the HEALTHCHECK against a real service.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE = ROOT / "docker-compose.yml"
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
DEPLOYMENT_DOC = ROOT / "docs" / "deployment.md"
COMPOSE_SCHEMA = ROOT.parent / "shared" / "data" / "compose-spec.json"

# How the tests and run.sh start the service (`python -m service --host --port`); the image runs
# the same on all interfaces.
SERVE_MODULE = ["python", "-m", "service"]
CONTAINER_ADDRESS = ["--host", "0.0.0.0", "--port", "8000"]
PORT = 8000


# ---------------------------------------------------------------- a small Dockerfile reader


@dataclass
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str  # the rest of the logical line, continuation lines joined
    line: int  # 1-based line of its first physical line

    def json_args(self) -> list[str] | None:
        """The exec (JSON array) form's argv, or None for the shell form."""
        text = self.args
        for flag in re.findall(r"--[a-z-]+=\S+\s+", text):  # HEALTHCHECK options
            text = text.replace(flag, "", 1)
        text = text.strip()
        if text.startswith("CMD "):
            text = text[4:].strip()
        if not text.startswith("["):
            return None
        return json.loads(text)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def read_dockerfile(path: Path = DOCKERFILE) -> tuple[list[Instruction], list[Stage]]:
    """Logical instructions (comments dropped, `\\` continuations joined) and the build stages."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # comment lines are dropped, even inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        text = " ".join(part.strip() for part in pending if part.strip())
        pending = []
        keyword, _, args = text.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    stages: list[Stage] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            words = instruction.args.split()
            words = [w for w in words if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, []))
        elif stages:
            stages[-1].instructions.append(instruction)
    return instructions, stages


def global_args(instructions: list[Instruction]) -> dict[str, str]:
    """ARGs declared before the first FROM, with their defaults."""
    found: dict[str, str] = {}
    for instruction in instructions:
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, _, default = instruction.args.partition("=")
            found[name] = default
    return found


def expand(text: str, values: dict[str, str]) -> str:
    """Docker's `$VAR`, `${VAR}` and `${VAR:-default}`."""

    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        return values.get(name) or (m.group(3) if m.group(2) else values.get(name, ""))

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}|\$(\w+)", one, text)


def final_stage(variant: str = "cpu") -> tuple[list[Stage], Stage]:
    """The stages the image is built from for a VARIANT, base first and the final stage last."""
    instructions, stages = read_dockerfile()
    values = global_args(instructions) | {"VARIANT": variant}
    by_name = {s.name: s for s in stages if s.name}
    chain = [stages[-1]]
    while expand(chain[0].base, values) in by_name:
        chain.insert(0, by_name[expand(chain[0].base, values)])
    return chain, stages[-1]


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(relative: str) -> bool:
    """Whether .dockerignore keeps a path (or one of its parents) out of the build context."""
    result = False
    parts = Path(relative).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for pattern in dockerignore_patterns():
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        for candidate in candidates:
            if fnmatch.fnmatchcase(candidate, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatchcase(candidate, pattern[3:])
            ):
                result = not negate
                break
    return result


def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- Dockerfile


def test_cmd_is_the_services_start_command_on_all_interfaces():
    _, final = final_stage()
    (cmd,) = final.all("CMD")
    assert cmd.json_args() == SERVE_MODULE + CONTAINER_ADDRESS, (
        "CMD must be the exec form of `python -m service --host 0.0.0.0 --port 8000`, "
        "the same start command the tests and run.sh use"
    )
    assert not final.all("ENTRYPOINT"), "an ENTRYPOINT would change what CMD runs"
    (expose,) = final.all("EXPOSE")
    assert expose.args.split() == [str(PORT)]


def test_start_command_flags_exist_in_the_service_cli():
    result = subprocess.run(
        [sys.executable, "-m", "service", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for flag in ("--host", "--port", "--workers"):
        assert flag in result.stdout, f"`python -m service --help` does not list {flag}"


def test_torch_is_installed_first_as_container_check_requires():
    """TORCH_SPEC and PIP_FIND_LINKS are declared, and torch is installed before anything else
    (../shared/tools/README.md: that is how the check builds with the local CPU wheel); with no
    TORCH_SPEC the lock's own torch pin is installed, checked against the lock's hashes."""
    chain, final = final_stage()
    args = {i.args.partition("=")[0]: i.args.partition("=")[2] for i in final.all("ARG")}
    assert args.get("TORCH_SPEC") == ""
    assert "PIP_FIND_LINKS" in args
    installs = [i for s in chain for i in s.all("RUN") if "pip install" in i.args]
    assert installs, "no pip install in the image's stages"
    first = installs[0]
    assert '"$TORCH_SPEC"' in first.args and first.args.count("pip install") == 3
    assert "${TORCH_SPEC:-$(grep -o -E '^torch==[^ ]+' requirements/service.txt)}" in first.args
    assert "--require-hashes --no-deps --no-index -r /tmp/torch.txt" in first.args
    assert (
        "--require-hashes --no-deps -r /tmp/torch.txt -r requirements/torch-cuda.txt" in first.args
    )
    arg_lines = {name: i.line for i in final.all("ARG") for name in [i.args.partition("=")[0]]}
    assert arg_lines["TORCH_SPEC"] < first.line and arg_lines["PIP_FIND_LINKS"] < first.line


def test_every_copy_source_exists_and_is_in_the_build_context():
    _, stages = read_dockerfile()
    copies = [i for s in stages for i in s.instructions if i.keyword in ("COPY", "ADD")]
    assert copies
    for copy in copies:
        assert copy.keyword == "COPY", f"line {copy.line}: use COPY, not ADD"
        words = [w for w in shlex.split(copy.args) if not w.startswith("--")]
        assert not copy.args.startswith("--from"), "no stage copies expected"
        for source in words[:-1]:
            assert (ROOT / source).exists(), f"line {copy.line}: COPY source {source} is missing"
            assert not ignored(source.rstrip("/")), f"{source} is excluded by .dockerignore"
            assert not source.startswith(("http:", "https:")), "COPY from the network"


def test_dependencies_are_installed_from_the_copied_lock_before_the_code():
    """Layer order: the lock (requirements/service.txt), then the dependencies from it, then the
    code; and every pip install names only TORCH_SPEC, the lock less its torch line, or the
    copied project itself (no URLs, no git, no package names typed into the Dockerfile)."""
    _, final = final_stage()
    steps = [i for i in final.instructions if i.keyword in ("COPY", "RUN")]
    copied: list[str] = []
    from_lock: set[str] = set()
    project_installed_at = None
    for step in steps:
        if step.keyword == "COPY":
            copied.extend(w.rstrip("/") for w in shlex.split(step.args)[:-1])
            continue
        # `${VAR:+...}` adds options only when VAR is set (e.g. --index-url); no install targets.
        words = shlex.split(re.sub(r"\$\{\w+:\+[^}]*\}", "", step.args))
        made = re.findall(r"requirements/service\.txt > (/tmp/\w+\.txt)", step.args)
        if made:
            assert "requirements/service.txt" in copied, (
                "requirements read before the lock is copied"
            )
            from_lock |= set(made)
        for n, word in enumerate(words):
            if word != "install" or words[n - 1] != "pip":
                continue
            targets = []
            rest = words[n + 1 :]
            for m, arg in enumerate(rest):
                if arg in ("&&", ";", "||") or arg.endswith(";"):
                    break
                if arg.startswith("-") and arg != "-r":
                    continue
                if m and rest[m - 1] in ("--index-url", "--extra-index-url", "-i"):
                    continue
                targets.append(arg)
            for target in targets:
                if target == "-r" or target in from_lock or target == "$TORCH_SPEC":
                    continue
                if target.startswith("requirements/") and target in copied:
                    continue
                if target == ".":
                    assert {"pyproject.toml", "posenc", "service"} <= set(copied)
                    project_installed_at = step.line
                    continue
                pytest.fail(f"line {step.line}: pip install of {target!r} is not from copied files")
    assert from_lock, "dependencies are not read from the copied lock"
    assert project_installed_at is not None, "the project itself is never installed"
    code_copies = [s.line for s in steps if s.keyword == "COPY" and "posenc" in s.args]
    dep_install = [s.line for s in steps if "-r requirements/service.txt" in s.args]
    assert all("--require-hashes" in s.args for s in steps if " -r " in s.args)
    assert dep_install and code_copies and max(dep_install) < min(code_copies), (
        "the dependency layer must come before the code, so a code change keeps it cached"
    )


def test_the_images_lock_holds_the_services_direct_requirements():
    """requirements/service.txt pins every dependency and `service` requirement of pyproject.toml
    at a version its range admits (scripts/lock.py --check, the check CI runs, says the same)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = {}
    for line in (ROOT / "requirements" / "service.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = Version(m.group(2))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"] + project["optional-dependencies"]["service"]:
        r = Requirement(text)
        name = r.name.lower().replace("_", "-")
        assert name in pins, f"{r.name} is not pinned in requirements/service.txt"
        assert r.specifier.contains(pins[name]), f"{r.name}=={pins[name]} is outside {r}"


def test_runs_as_a_non_root_user():
    _, final = final_stage()
    users = final.all("USER")
    assert users, "no USER: the image would run as root"
    user = users[-1].args.split(":")[0]
    assert user not in ("0", "root"), f"USER {users[-1].args} is root"
    run_text = " ".join(i.args for i in final.all("RUN"))
    assert re.search(rf"useradd\b.*--uid {user}\b", run_text), f"no user with uid {user} is created"
    assert users[-1].line > max(i.line for i in final.all("RUN")), "USER comes after every RUN"


def test_healthcheck_asks_readyz_with_python():
    _, final = final_stage()
    (health,) = final.all("HEALTHCHECK")
    argv = health.json_args()
    assert argv and argv[0] == "python", "HEALTHCHECK must be python (no curl in slim)"
    assert " CMD [" in f" {health.args}", "HEALTHCHECK CMD in exec form"
    assert f"http://127.0.0.1:{PORT}/readyz" in argv[-1]
    assert "--start-period=" in health.args
    assert final.all("STOPSIGNAL")[0].args in ("SIGTERM", "SIGINT")


def test_variants_pick_the_slim_and_the_cuda_runtime_bases():
    instructions, _ = read_dockerfile()
    values = global_args(instructions)
    assert not values.get("VARIANT"), "VARIANT's default is in `${VARIANT:-cpu}` (see Dockerfile)"
    cpu_chain, _ = final_stage("cpu")
    cuda_chain, _ = final_stage("cuda")
    assert expand(cpu_chain[0].base, values) == "python:3.11-slim"
    cuda_base = expand(cuda_chain[0].base, values)
    assert re.fullmatch(r"nvidia/cuda:[\w.]+-runtime-[\w.]+", cuda_base), cuda_base
    assert any("python3" in i.args for i in cuda_chain[0].all("RUN")), "CUDA base gets no Python"


def test_dockerignore_keeps_environments_caches_and_outputs_out():
    for path in (
        ".venv",
        ".git",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        "bench/out",
        "posenc/__pycache__",
        "service/routes/__pycache__",
        "posenc.egg-info",
        "models",
    ):
        assert ignored(path), f".dockerignore does not exclude {path}"
    for path in ("pyproject.toml", "README.md", "posenc", "service", "service/routes"):
        assert not ignored(path), f".dockerignore excludes {path}, which the build needs"


def test_healthcheck_passes_against_the_image_start_command(tmp_path):
    """Start the service with the image's CMD (host and port changed for the test), its ENV and
    non-root-like working folder, and run the HEALTHCHECK's python against it."""
    _, final = final_stage()
    argv = final.all("CMD")[0].json_args()
    port = free_port()
    argv = [sys.executable, *argv[1:]]
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSENC_")}
    for instruction in final.all("ENV"):
        for key, value in re.findall(r"(POSENC_\w+)=(\S+)", instruction.args):
            env[key] = value
    env["PYTHONPATH"] = str(ROOT)
    check = final.all("HEALTHCHECK")[0].json_args()[-1].replace(f":{PORT}/", f":{port}/")

    def healthy() -> bool:
        run = subprocess.run([sys.executable, "-c", check], capture_output=True, timeout=30)
        return run.returncode == 0

    assert not healthy(), "the healthcheck passes with nothing listening"
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while not healthy():
                assert proc.poll() is None, f"the service exited: {log.read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"never healthy: {log.read_text()[-2000:]}"
                time.sleep(0.5)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
                assert r.status == 200
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------- docker-compose.yml


def test_compose_file_matches_the_compose_spec_schema():
    if not COMPOSE_SCHEMA.is_file():
        pytest.skip(
            f"the Compose JSON schema is not at {COMPOSE_SCHEMA} (../shared/data is absent)"
        )
    import jsonschema

    schema = json.loads(COMPOSE_SCHEMA.read_text())
    # the spec names draft-07 as "https://json-schema.org/draft-07/schema" (no "#"), which
    # jsonschema does not recognise: say the draft it is
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(
        schema
    )
    errors = sorted(validator.iter_errors(load_compose()), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_compose_default_service_builds_the_image_and_checks_readyz():
    compose = load_compose()
    service = compose["services"]["posenc"]
    assert "profiles" not in service, "the default service must start with a plain `up`"
    build = service["build"]
    assert (ROOT / build["context"] / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE
    assert "8000:8000" in [str(p) for p in service["ports"]]
    assert service["restart"] in ("always", "unless-stopped", "on-failure")
    test = service["healthcheck"]["test"]
    _, final = final_stage()
    assert test[0] == "CMD"
    assert test[1:] == final.all("HEALTHCHECK")[0].json_args(), "compose and image checks differ"
    env = service["environment"]
    assert {"POSENC_DEVICE", "POSENC_MODELS", "POSENC_MAX_ELEMENTS"} <= set(env)
    (models,) = [v for v in service["volumes"] if v["target"] == "/models"]
    assert models["read_only"] is True
    assert "POSENC_MODELS: " in COMPOSE.read_text() and "=/models/" in COMPOSE.read_text()
    for name, other in compose["services"].items():
        if "build" in other:
            context = ROOT / other["build"]["context"]
            assert (context / other["build"].get("dockerfile", "Dockerfile")).is_file(), name


def test_gpu_profile_reserves_an_nvidia_gpu_and_builds_the_cuda_variant():
    services = load_compose()["services"]
    gpu = [s for s in services.values() if "gpu" in s.get("profiles", [])]
    assert len(gpu) == 1
    (service,) = gpu
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert service["environment"]["POSENC_DEVICE"] == "cuda"
    assert service["build"]["args"]["VARIANT"] == "cuda"
    assert service["image"] != services["posenc"]["image"], "the CUDA image needs its own tag"
    published = {str(p).split(":")[0] for s in services.values() for p in s.get("ports", [])}
    assert len(published) == sum(len(s.get("ports", [])) for s in services.values()), (
        "two services publish the same host port"
    )


def test_scale_profile_balances_replicas_by_their_service_name():
    services = load_compose()["services"]
    scale = {name: s for name, s in services.items() if "scale" in s.get("profiles", [])}
    (balancer_name,) = [n for n, s in scale.items() if "nginx" in s.get("image", "")]
    replicas = {n: s for n, s in scale.items() if n != balancer_name}
    assert replicas
    for name, service in replicas.items():
        assert service["deploy"]["replicas"] >= 2, name
        assert "ports" not in service and "container_name" not in service, (
            f"{name}: a published port or fixed name would stop it from scaling"
        )
    balancer = scale[balancer_name]
    (mount,) = [v for v in balancer["volumes"] if str(v["source"]).endswith("nginx.conf")]
    assert (ROOT / mount["source"]).resolve() == NGINX_CONF
    assert mount["read_only"] is True

    conf = re.sub(r"#.*", "", NGINX_CONF.read_text())
    upstreams = dict(re.findall(r"upstream\s+(\w+)\s*\{([^}]*)\}", conf))
    assert upstreams
    servers = [
        s for body in upstreams.values() for s in re.findall(r"server\s+([\w.-]+):(\d+)", body)
    ]
    assert servers and {host for host, _ in servers} <= set(replicas), (
        f"nginx upstream servers {servers} are not the compose replica services {sorted(replicas)}"
    )
    assert {int(port) for _, port in servers} == {PORT}
    assert set(re.findall(r"proxy_pass\s+http://(\w+)", conf)) <= set(upstreams)
    (listen,) = set(re.findall(r"listen\s+(\d+)", conf))
    assert any(str(p).endswith(f":{listen}") for p in balancer["ports"])
    assert set(balancer["depends_on"]) <= set(replicas)


# ---------------------------------------------------------------- docs/deployment.md


def test_deployment_guide_points_at_the_kubernetes_manifests():
    """The guide's Kubernetes section applies the overlays under deploy/kubernetes (which
    tests/deploy/test_kubernetes.py renders and validates); every repository path it names exists."""
    text = DEPLOYMENT_DOC.read_text()
    for overlay in ("cpu", "gpu"):
        assert f"deploy/kubernetes/overlays/{overlay}" in text
        kustomization = ROOT / "deploy" / "kubernetes" / "overlays" / overlay / "kustomization.yaml"
        assert kustomization.is_file()
    assert "kubectl apply -k deploy/kubernetes/overlays/cpu" in text
    named = set(re.findall(r"`((?:deploy|bench|tests|docs)/[\w./-]+)`", text))
    assert named
    for path in named:
        assert (ROOT / path.rstrip("/")).exists(), path
    for probe in ("/readyz", "/healthz"):
        assert probe in text
