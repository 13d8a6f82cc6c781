"""Record diffusers' own position tables for published configs into tests/fixtures/diffusers/.

Runs in a separate virtual environment that has diffusers (never the service's: diffusers stays
out of its dependencies and its lock)::

    python3 -m venv /work/venvs/diffusers
    /work/venvs/diffusers/bin/pip install torch==2.13.0 diffusers transformers
    /work/venvs/diffusers/bin/python scripts/record_diffusers_tables.py          # rewrite
    /work/venvs/diffusers/bin/python scripts/record_diffusers_tables.py --check  # compare only

Each case builds the model's own positional module from a published ``transformer/config.json``
(``posenc.diffusion.published``; no weights) and calls it as the transformer or pipeline does:

- FLUX: ``FluxPosEmbed(theta=10000, axes_dims_rope)`` over ``cat(text ids, FluxPipeline.
  _prepare_latent_image_ids(...))``;
- Wan: ``WanRotaryPosEmbed(attention_head_dim, patch_size, rope_max_seq_len)`` on a latent;
- HunyuanVideo: ``HunyuanVideoRotaryPosEmbed(patch_size, patch_size_t, rope_axes_dim,
  rope_theta)`` on a latent (video rows; the text rows that follow are not rotated);
- Qwen-Image: ``QwenEmbedRope(10000, axes_dims_rope, scale_rope=True)`` (text rows first, as
  the joint attention concatenates them);
- CogVideoX: ``CogVideoXPipeline._prepare_rotary_positional_embeddings`` (video rows);
- LTX-Video: ``LTXVideoRotaryPosEmbed`` as ``LTXVideoTransformer3DModel`` builds it, with the
  pipeline's ``rope_interpolation_scale``;
- SD3, PixArt, DiT: ``PatchEmbed`` built as the transformer builds it, its projection zeroed, run
  on a zero latent of the grid's size: its output is then the table its forward adds;
- CogVideoX-2b: ``CogVideoXPatchEmbed._get_positional_embeddings`` (video rows).

What is recorded per case: the request posenc answers it with, some rows of each table as
diffusers returns them (float32, base64 little-endian) and, for the sin-cos tables, diffusers'
``get_2d_sincos_pos_embed_from_grid`` / ``get_1d_sincos_pos_embed_from_grid`` evaluated on float64
coordinates (float64: the formula without diffusers' float32 coordinates).
``tests/lib/test_diffusion_fixtures.py`` checks posenc against them in the default test lane,
and ``tests/lib/test_diffusion_live.py`` runs :func:`reference` whole where diffusers imports.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "diffusers" / "tables.json"

#: ``(name, endpoint, request)``: what posenc is asked. ``model`` is a published checkpoint.
CASES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "flux 1024px",
        "diffusion_rope",
        {"model": "FLUX.1-dev", "height": 64, "width": 64, "text_len": 512},
    ),
    (
        "flux small",
        "diffusion_rope",
        {"model": "FLUX.1-dev", "height": 3, "width": 5, "text_len": 2},
    ),
    (
        "wan2.1 480p 81f",
        "diffusion_rope",
        {"model": "Wan2.1-T2V-14B", "frames": 21, "height": 30, "width": 52},
    ),
    (
        "wan2.2 ti2v 720p",
        "diffusion_rope",
        {"model": "Wan2.2-TI2V-5B", "frames": 31, "height": 22, "width": 40},
    ),
    (
        "hunyuan-video 720p",
        "diffusion_rope",
        {"model": "HunyuanVideo", "frames": 33, "height": 45, "width": 80, "text_len": 256},
    ),
    (
        "qwen-image 1024px",
        "diffusion_rope",
        {"model": "Qwen-Image", "height": 64, "width": 64, "text_len": 77},
    ),
    (
        "qwen-image odd",
        "diffusion_rope",
        {"model": "Qwen-Image", "frames": 2, "height": 37, "width": 53, "text_len": 5},
    ),
    (
        "cogvideox-5b base",
        "diffusion_rope",
        {"model": "CogVideoX-5b", "frames": 13, "height": 30, "width": 45, "text_len": 226},
    ),
    (
        "cogvideox-5b cropped",
        "diffusion_rope",
        {"model": "CogVideoX-5b", "frames": 7, "height": 40, "width": 40, "text_len": 3},
    ),
    (
        "cogvideox1.5-5b",
        "diffusion_rope",
        {"model": "CogVideoX1.5-5B", "frames": 11, "height": 48, "width": 85, "text_len": 226},
    ),
    (
        "ltx-video 480p",
        "diffusion_rope",
        {"model": "LTX-Video", "frames": 21, "height": 15, "width": 22},
    ),
    (
        "ltx-video 24fps",
        "diffusion_rope",
        {
            "model": "LTX-Video",
            "frames": 5,
            "height": 4,
            "width": 6,
            "rope_interpolation_scale": [8 / 24, 32.0, 32.0],
        },
    ),
    (
        "ltx-video 0.9.7",
        "diffusion_rope",
        {"model": "LTX-Video-0.9.7", "frames": 2, "height": 3, "width": 4},
    ),
    (
        "sd3.5-large 1024px",
        "sincos_2d",
        {"model": "stable-diffusion-3.5-large", "height": 64, "width": 64},
    ),
    (
        "sd3.5-large cropped",
        "sincos_2d",
        {"model": "stable-diffusion-3.5-large", "height": 40, "width": 96},
    ),
    ("sd3-medium", "sincos_2d", {"model": "stable-diffusion-3-medium", "height": 96, "width": 64}),
    (
        "pixart-sigma 1024px",
        "sincos_2d",
        {"model": "PixArt-Sigma-XL-2-1024-MS", "height": 64, "width": 64},
    ),
    (
        "pixart-sigma wide",
        "sincos_2d",
        {"model": "PixArt-Sigma-XL-2-1024-MS", "height": 48, "width": 80},
    ),
    ("dit 256", "sincos_2d", {"model": "DiT-XL-2-256", "height": 16, "width": 16}),
    ("dit other grid", "sincos_2d", {"model": "DiT-XL-2-256", "height": 12, "width": 20}),
    (
        "cogvideox-2b",
        "sincos_2d",
        {"model": "CogVideoX-2b", "frames": 13, "height": 30, "width": 45},
    ),
)


def _config(request: dict[str, Any]) -> dict[str, Any]:
    from posenc.diffusion.published import PUBLISHED

    return dict(PUBLISHED[request["model"]][1])


def _flux(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    import torch
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed
    from diffusers.pipelines.flux.pipeline_flux import FluxPipeline

    axes = list(config.get("axes_dims_rope", (16, 56, 56)))
    img = FluxPipeline._prepare_latent_image_ids(
        1, request["height"], request["width"], "cpu", torch.float32
    )
    ids = torch.cat([torch.zeros(request.get("text_len", 0), 3), img])
    cos, sin = FluxPosEmbed(theta=10000, axes_dim=axes)(ids)
    return {"cos": cos, "sin": sin, "ids": ids}


def _latent(request: dict[str, Any], pt: int, p: int) -> Any:
    import torch

    f, h, w = request.get("frames", 1), request["height"], request["width"]
    return torch.zeros(1, 1, f * pt, h * p, w * p)


def _wan(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    patch = tuple(config["patch_size"])
    rope = WanRotaryPosEmbed(
        config["attention_head_dim"], patch, config.get("rope_max_seq_len", 1024)
    )
    cos, sin = rope(_latent(request, patch[0], patch[1]))
    return {"cos": cos[0, :, 0], "sin": sin[0, :, 0]}


def _hunyuan(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed

    p, pt = config["patch_size"], config["patch_size_t"]
    rope = HunyuanVideoRotaryPosEmbed(p, pt, list(config["rope_axes_dim"]), config["rope_theta"])
    cos, sin = rope(_latent(request, pt, p))
    return {"cos": cos, "sin": sin}  # video rows; text rows follow, not rotated


def _qwen(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    import torch
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

    rope = QwenEmbedRope(theta=10000, axes_dim=list(config["axes_dims_rope"]), scale_rope=True)
    fhw = (request.get("frames", 1), request["height"], request["width"])
    vid, txt = rope([fhw], torch.device("cpu"), max_txt_seq_len=request.get("text_len", 0))
    freqs = torch.cat([txt, vid])  # (N, R/2) complex: text first, as the joint attention
    return {
        "cos": freqs.real.repeat_interleave(2, dim=1),
        "sin": freqs.imag.repeat_interleave(2, dim=1),
    }


def _cogvideox(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline

    keys = ("patch_size", "patch_size_t", "sample_height", "sample_width", "attention_head_dim")
    transformer = SimpleNamespace(config=SimpleNamespace(**{k: config.get(k) for k in keys}))
    pipe = SimpleNamespace(vae_scale_factor_spatial=8, transformer=transformer)
    p, pt = config["patch_size"], config.get("patch_size_t") or 1
    cos, sin = CogVideoXPipeline._prepare_rotary_positional_embeddings(
        pipe,  # type: ignore[arg-type]
        request["height"] * 8 * p,
        request["width"] * 8 * p,
        request["frames"] * pt,
        "cpu",
    )
    return {"cos": cos, "sin": sin}  # video rows; the text before them is not rotated


def _ltx(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    import torch
    from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed

    dim = config["num_attention_heads"] * config["attention_head_dim"]
    rope = LTXVideoRotaryPosEmbed(
        dim=dim,
        base_num_frames=20,
        base_height=2048,
        base_width=2048,
        patch_size=config["patch_size"],
        patch_size_t=config["patch_size_t"],
        theta=10000.0,
    )
    scale = request.get("rope_interpolation_scale") or (8 / 25, 32, 32)  # LTXPipeline at 25 fps
    f, h, w = request["frames"], request["height"], request["width"]
    cos, sin = rope(torch.zeros(1, f * h * w, 1), f, h, w, rope_interpolation_scale=tuple(scale))
    return {"cos": cos[0], "sin": sin[0]}


def _zero_patch_embed_output(embed: Any, request: dict[str, Any], patch: int) -> Any:
    """A PatchEmbed's own forward on a zero latent with its projection zeroed: the table."""
    import torch

    with torch.no_grad():
        embed.proj.weight.zero_()
        embed.proj.bias.zero_()
        latent = torch.zeros(1, 1, request["height"] * patch, request["width"] * patch)
        return embed(latent)[0]


def _sd3(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    from diffusers.models.embeddings import PatchEmbed

    p = config["patch_size"]
    embed = PatchEmbed(
        height=config["sample_size"],
        width=config["sample_size"],
        patch_size=p,
        in_channels=1,
        embed_dim=config["num_attention_heads"] * config["attention_head_dim"],
        pos_embed_max_size=config["pos_embed_max_size"],
    )
    return {"pos_embed": _zero_patch_embed_output(embed, request, p)}


def _patched(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    from diffusers.models.embeddings import PatchEmbed

    p, sample = config["patch_size"], config["sample_size"]
    scale = config.get("interpolation_scale")
    if scale is None:
        scale = max(sample // 64, 1)  # Transformer2DModel._init_patched_inputs
    embed = PatchEmbed(
        height=sample,
        width=sample,
        patch_size=p,
        in_channels=1,
        embed_dim=config["num_attention_heads"] * config["attention_head_dim"],
        interpolation_scale=scale,
    )
    return {"pos_embed": _zero_patch_embed_output(embed, request, p)}


def _cogvideox_sincos(request: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    from diffusers.models.embeddings import CogVideoXPatchEmbed

    p = config["patch_size"]
    ratio = config["temporal_compression_ratio"]
    embed = CogVideoXPatchEmbed(
        patch_size=p,
        embed_dim=config["num_attention_heads"] * config["attention_head_dim"],
        sample_height=config["sample_height"],
        sample_width=config["sample_width"],
        sample_frames=config["sample_frames"],
        temporal_compression_ratio=ratio,
        max_text_seq_length=config["max_text_seq_length"],
        spatial_interpolation_scale=config["spatial_interpolation_scale"],
        temporal_interpolation_scale=config["temporal_interpolation_scale"],
        use_positional_embeddings=True,
        use_learned_positional_embeddings=False,
    )
    table = embed._get_positional_embeddings(
        request["height"] * p, request["width"] * p, (request["frames"] - 1) * ratio + 1
    )
    return {"pos_embed": table[0, config["max_text_seq_length"] :].float()}


_BUILDERS = {
    "FluxTransformer2DModel": _flux,
    "WanTransformer3DModel": _wan,
    "HunyuanVideoTransformer3DModel": _hunyuan,
    "QwenImageTransformer2DModel": _qwen,
    "LTXVideoTransformer3DModel": _ltx,
    "SD3Transformer2DModel": _sd3,
    "Transformer2DModel": _patched,
}


def reference(endpoint: str, request: dict[str, Any]) -> dict[str, Any]:
    """diffusers' own tables for a case, whole (float32 tensors as diffusers returns them)."""
    config = _config(request)
    name = config["_class_name"]
    if name == "CogVideoXTransformer3DModel":
        return (_cogvideox if endpoint == "diffusion_rope" else _cogvideox_sincos)(request, config)
    return _BUILDERS[name](request, config)


def sincos_float64(request: dict[str, Any]) -> Any:
    """diffusers' sin-cos functions on float64 coordinates (the formula in float64), or None."""
    import torch
    from diffusers.models.embeddings import (
        get_1d_sincos_pos_embed_from_grid,
        get_2d_sincos_pos_embed_from_grid,
    )

    from posenc.diffusion import SINCOS_2D, sincos_grid
    from posenc.resolve import resolve_fields

    _reading, grid = sincos_grid(resolve_fields(SINCOS_2D, request))
    f, h, w = grid.frames, grid.height, grid.width
    n = grid.numbers
    if grid.model == "sd3":
        most, base = n["pos_embed_max_size"], n["base_size"]
        rows = (torch.arange(h, dtype=torch.float64) + n["top"]) / (most / base)
        cols = (torch.arange(w, dtype=torch.float64) + n["left"]) / (most / base)
    elif grid.model in ("pixart", "dit"):
        base, scale = n["base_size"], n["interpolation_scale"]
        rows = torch.arange(h, dtype=torch.float64) / (h / base) / scale
        cols = torch.arange(w, dtype=torch.float64) / (w / base) / scale
    else:
        s = n["spatial_interpolation_scale"]
        rows = torch.arange(h, dtype=torch.float64) / s
        cols = torch.arange(w, dtype=torch.float64) / s
    mesh = torch.stack(torch.meshgrid(cols, rows, indexing="xy"), dim=0).reshape(2, 1, w, h)
    spatial_dim = grid.dim - grid.temporal
    spatial = get_2d_sincos_pos_embed_from_grid(spatial_dim, mesh)  # (H*W, D or 3D/4)
    if not grid.temporal:
        return spatial
    frames = torch.arange(f, dtype=torch.float64) / n["temporal_interpolation_scale"]
    temporal = get_1d_sincos_pos_embed_from_grid(grid.temporal, frames)  # (F, D/4)
    return torch.cat(
        [temporal[:, None, :].expand(-1, h * w, -1), spatial[None].expand(f, -1, -1)], dim=-1
    ).reshape(f * h * w, -1)


def sample_rows(n: int, boundary: int = 0) -> list[int]:
    """The rows recorded of an ``n``-row table: its ends, its middle and the two rows either
    side of ``boundary`` (where text meets video), kept few: a table row is up to 4096 wide."""
    picks = {0, n // 2, n - 1}
    if boundary:
        picks |= {boundary - 1, boundary}
    return sorted(r for r in picks if 0 <= r < n)


def encode(values: Any) -> str:
    """A tensor's values as base64 of little-endian bytes (float32 or float64)."""
    array = values.detach().contiguous().numpy()
    return base64.b64encode(array.astype(array.dtype.newbyteorder("<")).tobytes()).decode()


def record(name: str, endpoint: str, request: dict[str, Any]) -> dict[str, Any]:
    import diffusers

    tables = reference(endpoint, request)
    out: dict[str, Any] = {
        "name": name,
        "endpoint": endpoint,
        "request": request,
        "diffusers": diffusers.__version__,
        "tables": {},
    }
    boundary = (
        request.get("text_len", 0)
        if tables.get("ids") is not None or "Qwen" in request["model"]
        else 0
    )
    for tensor_name, tensor in tables.items():
        rows = sample_rows(tensor.shape[0], boundary)
        out["tables"][tensor_name] = {
            "shape": list(tensor.shape),
            "rows": rows,
            "float32": encode(tensor[rows].float()),
        }
    if endpoint == "sincos_2d":
        full = sincos_float64(request)
        rows = out["tables"]["pos_embed"]["rows"]
        out["tables"]["pos_embed"]["float64"] = encode(full[rows])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the fixture only")
    args = parser.parse_args()
    recorded = {"cases": [record(*case) for case in CASES]}
    text = json.dumps(recorded, indent=1) + "\n"
    if args.check:
        same = FIXTURE.read_text() == text
        print("fixture up to date" if same else "fixture differs")
        return 0 if same else 1
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(text)
    print(f"wrote {FIXTURE} ({len(CASES)} cases)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
