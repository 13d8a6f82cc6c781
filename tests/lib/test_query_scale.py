"""Position-dependent query scale against transformers' Llama 4 and Ministral 3 attention.

References: transformers ``models/llama4/modeling_llama4.py::Llama4TextAttention.forward``
(``attn_temperature_tuning`` on layers with ``use_rope`` 0) and
``models/ministral3/modeling_ministral3.py::get_llama_4_attn_scale``, built from default
configs with no weights loaded; plus the closed form and hand-worked values.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import resolve
from posenc.attention.query_scale import query_scale, query_scale_from_config
from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from tests.references import SCOUT

QUERY_SCALE = kinds.REGISTRY["query_scale"]


def table(fields: dict) -> dict[str, torch.Tensor]:
    return resolve.compute(QUERY_SCALE, resolve.resolve_fields(QUERY_SCALE, fields))


def test_hand_worked_values() -> None:
    """alpha 0.5, period 4, offset 1: p = 0..2 -> floor(<1) = 0 -> 1; p = 3 -> floor(1) = 1
    -> 1 + 0.5 ln 2; p = 11 -> floor(3) = 3 -> 1 + 0.5 ln 4 = 1 + ln 2."""
    got = query_scale([0, 2, 3, 11], alpha=0.5, period=4, offset=1, dtype=torch.float64)
    want = torch.tensor([1.0, 1.0, 1 + 0.5 * math.log(2), 1 + math.log(2)], dtype=torch.float64)
    assert_close(got, want, rtol=0, atol=1e-15)


def test_closed_form_at_large_positions() -> None:
    """float64 to 2^40: 1 + alpha · ln(1 + (p + offset) // period) from Python's integers."""
    ps = [0, 8191, 8192, 2**20 - 1, 2**20, 2**33 + 5, 2**40]
    got = query_scale(ps, alpha=0.1, period=8192, offset=1, dtype=torch.float64)
    want = torch.tensor([1 + 0.1 * math.log1p((p + 1) // 8192) for p in ps], dtype=torch.float64)
    assert_close(got, want, rtol=0, atol=1e-15)


def llama4_reference_scale(config, layer_idx: int, seq_len: int) -> torch.Tensor:
    """What Llama4TextAttention.forward multiplies the queries of ``layer_idx`` by, read off
    the queries it hands to the attention function (query projection = ones)."""
    import transformers.models.llama4.modeling_llama4 as m

    attention = m.Llama4TextAttention(config, layer_idx)
    with torch.no_grad():
        attention.q_proj.weight.zero_()
        attention.q_proj.weight[:, 0] = 1.0  # every query channel = hidden[0] = 1
    captured = {}

    def capture(module, query, key, value, attention_mask, **kwargs):
        captured["query"] = query  # (B, H, T, D)
        return value.transpose(1, 2), None

    original = m.eager_attention_forward
    m.eager_attention_forward = capture  # type: ignore[assignment]
    try:
        hidden = torch.ones(1, seq_len, config.hidden_size)
        freqs = torch.ones(1, seq_len, config.head_dim // 2, dtype=torch.complex64)
        attention(hidden, freqs, None)
    finally:
        m.eager_attention_forward = original
    return captured["query"][0, 0, :, 0]  # (T,)


def test_llama4_matches_llama4_text_attention() -> None:
    from transformers import Llama4TextConfig

    config = Llama4TextConfig(
        hidden_size=16,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
        num_hidden_layers=8,
        floor_scale=16,
        attn_scale=0.3,
        use_qk_norm=False,
    )
    config._attn_implementation = "eager"
    as_file = {
        "model_type": "llama4_text",
        "hidden_size": 16,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "num_hidden_layers": 8,
        "floor_scale": 16,
        "attn_scale": 0.3,
    }
    rule = query_scale_from_config(as_file)
    assert rule is not None and rule.layers == (3, 7)
    assert [i for i in range(8) if not config.no_rope_layers[i]] == [3, 7]
    for layer in range(8):
        want = llama4_reference_scale(config, layer, 300)
        got = table({"config": as_file, "seq_len": 300, "layer": layer})["scale"]
        assert_close(got, want, rtol=1e-6, atol=1e-6)
        fields = {"config": as_file, "seq_len": 300, "layer": layer, "precision": "engine"}
        assert torch.equal(table(fields)["scale"], want)  # issue 30: bit for bit
    assert table({"config": as_file, "seq_len": 300, "layer": 0})["scale"].eq(1).all()


def test_engine_precision_is_the_float32_floor_past_2_24() -> None:
    """transformers rounds ``p`` to float32 before its floor: at p = 2^25 − 2 Llama 4's step
    is 4,096 where the exact one is 4,095, and at 3·2^24 − 1 Ministral 3's is 3,072 (exact
    3,071). ``precision: "engine"`` gives transformers' numbers there, bit for bit."""
    from transformers import Ministral3Config
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    positions = [0, 8191, 100_000, 2**25 - 2]
    engine = table({"config": SCOUT, "positions": positions, "precision": "engine"})["scale"]
    p = torch.tensor(positions)
    want = torch.log1p(torch.floor((p.float() + 1.0) / 8192)) * 0.1 + 1.0  # Llama4TextAttention
    assert torch.equal(engine, want)
    exact = table({"config": SCOUT, "positions": positions, "dtype": "float64"})["scale"]
    assert float(exact[-1]) == 1 + 0.1 * math.log1p(4095)
    assert float(engine[-1]) == float(torch.tensor(1 + 0.1 * math.log1p(4096)).float())
    rope = dict(Ministral3Config().rope_parameters)
    as_file = {"model_type": "ministral3", "rope_parameters": rope}
    positions = [0, 16383, 16384, 3 * 2**24 - 1]
    engine = table({"config": as_file, "positions": positions, "precision": "engine"})["scale"]
    want = get_llama_4_attn_scale(
        torch.tensor([positions]),
        rope["llama_4_scaling_beta"],
        rope["original_max_position_embeddings"],
    )[0, 0, :, 0]
    assert torch.equal(engine, want)
    exact = table({"config": as_file, "positions": positions})["scale"]
    assert not torch.equal(engine, exact)
    with pytest.raises(InvalidArgument) as err:
        table({"seq_len": 4, "alpha": 0.1, "period": 2, "precision": "engine"})
    assert err.value.field == "precision"


def test_llama4_scout_config() -> None:
    """The published Scout text_config: attn_scale 0.1, floor_scale 8192, offset 1."""
    positions = [0, 8190, 8191, 16383, 100000, 2**20]
    got = table({"config": SCOUT, "positions": positions, "dtype": "float64"})["scale"]
    want = [1 + 0.1 * math.log1p(math.floor((p + 1) / 8192)) for p in positions]
    assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-15)
    rule = query_scale_from_config(SCOUT)
    assert rule is not None and rule.layers == tuple(range(3, 48, 4))


def test_ministral3_matches_get_llama_4_attn_scale() -> None:
    from transformers import Ministral3Config
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    config = Ministral3Config()
    rope = dict(config.rope_parameters)
    as_file = {
        "model_type": "mistral3",
        "text_config": {
            "model_type": "ministral3",
            "num_hidden_layers": 34,
            "rope_parameters": rope,
        },
    }
    positions = torch.tensor([[0, 1, 16383, 16384, 50000, 100000, 2**20]])
    want = get_llama_4_attn_scale(
        positions, rope["llama_4_scaling_beta"], rope["original_max_position_embeddings"]
    )[0, 0, :, 0]
    got = table({"config": as_file, "positions": positions[0].tolist()})["scale"]
    assert_close(got, want, rtol=1e-6, atol=1e-6)
    fields = {"config": as_file, "positions": positions[0].tolist(), "precision": "engine"}
    assert torch.equal(table(fields)["scale"], want)  # issue 30: bit for bit
    rule = query_scale_from_config(as_file)
    assert rule is not None and rule.offset == 0 and rule.layers == tuple(range(34))


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"seq_len": 4}, "alpha"),
        ({"seq_len": 4, "alpha": 0.1}, "period"),
        ({"seq_len": 4, "positions": [0, 1], "alpha": 0.1, "period": 2}, "seq_len"),
        ({"seq_len": 4, "config": {"model_type": "llama", "rope_theta": 1e4}}, "config"),
        (
            {
                "seq_len": 4,
                "config": {
                    **SCOUT,
                    "text_config": {**SCOUT["text_config"], "attn_temperature_tuning": False},  # type: ignore[dict-item]
                },
            },
            "config",
        ),
        ({"seq_len": 4, "config": SCOUT, "layer": 48}, "layer"),
        ({"seq_len": 4, "alpha": 0.1, "period": 2, "layer": 1}, "layer"),
    ],
)
def test_refusals(fields: dict, where: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        table(fields)
    assert err.value.field == where


def test_llama4_scout_preset_quotes_its_config() -> None:
    from posenc.core.errors import UnknownName

    got = table({"preset": "llama-4-scout", "positions": [0, 8191, 100000], "dtype": "float64"})
    want = [1 + 0.1 * math.log1p((p + 1) // 8192) for p in (0, 8191, 100000)]
    assert_close(got["scale"], torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-15)
    with pytest.raises(UnknownName, match="llama-4-scout"):
        table({"preset": "llama-2-7b", "seq_len": 3})
    with pytest.raises(InvalidArgument, match="not both"):
        table({"preset": "llama-4-scout", "config": SCOUT, "seq_len": 3})


def test_ministral3_preset_quotes_the_published_file() -> None:
    """Preset ministral-3-8b (mistralai/Ministral-3-8B-Instruct-2512's config.json): the query
    scale equals transformers' get_llama_4_attn_scale with the file's rope_parameters as
    Ministral3Config keeps them, on every one of its 34 layers; the same numbers as the whole
    quoted file sent as config."""
    from transformers import AutoConfig
    from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

    from posenc.facts.model_configs import model_config
    from posenc.readers.presets import PRESETS

    quoted = model_config("ministral-3-8b")
    text = AutoConfig.for_model(**quoted).get_text_config()
    assert text.model_type == "ministral3" and text.num_hidden_layers == 34
    positions = torch.tensor([[0, 16383, 16384, 49151, 49152, 262143]])
    want = get_llama_4_attn_scale(
        positions,
        text.rope_parameters["llama_4_scaling_beta"],
        text.rope_parameters["original_max_position_embeddings"],
    )[0, 0, :, 0]
    got = table({"preset": "ministral-3-8b", "positions": positions[0].tolist()})
    assert_close(got["scale"], want, rtol=1e-6, atol=1e-6)
    from_file = table({"config": quoted, "positions": positions[0].tolist(), "dtype": "float64"})
    exact = [1 + 0.1 * math.log1p(p // 16384) for p in positions[0].tolist()]
    assert_close(from_file["scale"], torch.tensor(exact, dtype=torch.float64), rtol=0, atol=1e-15)
    rule = query_scale_from_config(quoted)
    assert rule is not None and (rule.alpha, rule.period, rule.offset) == (0.1, 16384, 0)
    assert rule.layers == tuple(range(34))
    scaling = PRESETS["ministral-3-8b"].params["scaling"]
    assert (scaling["type"], scaling["factor"], PRESETS["ministral-3-8b"].params["base"]) == (
        "yarn",
        16.0,
        1e6,
    )
