"""``rotate`` with ``precision: "engine"`` against the engines' own recorded rotations.

- vLLM: tests/fixtures/apply/vllm.json, recorded by scripts/record_vllm_apply.py from the
  rotary class's own ``forward_native`` (``Phi3LongRoPEScaledRotaryEmbedding.forward``) on the
  CPU: bit for bit, in vLLM's channel order (pairs in place).
- MLX: tests/fixtures/apply/mlx.json, recorded by scripts/record_mlx_apply.py from mlx-lm's
  rope module (``mx.fast.rope``) as the model's mlx-lm file builds it: within 2 float32 ulp of
  each rotated pair's magnitude.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from posenc.rope_kinds.rotate import rotate
from tests.fixtures.apply.configs import vector_values

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "apply"


def _cases(engine: str) -> list[dict[str, Any]]:
    path = FIXTURES / f"{engine}.json"
    return json.loads(path.read_text())["cases"] if path.exists() else []


def _array(text: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").reshape(shape)


def _inputs(case: dict[str, Any], d: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    positions = case["positions"]
    t = len(positions[0]) if isinstance(positions[0], list) else len(positions)
    q = torch.tensor(vector_values(t * case["heads"] * d)).view(t, case["heads"], d)
    k = torch.tensor(vector_values(t * case["kv_heads"] * d, start=1)).view(t, case["kv_heads"], d)
    return q, k, t


def _request(case: dict[str, Any]) -> dict[str, Any]:
    req = {"config": case["config"], "positions": case["positions"]}
    for name in ("layer_type", "max_model_len"):
        if case.get(name) is not None:
            req[name] = case[name]
    return req


VLLM = _cases("vllm")


@pytest.mark.parametrize("case", VLLM, ids=[c["name"] for c in VLLM])
def test_vllm_engine_is_forward_native_bit_for_bit(case: dict[str, Any]) -> None:
    d = case["head_size"]
    q, k, t = _inputs(case, d)
    got = rotate(_request(case), q, k, engine="vllm", precision="engine")
    assert got["meta"]["layout"] == ("neox" if case["is_neox_style"] else "gptj")
    assert got["meta"]["rotary_dim"] == case["rotary_dim"]
    want_q = _array(case["q"], (t, case["heads"], d))
    want_k = _array(case["k"], (t, case["kv_heads"], d))
    assert np.array_equal(got["q"].numpy(), want_q), np.abs(got["q"].numpy() - want_q).max()
    assert np.array_equal(got["k"].numpy(), want_k)


def test_vllm_fixture_is_present() -> None:
    """The recorded cases cover the issue's models (the parametrized test would pass empty)."""
    names = {c["name"] for c in VLLM}
    assert {"llama-3.1-8b", "gpt-j-6b", "deepseek-v3", "qwen2-vl", "phi-3.5-mini long"} <= names


MLX = _cases("mlx")


def _ulp_bound(x: np.ndarray, layout: str, r: int) -> np.ndarray:
    """2 float32 ulp of each rotated pair's magnitude, per channel of the first ``r``."""
    rot = x[..., :r].astype(np.float64)
    if layout == "neox":
        a, b = rot[..., : r // 2], rot[..., r // 2 :]
        mag = np.sqrt(a * a + b * b)
        mag = np.concatenate([mag, mag], -1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        mag = np.repeat(np.sqrt(a * a + b * b), 2, -1)
    return 2 * np.spacing(mag.astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("case", MLX, ids=[c["name"] for c in MLX])
def test_mlx_engine_is_mx_fast_rope_within_2_ulp(case: dict[str, Any]) -> None:
    d = case["head_size"]
    q, k, _t = _inputs(case, d)
    got = rotate(_request(case), q, k, engine="mlx", precision="engine")
    layout = got["meta"]["layout"]
    assert layout == ("gptj" if case["traditional"] else "neox")
    r = got["meta"]["rotary_dim"]
    for name, x in (("q", got["q"]), ("k", got["k"])):
        want = _array(case[name], tuple(x.shape))
        mine = x.numpy()
        assert np.array_equal(mine[..., r:], want[..., r:])
        bound = _ulp_bound(want, layout, r)
        assert (np.abs(mine[..., :r].astype(np.float64) - want[..., :r]) <= bound).all()


def test_mlx_fixture_is_present() -> None:
    assert len(MLX) >= 5
