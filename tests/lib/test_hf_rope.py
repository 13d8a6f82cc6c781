"""Parity of posenc's config reading with transformers 5's own model code.

For every family in :mod:`posenc.facts.model_configs` (configs quoted from the published
``config.json`` files named there), transformers builds its configuration class and the model's
own rotary embedding module from the same dict, with no weights, and we compare:

- ``inv_freq`` to float32 rounding, and ``attention_scaling`` to 1e-6;
- cos / sin at positions 0 … 63 in the layout the model applies them (GLM, DeepSeek and Llama 4
  interleave pairs inside their attention; GPT-J uses ``create_sinusoidal_positions``);
- the softmax scale of the model's attention class (built on the meta device);
- and, as in version 1, that the float32 tables stay within 1e-6 of the float64 formula at
  positions up to 2**20.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import torch

from posenc.facts.model_configs import MODEL_CONFIGS, model_config
from posenc.readers.hf.positions import read_positions
from posenc.readers.hf.results import rope_request_fields
from posenc.rope import RopeScaling, rope_cos_sin

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig  # noqa: E402

POSITIONS = torch.arange(64)

# model_type of the text config -> (modeling module, rotary class, attention class)
ROTARY = {
    "llama": ("llama", "LlamaRotaryEmbedding", "LlamaAttention"),
    "llama4_text": ("llama4", "Llama4TextRotaryEmbedding", "Llama4TextAttention"),
    "mistral": ("mistral", "MistralRotaryEmbedding", "MistralAttention"),
    "mixtral": ("mixtral", "MixtralRotaryEmbedding", "MixtralAttention"),
    "qwen2": ("qwen2", "Qwen2RotaryEmbedding", "Qwen2Attention"),
    "qwen3": ("qwen3", "Qwen3RotaryEmbedding", "Qwen3Attention"),
    "qwen2_5_vl_text": ("qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding", "Qwen2_5_VLAttention"),
    "qwen3_vl_text": ("qwen3_vl", "Qwen3VLTextRotaryEmbedding", "Qwen3VLTextAttention"),
    "gemma2": ("gemma2", "Gemma2RotaryEmbedding", "Gemma2Attention"),
    "gemma3_text": ("gemma3", "Gemma3RotaryEmbedding", "Gemma3Attention"),
    "phi": ("phi", "PhiRotaryEmbedding", "PhiAttention"),
    "phi3": ("phi3", "Phi3RotaryEmbedding", "Phi3Attention"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3RotaryEmbedding", "DeepseekV3Attention"),
    "gpt_neox": ("gpt_neox", "GPTNeoXRotaryEmbedding", "GPTNeoXAttention"),
    "olmo2": ("olmo2", "Olmo2RotaryEmbedding", "Olmo2Attention"),
    "glm4": ("glm4", "Glm4RotaryEmbedding", "Glm4Attention"),
    "falcon": ("falcon", "FalconRotaryEmbedding", None),
    "gpt_oss": ("gpt_oss", "GptOssRotaryEmbedding", "GptOssAttention"),
    "ministral3": ("ministral3", "Ministral3RotaryEmbedding", "Ministral3Attention"),
}

ROPE_NAMES = [n for n, (_, c) in MODEL_CONFIGS.items() if read_positions(c).kind == "rope"]


def _module(name: str):
    import importlib

    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _hf_text_config(config: dict):
    cfg = AutoConfig.for_model(**config)
    return cfg.get_text_config()


def _hf_rotary(tc, layer_type: str | None):
    """transformers' (inv_freq, attention_scaling, cos, sin) at POSITIONS, as (T, R) in the
    layout the model's attention applies them (half, or interleaved pairs)."""
    mt = tc.model_type
    if mt == "gptj":
        gptj = _module("gptj")
        sincos = gptj.create_sinusoidal_positions(len(POSITIONS), tc.rotary_dim)  # (T, R)
        sin, cos = torch.chunk(sincos, 2, dim=-1)
        inv = 1.0 / (
            10000 ** (torch.arange(0, tc.rotary_dim, 2, dtype=torch.int64) / tc.rotary_dim)
        )
        return inv.float(), 1.0, cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    mod_name, cls_name, _ = ROTARY[mt]
    rot = getattr(_module(mod_name), cls_name)(config=tc)
    x = torch.zeros(1, dtype=torch.float32)
    pos = POSITIONS[None]  # (1, T)
    if layer_type is not None and hasattr(rot, f"{layer_type}_inv_freq"):
        inv = getattr(rot, f"{layer_type}_inv_freq")
        scale = getattr(rot, f"{layer_type}_attention_scaling")
        cos, sin = rot(x, pos, layer_type)
    else:
        inv, scale = rot.inv_freq, rot.attention_scaling
        if mt == "llama4_text":
            freqs_cis = rot(x, pos)  # (1, T, R/2) complex, attention scaling included
            cos, sin = freqs_cis.real, freqs_cis.imag
            return inv, scale, cos[0].repeat_interleave(2, -1), sin[0].repeat_interleave(2, -1)
        if mt in ("qwen2_5_vl_text", "qwen3_vl_text"):
            cos, sin = rot(x, pos[None].expand(3, 1, -1))
        else:
            cos, sin = rot(x, pos)
    cos, sin = cos[0], sin[0]  # (T, R) in cat(θ, θ) form
    if cos.shape[-1] == inv.shape[-1]:  # GPT-OSS returns the half and rotates [x1 | x2]
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    if mt in ("glm4", "glm", "deepseek_v3"):  # their attention interleaves the half table
        half = cos.shape[-1] // 2
        cos, sin = (
            cos[..., :half].repeat_interleave(2, -1),
            sin[..., :half].repeat_interleave(2, -1),
        )
    return inv, float(scale), cos, sin


def _layer_types(name: str) -> list[str | None]:
    mp = read_positions(model_config(name))
    return sorted(mp.rope) if mp.per_layer_type else [None]


CASES = [(n, lt) for n in ROPE_NAMES for lt in _layer_types(n)]


@pytest.mark.parametrize(("name", "layer_type"), CASES, ids=[f"{n}-{lt}" for n, lt in CASES])
def test_rope_tables_equal_transformers_rotary_embedding(name: str, layer_type: str | None) -> None:
    """inv_freq, attention scaling and cos/sin equal the model's own rotary embedding module."""
    config = model_config(name)
    mp = read_positions(config)
    fields = rope_request_fields(mp, layer_type)
    tc = _hf_text_config(model_config(name))
    inv_hf, scale_hf, cos_hf, sin_hf = _hf_rotary(tc, layer_type)

    scaling = RopeScaling.from_dict(fields["scaling"]) if fields["scaling"] else None
    ours = rope_cos_sin(
        POSITIONS,
        rotary_dim=fields["rotary_dim"],
        base=fields["base"],
        layout=fields["layout"],
        scaling=scaling,
        dtype=torch.float64,
    )
    assert ours.attention_scaling == pytest.approx(float(scale_hf), abs=1e-6)
    torch.testing.assert_close(ours.inv_freq.float(), inv_hf.float(), rtol=2e-6, atol=0)
    # transformers computes angles in float32: its error at p < 64 is about 64·ulp(1)
    torch.testing.assert_close(ours.cos.float(), cos_hf.float(), rtol=0, atol=2e-5)
    torch.testing.assert_close(ours.sin.float(), sin_hf.float(), rtol=0, atol=2e-5)


@pytest.mark.parametrize("name", ROPE_NAMES)
def test_rope_tables_exact_at_large_positions(name: str) -> None:
    """float32 tables within 1e-6 of the float64 formula up to 2**20 (version 1's promise)."""
    mp = read_positions(model_config(name))
    layer_type = sorted(mp.rope)[0] if mp.per_layer_type else None
    f = rope_request_fields(mp, layer_type)
    scaling = RopeScaling.from_dict(f["scaling"]) if f["scaling"] else None
    pos = torch.tensor([0, 1, 4095, 65537, 2**20 - 1])
    t32 = rope_cos_sin(
        pos, rotary_dim=f["rotary_dim"], base=f["base"], layout=f["layout"], scaling=scaling
    )
    t64 = rope_cos_sin(
        pos,
        rotary_dim=f["rotary_dim"],
        base=f["base"],
        layout=f["layout"],
        scaling=scaling,
        dtype=torch.float64,
    )
    # independent float64 formula from the float64 inverse frequencies
    angles = pos.double()[:, None] * t64.inv_freq[None]
    if f["layout"] == "half":
        angles = torch.cat((angles, angles), -1)
    else:
        angles = angles.repeat_interleave(2, -1)
    torch.testing.assert_close(t64.cos, angles.cos() * t64.attention_scaling, rtol=0, atol=1e-12)
    torch.testing.assert_close(t32.cos.double(), t64.cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(t32.sin.double(), t64.sin, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "name", [n for n in ROPE_NAMES if ROTARY.get(read_positions(model_config(n)).model_type)]
)
def test_softmax_scale_equals_the_models_attention(name: str) -> None:
    """``softmax_scale`` is ``self.scaling`` of the model's attention class (meta device)."""
    tc = _hf_text_config(model_config(name))
    mod_name, _, attn_name = ROTARY[tc.model_type]
    if attn_name is None:
        pytest.skip("attention computes the scale inline")
    with torch.device("meta"):
        attn = getattr(_module(mod_name), attn_name)(tc, layer_idx=0)
    assert read_positions(model_config(name)).softmax_scale == pytest.approx(
        attn.scaling, rel=1e-12
    )


def test_deepseek_softmax_scale_has_the_yarn_mscale_squared() -> None:
    """DeepSeek-V3: (128 + 64)^-0.5 · (0.1·1·ln 40 + 1)² (modeling_deepseek_v3.yarn_get_mscale)."""
    mp = read_positions(model_config("deepseek-v3"))
    m = 0.1 * math.log(40) + 1.0
    assert mp.softmax_scale == pytest.approx(192**-0.5 * m * m, rel=1e-12)
    assert mp.layout == "interleaved" and mp.head_dim == 64
    assert mp.rope["full_attention"].attention_scaling == pytest.approx(
        1.0
    )  # mscale / mscale_all_dim


def test_llama4_layer_types_and_temperature() -> None:
    """Llama 4: every 4th layer is NoPE (no_rope_layer_interval 4) with temperature tuning."""
    mp = read_positions(model_config("llama-4-scout"))
    tc = _hf_text_config(model_config("llama-4-scout"))
    expected = ["no_rope" if not use else "chunked_attention" for use in tc.no_rope_layers]
    assert list(mp.layer_types) == expected
    assert mp.layer_types[3] == "no_rope" and mp.layer_types[0] == "chunked_attention"
    assert dict(mp.attention_temperature) == {"floor_scale": 8192.0, "attn_scale": 0.1}
    assert mp.layout == "interleaved"


@pytest.mark.parametrize("name", ["gemma-3-1b", "gemma-3-4b", "gemma-2-9b", "qwen2.5-7b"])
def test_layer_types_equal_transformers(name: str) -> None:
    tc = _hf_text_config(model_config(name))
    assert list(read_positions(model_config(name)).layer_types) == list(tc.layer_types)


# The sweep below builds every model type's text model from its default config and reads the
# rotation its attention applies (tests/lib/transformers_probe.py). These model types disagree
# with posenc today, each for a reason that issue 24 tracks; any other disagreement fails.
SWEEP_MISMATCHES: dict[str, str] = {}

# posenc answers 422 where transformers builds a table.
SWEEP_REFUSED: dict[str, str] = dict.fromkeys(
    ("qwen3_omni_moe", "qwen3_omni_moe_text", "qwen3_omni_moe_thinker"),
    "the default config only (no head_dim): 2048 // 28 = 73-wide heads. Its rotary module builds "
    "37 frequencies over 73, a 74-wide table, which no layer of the model can apply (its "
    "attention fails on 73-wide heads, and its M-RoPE sections [24, 20, 20] ask for 64 "
    "frequencies); posenc answers 422 naming hidden_size / num_attention_heads. A config "
    "that gives head_dim is read",
)

# Rotary models whose rotation the probe cannot read, each with the reason. A text model whose
# forward on the meta device stops before its attention applies the rotary (a multimodal
# wrapper, a hybrid cache, an encoder-decoder, a meta .item(), JetMoE's router) is read by
# driving its attention's own call instead (transformers_probe._driven_directly); these remain.
_GLM4V_SECTIONS = (
    "transformers' own {cls} fails on the default config: its mrope_section [8, 12, 12] "
    "sums to 32 frequencies, the module makes {n} ({why}); published GLM-4.1V/4.5V configs "
    "set partial_rotary_factor 0.5 (64 x 0.5 / 2 = 32)"
)
SWEEP_UNREAD: dict[str, str] = {
    **dict.fromkeys(
        ("glm4v", "glm4v_text", "glm46v", "glmga"),
        _GLM4V_SECTIONS.format(
            cls="Glm4vTextRotaryEmbedding", n=64, why="head_dim 128, no partial_rotary_factor"
        ),
    ),
    **dict.fromkeys(
        ("glm4v_moe", "glm4v_moe_text"),
        _GLM4V_SECTIONS.format(
            cls="Glm4vMoeTextRotaryEmbedding",
            n=11,
            why="head_dim 42 x partial_rotary_factor 0.5 = 21",
        ),
    ),
    **dict.fromkeys(
        ("clvp", "clvp_encoder"),
        "CLVP's attention turns the module's angles into cos/sin itself, slices q, k and v to "
        "their width and rotates the values too (apply_rotary_pos_emb(q, k, v, cos, sin, "
        "position_ids)): no apply function takes the module's output as it returns it",
    ),
    "muse_glimmer_assistant": "its forward takes noise_embeds and context_hidden_states (a "
    "diffusion head), not token ids: no text positions to drive",
    # rotary modules of audio, vision, codec and time-series models (not text positions): their
    # forward requires input_features, input_values, pixel_values, past_values or latents
    **dict.fromkeys(
        (
            "efficientloftr",
            "esmfold2",
            "glmasr_encoder",
            "lasr_ctc",
            "lasr_encoder",
            "mimi",
            "mimi_decoder",
            "mimi_encoder",
            "mlcd",
            "mlcd_vision_model",
            "nemotron3_5_transcribe_audio",
            "nemotron3_diarization",
            "neucodec",
            "qwen2_5_omni_dit",
            "qwen2_5_omni_token2wav",
            "sam3_vision_model",
            "sam3_vit_model",
            "timesfm2_5",
            "xcodec2",
        ),
        "not a text model's rotary: audio, vision, codec, protein or time series",
    ),
}


def _posenc_rotation(mp, layer_type: str | None, rows: torch.Tensor, width: int) -> torch.Tensor:
    """posenc's (T, W, W) rotation for this config: its table (with its ``exponent_dim`` and
    ``rotation``), applied in its layout to the first R of W channels, or the last R where
    ``rotated_channels`` says so (the rest pass through)."""
    from posenc.rope import apply_rope, mrope_cos_sin

    f = rope_request_fields(mp, layer_type)
    scaling = RopeScaling.from_dict(f["scaling"]) if f["scaling"] else None
    if f["rotary_dim"] > width:
        raise ValueError(f"posenc's rotary_dim {f['rotary_dim']} > the model's width {width}")
    kw = dict(rotary_dim=f["rotary_dim"], base=f["base"], layout=f["layout"], scaling=scaling,
              dtype=torch.float64, exponent_dim=f["exponent_dim"])  # fmt: skip
    if rows.shape[0] > 1 and mp.mrope_section is not None:
        tab = mrope_cos_sin(rows, mrope_section=f["mrope_section"],
                            interleaved=f["mrope_interleaved"], **kw)  # fmt: skip
        cos, sin = tab.cos, tab.sin * (-1 if f["rotation"] == "negative" else 1)
    else:
        tab = rope_cos_sin(rows[0], rotation=f["rotation"], **kw)
        cos, sin = tab.cos, tab.sin
    n = rows.shape[-1]
    eye = torch.eye(width, dtype=torch.float64)[:, None, :].expand(width, n, width)
    out = apply_rope(eye[None].contiguous(), cos, sin, layout=f["layout"],
                     rotated_channels=mp.rotated_channels)[0]  # fmt: skip
    return out.permute(1, 2, 0)  # (T, W out, W in)


def _sweep_reading(cfg):
    """posenc's reading of ``cfg``, or None and why it refuses (None when it reads RoPE), and
    the layer types to compare: those its layers use (a config may give parameters for others
    too), else ``[None]``."""
    try:
        mp = read_positions(cfg.to_dict())
        refused = None if mp.kind == "rope" else f"kind {mp.kind}"
    except Exception as exc:
        mp, refused = None, str(exc)
    layer_types: list[str | None] = [None]
    if mp is not None and mp.kind == "rope" and mp.per_layer_type:
        used = [t for t in sorted(mp.rope) if t in mp.layer_types]
        layer_types = list(used or sorted(mp.rope))
    return mp, refused, layer_types


def _sweep_one(cfg):
    """posenc's reading of ``cfg`` (or why it refuses), and the model's rotations for the
    layer types its layers use."""
    from tests.lib.transformers_probe import model_rotation

    mp, refused, layer_types = _sweep_reading(cfg)
    distinct = bool(mp is not None and mp.kind == "rope" and mp.mrope_section)
    return mp, refused, cfg, model_rotation(cfg, layer_types, distinct_rows=distinct)


def _module_alone(cfg) -> str | None:
    """For a default config transformers cannot build a model from: its text rotary module
    alone (tests/lib/transformers_probe.py ``rotary_module_tables``) against posenc's table for
    ``cfg.to_dict()``, values only (in whichever layout the module writes them: the layout its
    attention applies needs the model). ``"match"``, ``"refused: …"``, ``"mismatch: …"``, or
    None where the module cannot be built or called either."""
    from tests.lib.transformers_probe import NotProbed, T, rotary_module_tables

    mp, refused, layer_types = _sweep_reading(cfg)
    try:
        tables = rotary_module_tables(cfg, layer_types)
    except NotProbed:
        return None
    if mp is None or refused is not None:
        return f"refused (module alone): {refused}"[:160]
    worst = 0.0
    for lt, (cos, sin) in tables.items():
        f = rope_request_fields(mp, lt)
        if cos.shape[-1] != f["rotary_dim"]:
            return f"mismatch (module alone): {cos.shape[-1]} wide, posenc {f['rotary_dim']}"
        scaling = RopeScaling.from_dict(f["scaling"]) if f["scaling"] else None
        best = math.inf
        for layout in ("half", "interleaved"):
            ours = rope_cos_sin(torch.arange(T), rotary_dim=f["rotary_dim"], base=f["base"],
                                scaling=scaling, layout=layout, exponent_dim=f["exponent_dim"],
                                dtype=torch.float64)  # fmt: skip
            diff = max(float((ours.cos - cos).abs().max()), float((ours.sin - sin).abs().max()))
            best = min(best, diff)
        worst = max(worst, best)
    return "match" if worst <= 2e-5 else f"mismatch (module alone): max |diff| {worst:.3g}"


#: The sweep in shards, so that pytest-xdist spreads it over the cores: shard ``k`` takes the
#: model types at places k, k + SWEEP_SHARDS, … of the sorted list. Shard 0, a fixed sample of
#: every SWEEP_SHARDS-th model type, runs in the fast lane; the others are ``slow``. Together
#: they check every model type once.
SWEEP_SHARDS = 6
#: Model types of the installed transformers whose rotation equals posenc's, at least (the
#: whole sweep's): each shard asks for its share less a fifth (the model types of a shard
#: are interleaved over the sorted list, so each shard's share is close to an equal one).
SWEEP_MIN_MATCH = 200


T = TypeVar("T")


def _shallow_first(config: Any, probe: Callable[[Any], T]) -> T:
    """``probe(shallow(config))``: the layers that show each layer type, read on both sides;
    ``probe(config)``, the whole depth, where the model refuses the shallow copy or applies
    its rotary only in later layers (Bamba's attn_layer_indices). A model with no rotary is
    not probed again."""
    from tests.lib.transformers_probe import NotProbed, shallow

    try:
        return probe(shallow(config))
    except NotProbed as exc:
        if exc.why == "no_rotary":
            raise
        return probe(config)


@pytest.mark.timeout(900)  # about 2.5 minutes in all on two shared cores: ~300 types built
@pytest.mark.parametrize(
    "shard",
    [0, *(pytest.param(k, marks=pytest.mark.slow) for k in range(1, SWEEP_SHARDS))],
)
def test_sweep_of_transformers_default_configs(shard: int) -> None:
    """Every model type of the installed transformers whose text model applies a rotary
    embedding: built from its default config on the meta device, its rotary module rebuilt on
    the CPU and read through its forward, its own apply function run on identity vectors
    (tests/lib/transformers_probe.py). The rotation matrices at positions 0 … 22 (M-RoPE rows
    apart where posenc reads sections) equal posenc's table for ``cfg.to_dict()`` applied in
    posenc's layout, for each layer type. Where transformers cannot build or run the model from
    its default, its rotary module alone is compared, values only (``module_alone``). Fails on
    any model type outside SWEEP_MISMATCHES /
    SWEEP_REFUSED / SWEEP_UNREAD that disagrees, and on a named one that now agrees (so the
    lists shrink as posenc catches up). Prints the counts. One shard of SWEEP_SHARDS of them."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from tests.lib.transformers_probe import NotProbed

    counts = dict.fromkeys(("match", "module_alone", "mismatch", "refused", "skipped", "unread"), 0)
    unexpected: list[str] = []
    named = {**SWEEP_MISMATCHES, **SWEEP_REFUSED, **SWEEP_UNREAD}
    seen: dict[str, str] = {}
    matched: set[str] = set()
    for mt in sorted(CONFIG_MAPPING_NAMES)[shard::SWEEP_SHARDS]:
        try:
            full = AutoConfig.for_model(mt)
        except Exception:
            counts["skipped"] += 1
            continue
        try:
            mp, refused, _cfg, rotations = _shallow_first(full, _sweep_one)
        except NotProbed as exc:
            if exc.why == "no_rotary":
                continue  # not a rotary text model
            if exc.why == "unread":
                counts["unread"] += 1
                seen[mt] = f"unread: {exc}"
                continue
            # transformers cannot build or run its default model: its rotary module alone
            alone = _module_alone(full)
            if alone is None:
                counts["skipped"] += 1  # nor that
            elif alone == "match":
                counts["module_alone"] += 1
                matched.add(mt)
            else:
                counts["refused" if alone.startswith("refused") else "mismatch"] += 1
                seen[mt] = alone
            continue
        except Exception as exc:
            counts["mismatch"] += 1
            seen[mt] = f"mismatch: probe error {exc!r:.120}"
            continue
        if refused is not None:
            counts["refused"] += 1
            seen[mt] = f"refused: {refused:.120}"
            continue
        worst, error = 0.0, None
        for lt, rot in rotations.items():
            try:
                ours = _posenc_rotation(mp, lt, rot.position_rows, rot.matrices.shape[-1])
                worst = max(worst, float((ours - rot.matrices).abs().max()))
            except Exception as exc:
                error = f"{lt}: {exc!r:.120}"
        # transformers computes angles in float32: about 60·ulp(1) at these positions
        if error is None and worst <= 2e-5:
            counts["match"] += 1
            matched.add(mt)
        else:
            counts["mismatch"] += 1
            seen[mt] = f"mismatch: {error or f'max |diff| {worst:.3g}'}"
    print(f"sweep of transformers {transformers.__version__}, shard {shard}: {counts}")
    for mt, what in sorted(seen.items()):
        if mt not in named:
            unexpected.append(f"{mt}: {what}")
    assert not unexpected, unexpected
    assert counts["match"] >= SWEEP_MIN_MATCH * 4 // (5 * SWEEP_SHARDS), counts
    # a named exception that now agrees leaves the list
    assert not sorted(matched & set(named)), sorted(matched & set(named))


def test_sweep_checks_gptj_and_codegen_through_their_output() -> None:
    """GPT-J and CodeGen in transformers 5.24 keep a sinusoidal buffer and return (sin, cos):
    read through forward and their apply function, they equal posenc's interleaved table."""
    from tests.lib.transformers_probe import model_rotation

    for mt in ("gptj", "codegen"):
        cfg = AutoConfig.for_model(mt)
        mp = read_positions(cfg.to_dict())
        rot = model_rotation(cfg, [None])[None]
        assert mp.layout == "interleaved"
        ours = _posenc_rotation(mp, None, rot.position_rows, rot.matrices.shape[-1])
        torch.testing.assert_close(ours, rot.matrices, rtol=0, atol=2e-5)
        # not the identity: positions > 0 rotate
        assert (rot.matrices[5] - torch.eye(rot.matrices.shape[-1])).abs().max() > 0.1


@pytest.mark.parametrize(
    ("name", "module", "cls"),
    [
        ("qwen2.5-vl-7b", "qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding"),
        ("qwen3-vl-8b", "qwen3_vl", "Qwen3VLTextRotaryEmbedding"),
    ],
)
def test_mrope_sections_equal_transformers(name: str, module: str, cls: str) -> None:
    """(3, T) positions over the config's mrope_section: Qwen2.5-VL contiguous, Qwen3-VL
    interleaved, against the model's own text rotary embedding."""
    from posenc.rope import mrope_cos_sin

    mp = read_positions(model_config(name))
    f = rope_request_fields(mp)
    assert f["mrope_interleaved"] is (name == "qwen3-vl-8b")
    tc = _hf_text_config(model_config(name))
    rot = getattr(_module(module), cls)(config=tc)
    gen = torch.Generator().manual_seed(0)
    pos = torch.randint(0, 50, (3, 1, 40), generator=gen)  # (3, B, T): distinct rows
    cos_hf, sin_hf = rot(torch.zeros(1), pos)
    ours = mrope_cos_sin(
        pos[:, 0],
        rotary_dim=f["rotary_dim"],
        mrope_section=f["mrope_section"],
        interleaved=f["mrope_interleaved"],
        base=f["base"],
        dtype=torch.float64,
    )
    torch.testing.assert_close(ours.cos.float(), cos_hf[0], rtol=0, atol=2e-5)
    torch.testing.assert_close(ours.sin.float(), sin_hf[0], rtol=0, atol=2e-5)
    # the sections matter: plain RoPE over the temporal row alone differs
    plain = rope_cos_sin(pos[0, 0], rotary_dim=f["rotary_dim"], base=f["base"])
    assert (plain.cos - cos_hf[0]).abs().max() > 0.1


def test_phi3_longrope_short_and_long_equal_transformers() -> None:
    """Phi-3.5-mini's layout of keys (longrope in rope_scaling, a top-level
    original_max_position_embeddings 4096, max_position_embeddings 131072). Its 48 published
    short/long factors are not quoted here; the test uses made-up ones of the same shape."""
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    short = [1.0 + 0.01 * i for i in range(48)]
    long = [1.0 + 0.5 * i for i in range(48)]
    config = {
        "model_type": "phi3",
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": {"long_factor": long, "short_factor": short, "type": "longrope"},
    }
    mp = read_positions(config)
    layer = mp.rope["full_attention"]
    assert layer.parameters["factor"] == 32.0
    assert layer.attention_scaling == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    f = rope_request_fields(mp)
    rot = Phi3RotaryEmbedding(config=_hf_text_config(config))
    for last in (100, 5000):  # within, then beyond, the original 4096
        pos = torch.arange(last - 8, last)
        cos_hf, _ = rot(torch.zeros(1), pos[None])
        ours = rope_cos_sin(
            pos,
            rotary_dim=f["rotary_dim"],
            base=f["base"],
            scaling=RopeScaling.from_dict(f["scaling"]),
            dtype=torch.float64,
        )
        # float32 angles near p = 5000 are off by ~5000·ulp(1) in transformers
        torch.testing.assert_close(ours.cos.float(), cos_hf[0], rtol=0, atol=2e-3)


@pytest.mark.parametrize(
    ("config", "uses_rope"),
    [
        (  # SmolLM3: NoPE where no_rope_layers[i] == 0 (modeling_smollm3: self.use_rope)
            {"model_type": "smollm3", "hidden_size": 2048, "num_attention_heads": 16,
             "num_hidden_layers": 8, "rope_theta": 2000000.0},
            lambda tc, i: bool(tc.no_rope_layers[i]),
        ),
        (  # Cohere 2: RoPE only where the layer has a sliding window
            {"model_type": "cohere2", "hidden_size": 1024, "num_attention_heads": 8,
             "num_hidden_layers": 8, "sliding_window": 4096, "rope_theta": 50000.0},
            lambda tc, i: tc.layer_types[i] == "sliding_attention",
        ),
    ],
)  # fmt: skip
def test_no_rope_layers_equal_transformers(config: dict, uses_rope) -> None:
    tc = AutoConfig.for_model(**config)
    types = read_positions(config).layer_types
    assert len(types) == tc.num_hidden_layers
    assert [t != "no_rope" for t in types] == [uses_rope(tc, i) for i in range(len(types))]
    assert "no_rope" in types


def _layout_of(matrices: torch.Tensor) -> str:
    """The layout a (T, W, W) rotation has: the first channel c that position 1 rotates turns
    partly into its partner (c + 1: adjacent pairs; else the other half)."""
    moved = (matrices[1] - matrices[0]).abs().amax(0) > 1e-6  # (W,) channels that rotate
    c = int(moved.nonzero()[0])
    column = matrices[1][:, c].abs().clone()
    column[c] = 0
    return "interleaved" if int(column.argmax()) == c + 1 else "half"


@pytest.mark.slow  # every interleaved model built and run: the whole suite, not the fast lane
def test_layout_table_equals_each_models_apply_function() -> None:
    """Every model type of INTERLEAVED_MODEL_TYPES that the installed transformers has, and a
    few half ones: the layout that its own apply function gives (read from the rotation it
    makes of identity vectors) is the one posenc reads from its default config."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from posenc.facts.families import INTERLEAVED_MODEL_TYPES
    from tests.lib.transformers_probe import NotProbed, model_rotation

    names = sorted(t for t in INTERLEAVED_MODEL_TYPES if t in CONFIG_MAPPING_NAMES)
    names += ["llama", "qwen2", "gpt_neox", "gemma3_text"]
    read, wrong = 0, []
    for mt in names:
        try:
            cfg, rotation = _shallow_first(
                AutoConfig.for_model(mt),
                lambda c: (c, next(iter(model_rotation(c, [None]).values()))),
            )
        except NotProbed:
            continue  # e.g. per-layer-type modules; the sweep reads those
        mp = read_positions(cfg.to_dict())
        read += 1
        if _layout_of(rotation.matrices) != mp.layout:
            wrong.append(f"{mt}: model {_layout_of(rotation.matrices)}, posenc {mp.layout}")
    assert not wrong, wrong
    assert read >= 20, read


@pytest.mark.parametrize(("model_type", "key", "on"),
                         [("granitemoehybrid", "position_embedding_type", "rope"),
                          ("zamba2", "use_mem_rope", True)])  # fmt: skip
def test_rope_switched_off_by_default(model_type: str, key: str, on: object) -> None:
    """Granite MoE Hybrid and Zamba 2 build a rotary embedding only when ``key`` asks for it
    (modeling_granitemoehybrid: ``if config.position_embedding_type == "rope"``;
    modeling_zamba2: ``if config.use_mem_rope``): their defaults have none."""
    from tests.lib.transformers_probe import NotProbed, model_rotation

    with pytest.raises(NotProbed) as built:
        model_rotation(AutoConfig.for_model(model_type), [None])
    assert built.value.why == "no_rotary", built.value
    config = AutoConfig.for_model(model_type).to_dict()
    assert read_positions(config).kind == "none"
    config[key] = on
    assert read_positions(config).kind == "rope"


def test_learned_table_size_and_width_equal_the_models() -> None:
    """Every learned-position model type posenc reads that the installed transformers has:
    the (table_size, d_model) of its default config is the shape of the model's own position
    embedding (built on the meta device): ELECTRA's is embedding_size wide, GPT-2's has
    n_positions rows."""
    import warnings

    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from posenc.facts.families import types_where

    learned = types_where(lambda f: f.scheme == "learned")
    checked, wrong = 0, []
    for mt in sorted(t for t in learned if t in CONFIG_MAPPING_NAMES):
        cfg = AutoConfig.for_model(mt)
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            try:
                model = AutoModel.from_config(cfg)
            except Exception:
                continue
        shapes = {
            tuple(m.weight.shape)
            for n, m in model.named_modules()
            if isinstance(m, torch.nn.Embedding)
            and n.rsplit(".", 1)[-1] in ("wpe", "position_embeddings", "embed_positions")
            and "vision" not in n
        }
        if not shapes:
            continue
        learned = read_positions(cfg.to_dict()).learned or {}  # type: ignore[assignment]
        ours = (learned.get("table_size"), learned.get("d_model"))  # type: ignore[attr-defined]
        checked += 1
        if ours not in shapes:
            wrong.append(f"{mt}: posenc {ours}, model {sorted(shapes)}")
    assert not wrong, wrong
    assert checked >= 8, checked


def _posenc_tables(mp, layer_type: str | None, positions: torch.Tensor):
    """posenc's float64 cos/sin for a read config, as the rope endpoint builds them."""
    f = rope_request_fields(mp, layer_type)
    scaling = RopeScaling.from_dict(f["scaling"]) if f["scaling"] else None
    return rope_cos_sin(positions, rotary_dim=f["rotary_dim"], base=f["base"],
                        layout=f["layout"], scaling=scaling, exponent_dim=f["exponent_dim"],
                        rotation=f["rotation"], dtype=torch.float64)  # fmt: skip


def test_nanochat_rotates_by_minus_theta_as_its_own_apply_function() -> None:
    """nanochat's ``rotate_half`` is ``cat(x2, −x1)`` (modeling_nanochat.py): its attention
    rotates by ``−θ``. posenc reads ``rotation: negative`` from the model type, and its tables
    (``sin`` negated) applied by Llama's formula give what NanoChat's own rotary module and
    ``apply_rotary_pos_emb`` give a random query, to float32 rounding."""
    from transformers.models.nanochat import modeling_nanochat as m

    from posenc.rope import apply_rope

    cfg = AutoConfig.for_model("nanochat")
    mp = read_positions(cfg.to_dict())
    assert mp.rotation == "negative" and mp.to_dict()["rotation"] == "negative"
    assert mp.rotated_channels == "leading"
    rot = m.NanoChatRotaryEmbedding(config=cfg)  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, len(POSITIONS), mp.head_dim, generator=gen)  # (B, H, T, Dh)
    cos_hf, sin_hf = rot(q, POSITIONS[None])
    want, _ = m.apply_rotary_pos_emb(q, q, cos_hf, sin_hf)
    tab = _posenc_tables(mp, None, POSITIONS)
    got = apply_rope(q.double(), tab.cos, tab.sin, layout=mp.layout)  # type: ignore[arg-type]
    torch.testing.assert_close(got.float(), want, rtol=0, atol=1e-4)
    # the sign matters: the positive rotation is another matrix
    plain = rope_cos_sin(POSITIONS, rotary_dim=mp.rotary_dim, base=10000.0, dtype=torch.float64)
    assert (apply_rope(q.double(), plain.cos, plain.sin).float() - want).abs().max() > 0.5


def test_odd_rotary_width_equals_the_models_rotary_embedding() -> None:
    """GLM-4-MoE: head_dim 42 x partial_rotary_factor 0.5 = 21. transformers builds 11
    frequencies ``base^(−2i/21)``, a 22-wide table that its apply function rotates. posenc
    reads rotary_dim 22 with exponent_dim 21: inv_freq, cos and sin equal the model's rotary
    module, and its apply function's output on a random query equals posenc's."""
    from transformers.models.glm4_moe import modeling_glm4_moe as m

    from posenc.rope import apply_rope

    cfg = AutoConfig.for_model("glm4_moe")
    mp = read_positions(cfg.to_dict())
    layer = next(iter(mp.rope.values()))
    assert (layer.head_dim, layer.rotary_dim, layer.exponent_dim) == (42, 22, 21)
    assert layer.to_dict()["exponent_dim"] == 21
    assert mp.rotary_dim == 22 and any("exponent_dim" in w for w in mp.warnings)
    rot = m.Glm4MoeRotaryEmbedding(config=cfg)  # type: ignore[arg-type]
    tab = _posenc_tables(mp, None, POSITIONS)
    assert rot.inv_freq.shape == (11,)
    torch.testing.assert_close(tab.inv_freq.float(), rot.inv_freq, rtol=2e-6, atol=0)
    # independent: base^(-2i/21) for i = 0..10, in float64
    i = torch.arange(11, dtype=torch.float64)
    torch.testing.assert_close(tab.inv_freq, 10000.0 ** (-2 * i / 21), rtol=1e-15, atol=0)
    cos_hf, sin_hf = rot(torch.zeros(1), POSITIONS[None])
    assert cos_hf.shape[-1] == 22 and mp.layout == "half"
    torch.testing.assert_close(tab.cos.float(), cos_hf[0], rtol=0, atol=2e-5)
    torch.testing.assert_close(tab.sin.float(), sin_hf[0], rtol=0, atol=2e-5)
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, len(POSITIONS), 42, generator=gen)
    want, _ = m.apply_rotary_pos_emb(q, q, cos_hf, sin_hf)
    got = apply_rope(q.double(), tab.cos, tab.sin, layout=mp.layout)  # type: ignore[arg-type]
    torch.testing.assert_close(got.float(), want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("layer_type", ["main", "compress"])
def test_deepseek_v4_rotates_the_trailing_channels(layer_type: str) -> None:
    """DeepSeek-V4's ``apply_rotary_pos_emb`` rotates the last ``2·len(cos)`` channels of its
    512-wide ``[nope | rope]`` heads, pairs interleaved. posenc reports
    ``rotated_channels: trailing`` and ``apply_rope(..., rotated_channels="trailing")`` of its
    table gives what the model's rotary module and apply function give a random query."""
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m

    from posenc.rope import apply_rope

    cfg = AutoConfig.for_model("deepseek_v4")
    mp = read_positions(cfg.to_dict())
    assert mp.rotated_channels == "trailing" and mp.to_dict()["rotated_channels"] == "trailing"
    assert mp.layout == "interleaved" and mp.rotation == "positive"
    rot = m.DeepseekV4RotaryEmbedding(config=cfg)  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2, len(POSITIONS), 512, generator=gen)
    cos_hf, sin_hf = rot(x, POSITIONS[None], layer_type=layer_type)
    want = m.apply_rotary_pos_emb(x, cos_hf, sin_hf)
    tab = _posenc_tables(mp, layer_type, POSITIONS)
    got = apply_rope(x.double(), tab.cos, tab.sin, layout=mp.layout, rotated_channels="trailing")  # type: ignore[arg-type]
    torch.testing.assert_close(got.float(), want, rtol=0, atol=1e-4)
    assert torch.equal(got[..., :448].float(), x[..., :448])  # the nope channels pass through
    leading = apply_rope(x.double(), tab.cos, tab.sin, layout=mp.layout)  # type: ignore[arg-type]
    assert (leading.float() - want).abs().max() > 0.5


@pytest.mark.parametrize(
    ("model_type", "rotary"),
    [
        ("t5gemma", "T5GemmaRotaryEmbedding"),  # encoder-decoder: meta .item() in its mask
        ("bamba", "BambaRotaryEmbedding"),  # hybrid: its cache refuses get_seq_length
        ("moshi", "MoshiRotaryEmbedding"),  # meta .item()
        ("jetmoe", "JetMoeRotaryEmbedding"),  # its router stops between module and apply
        ("idefics", "IdeficsRotaryEmbedding"),  # multimodal: needs pixel_values
        ("gemma4_unified_assistant", "Gemma4UnifiedTextRotaryEmbedding"),  # q and k apart
    ],
)
def test_sweep_drives_the_attention_of_models_whose_forward_stops(
    model_type: str, rotary: str
) -> None:
    """Text models whose forward on the meta device stops before their attention applies the
    rotary: the probe rebuilds the rotary module they built and runs the apply function their
    attention calls (``apply_rotary_pos_emb(q, k, cos, sin)``, or Gemma 4's per-tensor call)
    on identity vectors. The rotation equals posenc's table for the default config, per layer
    type, and is not the identity past position 0."""
    from tests.lib.transformers_probe import NotProbed, shallow

    full = AutoConfig.for_model(model_type)
    try:
        mp, refused, _cfg, rotations = _sweep_one(shallow(full))
    except NotProbed:  # as the sweep: Gemma 4's KV sharing needs its whole depth
        mp, refused, _cfg, rotations = _sweep_one(full)
    assert refused is None
    for lt, rot in rotations.items():
        assert rot.rotary == rotary
        ours = _posenc_rotation(mp, lt, rot.position_rows, rot.matrices.shape[-1])
        torch.testing.assert_close(ours, rot.matrices, rtol=0, atol=2e-5)
        assert (rot.matrices[5] - torch.eye(rot.matrices.shape[-1])).abs().max() > 0.1
