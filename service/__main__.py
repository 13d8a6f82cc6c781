"""``python -m service [--host 127.0.0.1] [--port 8000] [--workers N]``: serve with uvicorn.

The configuration (``POSENC_*``) and the device are checked before uvicorn starts, so a bad
setting (e.g. ``POSENC_DEVICE=cuda`` on a machine without CUDA) ends the process with exit
status 2 and one clear line on stderr, not a traceback. SIGTERM and SIGINT let in-flight
requests finish, then exit 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys

from pydantic import ValidationError

# torch's CPU allocator backs allocations of 2 MiB and more with transparent huge pages when this
# is set (read once, at the first allocation: so before torch is imported). A fresh (32, 512,
# 512) float32 embedding output then takes ~550 page faults instead of ~8,200, about half the
# cold /v1/embed compute on the 2-core dev machine. Set THP_MEM_ALLOC_ENABLE=0 to opt out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def _fail(message: str) -> int:
    print(f"posenc: cannot start: {message}", file=sys.stderr)
    return 2


def _exit_cleanly(signum: int, frame: object) -> None:
    sys.exit(0)


_CHECK_DEVICE = """
import sys
from posenc.device import resolve_device
from posenc.errors import PosencError
try:
    resolve_device(sys.argv[1])
except PosencError as exc:
    print(exc.message)
    sys.exit(3)
"""


def device_problem(device: str, *, isolated: bool) -> str | None:
    """Why ``device`` cannot be used (e.g. ``cuda`` without CUDA), or None when it can.

    ``isolated`` checks in a short-lived child process, so that this process never imports
    torch: with ``--workers N > 1`` it becomes uvicorn's supervisor, which serves nothing and
    would otherwise hold torch's ~200 MiB for its whole life.
    """
    if not isolated:
        from posenc.device import resolve_device
        from posenc.errors import PosencError

        try:
            resolve_device(device)
        except PosencError as exc:
            return exc.message
        return None
    result = subprocess.run(
        [sys.executable, "-c", _CHECK_DEVICE, device], capture_output=True, text=True, check=False
    )
    if result.returncode == 0:
        return None
    lines = (
        result.stdout.strip() or result.stderr.strip() or "the device check failed"
    ).splitlines()
    return lines[-1]


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
        lines = [f"POSENC_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()]
        return _fail("invalid configuration: " + "; ".join(lines))

    problem = device_problem(settings.device, isolated=args.workers > 1)
    if problem is not None:
        return _fail(f"POSENC_DEVICE={settings.device!r}: {problem}")
    for name, path in settings.model_paths.items():
        if not os.path.isfile(path):
            return _fail(f"POSENC_MODELS: model {name!r}: no such file {path!r}")

    log_level = args.log_level or settings.log_level
    logging.basicConfig(
        level=logging.DEBUG if log_level == "trace" else getattr(logging, log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    import uvicorn

    # uvicorn shuts down gracefully on SIGTERM / SIGINT, then re-raises the signal with the
    # handler that was there before it: make that a clean exit 0, not death by signal or a
    # KeyboardInterrupt traceback (orchestrators read 0 as a clean stop).
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_cleanly)

    if args.workers > 1:
        # Workers are separate processes: each imports the app (and reads POSENC_*) itself.
        uvicorn.run(
            "service.app:app",
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=log_level,
            access_log=settings.access_log,
        )
    else:
        from service.app import create_app

        uvicorn.run(
            create_app(settings),
            host=args.host,
            port=args.port,
            log_level=log_level,
            access_log=settings.access_log,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
