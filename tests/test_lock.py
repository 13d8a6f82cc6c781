"""scripts/lock.py: the committed lock carries a hash on every pin, torch's covers both this
machine's local CPU build and PyPI's release, and ``--check`` fails on a pin without one."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
HASH = "sha256:" + "0" * 64
OTHER = "sha256:" + "1" * 64


def _lock() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "posenc_lock_script", ROOT / "scripts" / "lock.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lock = _lock()


@pytest.mark.parametrize("name", ["test.txt", "service.txt"])
def test_every_pin_of_the_committed_lock_has_a_hash(name: str) -> None:
    text = (ROOT / "requirements" / name).read_text()
    assert lock.unhashed(text) == []
    pins = re.findall(r"^[A-Za-z0-9][A-Za-z0-9._-]*==", text, flags=re.M)
    assert len(pins) > 40, name


@pytest.mark.parametrize("name", ["test.txt", "service.txt"])
def test_torch_pin_verifies_the_local_build_and_pypis_files(name: str) -> None:
    """The pin is torch==X without a local label, with the local +cpu wheel's hash (when this
    machine has one on disk) and more (PyPI's files of X for other platforms and Pythons)."""
    text = (ROOT / "requirements" / name).read_text()
    block = re.search(r"^torch==(\S+) \\\n((?:    --hash=\S+(?: \\)?\n)+)", text, flags=re.M)
    assert block is not None, "torch is not pinned with hashes"
    assert "+" not in block[1]
    hashes = set(re.findall(r"sha256:([0-9a-f]{64})", block[2]))
    assert len(hashes) > 4
    import hashlib

    for wheel in Path("/opt/wheels").glob(f"torch-{block[1]}+cpu-*.whl"):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert digest in hashes, f"{wheel.name}'s sha256 is not in {name}'s torch pin"


def test_check_fails_on_a_pin_without_a_hash() -> None:
    text = f"""# header
annotated-doc==0.0.7 \\
    --hash={HASH} \\
    --hash={OTHER}
    # via fastapi
anyio==4.16.0
    # via httpx
torch==2.13.0 ; sys_platform == "linux" \\
    --hash={HASH}
"""
    problems = lock.unhashed(text)
    assert len(problems) == 1 and "'anyio==4.16.0'" in problems[0], problems


def test_widen_adds_the_index_hashes_of_the_same_release(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def index_hashes(name: str, version: object) -> set[str]:
        seen.append((name, str(version)))
        return {OTHER, HASH}

    monkeypatch.setattr(lock, "_index_hashes", index_hashes)
    text = (
        f"torch==2.13.0 \\\n    --hash={HASH}\n    # via posenc\nzz==1.0 \\\n    --hash={OTHER}\n"
    )
    widened = lock.widen_hashes(text)
    assert seen == [("torch", "2.13.0"), ("zz", "1.0")]
    assert widened.startswith(
        f"torch==2.13.0 \\\n    --hash={HASH} \\\n    --hash={OTHER}\n    # via"
    )
    assert lock.unhashed(widened) == []
