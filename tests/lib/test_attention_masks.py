"""Attention masks (posenc.attention.masks) against transformers' own ``masking_utils`` and by hand.

Every comparison with transformers calls its functions (``create_causal_mask``,
``create_sliding_window_causal_mask``, ``create_chunked_causal_mask``,
``create_bidirectional_mask``, Gemma 3's ``create_masks_for_vision_model``) with a config built
by ``AutoConfig.for_model`` from the same dict posenc reads: defaults and published configs, no
weights. posenc's side goes through the registered kind (``posenc.resolve.compute``), the way
the service computes it.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc import resolve
from posenc.attention.layers import attention_layers
from posenc.attention.masks import (
    attention_bias,
    attention_mask,
    kernel_spellings,
    mask_blocks,
    mask_inputs,
    mask_rule,
    packed_documents,
)
from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from tests.references import GRANITE_4H, QWEN3_NEXT

transformers = pytest.importorskip("transformers")
masking_utils = pytest.importorskip("transformers.masking_utils")

MASKS = kinds.REGISTRY["masks"]

PUBLISHED = {
    "gemma-2-9b": model_config("gemma-2-9b"),
    "gemma-3-1b": model_config("gemma-3-1b"),
    "gemma-3-4b": model_config("gemma-3-4b"),
    "gpt-oss-20b": model_config("gpt-oss-20b"),
    "llama-4-scout": model_config("llama-4-scout"),
    "mistral-7b": model_config("mistral-7b"),
    "mistral-7b-v0.3": model_config("mistral-7b-v0.3"),
    "qwen2.5-7b": model_config("qwen2.5-7b"),
    "qwen3-next": QWEN3_NEXT,
    "granite-4.0-h": GRANITE_4H,
}
DEFAULTS = (
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "llama4_text",
    "mistral",
    "qwen2",
    "qwen3_next",
    "granitemoehybrid",
    "cohere2",
    "llama",
    "mixtral",
    "minimax",
    "jamba",
    "qwen3",
)


def _hf_config(config: dict[str, Any], attn: str = "sdpa") -> Any:
    """transformers' text config for the dict, with ``attn`` as its attention."""
    cfg = transformers.AutoConfig.for_model(**config)
    text = cfg.get_text_config()
    text._attn_implementation = attn
    return text


def _hf_layer_types(text: Any) -> list[str]:
    """Each layer's pattern as ``create_masks_for_generate`` chooses its mask function."""
    n = text.num_hidden_layers
    if getattr(text, "layer_types", None) is not None:
        return list(text.layer_types)
    if getattr(text, "sliding_window", None) is not None:
        return ["sliding_attention"] * n
    if getattr(text, "attention_chunk_size", None) is not None:
        return ["chunked_attention"] * n
    return ["full_attention"] * n


class _Seen:
    """A cache that holds every one of ``S`` keys, ``S − T`` of them seen before (the queries
    are the last ``T``), duck-typed for ``_preprocess_mask_arguments``."""

    is_compileable = False

    def __init__(self, seen: int, key_len: int) -> None:
        self.seen, self.key_len = seen, key_len

    def get_query_offset(self, layer_idx: int) -> int:
        return self.seen

    def get_mask_sizes(self, q_length: int, layer_idx: int) -> tuple[int, int]:
        return self.key_len, 0


def _hf_mask(
    text: Any,
    layer_type: str,
    seq_len: int,
    key_len: int,
    padding: torch.Tensor | None,
    batch: int = 1,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """transformers' (B, T, S) mask of one layer type (bool for sdpa, float for eager)."""
    function = masking_utils.LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING[layer_type]
    embeds = torch.zeros(batch, seq_len, 1)
    cache = _Seen(key_len - seq_len, key_len) if key_len > seq_len else None
    kwargs: dict[str, Any] = {}
    if getattr(text, "is_causal", True) is not False:
        kwargs["allow_is_causal_skip"] = False
    mask = function(
        config=text,
        inputs_embeds=embeds,
        attention_mask=padding,
        cache=cache,
        position_ids=position_ids,
        **kwargs,
    )
    if mask is None:  # a bidirectional mask without padding: no tensor, every key
        return torch.ones(batch, seq_len, key_len, dtype=torch.bool)
    return mask[:, 0]


def _posenc(**fields: Any) -> torch.Tensor:
    params = resolve.resolve_fields(MASKS, fields)
    out = resolve.compute(MASKS, params)
    return out[params["as"]]


def _padding(batch: int, key_len: int) -> torch.Tensor:
    """Left padding in row 0, right padding in row 1, none in the rest (1: real)."""
    m = torch.ones(batch, key_len, dtype=torch.int64)
    m[0, : min(3, key_len - 1)] = 0
    if batch > 1:
        m[1, -2:] = 0
    return m


CASES = [(9, 9), (7, 20), (1, 13), (12, 12)]


def _first_of_each_type(config: dict[str, Any]) -> dict[str, int]:
    first: dict[str, int] = {}
    for i, t in enumerate(_hf_layer_types(_hf_config(config))):
        first.setdefault(t, i)
    return first


@pytest.mark.parametrize("name", sorted(PUBLISHED))
@pytest.mark.parametrize(("seq_len", "key_len"), CASES)
@pytest.mark.parametrize("padded", [False, True])
def test_published_configs_equal_transformers(
    name: str, seq_len: int, key_len: int, padded: bool
) -> None:
    """Every layer type of each published config, with and without padding, with and without
    keys seen before: posenc's mask is transformers' sdpa mask element for element."""
    config = PUBLISHED[name]
    text = _hf_config(config)
    padding = _padding(2, key_len) if padded else None
    for layer_type, index in _first_of_each_type(config).items():
        if layer_type == "linear_attention":
            with pytest.raises(InvalidArgument, match="no attention mask"):
                _posenc(config=config, layer=index, seq_len=seq_len, key_len=key_len)
            continue
        chunked_small = layer_type == "chunked_attention"
        want = _hf_mask(text, layer_type, seq_len, key_len, padding, batch=2 if padded else 1)
        got = _posenc(
            config=config,
            layer=index,
            seq_len=seq_len,
            key_len=key_len,
            attention_mask=padding.tolist() if padding is not None else None,
        )
        assert got.dtype == torch.bool
        assert torch.equal(got, want), (name, layer_type, chunked_small)


def _small(config: dict[str, Any], **sizes: int) -> dict[str, Any]:
    """The config with small windows, so that short sequences cross them."""
    out = dict(config)
    text = dict(out["text_config"]) if "text_config" in out else out
    for key, value in sizes.items():
        text[key] = value
    if "text_config" in out:
        out["text_config"] = text
    return out


@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("gemma-2-9b", {"sliding_window": 4}),
        ("gemma-3-1b", {"sliding_window": 3}),
        ("gpt-oss-20b", {"sliding_window": 5}),
        ("llama-4-scout", {"attention_chunk_size": 4}),
        ("mistral-7b", {"sliding_window": 6}),
    ],
)
@pytest.mark.parametrize(("seq_len", "key_len"), CASES)
@pytest.mark.parametrize("padded", [False, True])
def test_windows_inside_the_sequence(
    name: str, sizes: dict[str, int], seq_len: int, key_len: int, padded: bool
) -> None:
    """The same configs with windows and chunks shorter than the sequence (so that they cut),
    and the bias in float32 with transformers' eager fill (finfo.min) as well."""
    config = _small(PUBLISHED[name], **sizes)
    padding = _padding(3, key_len) if padded else None
    batch = 3 if padded else 1
    for attn in ("sdpa", "eager"):
        text = _hf_config(config, attn)
        for layer_type, index in _first_of_each_type(config).items():
            want = _hf_mask(text, layer_type, seq_len, key_len, padding, batch=batch)
            got = _posenc(
                config=config,
                layer=index,
                seq_len=seq_len,
                key_len=key_len,
                attention_mask=padding.tolist() if padding is not None else None,
                **({"as": "bias", "masked_value": "min"} if attn == "eager" else {}),
            )
            assert torch.equal(got, want), (name, layer_type, attn)


@pytest.mark.parametrize("model_type", DEFAULTS)
def test_default_configs_layer_by_layer(model_type: str) -> None:
    """Each config class's defaults: posenc's layer labels give transformers' mask function
    for every layer, and its sizes."""
    text = transformers.AutoConfig.for_model(model_type).get_text_config()
    config = text.to_dict()
    hf_types = _hf_layer_types(text)
    ours = attention_layers(config)
    assert len(ours) == len(hf_types)
    expect = {
        "full_attention": "causal",
        "sliding_attention": "sliding",
        "chunked_attention": "chunked",
        "linear_attention": None,
    }
    for layer, hf_type in zip(ours, hf_types, strict=True):
        assert layer.mask == expect[hf_type], (layer.index, layer.layer_type, hf_type)
        assert layer.layer_type == hf_type
        if layer.mask == "sliding":
            assert layer.window == text.sliding_window
        if layer.mask == "chunked":
            assert layer.chunk_size == text.attention_chunk_size


def test_default_masks_equal_transformers() -> None:
    """Masks of a few default configs with small sizes, whole pipeline (fields to tensor)."""
    for model_type, sizes in (
        ("gemma2", {"sliding_window": 3}),
        ("cohere2", {"sliding_window": 4}),
        ("llama4_text", {"attention_chunk_size": 3}),
        ("qwen3_next", {}),
    ):
        config = {"model_type": model_type, "num_hidden_layers": 8, **sizes}
        text = _hf_config(config)
        padding = _padding(2, 11)
        for layer_type, index in _first_of_each_type(config).items():
            if layer_type == "linear_attention":
                continue
            want = _hf_mask(text, layer_type, 11, 11, padding, batch=2)
            got = _posenc(config=config, layer=index, seq_len=11, attention_mask=padding.tolist())
            assert torch.equal(got, want), (model_type, layer_type)


@pytest.mark.parametrize("window", [2, 4])
@pytest.mark.parametrize("padded", [False, True])
def test_gemma3_image_spans_equal_transformers(window: int, padded: bool) -> None:
    """Gemma 3's bidirectional image spans (token_type_ids) on its full and sliding layers, as
    its model builds them (``create_masks_for_vision_model``)."""
    from transformers.models.gemma3 import modeling_gemma3

    config = _small(PUBLISHED["gemma-3-4b"], sliding_window=window)
    text = _hf_config(config)
    types = torch.tensor(
        [[0, 1, 1, 1, 0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1, 0, 1, 1]], dtype=torch.int64
    )
    padding = _padding(2, 10) if padded else None
    blocks = modeling_gemma3.get_block_sequence_ids_for_mask(types)
    want = modeling_gemma3.create_masks_for_vision_model(
        config=text,
        inputs_embeds=torch.zeros(2, 10, 1),
        attention_mask=padding,
        cache=None,
        position_ids=None,
        block_sequence_ids=blocks,
    )
    for layer_type, hf in want.items():
        got = _posenc(
            config=config,
            layer_type=layer_type,
            seq_len=10,
            token_type_ids=types.tolist(),
            attention_mask=padding.tolist() if padding is not None else None,
        )
        assert torch.equal(got, hf[:, 0]), layer_type


@pytest.mark.parametrize("name", ["gemma-2-9b", "gpt-oss-20b", "llama-4-scout", "mistral-7b"])
def test_packed_equal_transformers_detection(name: str) -> None:
    """cu_seqlens gives the mask transformers builds when it detects packing from position ids
    restarting at 0 (``find_packed_sequence_indices``)."""
    config = _small(PUBLISHED[name], sliding_window=3, attention_chunk_size=3)
    text = _hf_config(config)
    cu = [0, 4, 5, 11, 14]
    position_ids = torch.cat([torch.arange(b - a) for a, b in itertools.pairwise(cu)])
    for layer_type, index in _first_of_each_type(config).items():
        want = _hf_mask(text, layer_type, 14, 14, None, position_ids=position_ids[None])
        got = _posenc(config=config, layer=index, seq_len=14, cu_seqlens=cu)
        assert torch.equal(got, want), layer_type
        # and each document alone is the unpacked mask of its length
        for a, b in itertools.pairwise(cu):
            alone = _posenc(config=config, layer=index, seq_len=b - a)
            assert torch.equal(got[0, a:b, a:b], alone[0])
            assert not got[0, a:b, :a].any() and not got[0, a:b, b:].any()


def test_hand_worked_masks() -> None:
    """sdpa_mask's docstring examples, worked by hand, and a packed row."""
    ones = torch.tensor
    assert torch.equal(
        attention_mask(mask_rule("sliding", window=3), 5)[0].int(),
        ones([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]]),
    )
    assert torch.equal(
        attention_mask(mask_rule("chunked", chunk_size=3), 5)[0].int(),
        ones([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 1]]),
    )
    # two documents of 2 and 3 tokens, causal inside each
    assert torch.equal(
        attention_mask(mask_rule("causal"), 5, cu_seqlens=[0, 2, 5])[0].int(),
        ones([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]),
    )
    # the last 2 queries of 5 keys, window 2, the first key padding
    assert torch.equal(
        attention_mask(mask_rule("sliding", window=2), 2, 5, attention_mask=[[0, 1, 1, 1, 1]])[
            0
        ].int(),
        ones([[0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]),
    )
    # chunks start after the left padding: 2 pads, chunk 2 -> chunks {2,3}, {4,5}
    assert torch.equal(
        attention_mask(mask_rule("chunked", chunk_size=2), 6, attention_mask=[[0, 0, 1, 1, 1, 1]])[
            0
        ].int(),
        ones(
            [
                [0, 0, 0, 0, 0, 0],
                [0, 0, 0, 0, 0, 0],
                [0, 0, 1, 0, 0, 0],
                [0, 0, 1, 1, 0, 0],
                [0, 0, 0, 0, 1, 0],
                [0, 0, 0, 0, 1, 1],
            ]
        ),
    )
    bias = attention_bias(mask_rule("causal"), 2, dtype=torch.float16)
    assert bias.dtype == torch.float16
    assert bias[0].tolist() == [[0.0, float("-inf")], [0.0, 0.0]]


def _flash_attn_window(seq_len: int, key_len: int, left: int, right: int) -> torch.Tensor:
    """flash-attn's documented rule: query i sees keys j with
    ``i + S − T − left <= j <= i + S − T + right`` (−1: unbounded on that side)."""
    i = torch.arange(seq_len)[:, None] + key_len - seq_len
    j = torch.arange(key_len)[None, :]
    ok = torch.ones(seq_len, key_len, dtype=torch.bool)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    st.sampled_from(["causal", "sliding", "bidirectional", "sliding_bidirectional", "chunked"]),
    st.integers(1, 12),
    st.integers(0, 10),
    st.integers(1, 9),
)
def test_kernel_spellings_follow_their_conventions(
    kind: str, seq_len: int, extra: int, size: int
) -> None:
    """meta's flash-attn window gives the mask by flash-attn's documented rule; vLLM's
    sliding_window W becomes flash-attn's (W − 1, 0) in its backend; SDPA's is_causal, when
    given, is the mask SDPA builds (top-left aligned tril, or every key)."""
    key_len = seq_len + extra
    rule = mask_rule(
        kind,
        window=size if "sliding" in kind else None,
        chunk_size=size if kind == "chunked" else None,
    )
    mask = attention_mask(rule, seq_len, key_len)[0]
    meta = kernel_spellings(rule, mask_inputs(rule, seq_len, key_len))
    window = meta["flash_attn_window_size"]
    if kind == "chunked":
        assert window is None and meta["vllm_attention_chunk_size"] == size
    else:
        assert torch.equal(mask, _flash_attn_window(seq_len, key_len, *window))
    if meta["vllm_sliding_window"] is not None:
        w = meta["vllm_sliding_window"]
        assert torch.equal(mask, _flash_attn_window(seq_len, key_len, w - 1, 0))
    if meta["sdpa_is_causal"] is True:
        assert torch.equal(mask, torch.ones(seq_len, key_len, dtype=torch.bool).tril())
    elif meta["sdpa_is_causal"] is False:
        assert bool(mask.all())


@pytest.mark.parametrize("output", ["mask", "bias"])
def test_blocks_equal_the_whole(output: str) -> None:
    """Row blocks of any size are the whole table's bytes (padding, images, packing)."""
    rule = mask_rule("sliding", window=3)
    cases = [
        mask_inputs(rule, 7, 11, attention_mask=_padding(3, 11).tolist()),
        mask_inputs(rule, 9, token_type_ids=[[0, 1, 1, 0, 1, 1, 1, 0, 0]]),
        mask_inputs(rule, 9, cu_seqlens=[0, 3, 4, 9]),
    ]
    for inputs in cases:
        blocks = mask_blocks(rule, inputs, output=output, dtype=torch.bfloat16)  # type: ignore[arg-type]
        whole = blocks.whole()
        for block_bytes in (1, 7 * 2, 11 * 2 * 5):
            assert torch.equal(blocks.whole(block_bytes), whole)
            rows = [blocks.fill(a, b) for a, b in blocks.ranges(block_bytes)]
            assert torch.equal(torch.cat(rows).reshape(whole.shape), whole)


@pytest.mark.parametrize(
    ("fields", "field", "match"),
    [
        ({"kind": "sliding"}, "window", "needs window"),
        ({"kind": "causal", "window": 3}, "window", "not to kind causal"),
        ({"seq_len": 4, "key_len": 3}, "key_len", "must be >= seq_len"),
        ({"attention_mask": [[1, 1, 1]]}, "attention_mask[0]", "key_len = 4"),
        ({"attention_mask": [[1, 2, 1, 1]]}, "attention_mask[0][1]", "<= 1"),
        ({"cu_seqlens": [0, 2, 2, 4]}, "cu_seqlens[2]", "increase"),
        ({"cu_seqlens": [0, 3]}, "cu_seqlens[1]", "end at"),
        ({"cu_seqlens": [1, 4]}, "cu_seqlens", "start at 0"),
        ({"cu_seqlens": [0, 4], "key_len": 6}, "key_len", "must equal seq_len"),
        (
            {"kind": "chunked", "chunk_size": 2, "token_type_ids": [[0, 1, 1, 0]]},
            "token_type_ids",
            "causal and sliding",
        ),
        ({"layer": 3}, "layer", "needs config"),
        ({"config": GRANITE_4H, "layer": 0}, "layer", "Mamba-2 state-space"),
        ({"config": QWEN3_NEXT, "layer": 0}, "layer", "DeltaNet"),
        ({"config": QWEN3_NEXT, "layer": 48}, "layer", r"\[0, 47\]"),
        ({"config": PUBLISHED["gemma-2-9b"]}, "layer_type", "different masks"),
        (
            {"config": PUBLISHED["gemma-2-9b"], "layer_type": "chunked_attention"},
            "layer_type",
            "not a layer type",
        ),
        ({"config": PUBLISHED["mistral-7b"], "chunk_size": 3}, "chunk_size", "not to kind sliding"),
        (
            {"config": {"model_type": "qwen3_next", "num_hidden_layers": 10**12}, "layer": 0},
            "config.num_hidden_layers",
            "over posenc's limit",
        ),
    ],
)
def test_bad_requests_name_the_field(fields: dict[str, Any], field: str, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match) as err:
        params = resolve.resolve_fields(MASKS, {"seq_len": 4, **fields})
        resolve.compute(MASKS, params)
    assert err.value.field == field


def test_layers_are_labelled() -> None:
    """Llama 4's NoPE layers, Granite 4.0-H's Mamba and attention without positions,
    Qwen3-Next's linear attention, Gemma 3's sliding and full layers with RoPE."""
    llama4 = attention_layers(PUBLISHED["llama-4-scout"])
    hf_types = _hf_layer_types(_hf_config(PUBLISHED["llama-4-scout"]))
    assert [x.layer_type for x in llama4] == hf_types  # NoPE layers are full_attention
    assert [x.positions for x in llama4[:4]] == ["rope", "rope", "rope", "none"]
    assert [x.mask for x in llama4[:4]] == ["chunked", "chunked", "chunked", "causal"]
    assert llama4[0].chunk_size == 8192 and "chunk 8192" in llama4[0].what
    assert "NoPE" in llama4[3].what
    granite = attention_layers(GRANITE_4H)
    assert granite[5].mixer == "attention" and granite[5].positions == "none"
    assert granite[0].mixer == "mamba" and granite[0].mask is None
    qwen = attention_layers(QWEN3_NEXT)
    assert [x.mixer for x in qwen[:4]] == ["linear_attention"] * 3 + ["attention"]
    gemma = attention_layers(PUBLISHED["gemma-3-1b"])
    assert [x.mask for x in gemma[:6]] == ["sliding"] * 5 + ["causal"]
    assert gemma[0].window == 512 and gemma[0].to_dict()["endpoint"] == "/v1/masks"
    mllama = attention_layers(
        {"model_type": "mllama", "text_config": {"model_type": "mllama_text_model",
         "num_hidden_layers": 5, "cross_attention_layers": [3], "rope_theta": 500000.0}}
    )  # fmt: skip
    assert mllama[3].mixer == "cross_attention" and mllama[3].mask is None


@pytest.mark.parametrize("name", ["gpt-oss-20b", "llama-4-scout"])
def test_packing_detected_from_position_ids(name: str) -> None:
    """position_ids given as transformers detects packing (a break wherever a position is not
    the previous plus 1), positions not starting at 0 included: the rule compares the given
    positions, as transformers' remap_positions_for_packed_sequence does."""
    config = _small(PUBLISHED[name], sliding_window=3, attention_chunk_size=4)
    text = _hf_config(config)
    ids = [3, 4, 5, 6, 7, 0, 1, 2, 9, 10, 11, 12, 13]
    for layer_type, index in _first_of_each_type(config).items():
        want = _hf_mask(text, layer_type, 13, 13, None, position_ids=torch.tensor([ids]))
        got = _posenc(config=config, layer=index, seq_len=13, position_ids=ids)
        assert torch.equal(got, want), layer_type
    # one document that does not start at 0: transformers finds no packing (indices, not
    # positions); a chunk of 4 from position 3 would otherwise cut after the first token
    chunked = _small(PUBLISHED["llama-4-scout"], attention_chunk_size=4)
    one = [3, 4, 5, 6, 7, 8]
    want = _hf_mask(
        _hf_config(chunked), "chunked_attention", 6, 6, None, position_ids=torch.tensor([one])
    )
    assert torch.equal(_posenc(config=chunked, layer=0, seq_len=6, position_ids=one), want)
    restart = [0, 1, 2, 0, 1, 0, 1, 2, 3]
    assert packed_documents(restart) == [0, 3, 5, 9]
    assert torch.equal(
        _posenc(kind="sliding", window=2, seq_len=9, position_ids=restart),
        _posenc(kind="sliding", window=2, seq_len=9, cu_seqlens=[0, 3, 5, 9]),
    )
    meta = MASKS.make_meta(resolve.resolve_fields(MASKS, {"seq_len": 9, "position_ids": restart}))
    assert meta["cu_seqlens"] == [0, 3, 5, 9] and meta["max_seqlen"] == 4


@pytest.mark.parametrize("name", ["llama-4-scout", "gemma-3-1b", "qwen3-next", "granite-4.0-h"])
def test_layer_types_are_transformers_names(name: str) -> None:
    """Every layer's layer_type is the one transformers' config gives it (what a caller
    sends as layer_type), and asking by that name gives that layer's mask."""
    config = PUBLISHED[name]
    hf_types = _hf_layer_types(_hf_config(config))
    assert [x.layer_type for x in attention_layers(config)] == hf_types
    for layer_type, index in _first_of_each_type(config).items():
        if layer_type == "linear_attention":
            continue
        assert torch.equal(
            _posenc(config=config, layer_type=layer_type, seq_len=5),
            _posenc(config=config, layer=index, seq_len=5),
        )


def test_fields_win_over_the_config() -> None:
    """window, chunk_size and kind given with a config replace the layer's own, as every
    field of posenc wins over a config's value."""
    config = PUBLISHED["gemma-2-9b"]
    assert torch.equal(
        _posenc(config=config, layer=0, seq_len=7, window=3),
        _posenc(kind="sliding", window=3, seq_len=7),
    )
    assert torch.equal(
        _posenc(config=config, layer=0, seq_len=7, kind="causal"),
        _posenc(seq_len=7),
    )
    llama4 = PUBLISHED["llama-4-scout"]
    assert torch.equal(
        _posenc(config=llama4, layer=0, seq_len=9, chunk_size=4),
        _posenc(kind="chunked", chunk_size=4, seq_len=9),
    )


@settings(max_examples=80, derandomize=True, deadline=None)
@given(
    kind=st.sampled_from(
        ["causal", "sliding", "chunked", "bidirectional", "sliding_bidirectional"]
    ),
    seq_len=st.integers(1, 9),
    extra=st.integers(0, 7),
    size=st.integers(1, 6),
    pads=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=3),
)
def test_random_masks_equal_sdpa_mask(
    kind: str, seq_len: int, extra: int, size: int, pads: list[tuple[int, int]]
) -> None:
    """transformers' sdpa_mask with its own mask functions, the queries offset by S − T and
    random left and right padding, equals posenc's mask for every kind."""
    key_len = seq_len + extra
    padding = torch.ones(len(pads), key_len, dtype=torch.bool)
    for row, (left, right) in enumerate(pads):
        padding[row, : min(left, key_len)] = False
        if right:
            padding[row, -min(right, key_len) :] = False
    left_padding = (padding.long().cumsum(-1) == 0).sum(-1)
    functions = {
        "causal": masking_utils.causal_mask_function,
        "sliding": masking_utils.sliding_window_causal_mask_function(size),
        "chunked": masking_utils.chunked_causal_mask_function(size, left_padding),
        "bidirectional": masking_utils.bidirectional_mask_function,
        "sliding_bidirectional": masking_utils.sliding_window_bidirectional_mask_function(size),
    }
    want = masking_utils.sdpa_mask(
        batch_size=len(pads),
        q_length=seq_len,
        kv_length=key_len,
        q_offset=key_len - seq_len,
        mask_function=functions[kind],
        attention_mask=padding,
        allow_is_causal_skip=False,
    )[:, 0]
    rule = mask_rule(
        kind,
        window=size if "sliding" in kind else None,
        chunk_size=size if kind == "chunked" else None,
    )
    got = attention_mask(rule, seq_len, key_len, attention_mask=padding.long().tolist())
    assert torch.equal(got, want)


@pytest.mark.parametrize("window", [4, 5, 8])
@pytest.mark.parametrize("padded", [False, True])
def test_embedding_gemma_bidirectional_layers(window: int, padded: bool) -> None:
    """EmbeddingGemma (gemma3_text with use_bidirectional_attention): its model's own mask
    calls (Gemma3TextModel.forward), full layers every key, sliding ones |q − k| <= W // 2."""
    from transformers.models.gemma3 import modeling_gemma3

    config = {
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "sliding_window": window,
        "use_bidirectional_attention": True,
        "head_dim": 64,
    }
    text = _hf_config(config)
    padding = _padding(2, 11) if padded else None
    kwargs = {
        "config": text,
        "inputs_embeds": torch.zeros(2 if padded else 1, 11, 1),
        "attention_mask": padding,
        "cache": None,
        "position_ids": torch.arange(11)[None],
    }
    full = masking_utils.create_causal_mask(
        **kwargs, or_mask_function=lambda *args: torch.tensor(True, dtype=torch.bool)
    )
    sliding = masking_utils.create_sliding_window_causal_mask(
        **kwargs,
        or_mask_function=modeling_gemma3._bidirectional_window_overlay(text.sliding_window),
    )
    for layer_type, want in (("full_attention", full), ("sliding_attention", sliding)):
        got = _posenc(
            config=config,
            layer_type=layer_type,
            seq_len=11,
            attention_mask=padding.tolist() if padding is not None else None,
        )
        assert torch.equal(got, want[:, 0]), layer_type
