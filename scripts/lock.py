"""The lock: every package `./run.sh serve`, `./run.sh test` and the Dockerfile install, pinned.

    python scripts/lock.py            refresh both lock files to the newest releases pyproject admits
    python scripts/lock.py --keep     re-lock after a pyproject change, keeping every pin that still fits
    python scripts/lock.py --check    fail when a lock no longer satisfies pyproject.toml, or a pin
                                      has no hash (CI runs this)

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

Every pin carries its files' sha256 (``--generate-hashes``), and run.sh, the Dockerfile and CI
install with ``--require-hashes``: a file that differs from the one locked is refused. pip-compile
hashes the files pip would pick on this machine; :func:`widen_hashes` adds those of every other
file the indexes list for the same release (other Pythons and platforms: the CUDA image runs
Python 3.12), so the lock verifies wherever the release installs. torch's pin thus holds both
the local CPU build's hash (this machine's ``+cpu`` wheel) and those of PyPI's ``torch==X``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
REQ = ROOT / "requirements"
TEST_LOCK = REQ / "test.txt"
SERVICE_LOCK = REQ / "service.txt"
TORCH_CUDA_LOCK = REQ / "torch-cuda.txt"
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
        "--verbose" if os.environ.get("POSENC_LOCK_VERBOSE") else "--quiet",
        "--strip-extras",
        "--allow-unsafe",
        "--no-emit-index-url",
        "--no-emit-find-links",
        "--generate-hashes",
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
    out.write_text(widen_hashes(text))


def _index_hashes(name: str, version: Version) -> set[str]:
    """sha256 of every file of ``name==version`` on the indexes pip is configured with (their
    JSON simple API, PEP 691: hashes listed, nothing downloaded; an index without it adds
    nothing)."""
    from piptools.repositories import PyPIRepository

    global _REPO
    if _REPO is None:
        _REPO = PyPIRepository([], cache_dir=tempfile.mkdtemp(prefix="posenc-lock-"))
    found: set[str] = set()
    for index in _REPO.finder.search_scope.index_urls:
        if not index.startswith("http"):
            continue  # the local mirrors hold copies of the index's files, hashed by pip-compile
        url = f"{index.rstrip('/')}/{canonicalize_name(name)}/"
        try:
            response = _REPO.session.get(
                url, headers={"Accept": "application/vnd.pypi.simple.v1+json"}, timeout=60
            )
            response.raise_for_status()
            files = json.loads(response.content)["files"]
        except Exception as exc:  # no JSON API there, or offline: pip-compile's hashes stay
            print(f"lock: no file hashes of {name} from {index}: {exc}", file=sys.stderr)
            continue
        for f in files:
            file_version = _file_version(name, f["filename"])
            if file_version is not None and file_version == version and "sha256" in f["hashes"]:
                found.add(f"sha256:{f['hashes']['sha256']}")
    return found


_REPO = None


def _file_version(name: str, filename: str) -> Version | None:
    from packaging.utils import parse_sdist_filename, parse_wheel_filename

    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except Exception:
        return None


_PIN_BLOCK = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)(?P<marker>[^\\\n]*)\\\n"
    r"(?P<hashes>(?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)",
    re.M,
)


def widen_hashes(text: str) -> str:
    """Each pin of a lock's ``text`` with the hashes of every file of its release on the
    indexes added to those pip-compile wrote (sorted, one a line)."""

    def widen(m: re.Match[str]) -> str:
        hashes = set(re.findall(r"sha256:[0-9a-f]{64}", m["hashes"]))
        hashes |= _index_hashes(m["name"], Version(m["version"]))
        lines = [f"    --hash={h}" for h in sorted(hashes)]
        return f"{m['name']}=={m['version']}{m['marker']}\\\n" + " \\\n".join(lines) + "\n"

    return _PIN_BLOCK.sub(widen, text)


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
    lock_service(flags)
    EXTRA_IN.unlink()
    lock_torch_cuda()


def lock_torch_cuda() -> None:
    """``requirements/torch-cuda.txt``: what the index's Linux build of the locked torch needs
    besides the lock (its CUDA libraries, triton), hashed. The lock is resolved with the local
    CPU build, which needs none of them; a machine without that build installs the index's,
    and then this file (run.sh, the Dockerfile). pip resolves it from the index alone (the
    machine's own configuration, with its local wheels, left out) without installing anything;
    the wheels' metadata is read, not the wheels."""
    torch = pins(TEST_LOCK)["torch"]
    bare = REQ / "test-pins.txt"
    bare.write_text("".join(f"{n}=={v}\n" for n, v in pins(TEST_LOCK).items() if n != "torch"))
    report = Path(tempfile.mkdtemp(prefix="posenc-lock-")) / "report.json"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
             "--report", str(report), "--constraint", str(bare), f"torch=={torch}"],
            cwd=ROOT, check=True, env=env,
        )  # fmt: skip
    finally:
        bare.unlink()
    locked = pins(TEST_LOCK)
    lines = [
        "# Written by scripts/lock.py (./run.sh lock): what the index's Linux build of the locked",
        f"# torch=={torch} needs besides requirements/test.txt and requirements/service.txt (the",
        "# local CPU build needs none of it). run.sh and the Dockerfile install it, with",
        "# --require-hashes --no-deps, only where torch came from the index.",
    ]
    for item in sorted(
        json.loads(report.read_text())["install"], key=lambda i: i["metadata"]["name"].lower()
    ):
        name, version = (
            canonicalize_name(item["metadata"]["name"]),
            Version(item["metadata"]["version"]),
        )
        if name in locked:
            continue
        hashes = {f"sha256:{item['download_info']['archive_info']['hashes']['sha256']}"}
        hashes |= _index_hashes(name, version)
        lines.append(f'{name}=={version} ; platform_system == "Linux" \\')
        lines.append(" \\\n".join(f"    --hash={h}" for h in sorted(hashes)))
    TORCH_CUDA_LOCK.write_text("\n".join(lines) + "\n")


def lock_service(flags: list[str]) -> None:
    """The service lock, constrained to the test lock's versions. The constraint is given
    without hashes: hashes there would make pip take the one file of torch's release that it
    can hash from the index (PyPI's CUDA build, with its CUDA libraries) over the local CPU
    build."""
    pyproject = ROOT / "pyproject.toml"
    _write_extra_in(())
    bare = REQ / "test-pins.txt"
    bare.write_text("".join(f"{name}=={v}\n" for name, v in pins(TEST_LOCK).items()))
    try:
        _compile(
            SERVICE_LOCK,
            SERVICE_EXTRAS,
            [pyproject, PINS, EXTRA_IN],
            f"--constraint={bare.relative_to(ROOT)}",
            *flags,
        )
    finally:
        bare.unlink()
    text = SERVICE_LOCK.read_text().replace("requirements/test-pins.txt", "requirements/test.txt")
    SERVICE_LOCK.write_text(text)


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
    for lock_file in (TEST_LOCK, SERVICE_LOCK, TORCH_CUDA_LOCK):
        for line in lock_file.read_text().splitlines():
            if not line.startswith((" ", "#")) and " @ " in line:
                problems.append(f"{lock_file.name}: {line!r} is a path or URL, not a pin")
        problems += [f"{lock_file.name}: {p}" for p in unhashed(lock_file.read_text())]
    for name, v in service_pins.items():
        if name in test_pins and test_pins[name] != v:
            problems.append(f"service.txt pins {name}=={v}, test.txt {test_pins[name]}")
    return problems


def unhashed(text: str) -> list[str]:
    """The pins of a lock's ``text`` that carry no ``--hash`` (``--require-hashes`` refuses
    them)."""
    problems = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line or line.startswith((" ", "#", "-")):
            continue
        follows = lines[i + 1] if i + 1 < len(lines) else ""
        if not (line.rstrip().endswith("\\") and follows.lstrip().startswith("--hash=sha256:")):
            problems.append(f"{line.split()[0]!r} has no --hash (run ./run.sh lock --keep)")
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
