"""Token + position embedding: bit-exact to plain indexing ``wte[ids] + wpe[pos]`` (GPT-2)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from posenc import (
    InvalidArgument,
    TokenOutOfRange,
    TokenPositionEmbedding,
    build_batch,
    embed_tokens,
    load_safetensors_model,
    sinusoidal_table,
)

V, P, D = 50, 16, 12


@pytest.fixture
def gpt2_file(tmp_path):
    """A small GPT-2-style checkpoint: wte (V, D), wpe (P, D) and an unrelated tensor."""
    g = torch.Generator().manual_seed(1234)
    tensors = {
        "wte.weight": torch.randn(V, D, generator=g),
        "wpe.weight": torch.randn(P, D, generator=g) * 0.1,
        "h.0.ln_1.weight": torch.ones(D),
    }
    path = tmp_path / "gpt2-tiny.safetensors"
    save_file(tensors, str(path))
    return path, tensors


ROWS = [[3, 17, 49, 0, 8], [21, 5], [0, 0, 1]]


@pytest.mark.parametrize("side", ["right", "left"])
def test_gpt2_file_embeds_bit_exact_to_plain_indexing(gpt2_file, side):
    path, tensors = gpt2_file
    model = load_safetensors_model("tiny", path)
    wte, wpe = tensors["wte.weight"], tensors["wpe.weight"]
    batch = build_batch(ROWS, padding_side=side)
    out = embed_tokens(
        batch.input_ids,
        token_table=model.token_table,
        position_table=model.position_table,
        position_ids=batch.position_ids,
        attention_mask=batch.attention_mask,
    )
    assert out.shape == (3, 5, D)
    assert out.dtype == torch.float32
    for b, row in enumerate(ROWS):
        real = batch.attention_mask[b].bool()
        expected = wte[torch.tensor(row)] + wpe[torch.arange(len(row))]
        assert torch.equal(out[b][real], expected)  # bit for bit
        assert torch.equal(out[b][~real], torch.zeros(int((~real).sum()), D))


def test_scale_multiplies_only_the_token_part(gpt2_file):
    _, tensors = gpt2_file
    wte, wpe = tensors["wte.weight"], tensors["wpe.weight"]
    ids = torch.tensor([[4, 9, 2]])
    out = embed_tokens(ids, token_table=wte, position_table=wpe, scale=True)
    assert torch.equal(out[0], wte[ids[0]] * math.sqrt(D) + wpe[torch.arange(3)])


def test_default_positions_are_arange_and_explicit_ones_are_used(gpt2_file):
    _, tensors = gpt2_file
    wte, wpe = tensors["wte.weight"], tensors["wpe.weight"]
    ids = torch.tensor([[4, 9, 2], [7, 7, 7]])
    out = embed_tokens(ids, token_table=wte, position_table=wpe)
    assert torch.equal(out[1], wte[7].expand(3, D) + wpe[:3])
    pos = torch.tensor([[5, 0, 15], [2, 2, 2]])
    out = embed_tokens(ids, token_table=wte, position_table=wpe, position_ids=pos)
    assert torch.equal(out[0], wte[ids[0]] + wpe[pos[0]])
    assert torch.equal(out[1], wte[ids[1]] + wpe[pos[1]])


def test_sinusoidal_part_is_the_float64_table_cast_to_the_table_dtype(gpt2_file):
    _, tensors = gpt2_file
    wte = tensors["wte.weight"]
    batch = build_batch([[1, 2, 3, 4], [5, 6]], padding_side="left")
    out = embed_tokens(
        batch.input_ids,
        token_table=wte,
        positional="sinusoidal",
        position_ids=batch.position_ids,
        attention_mask=batch.attention_mask,
        scale=True,
    )
    table = sinusoidal_table(seq_len=4, d_model=D, dtype=torch.float64).to(torch.float32)
    assert torch.equal(out[0], wte[[1, 2, 3, 4]] * math.sqrt(D) + table)
    assert torch.equal(out[1, 2:], wte[[5, 6]] * math.sqrt(D) + table[:2])
    assert torch.equal(out[1, :2], torch.zeros(2, D))


def test_positional_none_is_the_token_table_alone(gpt2_file):
    _, tensors = gpt2_file
    ids = torch.tensor([[3, 1]])
    out = embed_tokens(ids, token_table=tensors["wte.weight"], positional="none")
    assert torch.equal(out[0], tensors["wte.weight"][[3, 1]])


def test_float64_output_is_computed_in_float64(gpt2_file):
    _, tensors = gpt2_file
    wte, wpe = tensors["wte.weight"], tensors["wpe.weight"]
    ids = torch.tensor([[4, 9, 2]])
    out = embed_tokens(ids, token_table=wte, position_table=wpe, scale=True, dtype=torch.float64)
    assert out.dtype == torch.float64
    expected = wte.double()[ids[0]] * math.sqrt(D) + wpe.double()[:3]
    assert torch.equal(out[0], expected)
    half = embed_tokens(ids, token_table=wte, position_table=wpe, dtype=torch.float16)
    assert torch.equal(half[0], (wte[ids[0]] + wpe[:3]).half())


def test_module_from_model_matches_function(gpt2_file):
    path, tensors = gpt2_file
    module = TokenPositionEmbedding.from_model(load_safetensors_model("tiny", path))
    ids = torch.tensor([[4, 9, 2]])
    assert torch.equal(module(ids)[0], tensors["wte.weight"][ids[0]] + tensors["wpe.weight"][:3])


def test_out_of_range_token_names_the_first_slot(gpt2_file):
    _, tensors = gpt2_file
    ids = torch.tensor([[1, 2, 3], [4, V, -1], [V + 7, 0, 0]])
    with pytest.raises(
        TokenOutOfRange, match=rf"token id {V} at input_ids\[1\]\[1\].*\[0, {V}\)"
    ) as info:
        embed_tokens(ids, token_table=tensors["wte.weight"], position_table=tensors["wpe.weight"])
    assert info.value.field == "input_ids[1][1]"
    with pytest.raises(TokenOutOfRange) as info:
        embed_tokens(
            torch.tensor([[0, -1]]),
            token_table=tensors["wte.weight"],
            position_table=tensors["wpe.weight"],
        )
    assert info.value.field == "input_ids[0][1]"


@pytest.mark.parametrize("mask", [[[1, 1, 0]], [[True, True, False]], [[1.0, 1.0, 0.0]]])
def test_padded_slots_are_not_looked_up(gpt2_file, mask):
    _, tensors = gpt2_file
    ids = torch.tensor([[1, 2, -100]])
    pos = torch.tensor([[0, 1, P + 100]])
    out = embed_tokens(
        ids,
        token_table=tensors["wte.weight"],
        position_table=tensors["wpe.weight"],
        position_ids=pos,
        attention_mask=torch.tensor(mask),
    )
    assert torch.equal(out[0, :2], tensors["wte.weight"][[1, 2]] + tensors["wpe.weight"][:2])
    assert torch.equal(out[0, 2], torch.zeros(D))


def test_out_of_range_position_names_the_slot_and_table_size(gpt2_file):
    _, tensors = gpt2_file
    ids = torch.zeros(2, P + 1, dtype=torch.int64)
    with pytest.raises(
        InvalidArgument, match=rf"position {P} at position_ids\[0\]\[{P}\].*{P} positions"
    ) as info:
        embed_tokens(ids, token_table=tensors["wte.weight"], position_table=tensors["wpe.weight"])
    assert info.value.field == f"position_ids[0][{P}]"
    assert not isinstance(info.value, TokenOutOfRange)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"positional": "rotary"}, "positional must be one of .*'rotary'"),
        ({"position_table": None}, "needs a position_table, got None"),
        ({"position_table": torch.zeros(P, D + 1)}, f"d_model {D}, got {D + 1}"),
        ({"attention_mask": torch.ones(1, 2)}, r"shape of input_ids \(1, 3\), got \(1, 2\)"),
        (
            {"attention_mask": torch.tensor([[1.0, 0.5, 1.0]])},
            r"got 0.5 at attention_mask\[0\]\[1\]",
        ),
        ({"position_ids": torch.zeros(3)}, r"position_ids must be 2-D \(B, T\), got shape \(3,\)"),
    ],
)
def test_bad_arguments_say_what_was_given(gpt2_file, kwargs, message):
    _, tensors = gpt2_file
    args = {"token_table": tensors["wte.weight"], "position_table": tensors["wpe.weight"]} | kwargs
    with pytest.raises(InvalidArgument, match=message):
        embed_tokens(torch.tensor([[1, 2, 3]]), **args)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tables_give_the_cpu_bits(gpt2_file):
    path, tensors = gpt2_file
    model = load_safetensors_model("tiny", path, device="cuda")
    batch = build_batch(ROWS, padding_side="left")
    kwargs = {"position_ids": batch.position_ids, "attention_mask": batch.attention_mask}
    gpu = embed_tokens(
        batch.input_ids,
        token_table=model.token_table,
        position_table=model.position_table,
        **kwargs,
    )
    cpu = embed_tokens(
        batch.input_ids,
        token_table=tensors["wte.weight"],
        position_table=tensors["wpe.weight"],
        **kwargs,
    )
    assert gpu.device.type == "cuda"
    assert torch.equal(gpu.cpu(), cpu)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "none"])
def test_a_batch_of_empty_rows_embeds_to_nothing(gpt2_file, positional):
    _, tensors = gpt2_file
    batch = build_batch([[], []])
    out = embed_tokens(
        batch.input_ids,
        token_table=tensors["wte.weight"],
        position_table=tensors["wpe.weight"],
        positional=positional,
        attention_mask=batch.attention_mask,
    )
    assert out.shape == (2, 0, D)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    batch=st.integers(1, 4),
    width=st.integers(1, 6),
    scale=st.booleans(),
    table_dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    out_dtype=st.sampled_from([None, torch.float32, torch.float64]),
)
def test_in_place_path_is_bit_exact_to_out_of_place_indexing(
    data, batch, width, scale, table_dtype, out_dtype
):
    """Whatever shortcut embed_tokens takes (one (T, D) slice for shared ranges, in-place
    updates, masking only with pads), it equals the plain out-of-place formula bit for bit."""
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16), label="seed"))
    wte = torch.randn(V, D, generator=g).to(table_dtype)
    wpe = torch.randn(P, D, generator=g).to(table_dtype)
    ids = torch.randint(0, V, (batch, width), generator=g)
    mask = None
    if data.draw(st.booleans(), label="mask"):
        mask = torch.randint(0, 2, (batch, width), generator=g)
    kind = data.draw(st.sampled_from(["default", "shared_range", "random"]), label="positions")
    if kind == "default":
        pos = None
    elif kind == "shared_range":
        start = data.draw(st.integers(0, P - width), label="start")
        pos = (torch.arange(width) + start).expand(batch, width)
    else:
        pos = torch.randint(0, P, (batch, width), generator=g)

    out = embed_tokens(
        ids,
        token_table=wte,
        position_table=wpe,
        position_ids=pos,
        attention_mask=mask,
        scale=scale,
        dtype=out_dtype,
    )

    real = torch.ones(batch, width, dtype=torch.bool) if mask is None else mask.bool()
    ref_pos = (real.long().cumsum(1) - 1).clamp_min(0) if pos is None else pos
    work = torch.float64 if out_dtype == torch.float64 else table_dtype
    expected = wte[ids].to(work)
    if scale:
        expected = expected * math.sqrt(D)
    expected = expected + wpe[ref_pos.where(real, 0)].to(work)
    expected = expected.masked_fill(~real[..., None], 0).to(out_dtype or work)
    assert out.dtype == expected.dtype
    assert torch.equal(out, expected)
