"""A RoPE scaling type is one module: defined below, in this file only, and registered for the
test, it is served by ``/v1/encodings/rope``, validated (its bounds and its own rule, 422 naming
the field), documented in ``/openapi.json`` and in vLLM's chain of types (``engine: vllm``,
its own class and cache rows), with values checked against its closed form.

The toy type ``halved`` divides every frequency by ``2·factor`` (``factor <= 16``); its vLLM
class ``HalvedRotaryEmbedding`` keeps ``2·max_position`` rows.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from torch import Tensor

from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.rope import RopeScaling, rope_inv_freq, scaling
from posenc.rope.parameters import parameter, parameters_of
from posenc.rope.vllm import vllm_classes, vllm_rope
from posenc.rope.vllm_cache import VllmRope, VllmServer
from posenc.rope_kinds.kind import with_current_scaling
from service.app import create_app
from service.config import Settings
from tests.helpers import json_tensor

# --- the whole scaling type: what a module posenc/rope/halved.py would hold -------------------


@dataclass(frozen=True)
class HalvedParams:
    """Every frequency divided by ``2·factor``."""

    factor: float = parameter("the divisor's half", required=True, exclusive_minimum=0)


def _validate(p: HalvedParams) -> None:
    if p.factor > 16:
        raise InvalidArgument(
            f"scaling.factor must be <= 16 for halved, got {p.factor}", field="scaling.factor"
        )


def _inv_freq(
    inv_freq: Tensor, rotary_dim: int, base: float, s: HalvedParams, seq_len: int | None
) -> tuple[Tensor, float]:
    return inv_freq / (2.0 * float(s.factor)), 1.0


def _vllm(
    inv_freq: Tensor, rotary_dim: int, base: float, scaling: Any, server: VllmServer
) -> VllmRope:
    factor = float(scaling["factor"])
    return VllmRope("halved", inv_freq / (2.0 * factor), 1.0, 2 * server.max_position)


HALVED = types.ModuleType("halved")
HALVED.NAME = "halved"  # type: ignore[attr-defined]
HALVED.LABEL = "Halved"  # type: ignore[attr-defined]
HALVED.Params = HalvedParams  # type: ignore[attr-defined]
HALVED.validate = _validate  # type: ignore[attr-defined]
HALVED.inv_freq = _inv_freq  # type: ignore[attr-defined]
HALVED.VLLM_CLASS = "HalvedRotaryEmbedding"  # type: ignore[attr-defined]
HALVED.vllm = _vllm  # type: ignore[attr-defined]

# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def halved() -> Iterator[None]:
    """The type registered, and the rope kind rebuilt from the types (restored after)."""
    order = list(kinds.REGISTRY.values())
    scaling.register_scaling_type(HALVED)

    def reregister(fresh: list[kinds.Kind]) -> None:
        for kind in order:
            kinds.unregister(kind.name)
        for kind in fresh:
            kinds.register(kind)

    try:
        # every kind with rope settings (rope, apply, shift, context parallel) takes the type
        reregister([with_current_scaling(kind) for kind in order])
        yield
    finally:
        scaling.unregister_scaling_type("halved")
        reregister(order)


def _closed_form(seq_len: int, dim: int, base: float, factor: float) -> np.ndarray:
    half = [[math.cos(p * base ** (-2 * i / dim) / (2 * factor)) for i in range(dim // 2)]
            for p in range(seq_len)]  # fmt: skip
    return np.array([row + row for row in half])  # half layout: cat(cos, cos)


def test_a_registered_type_is_served_validated_and_documented(halved: None) -> None:
    with TestClient(create_app(Settings())) as client:
        body = {"seq_len": 5, "head_dim": 8, "dtype": "float64"}
        r = client.post(
            "/v1/encodings/rope", json={**body, "scaling": {"type": "halved", "factor": 1.5}}
        )
        assert r.status_code == 200, r.text
        assert r.json()["meta"]["rope_type"] == "halved"
        cos = json_tensor(r.json(), "cos")
        np.testing.assert_allclose(cos, _closed_form(5, 8, 10000.0, 1.5), rtol=0, atol=1e-12)
        # the declared bound, checked by the request schema
        low = client.post(
            "/v1/encodings/rope", json={**body, "scaling": {"type": "halved", "factor": 0}}
        )
        assert low.status_code == 422, low.text
        assert low.json()["detail"][0]["loc"] == ["body", "scaling", "factor"]
        # the module's own rule, checked by the library
        high = client.post(
            "/v1/encodings/rope", json={**body, "scaling": {"type": "halved", "factor": 20}}
        )
        assert high.status_code == 422, high.text
        assert high.json()["field"] == "scaling.factor"
        assert "<= 16 for halved" in high.json()["detail"]
        spec = client.get("/openapi.json").json()
    members = spec["components"]["schemas"]["RopeScalingRequest"]["properties"]
    assert "halved" in members["type"]["enum"]
    assert "halved" in members["type"]["description"]
    assert {"type": "number", "exclusiveMinimum": 0} in members["factor"]["anyOf"]


def _halved_float32(dim: int, base: float, s: HalvedParams, length: int) -> Tensor:
    """The type's engine hook: transformers' float32 default ``inv_freq`` over ``2·factor``."""
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    inv: Tensor = 1.0 / (base**exponents) / (2.0 * float(s.factor))
    return inv


def test_engine_precision_needs_the_types_engine_hook(
    halved: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``transformers_float32`` the type's ``precision: "engine"`` is a 422 naming the
    engine and the type; with it (one more function in the module), it is served."""
    body = {"seq_len": 5, "head_dim": 8, "precision": "engine"}
    body["scaling"] = {"type": "halved", "factor": 1.5}
    with TestClient(create_app(Settings())) as client:
        r = client.post("/v1/encodings/rope", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "precision"
        assert "engine transformers" in r.json()["detail"] and "'halved'" in r.json()["detail"]
        r = client.post("/v1/encodings/rope", json={**body, "engine": "vllm"})
        assert r.status_code == 422, r.text
        assert "engine vllm" in r.json()["detail"] and "'halved'" in r.json()["detail"]
        monkeypatch.setattr(HALVED, "transformers_float32", _halved_float32, raising=False)
        r = client.post("/v1/encodings/rope", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["meta"]["precision"] == "engine"
    cos = json_tensor(r.json(), "cos")
    np.testing.assert_allclose(cos, _closed_form(5, 8, 10000.0, 1.5), rtol=0, atol=2e-7)


def test_the_library_follows_the_registry(halved: None) -> None:
    s = RopeScaling.from_dict({"type": "halved", "factor": 2.0})
    inv, scale = rope_inv_freq(8, 10000.0, s)
    expected = torch.tensor([10000.0 ** (-2 * i / 8) / 4 for i in range(4)], dtype=torch.float64)
    torch.testing.assert_close(inv, expected, rtol=0, atol=1e-15)
    assert scale == 1.0
    assert scaling.ROPE_PARAMETER_KEYS["halved"] == (("factor",), ())
    with pytest.raises(InvalidArgument, match="<= 16") as exc:
        RopeScaling(type="halved", factor=17.0)  # type: ignore[arg-type]
    assert exc.value.field == "scaling.factor"


def test_vllms_chain_follows_the_registry(halved: None) -> None:
    """vLLM's chain of types is read off the modules: the registered type is built by its own
    rule, in the library and through ``/v1/encodings/rope`` with ``engine: vllm``."""
    assert vllm_classes()["halved"] == "HalvedRotaryEmbedding"
    rope = vllm_rope(
        8, 10000.0, {"type": "halved", "factor": 2.0}, max_position=32, max_model_len=32
    )
    expected = torch.tensor([10000.0 ** (-2 * i / 8) / 4 for i in range(4)], dtype=torch.float64)
    torch.testing.assert_close(rope.inv_freq, expected, rtol=0, atol=1e-15)
    assert (rope.rope_type, rope.rows) == ("halved", 64)
    body = {"seq_len": 5, "head_dim": 8, "dtype": "float64", "engine": "vllm"}
    with TestClient(create_app(Settings())) as client:
        r = client.post(
            "/v1/encodings/rope",
            json={**body, "max_model_len": 3, "scaling": {"type": "halved", "factor": 1.5}},
        )
        assert r.status_code == 200, r.text
        cos = json_tensor(r.json(), "cos")
        np.testing.assert_allclose(cos, _closed_form(5, 8, 10000.0, 1.5), rtol=0, atol=1e-12)
        # its rows (2 * max_model_len = 6) bound the positions vLLM serves
        beyond = client.post(
            "/v1/encodings/rope",
            json={**body, "max_model_len": 2, "scaling": {"type": "halved", "factor": 1.5}},
        )
        assert beyond.status_code == 422, beyond.text
        assert "halved cos/sin cache of 4 rows" in beyond.json()["detail"]


def test_the_built_in_types_name_their_vllm_classes() -> None:
    """Each built-in type's module names the class vLLM's get_rope builds for it."""
    assert vllm_classes() == {
        "linear": "LinearScalingRotaryEmbedding",
        "dynamic": "DynamicNTKScalingRotaryEmbedding",
        "yarn": "YaRNScalingRotaryEmbedding",
        "longrope": "Phi3LongRoPEScaledRotaryEmbedding",
        "llama3": "Llama3RotaryEmbedding",
        "proportional": "Gemma4RotaryEmbedding",
    }


def test_the_type_leaves_with_its_module() -> None:
    assert "halved" not in scaling.SCALING_TYPES
    assert "halved" not in vllm_classes()
    with pytest.raises(InvalidArgument, match="no rule for scaling type 'halved'"):
        vllm_rope(8, 10000.0, {"type": "halved", "factor": 1.0}, max_position=8, max_model_len=8)
    with TestClient(create_app(Settings())) as client:
        r = client.post(
            "/v1/encodings/rope",
            json={"seq_len": 2, "head_dim": 8, "scaling": {"type": "halved", "factor": 1.0}},
        )
    assert r.status_code == 422


def test_the_built_in_types_are_their_modules() -> None:
    """ScalingType (the static Literal) names the registered modules, and RopeScaling's fields
    are the union of their declared parameters."""
    assert get_args(scaling.ScalingType) == scaling.SCALING_TYPES
    declared = {p.name for m in scaling.ROPE_TYPES.values() for p in parameters_of(m.Params)}
    fields = {f for f in RopeScaling.__dataclass_fields__ if f != "type"}
    assert declared == fields


def test_a_parameter_without_a_field_is_refused() -> None:
    @dataclass(frozen=True)
    class Odd:
        wiggle: float = parameter("no RopeScaling field", required=True)

    odd = types.ModuleType("odd")
    odd.NAME, odd.LABEL, odd.Params = "odd", "Odd", Odd  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="no field 'wiggle'"):
        scaling.register_scaling_type(odd)
    assert "odd" not in scaling.ROPE_TYPES
