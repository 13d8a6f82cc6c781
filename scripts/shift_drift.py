"""Measure how far each engine's own key shift drifts from the exact rotation, and draw it.

For Llama 3.1 8B (θ = 500000 with its llama3 factors) and a plain θ = 10000 model, seeded keys
(8 tokens, 8 heads of 128) are moved by ``steps`` shifts of ``delta`` (1, 10 and 100 steps, for
total distances up to 131,072) with ``POST /v1/rope/shift``'s library
(:data:`posenc.rope_kinds.shift.ROPE_SHIFT`, ``precision: "engine"``):

- llama.cpp: its K-shift, libggml's float32 ``ggml_rope_ext`` at the delta, again and again;
- transformers, vLLM: their float32 rotation by their float32 table at the delta (neither has a
  shift of its own; this is what calling their apply at the delta does).

``meta.drift`` is the largest |difference| from the key rotated exactly (float64) by
``θ·(to − from)``. Writes docs/shift_drift.png (|drift| against the distance moved, log scale)
and prints the Markdown table of docs/shift.md::

    PYTHONPATH=. python scripts/shift_drift.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posenc.core.difference_plot import difference_png  # noqa: E402
from posenc.resolve import compute, resolve_fields  # noqa: E402
from posenc.rope_kinds.shift import ROPE_SHIFT  # noqa: E402

PNG = ROOT / "docs" / "shift_drift.png"
ENGINES = ("llama.cpp", "transformers", "vllm")
STEPS = (1, 10, 100)
#: Total distances moved (|to − from|), each a multiple of 100 so that every step count divides.
DISTANCES = (100, *(int(d) for d in np.linspace(1000, 131_000, 27).round(-2)))
#: The distances the table gives.
COLUMNS = (100, 1000, 66_000, 131_000)
MODELS = {"llama-3.1-8b": {"preset": "llama-3.1-8b"}, "plain θ=10000": {"head_dim": 128}}


def drift(model: dict, engine: str, steps: int, distance: int) -> float:
    """``meta.drift`` of 8 seeded keys at 131,072 + i moved back by ``distance``."""
    fields = {
        **model,
        "positions": [131_072 + i for i in range(8)],
        "delta": -(distance // steps),
        "steps": steps,
        "seed": 0,
        "num_heads": 8,
        "engine": engine,
        "precision": "engine",
    }
    if engine == "vllm":
        fields["max_model_len"] = 131_080
    p = resolve_fields(ROPE_SHIFT, fields)
    compute(ROPE_SHIFT, p)
    return float(ROPE_SHIFT.make_meta(p)["drift"])


def main() -> int:
    rows = []
    pairs = []
    for model_name, model in MODELS.items():
        for engine in ENGINES:
            for steps in STEPS:
                values = np.array([drift(model, engine, steps, d) for d in DISTANCES])
                if model_name == "llama-3.1-8b":
                    pairs.append((f"{engine} x{steps}", values))
                rows.append((model_name, engine, steps, [values[DISTANCES.index(c)] for c in COLUMNS]))  # fmt: skip
    PNG.write_bytes(
        difference_png(
            np.asarray(DISTANCES),
            pairs,
            title="Llama 3.1 8B: key shift drift from the exact rotation, by distance moved",
        )
    )
    print("| model | engine | shifts | " + " | ".join(f"moved {c:,}" for c in COLUMNS) + " |")
    print("| --- | --- | --- |" + " --- |" * len(COLUMNS))
    for model_name, engine, steps, values in rows:
        cells = " | ".join(f"{v:.1e}" for v in values)
        print(f"| {model_name} | {engine} | {steps} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
