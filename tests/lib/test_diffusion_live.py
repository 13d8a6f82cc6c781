"""The live lane: diffusers itself, against posenc's diffusion tables and sweep.

Two ways in, each skipped when it cannot run:

- where ``diffusers`` imports in the test's own interpreter, whole tables of each rule on grids
  the fixture does not hold are compared with diffusers' modules directly (built as
  ``scripts/record_diffusers_tables.py`` builds them), and the sweep of
  ``posenc.diffusion.sweep`` is checked against the installed diffusers' classes;
- where ``POSENC_DIFFUSERS_PYTHON`` names the Python of a venv with diffusers
  (``/work/venvs/diffusers/bin/python``), ``scripts/record_diffusers_tables.py --check`` must
  find the fixture up to date.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from posenc.diffusion import DIFFUSION_ROPE, SINCOS_2D
from posenc.diffusion.sweep import SWEEP
from posenc.resolve import compute, resolve_fields

ROOT = Path(__file__).resolve().parents[2]
HAS_DIFFUSERS = importlib.util.find_spec("diffusers") is not None
DIFFUSERS_PYTHON = os.environ.get("POSENC_DIFFUSERS_PYTHON")

pytestmark = pytest.mark.slow

needs_diffusers = pytest.mark.skipif(not HAS_DIFFUSERS, reason="diffusers is not importable")


def _script() -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import record_diffusers_tables
    finally:
        sys.path.pop(0)
    return record_diffusers_tables


#: Grids the fixture does not hold: odd sizes, one frame, one row, crops off the base grid.
LIVE = (
    ("diffusion_rope", {"model": "FLUX.1-dev", "height": 1, "width": 9, "text_len": 4}),
    ("diffusion_rope", {"model": "FLUX.1-dev", "height": 33, "width": 17}),
    ("diffusion_rope", {"model": "Wan2.1-T2V-1.3B", "frames": 1, "height": 7, "width": 11}),
    ("diffusion_rope", {"model": "Wan2.2-T2V-A14B", "frames": 5, "height": 3, "width": 2}),
    (
        "diffusion_rope",
        {"model": "HunyuanVideo", "frames": 2, "height": 9, "width": 5, "text_len": 3},
    ),
    ("diffusion_rope", {"model": "Qwen-Image", "height": 1, "width": 1, "text_len": 9}),
    (
        "diffusion_rope",
        {"model": "Qwen-Image", "frames": 3, "height": 10, "width": 3, "text_len": 2},
    ),
    ("diffusion_rope", {"model": "CogVideoX-5b", "frames": 2, "height": 17, "width": 60}),
    ("diffusion_rope", {"model": "CogVideoX-5b", "frames": 1, "height": 1, "width": 1}),
    ("diffusion_rope", {"model": "CogVideoX1.5-5B", "frames": 3, "height": 150, "width": 2}),
    ("diffusion_rope", {"model": "LTX-Video", "frames": 1, "height": 5, "width": 3}),
    ("sincos_2d", {"model": "stable-diffusion-3.5-large", "height": 192, "width": 1}),
    ("sincos_2d", {"model": "stable-diffusion-3-medium", "height": 33, "width": 65}),
    ("sincos_2d", {"model": "PixArt-Sigma-XL-2-1024-MS", "height": 7, "width": 130}),
    ("sincos_2d", {"model": "DiT-XL-2-256", "height": 1, "width": 3}),
    ("sincos_2d", {"model": "CogVideoX-2b", "frames": 2, "height": 5, "width": 9}),
)


def _ours(endpoint: str, request: dict[str, Any], precision: str) -> dict[str, np.ndarray]:
    kind = DIFFUSION_ROPE if endpoint == "diffusion_rope" else SINCOS_2D
    params = resolve_fields(kind, {**request, "precision": precision})
    return {k: v.numpy() for k, v in compute(kind, params).items()}


@needs_diffusers
@pytest.mark.parametrize(("endpoint", "request_"), LIVE, ids=[str(r) for _, r in LIVE])
def test_whole_tables_equal_diffusers(endpoint: str, request_: dict[str, Any]) -> None:
    want = {
        k: v.detach().float().numpy() for k, v in _script().reference(endpoint, request_).items()
    }
    got = _ours(endpoint, request_, "diffusers")
    for name, table in want.items():
        ours = got[name]
        if endpoint == "diffusion_rope" and "CogVideoX" in request_["model"]:
            ours = ours[request_.get("text_len", 0) :]
        if endpoint == "diffusion_rope" and "Hunyuan" in request_["model"]:
            ours = ours[: table.shape[0]]
        assert ours.shape == table.shape, name
        assert np.abs(ours - table).max() <= 1e-6, (name, np.abs(ours - table).max())


def _positional_classes() -> dict[str, str]:
    """diffusers' transformer classes whose file defines or calls a positional module."""
    import diffusers.models.transformers as package

    pattern = re.compile(
        r"RotaryPosEmbed|PosEmbed|EmbedRope|Rope[A-Za-z0-9]*\(|rotary_pos_embed|"
        r"sincos_pos_embed|PatchEmbed\("
    )
    found: dict[str, str] = {}
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        text = path.read_text()
        if not pattern.search(text):
            continue
        for name in re.findall(r"^class ([A-Za-z0-9]*Transformer[A-Za-z0-9]*Model)\b", text, re.M):
            found[name] = path.stem
    return found


@needs_diffusers
def test_the_sweep_lists_every_positional_class_of_the_installed_diffusers() -> None:
    found = _positional_classes()
    missing = sorted(set(found) - set(SWEEP))
    assert not missing, f"diffusers classes with positions the sweep does not list: {missing}"
    for name, entry in SWEEP.items():
        if name in found:
            assert entry.module == found[name], name


@needs_diffusers
def test_served_classes_build_the_module_posenc_follows() -> None:
    """Each class the sweep serves names, in its source, the module its rule follows."""
    import diffusers

    expect = {
        "flux": "FluxPosEmbed",
        "wan": "WanRotaryPosEmbed",
        "hunyuan-video": "HunyuanVideoRotaryPosEmbed",
        "qwen-image": "QwenEmbedRope",
        "cogvideox": "CogVideoXPatchEmbed",
        "ltx-video": "LTXVideoRotaryPosEmbed",
        "sd3": "PatchEmbed",
        "pixart": "PatchEmbed",
        "dit": "PatchEmbed",
    }
    for name, entry in SWEEP.items():
        if entry.served is None:
            continue
        source = inspect.getsource(getattr(diffusers, name))
        model = entry.served.split(":")[1]
        assert expect[model] in source, name


@pytest.mark.skipif(not DIFFUSERS_PYTHON, reason="set POSENC_DIFFUSERS_PYTHON to a venv's python")
def test_the_fixture_is_what_diffusers_gives() -> None:
    assert DIFFUSERS_PYTHON is not None
    run = subprocess.run(
        [DIFFUSERS_PYTHON, str(ROOT / "scripts" / "record_diffusers_tables.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout + run.stderr
