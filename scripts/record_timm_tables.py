"""Record timm's own vision rotary tables into tests/fixtures/timm (``engine: "timm"``).

Runs in a separate virtual environment that has timm (never the service's: timm stays out of its
dependencies and its lock)::

    python3 -m venv /work/venvs/timm
    /work/venvs/timm/bin/pip install torch==2.13.0
    /work/venvs/timm/bin/pip install --no-deps timm
    /work/venvs/timm/bin/pip install pyyaml safetensors huggingface_hub
    /work/venvs/timm/bin/python scripts/record_timm_tables.py          # rewrite the fixtures
    /work/venvs/timm/bin/python scripts/record_timm_tables.py --check  # compare, write nothing

``timm.layers``' package ``__init__`` imports torchvision, whose only wheels for torch 2.13 on the
index are built against CUDA torch; the rotary code itself (``timm/layers/pos_embed_sincos.py``
with its ``grid``, ``trace_utils`` and ``_fx`` helpers) needs torch alone, so it is imported as a
submodule of the installed ``timm`` package without running the packages' ``__init__``
(:func:`load_pos_embed_sincos`). Where torchvision imports, plain ``import timm`` is used.

For each case (:data:`CASES`: the ``create_rope_embed`` arguments of EVA-02, ROPE-ViT axial and
mixed, timm's DINOv3 and NaFlexViT with DINOv3 RoPE, and the modules' own defaults), timm's
factory builds the module in eval mode (``mixed`` right after ``torch.manual_seed(seed)``), and
``get_embed([h, w])`` gives each grid's sin and cos, split from timm's ``[sin | cos]``
concatenation. What is recorded: timm's version, each case's config and grids, and the float32
tables (``tables.safetensors``, keys ``<case>/sin`` and ``<case>/cos``, rows as posenc orders
them: grids one after the other; ``mixed``: blocks, heads, then tokens).
``tests/lib/test_vision_timm.py`` checks posenc against them in the default test lane.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "timm"
CASES_FILE = FIXTURES / "cases.json"
TABLES_FILE = FIXTURES / "tables.safetensors"

#: name -> (create_rope_embed arguments, grids [t, h, w], where the arguments come from).
CASES: dict[str, tuple[dict[str, Any], list[list[int]], str]] = {
    "eva02_base_patch14_224": (
        {
            "rope_type": "cat",
            "dim": 768,
            "num_heads": 12,
            "in_pixels": False,
            "ref_feat_shape": [16, 16],
            "temperature": 10000.0,
        },
        [[1, 16, 16], [1, 10, 20]],
        "timm/models/eva.py: eva02_base_patch14_224 (ref_feat_shape 224/14), Eva's rope kwargs",
    ),
    "cat_defaults_pixel_bands": (
        {"rope_type": "cat", "dim": 384, "num_heads": 6},
        [[1, 14, 14]],
        "RotaryEmbeddingCat's own defaults: pixel bands over a [-1, 1] grid",
    ),
    "base_linear_bands_half": (
        {
            "rope_type": "base",
            "dim": 256,
            "num_heads": 4,
            "linear_bands": True,
            "max_res": 512,
            "rotate_half": True,
        },
        [[1, 8, 12]],
        "RotaryEmbedding (separate sin, cos) with linear pixel bands, rotate_half",
    ),
    "rope_vit_base_patch16_axial": (
        {
            "rope_type": "cat",
            "dim": 768,
            "num_heads": 12,
            "in_pixels": False,
            "temperature": 100.0,
            "grid_indexing": "xy",
        },
        [[1, 14, 14], [1, 8, 20]],
        "timm/models/eva.py: vit_base_patch16_rope_224 (ROPE-ViT axial)",
    ),
    "cat_centered_offset_ref_xy": (
        {
            "rope_type": "cat",
            "dim": 512,
            "num_heads": 8,
            "in_pixels": False,
            "grid_type": "centered",
            "normalize_coords": "max",
            "grid_offset": 0.5,
            "ref_feat_shape": [12, 9],
            "grid_indexing": "xy",
        },
        [[1, 6, 10]],
        "grid_type centered, normalize_coords max, grid_offset, ref_feat_shape with xy",
    ),
    "rope_vit_mixed_small": (
        {
            "rope_type": "mixed",
            "dim": 192,
            "num_heads": 3,
            "depth": 2,
            "temperature": 10.0,
            "grid_indexing": "xy",
            "seed": 0,
        },
        [[1, 4, 6], [1, 3, 3]],
        "timm/models/eva.py: vit_*_patch16_rope_mixed_224's rope kwargs (2 blocks), seed 0",
    ),
    "rope_vit_mixed_ij_seed7": (
        {
            "rope_type": "mixed",
            "dim": 128,
            "num_heads": 2,
            "depth": 3,
            "grid_indexing": "ij",
            "seed": 7,
        },
        [[1, 5, 4]],
        "RotaryEmbeddingMixed's defaults (temperature 10) with ij indexing, seed 7",
    ),
    "vit_small_patch16_dinov3": (
        {
            "rope_type": "dinov3",
            "dim": 384,
            "num_heads": 6,
            "temperature": 100.0,
            "rotate_half": True,
        },
        [[1, 14, 14], [1, 10, 16]],
        "timm/models/eva.py: vit_small_patch16_dinov3 (rope_temperature 100, rotate_half)",
    ),
    "naflexvit_dinov3_periods": (
        {
            "rope_type": "dinov3",
            "dim": 256,
            "num_heads": 4,
            "min_period": 0.5,
            "max_period": 50.0,
            "normalize_coords": "min",
            "grid_indexing": "xy",
            "rotate_half": False,
        },
        [[1, 7, 11], [1, 4, 4]],
        "RotaryEmbeddingDinoV3 with min/max periods, normalize_coords min, xy, interleaved "
        "(NaFlexViT builds one per grid of its batch)",
    ),
}


def load_pos_embed_sincos() -> types.ModuleType:
    """timm's ``timm.layers.pos_embed_sincos``, without torchvision where it cannot import."""
    try:
        return importlib.import_module("timm.layers.pos_embed_sincos")
    except ImportError:
        pass
    for name in [n for n in sys.modules if n == "timm" or n.startswith("timm.")]:
        del sys.modules[name]
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("timm is not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    for package, path in (("timm", root), ("timm.layers", root / "layers")):
        module = types.ModuleType(package)
        module.__path__ = [str(path)]
        sys.modules[package] = module
    return importlib.import_module("timm.layers.pos_embed_sincos")


def timm_version() -> str:
    from importlib.metadata import version

    return version("timm")


def timm_tables(config: dict[str, Any], grids: list[list[int]]) -> tuple[torch.Tensor, ...]:
    """timm's (sin, cos) for ``config`` over ``grids``, in posenc's row order, float32."""
    sincos = load_pos_embed_sincos()
    kwargs = {k: v for k, v in config.items() if k != "seed"}
    if isinstance(kwargs.get("ref_feat_shape"), list):
        kwargs["ref_feat_shape"] = tuple(kwargs["ref_feat_shape"])
    torch.manual_seed(int(config.get("seed", 0)))
    module = sincos.create_rope_embed(**kwargs).eval()
    sins, coss = [], []
    with torch.no_grad():
        for _t, h, w in grids:
            embed = module.get_embed([h, w])
            if isinstance(embed, tuple):  # RotaryEmbedding: (sin, cos)
                sin, cos = embed
            else:  # [sin | cos] on the last axis
                sin, cos = embed.chunk(2, dim=-1)
            sins.append(sin)
            coss.append(cos)
    axis = 2 if config["rope_type"] == "mixed" else 0  # mixed: (depth, heads, T, 2·Dh)
    sin, cos = torch.cat(sins, dim=axis), torch.cat(coss, dim=axis)
    return sin.reshape(-1, sin.shape[-1]).float(), cos.reshape(-1, cos.shape[-1]).float()


def record() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    cases = {}
    tensors = {}
    for name, (config, grids, source) in CASES.items():
        sin, cos = timm_tables(config, grids)
        cases[name] = {"config": config, "grid_thw": grids, "source": source}
        tensors[f"{name}/sin"] = sin.contiguous()
        tensors[f"{name}/cos"] = cos.contiguous()
    return {"timm": timm_version(), "cases": cases}, tensors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the fixtures")
    args = parser.parse_args()
    from safetensors.torch import load_file, save_file

    manifest, tensors = record()
    if args.check:
        stored = load_file(str(TABLES_FILE))
        bad = [k for k, v in tensors.items() if k not in stored or not torch.equal(stored[k], v)]
        same = json.loads(CASES_FILE.read_text())["cases"] == manifest["cases"]
        print(f"{len(tensors) - len(bad)} of {len(tensors)} tables equal; cases equal: {same}")
        return 1 if bad or not same else 0
    FIXTURES.mkdir(parents=True, exist_ok=True)
    CASES_FILE.write_text(json.dumps(manifest, indent=1) + "\n")
    save_file(tensors, str(TABLES_FILE))
    print(f"wrote {len(tensors)} tables of {len(CASES)} cases (timm {manifest['timm']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
