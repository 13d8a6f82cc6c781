"""vLLM-only RoPE types read from the configs that use them (``engine: "vllm"``), and what
transformers does with the same configs.

References, each independent of the code under test:

- vLLM 0.32.0's own caches: ``tests/lib/test_rope_vllm.py`` checks every case of
  ``tests/fixtures/vllm/tables.json`` (Hunyuan-7B, HunyuanOCR, ``ntk`` fixed and mixed, the five
  caches of Qwen2.5-7B-Instruct-1M);
- closed forms written here in Python floats and ints: NTK-alpha's base, NTK's frequencies,
  the positions of ``DualChunkRotaryEmbedding``'s caches (``dual_chunk_rope.py``), XD-RoPE's
  section split (vLLM's ``xdrope.py``: not in 0.32, read from its main branch);
- ``math.cos`` / ``math.sin`` of ``fl(p·w)`` element by element, at positions up to 2^20;
- transformers 5.24's own modules built from the configs with no weights
  (``HunYuanDenseV1RotaryEmbedding``, ``HunYuanVLRotaryEmbedding``, ``Qwen2RotaryEmbedding``,
  ``LlamaRotaryEmbedding``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from posenc import resolve
from posenc.core.errors import InvalidArgument
from posenc.explain.vllm_compare import compare_engines, positions_for_engine
from posenc.facts.model_configs import model_config, vllm_config
from posenc.readers.hf.positions import read_positions
from posenc.rope.vllm import dual_chunk_positions, vllm_for_fields, xdrope_cos_sin
from posenc.rope_kinds.kind import ROPE
from posenc.rope_kinds.kind import ROPE as KIND

F64 = torch.float64
QWEN_1M = "qwen2.5-7b-instruct-1m"
CHUNK, LOCAL = 262144, 8192
SPAN = CHUNK - LOCAL  # 253,952


def _fields(config: dict[str, Any], engine: str = "vllm", **given: Any) -> dict[str, Any]:
    body = {"config": config, "engine": engine, "dtype": "float64", **given}
    return resolve.resolve_fields(ROPE, body)


def _ntk_config(**rope: Any) -> dict[str, Any]:
    config = model_config("llama-2-7b")
    config["rope_scaling"] = {"rope_type": "ntk", **rope}
    return config


def _long(config: dict[str, Any]) -> dict[str, Any]:
    """The config with room for positions up to 2^21 (vLLM's cache rows follow it)."""
    return {**config, "max_position_embeddings": 2**21}


def test_kind_module_is_the_registered_one() -> None:
    assert KIND is ROPE


# --- closed forms ----------------------------------------------------------------------------


def test_hunyuan_alpha_base_closed_form_both_engines() -> None:
    """Hunyuan-7B: ``10000·1000^(128/126)`` for transformers (its ``ntk_alpha``) and vLLM."""
    want = 10000.0 * 1000.0 ** (128 / 126)
    exps = [2 * i / 128 for i in range(64)]
    closed = torch.tensor([1.0 / want**e for e in exps], dtype=F64)
    for engine in ("transformers", "vllm"):
        f = _fields(vllm_config("hunyuan-7b"), engine, positions=[0])
        if engine == "vllm":
            rope = vllm_for_fields(f)
            assert (rope.rope_type, rope.rows) == ("dynamic_alpha", 262144)
            inv = rope.inv_freq
        else:
            assert f["base"] == pytest.approx(want, rel=1e-15)
            assert f["scaling"] is None
            inv = resolve.compute(ROPE, f)["inv_freq"]
        torch.testing.assert_close(inv, closed, rtol=1e-14, atol=0)


@pytest.mark.parametrize("mixed_b", [None, 0.625])
def test_ntk_frequencies_closed_form(mixed_b: float | None) -> None:
    """vLLM's NTKScalingRotaryEmbedding: fixed ``(f·θ)^(−2i/R) / f^(2/R)``; mixed
    ``θ^(−2i/R) / exp(a·m^b)``, ``a = ln f / (R/2)^b``, ``m = 1 … R/2``."""
    r, theta, f = 128, 10000.0, 4.0
    given = {"factor": f} if mixed_b is None else {"factor": f, "mixed_b": mixed_b}
    rope = vllm_for_fields(_fields(_ntk_config(**given), positions=[0]))
    if mixed_b is None:
        want = [(f * theta) ** (-2 * i / r) / f ** (2 / r) for i in range(r // 2)]
    else:
        a = math.log(f) / (r / 2) ** mixed_b
        want = [theta ** (-2 * i / r) / math.exp(a * (i + 1) ** mixed_b) for i in range(r // 2)]
    torch.testing.assert_close(rope.inv_freq, torch.tensor(want, dtype=F64), rtol=1e-14, atol=0)
    assert (rope.rope_type, rope.rows, rope.attention_scaling) == ("ntk", 4096, 1.0)


def test_dual_chunk_positions_hand_worked() -> None:
    """``dual_chunk_rope.py``: q ``r``; qc ``min(r + L, C)``; k ``r mod L``; qc_no_clamp
    ``r + L``; q_inter ``r + C`` (C 262,144, L = C − 8,192 = 253,952)."""
    rows = [0, 1, 8191, 8192, 253951, 253952, 1009999]
    want = {
        "q": rows,
        "qc": [min(r + SPAN, CHUNK) for r in rows],
        "k": [r % SPAN for r in rows],
        "qc_no_clamp": [r + SPAN for r in rows],
        "q_inter": [r + CHUNK for r in rows],
    }
    assert want["qc"][:4] == [253952, 253953, 262143, 262144]  # clamped from row 8192 on
    for cache, expected in want.items():
        got = dual_chunk_positions(torch.tensor(rows), cache, CHUNK, LOCAL)
        assert got.tolist() == expected, cache


def test_xdrope_sections_hand_worked() -> None:
    """vLLM's XDRotaryEmbedding: part ``i`` of the half (xdrope_section) at position row
    ``i``; here four parts of one frequency each, rows 1, 2, 3, 4 (frequencies 1, ½, ¼, ⅛)."""
    inv = torch.tensor([1.0, 0.5, 0.25, 0.125], dtype=F64)
    rows = torch.tensor([[1], [2], [3], [4]])
    cos, sin = xdrope_cos_sin(rows, inv, [1, 1, 1, 1])
    angles = [1 * 1.0, 2 * 0.5, 3 * 0.25, 4 * 0.125]
    torch.testing.assert_close(cos, torch.tensor([[math.cos(a) for a in angles]], dtype=F64))
    torch.testing.assert_close(sin, torch.tensor([[math.sin(a) for a in angles]], dtype=F64))


# --- float64 exactness up to 2^20 ------------------------------------------------------------

STARTS = [0, 65, 2**20 - 70]

EXACT = [
    ("hunyuan-7b", lambda: _long(vllm_config("hunyuan-7b")), None),
    ("hunyuan-ocr", lambda: _long(vllm_config("hunyuan-ocr")), None),
    ("ntk fixed", lambda: _long(_ntk_config(factor=4.0)), None),
    ("ntk mixed", lambda: _long(_ntk_config(factor=4.0, mixed_b=0.625)), None),
    *[
        (f"dual chunk {c}", lambda: _long(model_config(QWEN_1M)), c)
        for c in ("k", "q", "qc", "qc_no_clamp", "q_inter")
    ],
]


@pytest.mark.parametrize(("name", "make", "cache"), EXACT, ids=[e[0] for e in EXACT])
@pytest.mark.parametrize("start", STARTS)
def test_float64_tables_are_cos_and_sin_of_the_float64_angles(
    name: str, make: Any, cache: str | None, start: int
) -> None:
    """Whole tables and row blocks (the streamed path) within a few float64 ulps of
    ``cos(fl(m·w))``, ``m`` the position the row holds, up to 2^20; both halves equal."""
    config = make()
    rows = list(range(start, start + 70))
    if cache in ("q", "qc", "qc_no_clamp", "q_inter"):
        rows = [r % SPAN for r in rows]  # those caches have L rows
    given = {"positions": rows} if cache is None else {"positions": rows, "dual_chunk_cache": cache}
    f = _fields(config, **given)
    rope = vllm_for_fields(f)
    out = resolve.compute(ROPE, f)
    held = rows if cache is None else dual_chunk_positions(torch.tensor(rows), cache, CHUNK, LOCAL)
    w = rope.inv_freq.tolist()
    cos = torch.tensor([[math.cos(float(m) * x) for x in w] for m in list(held)], dtype=F64)
    sin = torch.tensor([[math.sin(float(m) * x) for x in w] for m in list(held)], dtype=F64)
    half = len(w)
    for which, ref in (("cos", cos), ("sin", sin)):
        table = out[which]
        assert torch.equal(table[:, :half], table[:, half:])
        torch.testing.assert_close(table[:, :half], ref, rtol=0, atol=4e-16)
        blocks = ROPE.blocks(f, resolve.context(f))[which]  # type: ignore[misc]
        streamed = torch.empty(len(rows), 2 * half, dtype=F64)
        blocks.fill(0, 33, streamed[:33])
        blocks.fill(33, len(rows), streamed[33:])
        assert torch.equal(streamed, table)


# --- what transformers does with these configs -----------------------------------------------


def _hf(config: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model(**config).get_text_config()


def test_transformers_engine_equals_hunyuans_own_rotary_module() -> None:
    """Hunyuan-7B with engine transformers: ``HunYuanDenseV1RotaryEmbedding`` (ntk_alpha).
    Its ``compute_ntk_alpha_rope_parameters`` reads ``config.head_dim``, which
    HunYuanDenseV1Config leaves None for a file without the key (as quoted): the module is
    given ``hidden_size / num_attention_heads`` = 128, which posenc reads."""
    from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import (
        HunYuanDenseV1RotaryEmbedding,
    )

    pos = [0, 1, 2, 63, 1000, 4095]
    rot = HunYuanDenseV1RotaryEmbedding(_hf({**vllm_config("hunyuan-7b"), "head_dim": 128}))
    cos, sin = rot(torch.zeros(1), torch.tensor([pos]))
    out = resolve.compute(ROPE, _fields(vllm_config("hunyuan-7b"), "transformers", positions=pos))
    tol = 1e-6 + 3e-7 * max(pos)
    torch.testing.assert_close(out["cos"], cos[0].double(), rtol=0, atol=tol)
    torch.testing.assert_close(out["sin"], sin[0].double(), rtol=0, atol=tol)


def test_hunyuan_ocr_four_rows_both_engines() -> None:
    """Four position rows (P/W/H/T): engine transformers equals ``HunYuanVLRotaryEmbedding``
    (sections doubled over the whole ``cat(θ, θ)`` width, so a pair's halves follow different
    rows); engine vllm follows XDRotaryEmbedding (the same part in both halves). They agree on
    text (four equal rows) and differ on an image grid."""
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLRotaryEmbedding

    config = vllm_config("hunyuan-ocr")
    grid = [[0, 5, 9, 100, 3000], [0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [0, 0, 1, 1, 30000]]
    rot = HunYuanVLRotaryEmbedding(_hf(vllm_config("hunyuan-ocr")))
    cos, sin = rot(torch.zeros(1), torch.tensor(grid)[:, None, :])
    tf = resolve.compute(ROPE, _fields(config, "transformers", positions=grid))
    torch.testing.assert_close(tf["cos"], cos[0].double(), rtol=0, atol=1e-6 + 3e-7 * 30000)
    torch.testing.assert_close(tf["sin"], sin[0].double(), rtol=0, atol=1e-6 + 3e-7 * 30000)
    f = _fields(config, positions=grid)
    vl = resolve.compute(ROPE, f)
    assert ROPE.make_meta(f)["xdrope_section"] == [16, 16, 16, 16]
    assert (vl["cos"] - tf["cos"]).abs().max() > 0.5  # the engines' rules differ on images
    text = [[3, 4, 5]] * 4
    a = resolve.compute(ROPE, _fields(config, "transformers", positions=text))
    b = resolve.compute(ROPE, _fields(config, positions=text))
    c = resolve.compute(ROPE, _fields(config, positions=[3, 4, 5]))
    torch.testing.assert_close(a["cos"], b["cos"], rtol=0, atol=1e-15)
    assert torch.equal(b["cos"], c["cos"])


def test_hunyuan_ocr_engine_precision_equals_the_module_bit_for_bit() -> None:
    """``precision: "engine"`` with engine transformers is ``HunYuanVLRotaryEmbedding``'s own
    float32 output (``torch.equal``): four image-like rows and text rows, at positions up to
    131,071 (float32 angles there depart from the exact table); engine vllm is a 422 (vLLM
    0.32 runs HunYuanVL on its Transformers backend), and so is the interleaved layout."""
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLRotaryEmbedding

    config = _long(vllm_config("hunyuan-ocr"))
    rot = HunYuanVLRotaryEmbedding(_hf(_long(vllm_config("hunyuan-ocr"))))
    grid = [
        [0, 1, 2, 5000, 100000, 131071],
        [0, 3, 1, 7, 9, 131071],
        [0, 2, 2, 12345, 5, 1],
        [0, 1, 9, 4, 8, 77],
    ]
    text = [*range(0, 131072, 997), 131071]
    for rows, ids in ((grid, torch.tensor(grid)), (text, torch.tensor([text] * 4))):
        cos, sin = rot(torch.zeros(1), ids[:, None, :])
        f = _fields(config, "transformers", positions=rows, precision="engine", dtype="float32")
        out = resolve.compute(ROPE, f)
        assert torch.equal(out["cos"], cos[0]) and torch.equal(out["sin"], sin[0])
        assert torch.equal(out["inv_freq"], rot.inv_freq)
        exact = resolve.compute(ROPE, _fields(config, "transformers", positions=rows))
        assert (exact["cos"] - cos[0].double()).abs().max() > 1e-4  # float32 angles
    from posenc.engines import ENGINES

    f = _fields(config, "transformers", seq_len=3000, precision="engine", dtype="float32")
    whole = resolve.compute(ROPE, f)  # text rows stream: blocks are the whole table's bytes
    for name, blocks in ENGINES[f["engine"]].blocks(f, device=None, dtype=torch.float32).items():
        got = torch.empty(blocks.shape, dtype=blocks.dtype).reshape(-1, blocks.row_elements)
        for start in range(0, blocks.rows, 777):
            blocks.fill_rows(start, min(start + 777, blocks.rows), got[start : start + 777])
        assert torch.equal(got.reshape(blocks.shape), whole[name]), name
    with pytest.raises(InvalidArgument, match="Transformers backend") as err:
        _fields(config, positions=grid, precision="engine")
    assert err.value.field == "precision"
    with pytest.raises(InvalidArgument) as err:
        _fields(config, "transformers", positions=grid, precision="engine", layout="interleaved")
    assert err.value.field == "layout"


def test_qwen_1m_transformers_ignores_dual_chunk() -> None:
    """``Qwen2RotaryEmbedding`` is plain RoPE of theta 1e7 at every position; engine
    transformers serves that, and a dual_chunk_cache without engine vllm is refused."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    pos = [0, 1, 300000]
    rot = Qwen2RotaryEmbedding(_hf(model_config(QWEN_1M)))
    assert rot.rope_type == "default"
    cos, _ = rot(torch.zeros(1), torch.tensor([pos]))
    out = resolve.compute(ROPE, _fields(model_config(QWEN_1M), "transformers", positions=pos))
    torch.testing.assert_close(out["cos"], cos[0].double(), rtol=0, atol=0.1)  # float32 at 3e5
    mp = read_positions(model_config(QWEN_1M))
    assert any("dual_chunk_attention_config" in w for w in mp.warnings)
    with pytest.raises(InvalidArgument, match="engine vllm") as err:
        _fields(model_config(QWEN_1M), "transformers", positions=[0], dual_chunk_cache="k")
    assert err.value.field == "dual_chunk_cache"


def test_ntk_is_refused_by_transformers_and_its_module_fails() -> None:
    """transformers 5.24 has no ``ntk`` rule: LlamaRotaryEmbedding raises KeyError; posenc
    answers 422 naming engine vllm, and /v1/configs/positions says what vLLM reads."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    with pytest.raises(KeyError):
        LlamaRotaryEmbedding(_hf(_ntk_config(factor=4.0)))
    with pytest.raises(InvalidArgument, match='engine: "vllm"') as err:
        _fields(_ntk_config(factor=4.0), "transformers", positions=[0])
    assert err.value.field == "engine"
    with pytest.raises(InvalidArgument, match="nothing to compare"):
        compare_engines(_ntk_config(factor=4.0), seq_len=4)
    shown = positions_for_engine(_ntk_config(factor=4.0, mixed_b=0.5))["rope"]["full_attention"]
    assert shown["rope_type"] == "ntk"
    assert shown["vllm"] == {
        "rope_type": "ntk",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "mixed_b": 0.5,
    }
    vl = positions_for_engine(_ntk_config(factor=4.0), "vllm")["rope"]["full_attention"]
    assert (vl["vllm_rope_type"], vl["vllm_rows"]) == ("ntk", 4096)


# --- the dual-chunk caches through the kind --------------------------------------------------


def test_dual_chunk_rows_meta_and_refusals() -> None:
    config = model_config(QWEN_1M)
    f = _fields(config, seq_len=4)
    meta = ROPE.make_meta(f)
    assert meta["vllm_rope"] == "dual_chunk"
    assert (meta["dual_chunk_cache"], meta["chunk_size"], meta["local_size"]) == ("k", CHUNK, LOCAL)
    assert meta["vllm_rows"] == 1010000
    assert (
        ROPE.make_meta(_fields(config, seq_len=4, dual_chunk_cache="q_inter"))["vllm_rows"] == SPAN
    )
    with pytest.raises(InvalidArgument, match="253952 rows"):
        _fields(config, positions=[SPAN], dual_chunk_cache="qc")
    _fields(config, positions=[SPAN - 1], dual_chunk_cache="qc")
    with pytest.raises(InvalidArgument, match="1010000 rows"):
        _fields(config, positions=[1010000])
    with pytest.raises(InvalidArgument, match="single cache") as err:
        _fields(vllm_config("hunyuan-7b"), positions=[0], dual_chunk_cache="k")
    assert err.value.field == "dual_chunk_cache"


def test_compare_names_the_dual_chunk_rule() -> None:
    """The key cache equals plain RoPE below the chunk span and wraps at 253,952."""
    config = model_config(QWEN_1M)
    below = compare_engines(config, positions=[0, 1000, SPAN - 1])
    assert below["differences"] == []
    out = compare_engines(config, positions=[0, SPAN - 1, SPAN, 500000])
    assert out["cos"]["first_position"] == SPAN
    assert out["differences"][0].startswith("Dual chunk attention")
    assert out["meta"]["vllm_rope_type"] == "dual_chunk"


def test_four_rows_need_an_xdrope_config() -> None:
    rows = [[0, 1]] * 4
    with pytest.raises(InvalidArgument, match="XD-RoPE") as err:
        _fields(vllm_config("hunyuan-7b"), positions=rows)
    assert err.value.field == "positions"
    with pytest.raises(InvalidArgument, match="takes 4 position rows"):
        _fields(vllm_config("hunyuan-ocr"), positions=[[0, 1]] * 3)
