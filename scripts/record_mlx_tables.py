"""Record MLX's own RoPE (mlx-lm's ``initialize_rope`` -> ``nn.RoPE`` -> ``mx.fast.rope`` on the
CPU) into tests/fixtures/mlx/tables.json.

Runs in a separate virtual environment with MLX (never the service's)::

    python -m venv /work/venvs/mlx
    /work/venvs/mlx/bin/pip install numpy 'mlx[cpu]' mlx-lm
    /work/venvs/mlx/bin/python scripts/record_mlx_tables.py          # rewrite the fixture
    /work/venvs/mlx/bin/python scripts/record_mlx_tables.py --check  # compare only

For each case, ``initialize_rope(dims, base, traditional, scaling_config,
max_position_embeddings)`` builds the module as the model's mlx-lm file does; it rotates a
one-head input whose rotated pairs are ``(1, 0)`` at ``offset = p`` (one position per call), so
its output holds cos and sin exactly. Stored as float32 bytes (base64) per position, with the
arguments. ``tests/lib/test_mlx.py`` checks posenc's ``engine: "mlx"``, ``precision: "engine"``
within 2 float32 ulp in the default test lane.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "mlx" / "tables.json"

POSITIONS = (*range(16), 100, 1000, 4095, 4096, 8191, 8192, 16384, 32767, 65536, 100_000,
             131_071, 131_072, 262_143, 1_000_000)  # fmt: skip

#: (name, dims, base, traditional, scaling_config or None)
CASES: tuple[tuple[str, int, float, bool, dict[str, Any] | None], ...] = (
    ("llama-2-7b", 128, 10000.0, False, None),
    ("qwen2.5-7b", 128, 1000000.0, False, None),
    ("llama-3.1-base", 128, 500000.0, False, None),
    ("phi-2", 32, 10000.0, False, None),
    ("glm-4-9b traditional", 64, 10000.0, True, None),
    (
        "gemma-3-4b full_attention linear 8",
        256,
        1000000.0,
        False,
        {"type": "linear", "factor": 8.0},
    ),
    ("linear 4 traditional", 64, 10000.0, True, {"rope_type": "linear", "factor": 4.0}),
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


def record() -> dict[str, Any]:
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.models.rope_utils import initialize_rope

    cases = []
    for name, dims, base, traditional, scaling in CASES:
        rope = initialize_rope(dims, base, traditional, scaling, 131072)
        rows = [mlx_cos_sin(rope, dims, traditional, p) for p in POSITIONS]
        cos = np.stack([r[0] for r in rows])
        sin = np.stack([r[1] for r in rows])
        cases.append(
            {
                "name": name,
                "dims": dims,
                "base": base,
                "traditional": traditional,
                "scaling": scaling,
                "cos": _b64(cos),
                "sin": _b64(sin),
            }
        )
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
