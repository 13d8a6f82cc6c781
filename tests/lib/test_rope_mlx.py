"""MLX's RoPE (:mod:`posenc.rope.mlx`) against MLX's own output.

The fixture (tests/fixtures/mlx/tables.json) holds ``mx.fast.rope`` output on the CPU through
mlx-lm's ``initialize_rope`` for every type it dispatches (default, linear, llama3, yarn,
longrope, dynamic, proportional), recorded by scripts/record_mlx_tables.py at positions up to
1,000,000 (dynamic NTK: rows of one call over 131,073 positions), with each module's own
``freqs`` and input magnitude. posenc's float32 replay must be within 2 float32 ulp of the
tables and equal the ``freqs`` bit for bit; MLX's ``exp`` is replayed bit for bit (checked live
where ``mlx`` is importable, as is the whole replay at other positions).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.engines import ENGINES
from posenc.resolve import compute, resolve_fields
from posenc.rope.mlx import (
    MlxRope,
    mlx_exact_tables,
    mlx_exp,
    mlx_freqs,
    mlx_magnitude,
    mlx_rope_for,
    mlx_rope_tables,
)
from posenc.rope_kinds.kind import ROPE

FIXTURE = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "mlx" / "tables.json").read_text()
)
CASES = {c["name"]: c for c in FIXTURE["cases"]}


def _positions(case: dict[str, Any]) -> list[int]:
    return list(case.get("positions", FIXTURE["positions"]))


def _array(case: dict[str, Any], which: str) -> np.ndarray:
    half = case["dims"] // 2
    return np.frombuffer(base64.b64decode(case[which]), dtype="<f4").reshape(-1, half)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia = a.astype("<f4").view(np.int32).astype(np.int64)
    ib = b.astype("<f4").view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(2**31) - ia, ia)
    ib = np.where(ib < 0, -(2**31) - ib, ib)
    return np.abs(ia - ib)


def _rope(case: dict[str, Any]) -> MlxRope:
    return mlx_rope_for(
        rotary_dim=case["dims"],
        base=case["base"],
        layout="interleaved" if case["traditional"] else "half",
        scaling=case["scaling"],
        max_position_embeddings=case["max_position_embeddings"],
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_precision_within_two_ulp_of_mlx(name: str) -> None:
    case = CASES[name]
    cos, sin = mlx_rope_tables(torch.tensor(_positions(case)), _rope(case), case.get("seq_len"))
    assert int(ulp_distance(cos.numpy(), _array(case, "cos")).max()) <= 2
    assert int(ulp_distance(sin.numpy(), _array(case, "sin")).max()) <= 2


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "freqs" in c))
def test_module_freqs_bit_for_bit(name: str) -> None:
    """Llama3RoPE's, YarnRoPE's, SuScaledRoPE's and ProportionalRoPE's ``_freqs``: same bytes."""
    case = CASES[name]
    ours = mlx_freqs(_rope(case))
    assert ours is not None
    theirs = np.frombuffer(base64.b64decode(case["freqs"]), dtype="<f4")
    assert ours.tobytes() == theirs.tobytes()


@pytest.mark.parametrize("name", sorted(CASES))
def test_magnitude_is_the_module_own(name: str) -> None:
    assert mlx_magnitude(_rope(CASES[name])) == CASES[name]["magnitude"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_is_the_float64_rule(name: str) -> None:
    """MLX's float32 angles drift from the float64 rule by about p · 2^-23 at most here."""
    case = CASES[name]
    positions = _positions(case)
    cos, _ = mlx_exact_tables(torch.tensor(positions), _rope(case), case.get("seq_len"))
    got = torch.from_numpy(_array(case, "cos").astype(np.float64))
    bound = 4e-7 * (torch.tensor(positions, dtype=torch.float64)[:, None] + 1)
    assert bool(((cos - got).abs() <= bound * case["magnitude"]).all())


def _kind_cos(fields: dict[str, Any], case: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
    """The rope kind's ``(T, R/2)`` engine cos (one of each pair) and its ``meta``."""
    p = resolve_fields(ROPE, {**fields, "engine": "mlx", "precision": "engine"})
    cos = dict(compute(ROPE, p))["cos"].numpy()
    half = case["dims"] // 2
    return (cos[:, 0::2] if case["traditional"] else cos[:, :half]), ROPE.meta(p)  # type: ignore[misc]


def test_the_rope_kind_with_engine_mlx() -> None:
    case = CASES["gemma-3-4b full_attention linear 8"]
    fields = {"preset": "gemma-3-4b", "positions": FIXTURE["positions"], "engine": "mlx"}
    cos, meta = _kind_cos(fields, case)
    assert int(ulp_distance(cos, _array(case, "cos")).max()) <= 2
    assert meta["engine"] == "mlx" and meta["mlx"]["scale"] == 0.125
    exact = dict(compute(ROPE, resolve_fields(ROPE, fields)))
    assert not np.array_equal(exact["cos"][:, :128].numpy(), cos)


@pytest.mark.parametrize(
    ("preset", "name", "rope_type"),
    [
        ("llama-3.1-8b", "llama-3.1-8b llama3", "llama3"),
        ("phi-3.5-mini", "phi-3.5-mini longrope", "longrope"),
        ("deepseek-v3", "deepseek-v3 yarn 40 traditional", "yarn"),
        ("gpt-oss-20b", "gpt-oss-20b yarn 32", "yarn"),
    ],
)
def test_published_presets_through_the_rope_kind(preset: str, name: str, rope_type: str) -> None:
    """Each preset's reading gives mlx-lm's arguments, and its table is MLX's within 2 ulp,
    the module's magnitude included (``meta.attention_scaling``)."""
    case = CASES[name]
    cos, meta = _kind_cos({"preset": preset, "positions": _positions(case)}, case)
    assert int(ulp_distance(cos, _array(case, "cos")).max()) <= 2
    assert meta["mlx"]["rope_type"] == rope_type
    assert meta["attention_scaling"] == case["magnitude"]


def test_qwen25_yarn_and_dynamic_through_the_rope_kind() -> None:
    """A config with Qwen2.5's YaRN block, and dynamic NTK over a whole sequence of 131,073."""
    from posenc.facts.model_configs import model_config

    config = model_config("qwen2.5-7b")
    config["rope_scaling"] = {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    }
    config["max_position_embeddings"] = 32768
    case = CASES["qwen2.5-7b yarn 4"]
    cos, meta = _kind_cos({"config": config, "positions": _positions(case)}, case)
    assert int(ulp_distance(cos, _array(case, "cos")).max()) <= 2
    assert meta["attention_scaling"] == pytest.approx(1.138629436111989, abs=0)
    config = model_config("llama-2-7b")
    config["rope_scaling"] = {"type": "dynamic", "factor": 2.0}
    config["max_position_embeddings"] = 4096
    for name in ("dynamic 2 long", "dynamic 2 short"):
        case = CASES[name]
        cos, meta = _kind_cos({"config": config, "positions": _positions(case)}, case)
        assert int(ulp_distance(cos, _array(case, "cos")).max()) <= 2, name
        assert meta["mlx"]["max_position_embeddings"] == 4096


def test_dynamic_blocks_see_the_whole_table_length() -> None:
    """Row blocks of a dynamic NTK table use the whole table's length, not the block's."""
    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": 512,
        "num_attention_heads": 4,
        "rope_theta": 10000.0,
        "max_position_embeddings": 64,
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
    }
    p = resolve_fields(
        ROPE, {"config": config, "seq_len": 300, "engine": "mlx", "precision": "engine"}
    )
    whole = dict(compute(ROPE, p))
    for name, blocks in ENGINES[p["engine"]].blocks(p, device=None, dtype=torch.float32).items():
        out = torch.empty(blocks.shape, dtype=blocks.dtype).reshape(-1, blocks.row_elements)
        for start in range(0, blocks.rows, 37):
            stop = min(start + 37, blocks.rows)
            blocks.fill_rows(start, stop, out[start:stop])
        assert torch.equal(out.reshape(blocks.shape), whole[name]), name
    short = dict(compute(ROPE, {**p, "seq_len": 40}))
    assert not torch.equal(short["cos"], whole["cos"][:40])  # base rescaled past 64 only


def test_refusals() -> None:
    with pytest.raises(InvalidArgument) as err:
        mlx_rope_for(rotary_dim=64, base=1e4, layout="half", scaling={"type": "xdrope"})
    assert err.value.field == "engine" and "xdrope" in str(err.value)
    with pytest.raises(InvalidArgument) as err:
        mlx_rope_for(
            rotary_dim=64, base=1e4, layout="half", scaling={"type": "dynamic", "factor": 2}
        )
    assert err.value.field == "scaling"


def test_mlx_exp_live_where_importable() -> None:
    """MLX's own exp, bit for bit."""
    mx = pytest.importorskip("mlx.core")
    x = np.random.default_rng(0).uniform(-87, 10, 100_000).astype(np.float32)
    assert np.array_equal(np.array(mx.exp(mx.array(x))), mlx_exp(x))


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "seq_len" not in c))
def test_live_where_importable(name: str) -> None:
    """mlx-lm's module itself at positions the fixture does not hold: within 2 ulp."""
    mx = pytest.importorskip("mlx.core")
    from mlx_lm.models.rope_utils import initialize_rope

    case = CASES[name]
    dims, traditional = case["dims"], case["traditional"]
    module = initialize_rope(
        dims, case["base"], traditional, case["scaling"], case["max_position_embeddings"]
    )
    positions = np.random.default_rng(1).integers(0, 131_073, 64)
    ours, _ = mlx_rope_tables(torch.from_numpy(positions), _rope(case))
    x = np.zeros((1, 1, 1, dims), dtype=np.float32)
    if traditional:
        x[..., 0::2] = 1.0
    else:
        x[..., : dims // 2] = 1.0
    for row, p in enumerate(positions.tolist()):
        y = np.array(module(mx.array(x), offset=p))[0, 0, 0]
        theirs = y[0::2] if traditional else y[: dims // 2]
        assert int(ulp_distance(ours[row].numpy(), theirs).max()) <= 2, p
