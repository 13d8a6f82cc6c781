"""A local Ray cluster bound to 127.0.0.1 alone, with posenc's Serve application on it, started
and stopped by PID: what the tests (tests/deploy/test_ray.py) and the benchmark
(bench/ray_serve.py) run, and the commands docs/deployment.md gives.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --block --node-ip-address 127.0.0.1 \\
        --port GCS --include-dashboard false --disable-usage-stats ...
    serve run --address 127.0.0.1:GCS deploy/ray/serve.yaml       # from the repository root

``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` matters: without it Ray resolves ``--node-ip-address
127.0.0.1`` to the host's own address (``ray._private.services.get_node_ip_address``) and its
processes listen there. Every process of the cluster runs in the session of ``ray start`` or of
``serve run`` (each started in a new session), so :meth:`LocalCluster.stop` ends exactly those
processes, by PID, and never another Ray on the machine (``ray stop`` would end them all).
Nothing here imports Ray: it runs the ``ray`` and ``serve`` commands beside the Python running it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "ray" / "serve.yaml"
HOST = "127.0.0.1"
LOOPBACK = ("127.0.0.1", "::ffff:127.0.0.1", "::1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def session_pids(sid: int) -> list[int]:
    """Every live process whose session is ``sid`` (``/proc/PID/stat``'s sixth field)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry))
    return found


def process_title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def render_config(source: Path, port: int, **deployment_options: dict[str, object]) -> str:
    """``source`` (a Serve config) with its HTTP port set to ``port`` and each named deployment's
    options updated (e.g. ``PosencService={"num_replicas": 1}``); everything else as written."""
    config = yaml.safe_load(source.read_text())
    config.setdefault("http_options", {})["port"] = port
    for app in config["applications"]:
        for deployment in app.get("deployments", []):
            deployment.update(deployment_options.get(deployment["name"], {}))
    return str(yaml.safe_dump(config, sort_keys=False))


@dataclass
class LocalCluster:
    """A one-node Ray cluster on loopback plus ``serve run`` of ``config``; ``env`` is the
    environment of every process (POSENC_* included: each replica reads it)."""

    config: Path = CONFIG
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    num_cpus: int = 3
    object_store_bytes: int = 80 * 1024 * 1024
    http_port: int = field(default_factory=free_port)
    gcs_port: int = field(default_factory=free_port)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="posenc-ray-")))
    head: subprocess.Popen[bytes] | None = None
    serve: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    def _command(self, name: str) -> str:
        beside = Path(sys.executable).parent / name
        return str(beside) if beside.exists() else name

    def _env(self) -> dict[str, str]:
        """``env`` plus loopback (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0), no usage stats, and this
        cluster's own token (RAY_AUTH_MODE=token): Ray 2.60 turns token authentication on for
        ``ray start`` whenever ``~/.ray/auth_token`` exists (a local ``ray.init()`` writes one)
        but not for a client such as ``serve run``, so both are given the same token here, from
        a file of this cluster's (mode 0600), whatever the home folder holds."""
        token = self.workdir / "auth_token"
        if not token.exists():
            token.touch(mode=0o600)
            token.write_text(secrets.token_hex(32))
        return {
            **self.env,
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(token),
        }

    def start(self) -> None:
        """``ray start --head`` on loopback, then ``serve run`` of the config with this
        cluster's HTTP port (both in new sessions, output in ``workdir``)."""
        head_cmd = [
            self._command("ray"), "start", "--head", "--block",
            "--node-ip-address", HOST, "--port", str(self.gcs_port),
            "--include-dashboard", "false", "--disable-usage-stats",
            "--num-cpus", str(self.num_cpus), "--num-gpus", "0",
            "--object-store-memory", str(self.object_store_bytes),
            "--ray-client-server-port", str(free_port()),
            "--dashboard-agent-listen-port", str(free_port()),
            "--temp-dir", str(self.workdir / "ray"),
        ]  # fmt: skip
        with (self.workdir / "head.log").open("wb") as log:
            self.head = subprocess.Popen(
                head_cmd, cwd=ROOT, env=self._env(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        rendered = self.workdir / "serve.yaml"
        rendered.write_text(render_config(self.config, self.http_port))
        serve_cmd = [
            self._command("serve"),
            "run",
            "--address",
            f"{HOST}:{self.gcs_port}",
            str(rendered),
        ]
        with (self.workdir / "serve.log").open("wb") as log:
            self.serve = subprocess.Popen(
                serve_cmd, cwd=ROOT, env=self._env(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n" + (self.workdir / name).read_text(errors="replace")[-4000:]
            for name in ("head.log", "serve.log")
            if (self.workdir / name).exists()
        )

    def wait_ready(self, timeout: float = 300) -> None:
        """Until ``/readyz`` through Serve's proxy answers 200 (every process still alive)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in (("ray start", self.head), ("serve run", self.serve)):
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited {proc.returncode}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        raise RuntimeError(f"Ray Serve not ready after {timeout} s:\n{self.logs()}")

    def pids(self) -> list[int]:
        """Every live process of this cluster (the sessions of ``ray start`` and ``serve run``)."""
        return [
            pid for p in (self.head, self.serve) if p is not None for pid in session_pids(p.pid)
        ]

    def replica_pids(self, deployment: str = "PosencService", app: str = "posenc") -> list[int]:
        """The processes of ``deployment``'s replicas (Ray titles them ``ray::ServeReplica:APP:NAME``)."""
        title = f"ray::ServeReplica:{app}:{deployment}"
        return [pid for pid in self.pids() if process_title(pid).startswith(title)]

    def stop(self, grace: float = 10, keep_files: bool = False) -> list[int]:
        """SIGINT to ``serve run``, then SIGTERM to every process of the cluster and SIGKILL to
        those still alive after ``grace`` seconds; returns the PIDs that outlived even that.
        ``workdir`` (logs, Ray's session files) is removed unless ``keep_files``."""
        if self.serve is not None and self.serve.poll() is None:
            self.serve.send_signal(signal.SIGINT)  # serve run shuts Serve down on Ctrl-C
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.serve.wait(timeout=grace)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)
        for proc in (self.head, self.serve):
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        left = self.pids()
        if not left and not keep_files:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return left
