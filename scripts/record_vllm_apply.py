"""Record vLLM's own rotation of q and k (the rotary class's ``forward_native`` on the CPU) into
tests/fixtures/apply/vllm.json.

Runs in a separate virtual environment with vLLM (never the service's), as
scripts/record_vllm_tables.py does::

    /work/venv-vllm/bin/python scripts/record_vllm_apply.py          # rewrite the fixture
    /work/venv-vllm/bin/python scripts/record_vllm_apply.py --check  # compare only

For each case ``get_rope`` builds the rotary class from the published config as the model's vLLM
file calls it (``is_neox_style`` as that file passes it; GPT-J's ``partial_rotary_factor``;
DeepSeek's renamed YaRN; Gemma 3's per-layer-type parameters; Qwen2-VL's M-RoPE), then
``forward_native(positions, query, key)`` rotates ``q (T, H·D)`` and ``k (T, H_kv·D)`` of the
closed-form values of tests/fixtures/apply/configs.py. The outputs are stored as float32 bytes
(base64), with the arguments. tests/lib/test_engines_rotation.py checks posenc's
``engine: "vllm"``, ``precision: "engine"`` against them bit for bit in the default lane.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "apply" / "vllm.json"

from tests.fixtures.apply.configs import COHERE, QWEN2_VL, QWEN_YARN, vector_values  # noqa: E402

HEADS, KV_HEADS = 2, 1

#: ``is_neox_style`` as each model's vLLM file passes it to ``get_rope``.
NEOX = {
    "llama": True,
    "gptj": False,
    "cohere": False,
    "qwen2": True,
    "phi3": True,
    "gemma3_text": True,
    "deepseek_v3": False,
    "qwen2_vl_text": True,
}


def _tables_script() -> Any:
    """scripts/record_vllm_tables.py, for its config and head helpers."""
    spec = importlib.util.spec_from_file_location("record_vllm_tables", ROOT / "scripts" /
                                                  "record_vllm_tables.py")  # fmt: skip
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases() -> list[dict[str, Any]]:
    """Every recorded case: name, config, positions, max_model_len, layer_type."""
    from posenc.facts.model_configs import model_config

    qwen = dict(model_config("qwen2.5-7b"), rope_scaling=dict(QWEN_YARN))
    phi = model_config("phi-3.5-mini")

    def case(name: str, config: dict[str, Any], positions: Any, **kw: Any) -> dict[str, Any]:
        return {"name": name, "config": config, "positions": positions,
                "max_model_len": kw.get("max_model_len"), "layer_type": kw.get("layer_type")}  # fmt: skip

    return [
        case("llama-3.1-8b", model_config("llama-3.1-8b"), [0, 1, 7, 9000]),
        case("gpt-j-6b", model_config("gpt-j-6b"), [0, 1, 7, 2000]),
        case("cohere", COHERE, [0, 1, 7, 8000]),
        case("qwen2.5-7b yarn", qwen, [0, 1, 40000, 90000]),
        case("phi-3.5-mini short", phi, [0, 5, 100, 4000], max_model_len=4096),
        case("phi-3.5-mini long", phi, [0, 5, 4096, 9000]),
        case("gemma-3-1b sliding", model_config("gemma-3-1b"), [0, 3, 500],
             layer_type="sliding_attention"),
        case("gemma-3-1b full", model_config("gemma-3-1b"), [0, 3, 500],
             layer_type="full_attention"),
        case("deepseek-v3", model_config("deepseek-v3"), [0, 3, 7000]),
        case("qwen2-vl", QWEN2_VL, [[0, 1, 2, 2], [0, 1, 3, 3], [0, 1, 3, 4]]),
    ]  # fmt: skip


def _b64(t: Any) -> str:
    return base64.b64encode(t.contiguous().numpy().astype("<f4").tobytes()).decode()


def record(case: dict[str, Any], helpers: Any) -> dict[str, Any]:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers import rotary_embedding
    from vllm.model_executor.layers.rotary_embedding import get_rope

    hf = helpers._hf_config(case["config"])
    rope_parameters = dict(getattr(hf, "rope_parameters", None) or {})  # gpt_j.py: getattr
    if case["layer_type"] is not None:  # gemma3.py: config.rope_parameters[layer_type]
        rope_parameters = dict(rope_parameters[case["layer_type"]])
    head_size, _scale = helpers._head_and_scale(hf, case["layer_type"], rope_parameters)
    if hf.model_type == "gptj":  # gpt_j.py
        rope_parameters["partial_rotary_factor"] = hf.rotary_dim / head_size
    max_model_len = case["max_model_len"] or hf.max_position_embeddings
    rotary_embedding._ROPE_DICT.clear()
    vcfg = VllmConfig()
    with set_current_vllm_config(vcfg):
        from types import SimpleNamespace

        vcfg.model_config = SimpleNamespace(max_model_len=max_model_len)  # type: ignore[assignment]
        rope = get_rope(
            head_size,
            max_position=hf.max_position_embeddings,
            is_neox_style=NEOX[hf.model_type],
            rope_parameters=rope_parameters,
            dtype=torch.float32,
        )
    positions = torch.tensor(case["positions"], dtype=torch.int64)
    t = positions.shape[-1]
    q = torch.tensor(vector_values(t * HEADS * head_size), dtype=torch.float32)
    k = torch.tensor(vector_values(t * KV_HEADS * head_size, start=1), dtype=torch.float32)
    # Phi3LongRoPEScaledRotaryEmbedding is a plain module: its forward is its native path
    forward = getattr(rope, "forward_native", rope.forward)
    # deepseek_v2.py's MLA hands its rope part as (T, H, D); the others take (T, H·D)
    three_d = type(rope).__name__.startswith("Deepseek")
    q_in = q.view(t, HEADS, head_size) if three_d else q.view(t, HEADS * head_size)
    k_in = k.view(t, KV_HEADS, head_size) if three_d else k.view(t, KV_HEADS * head_size)
    q_out, k_out = forward(positions, q_in.clone(), k_in.clone())
    return {
        "name": case["name"],
        "config": case["config"],
        "layer_type": case["layer_type"],
        "max_model_len": max_model_len,
        "vllm_class": type(rope).__name__,
        "is_neox_style": NEOX[hf.model_type],
        "head_size": head_size,
        "rotary_dim": int(rope.rotary_dim),
        "positions": case["positions"],
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "q": _b64(q_out),
        "k": _b64(k_out),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the fixture only")
    args = parser.parse_args()
    import torch
    import vllm

    helpers = _tables_script()
    out = {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "note": "recorded by scripts/record_vllm_apply.py: vLLM's own forward_native (CPU)",
        "cases": [record(c, helpers) for c in cases()],
    }
    if args.check:
        old = json.loads(FIXTURE.read_text())
        bad = [
            new["name"]
            for new, rec in zip(out["cases"], old["cases"], strict=True)
            if (new["q"], new["k"]) != (rec["q"], rec["k"])
        ]
        print("differ: " + ", ".join(bad) if bad else f"vLLM {vllm.__version__} matches")
        return 1 if bad else 0
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    head = {k: v for k, v in out.items() if k != "cases"}
    lines = ",\n".join(json.dumps(c) for c in out["cases"])
    FIXTURE.write_text(json.dumps(head)[:-1] + ', "cases": [\n' + lines + "\n]}\n")
    print(f"wrote {FIXTURE} ({len(out['cases'])} cases, vLLM {vllm.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
