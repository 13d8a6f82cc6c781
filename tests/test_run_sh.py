"""run.sh's ``pytest_workers``: the pytest-xdist options ``./run.sh test`` adds (one worker a
core, or POSENC_TEST_WORKERS), and none where the arguments choose or step into a debugger."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.helpers import ROOT


def _workers(*args: str, workers: str | None = None, cores: int = 2) -> str:
    """What run.sh's function prints for ``args``, on a machine of ``cores`` cores."""
    text = (ROOT / "run.sh").read_text()
    match = re.search(r"^pytest_workers\(\) \{.*?^\}$", text, re.M | re.S)
    assert match is not None, "run.sh: pytest_workers() is gone"
    script = f'nproc() {{ echo {cores}; }}\n{match.group(0)}\npytest_workers "$@"'
    env = {k: v for k, v in os.environ.items() if k != "POSENC_TEST_WORKERS"}
    if workers is not None:
        env["POSENC_TEST_WORKERS"] = workers
    done = subprocess.run(
        ["bash", "-c", script, "run.sh", *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("args", [(), ("-m", "not slow"), ("-k", "rope", "tests/lib")])
def test_a_worker_a_core_with_work_stealing(args: tuple[str, ...]) -> None:
    assert _workers(*args, cores=2) == "-n 2 --dist worksteal"
    assert _workers(*args, cores=16) == "-n 16 --dist worksteal"


@pytest.mark.parametrize(
    "args",
    [("-n", "4"), ("-n4",), ("--numprocesses=3",), ("--dist", "load"), ("-p", "no:xdist"),
     ("--pdb",), ("--trace",), ("--sw",)],
)  # fmt: skip
def test_none_where_the_arguments_choose_or_debug(args: tuple[str, ...]) -> None:
    assert _workers(*args) == ""


def test_posenc_test_workers_chooses() -> None:
    assert _workers(workers="3") == "-n 3 --dist worksteal"
    assert _workers(workers="1") == ""
    assert _workers(workers="0") == ""
    assert _workers(cores=1) == ""
