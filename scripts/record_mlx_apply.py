"""Record MLX's own rotation of q and k (mlx-lm's rope module -> ``mx.fast.rope`` on the CPU)
into tests/fixtures/apply/mlx.json.

Runs in a separate virtual environment with MLX (never the service's), as
scripts/record_mlx_tables.py does::

    /work/venvs/mlx/bin/python scripts/record_mlx_apply.py          # rewrite the fixture
    /work/venvs/mlx/bin/python scripts/record_mlx_apply.py --check  # compare only

For each case the rope module is built as the model's mlx-lm file builds it:
``initialize_rope(dims, base, traditional, scaling_config, max_position_embeddings)`` (Llama,
Qwen2, Phi-3, Gemma 3, DeepSeek-V3's YaRN) or ``nn.RoPE(dims, traditional, base)`` (GPT-NeoX's
``rotary_pct`` of the head, Cohere's ``traditional=True``, GPT-J's ``rotary_dim``), with the
arguments written out below from the published configs. It rotates ``q (1, H, T, D)`` and
``k (1, H_kv, T, D)`` of the closed-form values of tests/fixtures/apply/configs.py in one call
at ``offset`` = the first of T consecutive positions, as mlx-lm's attention does. The outputs
are stored as float32 bytes (base64), ``(T, H, D)``. tests/lib/test_engines_rotation.py checks
posenc's ``engine: "mlx"``, ``precision: "engine"`` within 2 float32 ulp of each rotated pair's
magnitude.
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
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "apply" / "mlx.json"

from tests.fixtures.apply.configs import COHERE, QWEN_YARN, vector_values  # noqa: E402

HEADS, KV_HEADS, T = 2, 1, 4


def _quoted(preset: str) -> dict[str, Any]:
    """A published config quoted in posenc/facts/model_configs.py (pure Python: no torch here)."""
    spec = importlib.util.spec_from_file_location(
        "model_configs", ROOT / "posenc" / "facts" / "model_configs.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return dict(module.MODEL_CONFIGS[preset][1])


def cases() -> list[dict[str, Any]]:
    """name, config, first position, layer_type, head_dim and the module's arguments:
    ``(dims, base, traditional, scaling_config, max_position_embeddings)``."""
    llama = _quoted("llama-3.1-8b")
    phi = _quoted("phi-3.5-mini")
    deepseek = _quoted("deepseek-v3")
    qwen = dict(_quoted("qwen2.5-7b"), rope_scaling=dict(QWEN_YARN))
    phi_scaling = dict(phi["rope_scaling"], original_max_position_embeddings=4096)

    def case(name: str, config: dict[str, Any], start: int, head_dim: int, args: tuple[Any, ...],
             layer_type: str | None = None) -> dict[str, Any]:  # fmt: skip
        return {"name": name, "config": config, "start": start, "head_dim": head_dim,
                "args": list(args), "layer_type": layer_type}  # fmt: skip

    return [
        # llama.py: initialize_rope(head_dim, rope_theta, rope_traditional, rope_scaling, max)
        case("llama-3.1-8b", llama, 9000, 128,
             (128, 500000.0, False, llama["rope_scaling"], 131072)),
        # gpt_neox.py: nn.RoPE(int(head_dim * rotary_pct), traditional=False, base)
        case("pythia-1b", _quoted("pythia-1b"), 100, 256, (64, 10000.0, False, None, None)),
        # cohere.py: nn.RoPE(head_dim, traditional=True, base=rope_theta)
        case("cohere", COHERE, 5000, 128, (128, 8000000.0, True, None, None)),
        # qwen2.py: initialize_rope(head_dim, rope_theta, rope_traditional, rope_scaling, max)
        case("qwen2.5-7b yarn", qwen, 90000, 128,
             (128, 1000000.0, False, QWEN_YARN, 131072)),
        # phi3.py: SuScaledRoPE (longrope) over the whole head; short below 4096, long above
        case("phi-3.5-mini short", phi, 100, 96, (96, 10000.0, False, phi_scaling, 131072)),
        case("phi-3.5-mini long", phi, 9000, 96, (96, 10000.0, False, phi_scaling, 131072)),
        # gemma3_text.py: initialize_rope(head_dim, rope_local_base_freq, False) on sliding
        case("gemma-3-1b sliding", _quoted("gemma-3-1b"), 500, 256,
             (256, 10000.0, False, None, 32768), "sliding_attention"),
        case("gemma-3-1b full", _quoted("gemma-3-1b"), 500, 256,
             (256, 1000000.0, False, None, 32768), "full_attention"),
        # deepseek_v3.py: initialize_rope(qk_rope_head_dim, rope_theta, traditional=True, ...)
        case("deepseek-v3", deepseek, 7000, 64,
             (64, 10000.0, True, deepseek["rope_scaling"], 163840)),
    ]  # fmt: skip


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode()


def record(case: dict[str, Any]) -> dict[str, Any]:
    import mlx.core as mx
    from mlx_lm.models.rope_utils import initialize_rope

    dims, base, traditional, scaling, max_pos = case["args"]
    rope = initialize_rope(dims, base, traditional, scaling, max_pos)
    d = case["head_dim"]
    q = np.array(vector_values(T * HEADS * d), dtype=np.float32).reshape(T, HEADS, d)
    k = np.array(vector_values(T * KV_HEADS * d, start=1), dtype=np.float32).reshape(T, KV_HEADS, d)
    out = {}
    for name, x in (("q", q), ("k", k)):
        y = rope(mx.array(x.transpose(1, 0, 2)[None]), offset=case["start"])  # (1, H, T, D)
        out[name] = np.array(y)[0].transpose(1, 0, 2)  # (T, H, D)
    return {
        "name": case["name"],
        "config": case["config"],
        "layer_type": case["layer_type"],
        "module": type(rope).__name__,
        "args": case["args"],
        "traditional": bool(traditional),
        "head_size": d,
        "positions": list(range(case["start"], case["start"] + T)),
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "q": _b64(out["q"]),
        "k": _b64(out["k"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the fixture only")
    args = parser.parse_args()
    import mlx.core as mx

    out = {
        "mlx": mx.__version__,
        "note": "recorded by scripts/record_mlx_apply.py: mlx-lm's rope modules (CPU)",
        "cases": [record(c) for c in cases()],
    }
    if args.check:
        old = json.loads(FIXTURE.read_text())
        bad = [
            new["name"]
            for new, rec in zip(out["cases"], old["cases"], strict=True)
            if (new["q"], new["k"]) != (rec["q"], rec["k"])
        ]
        print("differ: " + ", ".join(bad) if bad else f"MLX {mx.__version__} matches")
        return 1 if bad else 0
    head = {k: v for k, v in out.items() if k != "cases"}
    lines = ",\n".join(json.dumps(c) for c in out["cases"])
    FIXTURE.write_text(json.dumps(head)[:-1] + ', "cases": [\n' + lines + "\n]}\n")
    print(f"wrote {FIXTURE} ({len(out['cases'])} cases, MLX {mx.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
