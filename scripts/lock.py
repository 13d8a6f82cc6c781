"""The lock: every package `./run.sh serve`, `./run.sh test` and the Dockerfile install, pinned.

    python scripts/lock.py            refresh both lock files to the newest releases pyproject admits
    python scripts/lock.py --keep     re-lock after a pyproject change, keeping every pin that still fits
    python scripts/lock.py --check    fail when a lock no longer satisfies pyproject.toml (CI runs this)

The files are written by pip-tools' ``pip-compile`` (pip's own resolver, which sees the local CPU
torch build that these machines keep on disk; uv and poetry do not):

- ``requirements/test.txt``: the ``test`` extra, the ``dev`` dependency group and the build
  requirements; ``./run.sh test`` and ``./run.sh bench`` install it.
- ``requirements/service.txt``: the ``service``, ``client`` and ``otel`` extras and the build
  requirements, constrained to the test lock's versions, so the service runs on exactly the
  versions the suite checked; ``./run.sh serve`` and the Dockerfile install it.
- ``requirements/pins.in``: pins the lock needs that pyproject's ranges do not say (torch).

pip-compile cannot read PEP 735 dependency groups yet, nor build requirements beside other
input files, so those are written to ``requirements/pyproject-extra.in`` (ignored by git) from
pyproject.toml just before it runs (the lock then holds setuptools, and the project installs
without build isolation, offline). A torch local
label (``+cpu``) is dropped from the pin, so the same line takes the local CPU build here and
PyPI's release elsewhere; posenc itself, which the ``test`` extra names, is left out (run.sh
installs it from the clone).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
REQ = ROOT / "requirements"
TEST_LOCK = REQ / "test.txt"
SERVICE_LOCK = REQ / "service.txt"
PINS = REQ / "pins.in"
EXTRA_IN = REQ / "pyproject-extra.in"

TEST_EXTRAS = ("test",)
SERVICE_EXTRAS = ("service", "client", "otel")
GROUPS = ("dev",)


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _compile(out: Path, extras: tuple[str, ...], sources: list[Path], *extra: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "piptools",
        "compile",
        "--quiet",
        "--strip-extras",
        "--allow-unsafe",
        "--no-emit-index-url",
        "--no-emit-find-links",
        *(f"--extra={e}" for e in extras),
        f"--output-file={out.relative_to(ROOT)}",
        *extra,
        *(str(s.relative_to(ROOT)) for s in sources),
    ]
    # the command the files' header names (pip-tools reads it from the environment)
    env = {**os.environ, "CUSTOM_COMPILE_COMMAND": "./run.sh lock"}
    subprocess.run(cmd, cwd=ROOT, check=True, env=env)
    text = re.sub(r"^(torch==[0-9][0-9.]*)\+[A-Za-z0-9.]+", r"\1", out.read_text(), flags=re.M)
    # the test extra names posenc[service,client,otel]: pip-compile pins the project itself as a
    # path on this machine, which no other machine has (run.sh installs it from the clone)
    text = re.sub(r"^posenc @ .*\n(?:    #.*\n)*", "", text, flags=re.M)
    out.write_text(text)


def _write_extra_in(groups: tuple[str, ...]) -> None:
    p = _pyproject()
    lines = list(p["build-system"]["requires"])
    lines += [r for g in groups for r in p["dependency-groups"][g]]
    EXTRA_IN.write_text(
        "# Written by scripts/lock.py from pyproject.toml (build requirements, dependency groups).\n"
        + "".join(f"{r}\n" for r in lines)
    )


def lock(upgrade: bool) -> None:
    flags = ["--upgrade"] if upgrade else []
    pyproject = ROOT / "pyproject.toml"
    _write_extra_in(GROUPS)
    _compile(TEST_LOCK, TEST_EXTRAS, [pyproject, PINS, EXTRA_IN], *flags)
    _write_extra_in(())
    _compile(
        SERVICE_LOCK,
        SERVICE_EXTRAS,
        [pyproject, PINS, EXTRA_IN],
        f"--constraint={TEST_LOCK.relative_to(ROOT)}",
        *flags,
    )
    EXTRA_IN.unlink()


def pins(lock_file: Path) -> dict[str, Version]:
    """``{canonical name: version}`` of a lock file's ``name==version`` lines."""
    found = {}
    for line in lock_file.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if m:
            found[canonicalize_name(m.group(1))] = Version(m.group(2))
    return found


def required(extras: tuple[str, ...], groups: tuple[str, ...] = ()) -> list[Requirement]:
    """The direct requirements pyproject.toml names for these extras and groups (extras that name
    posenc itself expanded), plus its build requirements and requirements/pins.in."""
    p = _pyproject()
    optional = p["project"]["optional-dependencies"]
    todo, seen, reqs = list(extras), set(), []
    for text in p["project"]["dependencies"] + p["build-system"]["requires"]:
        reqs.append(Requirement(text))
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in optional[extra]:
            r = Requirement(text)
            if canonicalize_name(r.name) == "posenc":
                todo.extend(r.extras)
            else:
                reqs.append(r)
    for g in groups:
        reqs.extend(Requirement(t) for t in p["dependency-groups"][g])
    for line in PINS.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            reqs.append(Requirement(line))
    return reqs


def check() -> list[str]:
    """Every requirement of pyproject.toml is pinned in its lock, at a version its range admits;
    the service lock's pins equal the test lock's; no line is a path or URL (which another
    machine would not have)."""
    problems = []
    test_pins, service_pins = pins(TEST_LOCK), pins(SERVICE_LOCK)
    for lock_file, found, reqs in (
        (TEST_LOCK, test_pins, required(TEST_EXTRAS, GROUPS)),
        (SERVICE_LOCK, service_pins, required(SERVICE_EXTRAS)),
    ):
        for r in reqs:
            if r.marker is not None and not r.marker.evaluate():
                continue
            v = found.get(canonicalize_name(r.name))
            if v is None:
                problems.append(f"{lock_file.name}: {r} is not pinned")
            elif not r.specifier.contains(v, prereleases=True):
                problems.append(f"{lock_file.name}: {r.name}=={v} does not satisfy {r}")
    for lock_file in (TEST_LOCK, SERVICE_LOCK):
        for line in lock_file.read_text().splitlines():
            if not line.startswith((" ", "#")) and " @ " in line:
                problems.append(f"{lock_file.name}: {line!r} is a path or URL, not a pin")
    for name, v in service_pins.items():
        if name in test_pins and test_pins[name] != v:
            problems.append(f"service.txt pins {name}=={v}, test.txt {test_pins[name]}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail when a lock misses pyproject")
    mode.add_argument("--keep", action="store_true", help="keep the pins that still fit")
    args = parser.parse_args()
    if args.check:
        problems = check()
        for p in problems:
            print(f"lock: {p}", file=sys.stderr)
        if problems:
            print(
                "lock: out of date; run ./run.sh lock --keep and commit requirements/",
                file=sys.stderr,
            )
            return 1
        print("lock: requirements/ matches pyproject.toml")
        return 0
    lock(upgrade=not args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
