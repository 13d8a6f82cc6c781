"""Print docs/engines.md's side-by-side table: each engine's RoPE table against transformers'
exact one, for published configs, at positions 0 … 131,072.

    .venv/bin/python scripts/engines_table.py

Each cell is the largest |difference| of cos and sin per (position, frequency), magnitude
included, whatever the layouts (llama.cpp's normal mode interleaves). ``engine`` columns are
the engine's own float32 arithmetic (transformers and vLLM: bit for bit their modules and
caches; llama.cpp: ggml's, within 2 ulp of libggml; MLX: mx.fast.rope's, within 2 ulp);
``exact`` columns its rule in float64. vLLM's cache stops at its rows (max_model_len):
positions past it are left out of its column.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posenc.core.errors import PosencError  # noqa: E402
from posenc.facts.model_configs import model_config  # noqa: E402
from posenc.resolve import compute, resolve_fields  # noqa: E402
from posenc.rope_kinds.kind import ROPE  # noqa: E402

POSITIONS = list(range(0, 131_073, 64))  # 0, 64, …, 131,072
COLUMNS = (
    ("transformers", "engine"),
    ("vllm", "exact"),
    ("vllm", "engine"),
    ("llama.cpp", "exact"),
    ("llama.cpp", "engine"),
    ("mlx", "exact"),
    ("mlx", "engine"),
)


def _qwen25_yarn() -> dict[str, Any]:
    """Qwen2.5-7B-Instruct with the YaRN block its model card gives for 131,072 tokens."""
    config = model_config("qwen2.5-7b")
    config["rope_scaling"] = {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    }
    return config


ROWS: tuple[tuple[str, dict[str, Any], str | None], ...] = (
    ("Llama 3.1 8B (llama3)", model_config("llama-3.1-8b"), None),
    ("Qwen2.5 7B + YaRN x4", _qwen25_yarn(), None),
    ("Phi-3.5 mini (LongRoPE)", model_config("phi-3.5-mini"), None),
    ("DeepSeek-V3 (YaRN, MLA)", model_config("deepseek-v3"), None),
    ("gpt-oss 20B (YaRN)", model_config("gpt-oss-20b"), None),
    ("Gemma 3 4B (full_attention, linear)", model_config("gemma-3-4b"), "full_attention"),
    ("Qwen2.5-VL 7B (M-RoPE, text)", model_config("qwen2.5-vl-7b"), None),
)


def _half(fields: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    out = dict(compute(ROPE, fields))
    cos, sin = out["cos"], out["sin"]
    r = cos.shape[-1] // 2
    if fields["layout"] == "half":
        return cos[:, :r], sin[:, :r]
    return cos[:, 0::2], sin[:, 0::2]


def _cell(config: dict[str, Any], layer_type: str | None, engine: str, precision: str) -> str:
    given: dict[str, Any] = {"config": config, "positions": POSITIONS, "dtype": "float64"}
    if layer_type:
        given["layer_type"] = layer_type
    ref = _half(resolve_fields(ROPE, {**given, "engine": "transformers"}))
    if engine == "vllm":
        probe = resolve_fields(ROPE, {**given, "positions": [0], "engine": "vllm"})
        rows = ROPE.meta(probe)["vllm_rows"] or 2**53  # type: ignore[misc]  # None: no limit
        given["positions"] = [p for p in POSITIONS if p < rows] or [0]
        keep = len(given["positions"])
        ref = (ref[0][:keep], ref[1][:keep])
    try:
        got = _half(resolve_fields(ROPE, {**given, "engine": engine, "precision": precision}))
    except PosencError as exc:
        return "n/a" if "precision" in exc.message else f"n/a ({exc.message[:40]}…)"
    diff = max(float((got[0] - ref[0]).abs().max()), float((got[1] - ref[1]).abs().max()))
    return f"{diff:.2g}"


def main() -> None:
    head = " | ".join(f"{e} {p}" for e, p in COLUMNS)
    print(f"| config | {head} |")
    print("| --- |" + " --- |" * len(COLUMNS))
    for name, config, layer_type in ROWS:
        cells = " | ".join(_cell(config, layer_type, e, p) for e, p in COLUMNS)
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
