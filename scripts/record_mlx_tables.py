"""Record MLX's own RoPE (mlx-lm's ``initialize_rope`` -> its module -> ``mx.fast.rope`` on the
CPU) into tests/fixtures/mlx/tables.json.

Runs in a separate virtual environment with MLX (never the service's)::

    python -m venv /work/venvs/mlx
    /work/venvs/mlx/bin/pip install numpy 'mlx[cpu]' mlx-lm
    /work/venvs/mlx/bin/python scripts/record_mlx_tables.py          # rewrite the fixture
    /work/venvs/mlx/bin/python scripts/record_mlx_tables.py --check  # compare only

For each case, ``initialize_rope(dims, base, traditional, scaling_config,
max_position_embeddings)`` builds the module as the model's mlx-lm file does (every type it
dispatches: default, linear, llama3, yarn, longrope, dynamic, proportional); it rotates a
one-head input whose rotated pairs are ``(1, 0)`` at ``offset = p`` (one position per call), so
its output holds cos and sin exactly, times the module's own magnitude (YaRN's mscale,
LongRoPE's scale). Dynamic NTK's base depends on the call's length, so its cases rotate one
whole sequence of ``seq_len`` positions from offset 0 and keep the rows at the case's
positions. Stored as float32 bytes (base64) per position, with the arguments, the module's
``freqs`` (float32 bytes) and the magnitude it multiplies its input by. ``tests/lib/test_rope_mlx.py`` checks posenc's ``engine: "mlx"``, ``precision: "engine"``
within 2 float32 ulp in the default test lane.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "mlx" / "tables.json"

POSITIONS = (
    *range(16),
    100,
    1000,
    4095,
    4096,
    8191,
    8192,
    16384,
    32767,
    65536,
    100_000,
    131_071,
    131_072,
    262_143,
    1_000_000,
)

#: Positions of the dynamic NTK cases: rows of one call over ``seq_len`` positions.
DYNAMIC_POSITIONS = (*range(8), *(p for p in POSITIONS[16:] if p <= 131_072))


def _quoted(preset: str) -> dict[str, Any]:
    """A published config quoted in posenc/facts/model_configs.py (pure Python: no torch here)."""
    spec = importlib.util.spec_from_file_location(
        "model_configs", ROOT / "posenc" / "facts" / "model_configs.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return dict(module.MODEL_CONFIGS[preset][1])


def _phi35() -> dict[str, Any]:
    scaling = _quoted("phi-3.5-mini")["rope_scaling"]
    return {
        "type": "longrope",
        "short_factor": list(scaling["short_factor"]),
        "long_factor": list(scaling["long_factor"]),
        "original_max_position_embeddings": 4096,
    }


#: (name, dims, base, traditional, scaling_config or None, max_position_embeddings, seq_len):
#: ``seq_len`` None is one position per call; else one call over that many positions.
CASES: tuple[tuple[str, int, float, bool, dict[str, Any] | None, int, int | None], ...] = (
    ("llama-2-7b", 128, 10000.0, False, None, 131072, None),
    ("qwen2.5-7b", 128, 1000000.0, False, None, 131072, None),
    ("llama-3.1-base", 128, 500000.0, False, None, 131072, None),
    ("phi-2", 32, 10000.0, False, None, 131072, None),
    ("glm-4-9b traditional", 64, 10000.0, True, None, 131072, None),
    (
        "gemma-3-4b full_attention linear 8",
        256,
        1000000.0,
        False,
        {"type": "linear", "factor": 8.0},
        131072,
        None,
    ),
    (
        "linear 4 traditional",
        64,
        10000.0,
        True,
        {"rope_type": "linear", "factor": 4.0},
        131072,
        None,
    ),
    (
        "llama-3.1-8b llama3",
        128,
        500000.0,
        False,
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        131072,
        None,
    ),
    (
        "llama-3.2-1b llama3 32",
        64,
        500000.0,
        False,
        {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        131072,
        None,
    ),
    (
        "qwen2.5-7b yarn 4",
        128,
        1000000.0,
        False,
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        32768,
        None,
    ),
    (
        "deepseek-v3 yarn 40 traditional",
        64,
        10000.0,
        True,
        {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        163840,
        None,
    ),
    (
        "gpt-oss-20b yarn 32",
        64,
        150000.0,
        False,
        {
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "original_max_position_embeddings": 4096,
            "truncate": False,
        },
        131072,
        None,
    ),
    ("phi-3.5-mini longrope", 96, 10000.0, False, _phi35(), 131072, None),
    (
        "gemma-4 proportional 0.25",
        256,
        1000000.0,
        False,
        {"rope_type": "proportional", "partial_rotary_factor": 0.25, "factor": 1.0},
        131072,
        None,
    ),
    (
        "proportional 0.5 factor 8 traditional",
        128,
        10000.0,
        True,
        {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 8.0},
        131072,
        None,
    ),
    ("dynamic 2 long", 128, 10000.0, False, {"type": "dynamic", "factor": 2.0}, 4096, 131073),
    ("dynamic 2 short", 128, 10000.0, False, {"type": "dynamic", "factor": 2.0}, 4096, 4097),
)


def mlx_cos_sin(rope: Any, dims: int, traditional: bool, p: int) -> tuple[np.ndarray, np.ndarray]:
    import mlx.core as mx

    x = np.zeros((1, 1, 1, dims), dtype=np.float32)
    if traditional:
        x[..., 0::2] = 1.0
    else:
        x[..., : dims // 2] = 1.0
    y = np.array(rope(mx.array(x), offset=p))[0, 0, 0]
    if traditional:
        return y[0::2], y[1::2]
    return y[: dims // 2], y[dims // 2 :]


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode()


def _whole(
    rope: Any, dims: int, traditional: bool, seq_len: int, keep: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """One call over positions ``0 … seq_len − 1`` (dynamic NTK sees ``seq_len``); the rows
    at ``keep``."""
    import mlx.core as mx

    x = np.zeros((1, 1, seq_len, dims), dtype=np.float32)
    if traditional:
        x[..., 0::2] = 1.0
    else:
        x[..., : dims // 2] = 1.0
    y = np.array(rope(mx.array(x), offset=0))[0, 0][keep]
    if traditional:
        return y[:, 0::2], y[:, 1::2]
    return y[:, : dims // 2], y[:, dims // 2 :]


def record() -> dict[str, Any]:
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.models.rope_utils import initialize_rope

    cases = []
    for name, dims, base, traditional, scaling, mpe, seq_len in CASES:
        rope = initialize_rope(dims, base, traditional, scaling, mpe)
        case: dict[str, Any] = {
            "name": name,
            "dims": dims,
            "base": base,
            "traditional": traditional,
            "scaling": scaling,
            "max_position_embeddings": mpe,
        }
        if seq_len is None:
            rows = [mlx_cos_sin(rope, dims, traditional, p) for p in POSITIONS]
            cos = np.stack([r[0] for r in rows])
            sin = np.stack([r[1] for r in rows])
        else:
            keep = [p for p in DYNAMIC_POSITIONS if p < seq_len]
            cos, sin = _whole(rope, dims, traditional, seq_len, keep)
            case.update(seq_len=seq_len, positions=keep)
        freqs = getattr(rope, "_freqs", None)  # what the module passes mx.fast.rope
        if freqs is not None:
            case["freqs"] = _b64(np.array(freqs))
        case["magnitude"] = float(getattr(rope, "mscale", getattr(rope, "_scale", 1.0)))
        cases.append({**case, "cos": _b64(cos), "sin": _b64(sin)})
    return {
        "mlx": mx.__version__,
        "mlx_lm": mlx_lm.__version__,
        "positions": list(POSITIONS),
        "cases": cases,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    args = parser.parse_args()
    data = record()
    if args.check:
        same = json.loads(FIXTURE.read_text())["cases"] == data["cases"]
        print("fixture matches" if same else "fixture differs")
        return 0 if same else 1
    FIXTURE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(data['cases'])} cases to {FIXTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
