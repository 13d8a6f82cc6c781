"""``precision: "engine"`` for transformers: bit for bit the rotary module's own output.

For every RoPE preset (:mod:`posenc.readers.presets`, from the configs quoted in
:mod:`posenc.facts.model_configs`), transformers 5 builds the model's own rotary embedding module from
the same config (no weights) and runs its ``forward`` on CPU at positions up to 131,072; the rope
kind's tables with ``precision: "engine"`` must equal its cos and sin exactly (``torch.equal``),
in the layout the model's attention applies them. The exact tables (the default) are checked to
differ there, so the test can tell the two apart.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

from posenc.engines import ENGINES
from posenc.facts.model_configs import model_config
from posenc.readers.hf.positions import read_positions
from posenc.readers.presets import PRESETS
from posenc.resolve import compute, resolve_fields
from posenc.rope.precision import transformers_cos_sin
from posenc.rope.scaling import RopeScaling
from posenc.rope_kinds.kind import ROPE

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig  # noqa: E402

#: Positions 0 … 2047, then every 61st up to 131,072 (float32 angles drift most out there).
POSITIONS = torch.cat(
    (torch.arange(2048), torch.arange(2048, 131_073, 61), torch.tensor([131_072]))
)

# text model_type -> (modeling module, rotary class)
ROTARY = {
    "llama": ("llama", "LlamaRotaryEmbedding"),
    "llama4_text": ("llama4", "Llama4TextRotaryEmbedding"),
    "mistral": ("mistral", "MistralRotaryEmbedding"),
    "mixtral": ("mixtral", "MixtralRotaryEmbedding"),
    "ministral3": ("ministral3", "Ministral3RotaryEmbedding"),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding"),
    "qwen3": ("qwen3", "Qwen3RotaryEmbedding"),
    "qwen2_5_vl_text": ("qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding"),
    "qwen3_vl_text": ("qwen3_vl", "Qwen3VLTextRotaryEmbedding"),
    "gemma2": ("gemma2", "Gemma2RotaryEmbedding"),
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding"),
    "phi": ("phi", "PhiRotaryEmbedding"),
    "phi3": ("phi3", "Phi3RotaryEmbedding"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding"),
    "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding"),
    "olmo2": ("olmo2", "Olmo2RotaryEmbedding"),
    "glm4": ("glm4", "Glm4RotaryEmbedding"),
    "falcon": ("falcon", "FalconRotaryEmbedding"),
    "gpt_oss": ("gpt_oss", "GptOssRotaryEmbedding"),
}


def _modeling(name: str):  # type: ignore[no-untyped-def]
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _module_tables(config: dict, layer_type: str | None, pos: torch.Tensor):  # type: ignore[no-untyped-def]
    """The model's own rotary module's (cos, sin) at ``pos``, as (T, R) in the layout its
    attention applies them (half, or interleaved pairs)."""
    tc = AutoConfig.for_model(**config).get_text_config()
    mt = tc.model_type
    if mt == "gptj":  # a buffer of create_sinusoidal_positions rows, split [sin | cos]
        table = _modeling("gptj").create_sinusoidal_positions(int(pos.max()) + 1, tc.rotary_dim)
        sin, cos = torch.chunk(table[pos], 2, dim=-1)
        return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    mod, cls = ROTARY[mt]
    rot = getattr(_modeling(mod), cls)(config=tc)
    x = torch.zeros(1, dtype=torch.float32)
    if mt == "llama4_text":
        cis = rot(x, pos[None])[0]  # (T, R/2) complex
        return cis.real.repeat_interleave(2, -1), cis.imag.repeat_interleave(2, -1)
    if mt in ("qwen2_5_vl_text", "qwen3_vl_text"):
        cos, sin = rot(x, pos[None, None].expand(3, 1, -1))
    elif layer_type is not None:
        cos, sin = rot(x, pos[None], layer_type)
    else:
        cos, sin = rot(x, pos[None])
    cos, sin = cos[0], sin[0]
    if mt == "gpt_oss":  # returns the half, applied to [x1 | x2]
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    if mt in ("glm4", "deepseek_v3"):  # their attention interleaves the half table
        half = cos.shape[-1] // 2
        cos, sin = cos[:, :half].repeat_interleave(2, -1), sin[:, :half].repeat_interleave(2, -1)
    return cos, sin


def _preset_cases() -> list[tuple[str, str, str | None]]:
    out = []
    for name, preset in PRESETS.items():
        if preset.kind != "rope":
            continue
        base = name.removesuffix("-local")
        mp = read_positions(model_config(base))
        layer_type = None
        if mp.per_layer_type:
            layer_type = "sliding_attention" if name.endswith("-local") else "full_attention"
        out.append((name, base, layer_type))
    return out


CASES = _preset_cases()


def _kind_tables(fields: dict, dtype: str = "float32") -> dict[str, torch.Tensor]:
    p = resolve_fields(ROPE, {"dtype": dtype, **fields})
    return dict(compute(ROPE, p))


@pytest.mark.parametrize(("preset", "config_name", "layer_type"), CASES, ids=[c[0] for c in CASES])
def test_engine_precision_equals_the_rotary_module_bit_for_bit(
    preset: str, config_name: str, layer_type: str | None
) -> None:
    """Every RoPE preset, positions up to 131,072: cos and sin equal the module's exactly."""
    cos_hf, sin_hf = _module_tables(model_config(config_name), layer_type, POSITIONS)
    ours = _kind_tables({"preset": preset, "positions": POSITIONS.tolist(), "precision": "engine"})
    assert torch.equal(ours["cos"], cos_hf)
    assert torch.equal(ours["sin"], sin_hf)
    exact = _kind_tables({"preset": preset, "positions": POSITIONS.tolist()})
    assert not torch.equal(exact["cos"], cos_hf)  # float32 angles are off far out


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma-3-4b", "deepseek-v3", "qwen2.5-vl-7b"])
def test_engine_precision_from_the_config(name: str) -> None:
    """The same through ``config`` (with ``layer_type`` where the config has layer types)."""
    config = model_config(name)
    layer_type = "full_attention" if read_positions(config).per_layer_type else None
    cos_hf, sin_hf = _module_tables(config, layer_type, POSITIONS)
    fields = {"config": config, "positions": POSITIONS.tolist(), "precision": "engine"}
    if layer_type:
        fields["layer_type"] = layer_type
    ours = _kind_tables(fields)
    assert torch.equal(ours["cos"], cos_hf) and torch.equal(ours["sin"], sin_hf)


def test_longrope_short_factors_below_the_original_length() -> None:
    """Phi-3.5's module picks the short factors for a sequence within 4,096 positions."""
    pos = torch.arange(4096)
    cos_hf, sin_hf = _module_tables(model_config("phi-3.5-mini"), None, pos)
    ours = _kind_tables({"preset": "phi-3.5-mini", "seq_len": 4096, "precision": "engine"})
    assert torch.equal(ours["cos"], cos_hf) and torch.equal(ours["sin"], sin_hf)


@pytest.mark.parametrize("last", [2048, 4096, 131_072])
def test_dynamic_ntk_rescales_its_base_in_float32(last: int) -> None:
    """A dynamic-NTK Llama config: below the original length the init buffer, beyond it the
    float32 base the forward recomputes from ``max(position) + 1``."""
    config = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "dynamic", "factor": 4.0},
    }
    pos = torch.cat((torch.arange(0, last, 97), torch.tensor([last - 1])))
    cos_hf, sin_hf = _module_tables(config, None, pos)
    scaling = RopeScaling.from_dict(
        {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4096}
    )
    cos, sin, _ = transformers_cos_sin(pos, rotary_dim=64, base=10000.0, scaling=scaling)
    assert torch.equal(cos, cos_hf) and torch.equal(sin, sin_hf)


def test_mrope_rows_equal_the_module() -> None:
    """Qwen2.5-VL's three position rows (temporal, height, width), as its module takes them."""
    config = model_config("qwen2.5-vl-7b")
    tc = AutoConfig.for_model(**config).get_text_config()
    rot = _modeling("qwen2_5_vl").Qwen2_5_VLRotaryEmbedding(config=tc)
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 131_072, (3, 257), generator=g)
    cos_hf, sin_hf = rot(torch.zeros(1), rows[:, None, :])
    ours = _kind_tables({"config": config, "positions": rows.tolist(), "precision": "engine"})
    assert torch.equal(ours["cos"], cos_hf[0]) and torch.equal(ours["sin"], sin_hf[0])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_engine_precision_casts_once_to_the_activations_dtype(dtype: str) -> None:
    """The module casts its float32 cos/sin to ``x.dtype`` at the end; so does posenc."""
    tc = AutoConfig.for_model(**model_config("llama-3.1-8b")).get_text_config()
    rot = _modeling("llama").LlamaRotaryEmbedding(config=tc)
    torch_dtype = getattr(torch, dtype)
    cos_hf, sin_hf = rot(torch.zeros(1, dtype=torch_dtype), POSITIONS[None])
    ours = _kind_tables(
        {"preset": "llama-3.1-8b", "positions": POSITIONS.tolist(), "precision": "engine"}, dtype
    )
    assert torch.equal(ours["cos"], cos_hf[0]) and torch.equal(ours["sin"], sin_hf[0])


def test_blocks_equal_the_whole_table() -> None:
    """Row blocks of odd sizes give the same bytes as the whole table."""
    p = resolve_fields(ROPE, {"preset": "phi-3.5-mini", "seq_len": 9000, "precision": "engine"})
    whole = dict(compute(ROPE, p))
    for name, blocks in ENGINES[p["engine"]].blocks(p, device=None, dtype=torch.float32).items():
        out = torch.empty(blocks.shape, dtype=blocks.dtype).reshape(-1, blocks.row_elements)
        for start in range(0, blocks.rows, 777):
            stop = min(start + 777, blocks.rows)
            blocks.fill_rows(start, stop, out[start:stop])
        assert torch.equal(out.reshape(blocks.shape), whole[name]), name


VLLM_FIXTURE = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "tables.json").read_text()
)
#: Every recorded single-row vLLM cache but HunyuanOCR's (vLLM 0.32 runs that model on its
#: Transformers backend, so precision "engine" with engine vllm refuses XD-RoPE; engine
#: transformers is checked against HunYuanVLRotaryEmbedding in tests/lib/test_vllm_types.py),
#: Gemma 4's ``Gemma4RotaryEmbedding`` among them.
VLLM_CASES = [c for c in VLLM_FIXTURE["cases"] if c["name"] != "hunyuan-ocr" and not c["mrope"]]
#: vLLM's ``MRotaryEmbedding`` (Qwen2-VL, Qwen2.5-VL): three position rows each.
VLLM_MROPE_CASES = [c for c in VLLM_FIXTURE["cases"] if c["mrope"]]


def _rows_for_this_cpu(case: dict) -> dict:
    """The case's recorded rows for this CPU: torch's float32 ``exp`` and ``pow`` round
    differently with AVX2 and AVX-512 kernels, and vLLM's mixed NTK calls them, so such a case
    holds each capability's rows (``cpu_rows``; the fixture's own are ``cpu_capability``'s)."""
    mine = torch.backends.cpu.get_cpu_capability()
    if mine == VLLM_FIXTURE["cpu_capability"] or not case.get("cpu_rows"):
        return case
    if mine not in case["cpu_rows"]:
        pytest.skip(f"{case['name']} was recorded on {sorted(case['cpu_rows'])} and "
                    f"{VLLM_FIXTURE['cpu_capability']}, not {mine}")  # fmt: skip
    rows: dict = case["cpu_rows"][mine]
    return rows


@pytest.mark.parametrize("case", VLLM_CASES, ids=[c["name"] for c in VLLM_CASES])
def test_vllm_engine_precision_equals_its_recorded_cache(case: dict) -> None:
    """vLLM 0.32's own float32 cache rows (tests/fixtures/vllm, recorded by
    scripts/record_vllm_tables.py with vLLM's get_rope on the CPU), bit for bit: the plain
    classes, DeepSeek's YaRN, LongRoPE (short and long), dynamic NTK, Hunyuan's alpha, fixed
    and mixed NTK and the five dual-chunk caches, at positions up to the cache's rows."""
    pos = [q for q in case["positions"] if q < case["rows"]]
    rows = _rows_for_this_cpu(case)
    fields = {"config": case["config"], "positions": pos, "engine": "vllm", "precision": "engine"}
    for name in ("layer_type", "max_model_len", "dual_chunk_cache"):
        if case.get(name):
            fields[name] = case[name]
    p = resolve_fields(ROPE, {"dtype": "float32", **fields})
    out = dict(compute(ROPE, p))
    half = out["cos"].shape[1] // 2
    cos = out["cos"][:, :half] if p["layout"] == "half" else out["cos"][:, 0::2]
    assert torch.equal(cos, torch.tensor(rows["cos"][: len(pos)], dtype=torch.float32))
    sin = out["sin"][:, :half] if p["layout"] == "half" else out["sin"][:, 0::2]
    assert torch.equal(sin, torch.tensor(rows["sin"][: len(pos)], dtype=torch.float32))
    exact = dict(compute(ROPE, resolve_fields(ROPE, {**fields, "precision": "exact"})))
    if max(pos) >= 1000:  # float32 angles depart from the exact table
        assert not torch.equal(exact["cos"], out["cos"])


@pytest.mark.parametrize("case", VLLM_MROPE_CASES, ids=[c["name"] for c in VLLM_MROPE_CASES])
def test_vllm_mrope_engine_equals_its_recorded_forward(case: dict) -> None:
    """``MRotaryEmbedding.forward_native``'s float32 cos and sin for three position rows
    (Qwen2-VL-7B's and Qwen2.5-VL-7B's published configs; recorded by
    scripts/record_vllm_tables.py), bit for bit, text and image-like rows alike."""
    rows = case["positions"]
    fields = {"config": case["config"], "positions": rows, "engine": "vllm", "precision": "engine"}
    p = resolve_fields(ROPE, {"dtype": "float32", **fields})
    assert p["mrope_section"] == case["mrope_section"]
    out = dict(compute(ROPE, p))
    assert torch.equal(out["cos"], torch.tensor(case["cos"], dtype=torch.float32).repeat(1, 2))
    assert torch.equal(out["sin"], torch.tensor(case["sin"], dtype=torch.float32).repeat(1, 2))
    exact = dict(compute(ROPE, resolve_fields(ROPE, {**fields, "precision": "exact"})))
    assert not torch.equal(exact["cos"], out["cos"])  # float32 angles at 31,000


def test_vllm_mrope_engine_is_the_cache_rows_per_axis() -> None:
    """MRotaryEmbedding gathers each frequency from its axis's row of the base class's cache:
    with Qwen2.5-VL's sections and Qwen3-VL's interleaved ones, the same float32 values as
    transformers' rotary module (whose own bit-for-bit test is above)."""
    from posenc.facts.model_configs import model_config

    rows = [[0, 1, 2, 3, 4, 5000, 100000], [0, 1, 1, 2, 9, 5000, 3], [0, 2, 1, 7, 4, 5000, 77]]
    for preset in ("qwen2.5-vl-7b", "qwen3-vl-8b"):
        fields = {"config": model_config(preset), "positions": rows, "precision": "engine"}
        hf = dict(compute(ROPE, resolve_fields(ROPE, fields)))
        vllm = dict(compute(ROPE, resolve_fields(ROPE, {**fields, "engine": "vllm"})))
        assert torch.equal(hf["cos"], vllm["cos"]) and torch.equal(hf["sin"], vllm["sin"])


def test_meta_says_the_precision() -> None:
    p = resolve_fields(ROPE, {"preset": "llama-2-7b", "seq_len": 4, "precision": "engine"})
    assert ROPE.meta(p)["precision"] == "engine"  # type: ignore[misc]
    p = resolve_fields(ROPE, {"preset": "llama-2-7b", "seq_len": 4})
    assert ROPE.meta(p)["precision"] == "exact"  # type: ignore[misc]


def test_vllm_proportional_engine_ignores_factor_and_zero_pads() -> None:
    """``Gemma4RotaryEmbedding._compute_inv_freq``: ``int(Dh·p) // 2`` float32 frequencies over
    the whole head ``Dh``, zeros past them; ``get_rope`` passes it no ``factor`` (transformers
    divides by it), so vLLM's table with a factor is the one without."""
    base = {
        "head_dim": 64,
        "seq_len": 9000,
        "engine": "vllm",
        "precision": "engine",
        "dtype": "float32",
    }
    plain = {"type": "proportional", "partial_rotary_factor": 0.5}
    out = dict(compute(ROPE, resolve_fields(ROPE, {**base, "scaling": plain})))
    inv = 1.0 / (10000.0 ** (torch.arange(0, 32, 2, dtype=torch.float) / 64))
    assert torch.equal(out["inv_freq"], torch.cat([inv, torch.zeros(16)]))
    assert torch.equal(out["cos"][:, 16:32], torch.ones(9000, 16))
    assert torch.equal(out["sin"][:, 16:32], torch.zeros(9000, 16))
    t = torch.arange(9000).float()[:, None] * inv[None, :]
    assert torch.equal(out["cos"][:, :16], t.cos()) and torch.equal(out["sin"][:, :16], t.sin())
    factored = {**base, "scaling": {**plain, "factor": 8.0}}
    assert torch.equal(dict(compute(ROPE, resolve_fields(ROPE, factored)))["cos"], out["cos"])
    hf = {**factored, "engine": "transformers"}
    assert not torch.equal(dict(compute(ROPE, resolve_fields(ROPE, hf)))["cos"], out["cos"])


def test_vllm_engine_blocks_equal_the_whole_table() -> None:
    """Row blocks of vLLM's dual-chunk key cache and LongRoPE's long cache (engine precision)
    are the whole table's bytes."""
    cases = [c for c in VLLM_CASES if c["name"].endswith("dual chunk k") or "131072" in c["name"]]
    assert len(cases) == 2
    for case in cases:
        fields = {
            "config": case["config"],
            "seq_len": 3000,
            "engine": "vllm",
            "precision": "engine",
        }
        for name in ("max_model_len", "dual_chunk_cache"):
            if case.get(name):
                fields[name] = case[name]
        p = resolve_fields(ROPE, fields)
        whole = dict(compute(ROPE, p))
        for name, blocks in (
            ENGINES[p["engine"]].blocks(p, device=None, dtype=torch.float32).items()
        ):
            out = torch.empty(blocks.shape, dtype=blocks.dtype).reshape(-1, blocks.row_elements)
            for start in range(0, blocks.rows, 701):
                stop = min(start + 701, blocks.rows)
                blocks.fill_rows(start, stop, out[start:stop])
            assert torch.equal(out.reshape(blocks.shape), whole[name]), (case["name"], name)
