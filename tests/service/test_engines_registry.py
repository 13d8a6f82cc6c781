"""Adding an engine is one module and one registry line: a toy engine, defined here and
registered for the test, is served over HTTP, compared, checked and read from a config, and
the engines' names everywhere come from the registry.

The toy engine's rule is RoPE at half the position, ``cos(p·ω/2)``, ``ω_i = base^(-2i/R)``:
its tables are checked against that closed form in float64, and the other engines' against
transformers' ``cos(p·ω)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from torch import Tensor

from posenc.core.blocks import TableBlocks, tensor_blocks
from posenc.core.errors import InvalidArgument
from posenc.engines import (
    ENGINES,
    Engine,
    engine_hook,
    engine_names,
    register_engine,
    unregister_engine,
)
from posenc.engines.rotation import rotate_pairs
from posenc.resolve import compute, resolve_fields
from posenc.rope.precision import widen
from posenc.rope_kinds.shift import ROPE_SHIFT
from tests.helpers import json_tensor, make_settings

SEQ = 8
HEAD_DIM = 16
BASE = 10000.0
LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 4096,
    "rope_theta": BASE,
}


def omega(rotary_dim: int, base: float) -> np.ndarray:
    """``(R/2,)`` float64: ``base^(-2i/R)``."""
    return np.array([base ** (-2 * i / rotary_dim) for i in range(rotary_dim // 2)])


class Toy(Engine):
    """RoPE at half the position: ``cos(p·ω/2)`` in float64, cast once."""

    name = "toy"
    summary = "toy (RoPE at half the position)"
    kinds = frozenset({"rope"})
    precisions: ClassVar[tuple[str, ...]] = ("exact",)
    checked: ClassVar[tuple[str, ...]] = ("exact",)

    def computes(self, p: Mapping[str, Any]) -> bool:
        return True

    def blocks(
        self, p: Mapping[str, Any], *, device: torch.device | str | None, dtype: torch.dtype
    ) -> dict[str, TableBlocks]:
        given = p["positions"]
        pos = torch.arange(int(p["seq_len"])) if given is None else torch.tensor(given)
        r = int(p["rotary_dim"])
        speed = torch.tensor(omega(r, float(p["base"]))) / 2  # (R/2,) float64
        dev = torch.device("cpu") if device is None else torch.device(device)

        def filler(which: str) -> Any:
            def fill(start: int, stop: int, out: Tensor) -> None:
                angles = pos[start:stop, None].double() * speed  # (rows, R/2)
                half = angles.cos() if which == "cos" else angles.sin()
                out.copy_(widen(half, p["layout"]).to(dtype))

            return fill

        tables = {w: TableBlocks(w, (len(pos), r), dtype, filler(w), dev) for w in ("cos", "sin")}
        return {**tables, "inv_freq": tensor_blocks("inv_freq", speed.to(dtype))}

    def tables(
        self,
        p: Mapping[str, Any],
        rows: Sequence[Sequence[int]] | None,
        *,
        device: torch.device | str | None,
        dtype: torch.dtype,
    ) -> dict[str, Tensor]:
        if rows is not None:
            raise InvalidArgument("engine toy takes one row of positions", field="positions")
        blocks = self.blocks(p, device=device, dtype=dtype)
        return {name: table.whole().to(device) for name, table in blocks.items()}


@pytest.fixture
def toy() -> Iterator[Toy]:
    """The toy engine registered for one test; the registry as it was afterwards."""
    before = dict(ENGINES)
    engine = Toy()
    register_engine(engine)
    try:
        yield engine
    finally:
        unregister_engine(engine.name)
        assert before == ENGINES


@pytest.fixture
def client(toy: Toy, gpt2_file: Path) -> Iterator[TestClient]:
    """An app made after the toy engine is registered (its OpenAPI document names it)."""
    from service.app import create_app

    with TestClient(create_app(make_settings(gpt2_file))) as c:
        yield c


def test_registered_engine_is_served_over_http(client: TestClient) -> None:
    r = client.post(
        "/v1/encodings/rope", json={"seq_len": SEQ, "head_dim": HEAD_DIM, "engine": "toy"}
    )
    assert r.status_code == 200, r.text
    angles = np.arange(SEQ)[:, None] * omega(HEAD_DIM, BASE)[None, :] / 2  # (T, R/2)
    want = np.concatenate([np.cos(angles)] * 2, axis=1).astype(np.float32)
    np.testing.assert_array_equal(json_tensor(r.json(), "cos").astype(np.float32), want)
    assert r.json()["meta"]["engine"] == "toy"
    schema = client.get("/openapi.json").json()
    assert "toy" in str(schema), "the OpenAPI document lists the registered engine"


def test_registered_engine_is_compared(client: TestClient) -> None:
    positions = [0, 1, 5, 9]
    body = {"config": LLAMA, "positions": positions, "engines": ["transformers", "toy"]}
    r = client.post("/v1/configs/compare", json=body)
    assert r.status_code == 200, r.text
    w = omega(HEAD_DIM, BASE)
    p = np.array(positions)[:, None]
    want = np.abs(np.cos(p * w) - np.cos(p * w / 2)).max()
    assert r.json()["engines"] == ["transformers", "toy"]
    assert r.json()["cos"]["max_abs_diff"] == pytest.approx(want, abs=1e-6)
    assert r.json()["cos"]["first_position"] == 1


def test_registered_engine_is_checked(client: TestClient) -> None:
    positions = [0, 3, 7, 100]
    angles = np.array(positions)[:, None] * omega(HEAD_DIM, BASE)[None, :] / 2
    body = {
        "config": LLAMA,
        "positions": positions,
        "cos": np.cos(angles).tolist(),
        "sin": np.sin(angles).tolist(),
    }
    r = client.post("/v1/configs/check", json=body)
    assert r.status_code == 200, r.text
    best = r.json()["matches"][0]
    assert (best["engine"], best["precision"]) == ("toy", "exact")
    assert best["max_abs_diff"] < 1e-6
    assert "toy" in {m["engine"] for m in r.json()["matches"]}


def test_registered_engine_reads_a_config(client: TestClient) -> None:
    r = client.post("/v1/configs/positions", json={"config": LLAMA, "engine": "toy"})
    assert r.status_code == 200, r.text
    assert r.json()["engine"] == "toy" and r.json()["kind"] == "rope"
    r = client.post("/v1/configs/positions", json={"config": LLAMA, "engine": "nope"})
    assert r.status_code == 422 and "toy" in r.text


def test_an_unknown_engine_is_refused_with_the_registry_list(client: TestClient) -> None:
    r = client.post("/v1/encodings/rope", json={"seq_len": 4, "head_dim": 8, "engine": "nope"})
    assert r.status_code == 422
    assert all(name in r.text for name in engine_names())


def test_a_missing_hook_is_refused_by_name(toy: Toy) -> None:
    for hook in ("apply", "shift"):
        with pytest.raises(InvalidArgument, match=f"engine toy .*{hook}") as err:
            engine_hook("toy", hook)
        assert err.value.field == "engine"
    with pytest.raises(InvalidArgument, match=r"engine must be one of .*toy"):
        engine_hook("nope", "apply")


def test_a_precision_the_engine_lacks_is_refused_by_name(client: TestClient) -> None:
    body = {"seq_len": 4, "head_dim": 8, "engine": "toy", "precision": "engine"}
    r = client.post("/v1/encodings/rope", json=body)
    assert r.status_code == 422
    assert "engine toy" in r.text and "exact" in r.text


def test_the_toy_angles_are_the_closed_form() -> None:
    """The closed form above, at one hand-worked value: ω_1 of R = 16 is 10000^(-1/8)."""
    assert omega(16, BASE)[1] == pytest.approx(10000 ** (-1 / 8), rel=1e-15)
    assert math.isclose(omega(16, BASE)[0], 1.0)


def _unrotated(x: Tensor, positions: Tensor, fields: Mapping[str, Any]) -> Tensor:
    return x


class Wired(Toy):
    """The toy engine with an ``apply`` hook wired in one line, as the 1.4 engines will be."""

    name = "toy-wired"
    apply = staticmethod(_unrotated)


class Bare(Toy):
    """The toy engine with no hook."""

    name = "toy-bare"


def test_a_wired_hook_is_found_and_a_missing_one_refused() -> None:
    register_engine(Wired())
    register_engine(Bare())
    try:
        assert engine_hook("toy-wired", "apply") is _unrotated
        with pytest.raises(InvalidArgument, match="engine toy-bare rotates no queries") as err:
            engine_hook("toy-bare", "apply")
        having = str(err.value).rpartition("engines with apply: ")[2].split(", ")
        assert "toy-wired" in having and "toy-bare" not in having
        with pytest.raises(InvalidArgument, match="engine toy-wired re-rotates no cached keys"):
            engine_hook("toy-wired", "shift")
    finally:
        unregister_engine("toy-wired")
        unregister_engine("toy-bare")
    assert "toy-wired" not in engine_names()


def _toy_shift(k: Tensor, source: Tensor, target: Tensor, fields: Mapping[str, Any]) -> Tensor:
    """The toy's shift: ``k`` turned by ``(to − from)·ω/2`` in float64, cast once."""
    angles = (target - source).double()[:, None] * Shifting().frequencies(fields, 0)[0]
    return rotate_pairs(k.double(), angles.cos(), angles.sin(), fields["layout"]).to(k.dtype)


class Shifting(Toy):
    """The toy engine with a ``shift`` hook and its frequencies: what ``/v1/rope/shift`` asks."""

    name = "toy-shift"
    precisions = ("exact", "engine")
    shift = staticmethod(_toy_shift)

    def frequencies(self, p: Mapping[str, Any], seq_len: int) -> tuple[Tensor, float]:
        return torch.tensor(omega(int(p["rotary_dim"]), float(p["base"]))) / 2, 1.0

    def shift_tables(self, p: Mapping[str, Any], delta: Tensor) -> tuple[Tensor, Tensor]:
        angles = delta.double()[:, None] * self.frequencies(p, 0)[0]
        return angles.cos().float(), angles.sin().float()


def test_shift_asks_the_engine_s_hook_and_frequencies() -> None:
    """``/v1/rope/shift`` of a registered engine: its hook moves the key (checked against the
    toy's closed form), its frequencies give the exact path, its table the ``cos``/``sin``."""
    register_engine(Shifting())
    try:
        k = torch.randn(3, 2, HEAD_DIM, generator=torch.Generator().manual_seed(0))
        request = {"head_dim": HEAD_DIM, "positions": [0, 3, 5], "delta": 4, "k": k.tolist()}
        got = {}
        for precision in ("engine", "exact"):
            fields = {**request, "engine": "toy-shift", "precision": precision}
            p = resolve_fields(ROPE_SHIFT, fields)
            got[precision] = compute(ROPE_SHIFT, p)
        angles = 4 * omega(HEAD_DIM, BASE) / 2  # (R/2,): every token moves by 4
        x = k.double().numpy()
        x0, x1 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
        want = np.concatenate(
            [x0 * np.cos(angles) - x1 * np.sin(angles), x0 * np.sin(angles) + x1 * np.cos(angles)],
            axis=-1,
        )
        for precision in ("engine", "exact"):
            np.testing.assert_allclose(got[precision]["k"].double().numpy(), want, atol=1e-6)
        np.testing.assert_allclose(
            got["engine"]["cos"][0, : HEAD_DIM // 2].double().numpy(), np.cos(angles), atol=1e-7
        )
        register_engine(Still())
        with pytest.raises(InvalidArgument, match="engine toy-still re-rotates no cached keys"):
            resolve_fields(ROPE_SHIFT, {**request, "engine": "toy-still", "precision": "engine"})
    finally:
        unregister_engine("toy-shift")
        unregister_engine("toy-still")


class Still(Toy):
    """The toy engine computing its own tables, with no ``shift`` hook."""

    name = "toy-still"
    precisions = ("exact", "engine")
