"""``python -m service [--host 127.0.0.1] [--port 8000] [--workers N]``: serve with uvicorn.

The configuration (``POSENC_*``) and the device are checked before uvicorn starts, so a bad
setting (e.g. ``POSENC_DEVICE=cuda`` on a machine without CUDA) ends the process with exit
status 2 and one clear line on stderr, not a traceback. SIGTERM and SIGINT let in-flight
requests finish, then exit 0.
"""

from __future__ import annotations

import argparse
import logging
import logging.config
import os
import signal
import subprocess
import sys

from pydantic import ValidationError

from service.observability.logs import logging_config

# torch's CPU allocator backs allocations of 2 MiB and more with transparent huge pages when this
# is set (read once, at the first allocation: so before torch is imported). A fresh (32, 512,
# 512) float32 embedding output then takes ~550 page faults instead of ~8,200, about half the
# cold /v1/embed compute on the 2-core dev machine. Set THP_MEM_ALLOC_ENABLE=0 to opt out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
# OpenMP's worker threads spin about a thousand times, not libgomp's default 300,000, before they
# sleep after a parallel region: long spins took the cores that the event loop, the other
# requests and, on a small machine, the clients need; a short spin still catches the next op of
# a burst (OMP_WAIT_POLICY=PASSIVE, no spin at all, made a 2048x768 table on two threads 5x
# slower). Read when torch loads libgomp. Measured on 2 cores, loaded, paired requests: a cold
# 128x64 JSON request took 10.5 ms of server CPU with the default and 2.7 ms with this; a cold
# 2048x768 raw table 37.6 -> 16 ms. An operator's GOMP_SPINCOUNT or OMP_WAIT_POLICY wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")


def _fail(message: str) -> int:
    print(f"posenc: cannot start: {message}", file=sys.stderr)
    return 2


def _exit_cleanly(signum: int, frame: object) -> None:
    sys.exit(0)


_CHECK_DEVICE = """
import sys
from service.__main__ import device_problem, model_problem
problem = device_problem(sys.argv[1], isolated=False)
if problem is None:
    for entry in sys.argv[2:]:
        name, _, path = entry.partition("=")
        problem = model_problem(name, path)
        if problem is not None:
            break
if problem is not None:
    print(problem)
    sys.exit(3)
"""


def device_problem(
    device: str, *, isolated: bool, models: dict[str, str] | None = None
) -> str | None:
    """Why ``device`` cannot be used (e.g. ``cuda`` without CUDA), or None when it can.

    ``isolated`` checks in a short-lived child process, so that this process never imports
    torch: with ``--workers N > 1`` it becomes uvicorn's supervisor, which serves nothing and
    would otherwise hold torch's ~200 MiB for its whole life. The child also checks ``models``
    (``{name: path}``, see :func:`model_problem`); the message it prints names the setting.
    """
    if not isolated:
        from posenc.core.device import resolve_device
        from posenc.core.errors import PosencError

        try:
            resolve_device(device)
        except PosencError as exc:
            return f"POSENC_DEVICE={device!r}: {exc.message}"
        return None
    entries = [f"{name}={path}" for name, path in (models or {}).items()]
    result = subprocess.run(
        [sys.executable, "-c", _CHECK_DEVICE, device, *entries],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0:
        return None
    logging.getLogger("service").debug("start-up check failed:\n%s", result.stderr)
    lines = (
        result.stdout.strip() or result.stderr.strip() or "the device check failed"
    ).splitlines()
    return lines[-1]


def model_problem(name: str, path: str) -> str | None:
    """Why the ``POSENC_MODELS`` entry ``name=path`` cannot be served, or None when it can.

    Missing, unreadable, a folder without ``model.safetensors`` (or a sharded index), not a
    safetensors checkpoint with a token table, or a ``tokenizer.json`` beside it that
    ``tokenizers`` cannot read: the model is loaded exactly as the service will (on the CPU),
    so a corrupt file stops the start instead of failing the lifespan.
    """
    where = f"POSENC_MODELS: model {name!r} at {path!r}"
    if not os.path.exists(path):
        return f"{where}: no such file"
    if os.path.isdir(path):
        weights = [f for f in ("model.safetensors", "model.safetensors.index.json")
                   if os.path.isfile(os.path.join(path, f))]  # fmt: skip
        if not weights:
            return (
                f"{where}: a folder without model.safetensors or model.safetensors.index.json "
                f"(it holds {', '.join(sorted(os.listdir(path))[:10]) or 'nothing'})"
            )
        readable = os.path.join(path, weights[0])
    elif not os.path.isfile(path):
        return f"{where}: not a regular file or folder"
    else:
        readable = path
    try:
        with open(readable, "rb") as f:
            f.read(1)
    except OSError as exc:
        return f"{where}: cannot be read ({exc.strerror})"
    from posenc.core.errors import PosencError
    from posenc.readers.models import load_safetensors_model

    try:
        load_safetensors_model(name, path, device="cpu")
    except PosencError as exc:
        logging.getLogger("service").debug("%s", where, exc_info=True)
        return f"{where}: {exc.message}"
    except Exception as exc:  # safetensors' own errors on a damaged file
        logging.getLogger("service").debug("%s", where, exc_info=True)
        return f"{where}: not a readable safetensors file ({type(exc).__name__}: {exc})"
    return None


def port_problem(host: str, port: int) -> str | None:
    """Why uvicorn could not listen on ``host:port`` (e.g. in use), or None when it can.

    Bound and closed again with the options uvicorn uses (``SO_REUSEADDR``), before anything
    loads, so a port in use stops the start with one line instead of after "ready".
    """
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"--host {host!r}: {exc.strerror or exc}"
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        return f"--port {port} (--host {host}): {exc.strerror or exc}"
    finally:
        sock.close()
    return None


def _prepare_multiprocess_metrics() -> str:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` for the workers: the operator's folder, emptied of the
    files of an earlier run, or a new temporary one removed at exit. Returns the folder."""
    import atexit
    import glob
    import shutil
    import tempfile

    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        for stale in glob.glob(os.path.join(folder, "*.db")):
            os.remove(stale)
    else:
        folder = tempfile.mkdtemp(prefix="posenc-metrics-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    return folder


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m service", description="Serve the posenc HTTP API with uvicorn."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes (default 1); each loads the models"
    )
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="overrides POSENC_LOG_LEVEL",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.workers < 1:
        return _fail(f"--workers must be >= 1, got {args.workers}")

    from service.config import Settings

    try:
        settings = Settings()
    except ValidationError as exc:
        lines = [
            f"POSENC_{'_'.join(map(str, e['loc'])).upper()}={e.get('input')!r}: {e['msg']}"
            for e in exc.errors()
        ]
        return _fail("invalid configuration: " + "; ".join(lines))

    log_level = args.log_level or settings.log_level
    logging.config.dictConfig(logging_config(log_level, settings.log_format))

    problem = port_problem(args.host, args.port)
    if problem is not None:
        return _fail(problem)
    isolated = args.workers > 1
    problem = device_problem(settings.device, isolated=isolated, models=settings.model_paths)
    if problem is None and not isolated:
        for name, path in settings.model_paths.items():
            problem = model_problem(name, path)
            if problem is not None:
                break
    if problem is not None:
        return _fail(problem)

    import uvicorn

    # uvicorn shuts down gracefully on SIGTERM / SIGINT, then re-raises the signal with the
    # handler that was there before it: make that a clean exit 0, not death by signal or a
    # KeyboardInterrupt traceback (orchestrators read 0 as a clean stop).
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_cleanly)

    if args.workers > 1:
        # Workers are separate processes: each imports the app (and reads POSENC_*) itself,
        # and writes its metrics where /metrics (in any worker) sums them.
        _prepare_multiprocess_metrics()
        uvicorn.run(
            "service.app:create_app",  # each worker builds its own app from POSENC_*
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=log_level,
            log_config=logging_config(log_level, settings.log_format),
            # the access log is service.observability.request_id's (with the request id), not uvicorn's
            access_log=False,
        )
    else:
        from service.app import create_app

        uvicorn.run(
            create_app(settings),
            host=args.host,
            port=args.port,
            log_level=log_level,
            log_config=logging_config(log_level, settings.log_format),
            # the access log is service.observability.request_id's (with the request id), not uvicorn's
            access_log=False,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
