"""The library stands on its own: importing posenc must not pull in the service's stack."""

import subprocess
import sys

import pytest
import torch

from posenc import DeviceUnavailable, InvalidArgument, resolve_device, resolve_dtype


def test_library_imports_without_fastapi_or_pydantic():
    code = (
        "import sys, posenc, posenc.core.device, posenc.core.errors;"
        "import pkgutil, importlib;"
        "[importlib.import_module('posenc.' + m.name) for m in pkgutil.iter_modules(posenc.__path__)"
        " if m.name not in ('client', 'cli')];"
        "bad = [m for m in ('fastapi', 'pydantic', 'starlette', 'uvicorn') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, f"posenc imported {result.stdout.strip()} {result.stderr}"


def test_auto_device_follows_cuda_availability():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device(None).type == expected
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_cuda_without_gpu_says_so():
    with pytest.raises(DeviceUnavailable, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(DeviceUnavailable, match="cuda:1"):
        resolve_device("cuda:1")


def test_bad_device_and_dtype_names_state_what_is_allowed():
    with pytest.raises(InvalidArgument, match="'tpu'"):
        resolve_device("tpu")
    with pytest.raises(InvalidArgument, match=r"float16.*'int8'"):
        resolve_dtype("int8")
    assert resolve_dtype(None) is torch.float32
    assert resolve_dtype("bfloat16") is torch.bfloat16


def test_the_library_never_imports_the_service() -> None:
    """Layering: posenc/ is the library; service/ depends on it, never the other way round."""
    import re
    from pathlib import Path

    pattern = re.compile(r"^\s*(from\s+service(\.|\s)|import\s+service\b)", re.M)
    root = Path(__file__).resolve().parents[2] / "posenc"
    offenders = [p.name for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


@pytest.mark.slow
def test_a_script_beside_the_clone_imports_posenc(tmp_path):
    """``posenc/.venv/bin/python script.py`` run from the clone's parent folder once imported
    the clone folder as a namespace package (``cannot import name 'RopeScaling' from 'posenc'
    (unknown location)``). The clone is installed as run.sh installs it into a fresh venv,
    then a script beside a folder named posenc holding the clone imports the real package."""
    import os
    import shlex
    import sysconfig
    from pathlib import Path

    repo = Path(__file__).parents[2]
    line = next(
        x for x in (repo / "run.sh").read_text().splitlines() if "pip install" in x and " -e ." in x
    )
    args = shlex.split(line.strip())[1:]  # after "$py"
    args = [str(repo) if a == "." else a for a in args]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # setuptools (for the build) and torch (for the import) from this interpreter, on
    # PYTHONPATH: not a site folder, so its own posenc install is not set up there
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    install = subprocess.run([str(python), *args], env=env, capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    parent = tmp_path / "parent"
    parent.mkdir()
    (parent / "posenc").symlink_to(repo, target_is_directory=True)
    (parent / "script.py").write_text(
        "from posenc import RopeScaling\nprint(RopeScaling.__module__)\n"
    )
    run = subprocess.run(
        [str(python), "script.py"], cwd=parent, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "posenc.rope.scaling"
