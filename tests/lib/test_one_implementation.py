"""One implementation per table: each whole-table function is its row blocks filled once.

Issue 29: a convention's whole table (``sinusoidal_table``, ``rope_cos_sin``, ``alibi_bias`` …)
and its ``*_blocks`` twin must not be two computations that could drift apart. For every
registered kind that streams (``Kind.blocks``), this file

- names the library's whole-table functions of that kind's convention and, for each, checks its
  result bit for bit against its blocks' :meth:`~posenc.core.blocks.TableBlocks.whole` on a small
  case in every float dtype (an independent check of the closed forms is in each convention's
  own tests);
- reads each such function's source and checks that it calls its blocks twin and ``whole()``
  and allocates no table of its own (``rope_cos_sin`` and ``xpos_scales`` instead share their
  blocks' row function, so that their two tables come from one pass of the angles);
- checks the kind's own ``compute`` against its ``blocks`` filled whole, on its request example;
- fails when a kind with ``blocks`` is in neither list, so a new convention is added here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import torch

from posenc import resolve
from posenc.absolute.learned import learned_blocks, learned_table
from posenc.absolute.sinusoidal import sinusoidal_blocks, sinusoidal_table
from posenc.attention.masks import (
    attention_bias,
    attention_mask,
    mask_blocks,
    mask_inputs,
    mask_rule,
)
from posenc.core import kinds
from posenc.core.blocks import TableBlocks
from posenc.relative_schemes.alibi import alibi_bias, alibi_bias_blocks
from posenc.relative_schemes.relative import (
    deberta_positions_blocks,
    deberta_relative_positions,
    num_relative_buckets,
    relative_bias,
    relative_bias_blocks,
    relative_bias_table,
    relative_buckets,
    relative_buckets_blocks,
    swin_index_blocks,
    swin_relative_position_index,
)
from posenc.relative_schemes.relative_sinusoidal import (
    relative_sinusoidal_blocks,
    relative_sinusoidal_table,
)
from posenc.rope import RopeScaling, rope_blocks, rope_cos_sin
from posenc.rope.precision import own_tables, transformers_tables, vllm_tables
from posenc.rope.xpos import write_rows, xpos_blocks, xpos_scales
from posenc.vision.rope import vision_rope_blocks, vision_rope_cos_sin, vision_rope_spec
from posenc.vision.timm import timm_rope_blocks, timm_rope_cos_sin, timm_rope_spec

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

# A Qwen2.5-VL vision tower (the vision-rope kind's example) and a timm cat tower, small grids.
QWEN_VISION = {
    "model_type": "qwen2_5_vl",
    "vision_config": {
        "hidden_size": 1280,
        "num_heads": 16,
        "spatial_merge_size": 2,
        "model_type": "qwen2_5_vl",
    },
}
TIMM_CAT = {"rope_type": "cat", "dim": 8, "num_heads": 1}


def _bytes(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
    assert got.device == want.device
    assert _bytes(got) == _bytes(want)


# Each case: the whole-table function's result, and the blocks (one per tensor it returns).
Case = Callable[[torch.dtype], tuple[tuple[torch.Tensor, ...], tuple[TableBlocks, ...]]]


def _sinusoidal(dtype: torch.dtype) -> Any:
    kw: dict[str, Any] = dict(d_model=16, layout="tensor2tensor", offset=3, dtype=dtype)
    return (sinusoidal_table(seq_len=37, **kw),), (sinusoidal_blocks(seq_len=37, **kw),)


def _learned(dtype: torch.dtype) -> Any:
    # 13 x 5 = 65 elements: not a multiple of 16, so normal_'s last group is redrawn.
    return (learned_table(13, 5, seed=7, dtype=dtype),), (
        learned_blocks(13, 5, seed=7, dtype=dtype),
    )


def _rope(dtype: torch.dtype) -> Any:
    scaling = RopeScaling.from_dict(
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    )
    kw: dict[str, Any] = dict(rotary_dim=12, layout="interleaved", scaling=scaling, dtype=dtype)
    positions = [3, 0, 40, 41, 42, 9]
    whole = rope_cos_sin(positions, **kw)
    return (whole.cos, whole.sin), tuple(
        rope_blocks(positions, which=w, **kw) for w in ("cos", "sin")
    )


def _rope_seq_len(dtype: torch.dtype) -> Any:
    kw: dict[str, Any] = dict(seq_len=50, rotary_dim=8, rotation="negative", dtype=dtype)
    whole = rope_cos_sin(**kw)
    return (whole.cos, whole.sin), tuple(rope_blocks(which=w, **kw) for w in ("cos", "sin"))


def _vision_rope(dtype: torch.dtype) -> Any:
    spec = vision_rope_spec(QWEN_VISION, [[1, 4, 6], [2, 2, 2]])
    whole = vision_rope_cos_sin(spec, dtype=dtype)
    return whole, tuple(vision_rope_blocks(spec, which=w, dtype=dtype) for w in ("cos", "sin"))


def _timm_rope(dtype: torch.dtype) -> Any:
    spec = timm_rope_spec(TIMM_CAT, [[1, 3, 5]])
    whole = timm_rope_cos_sin(spec, dtype=dtype)
    return whole, tuple(timm_rope_blocks(spec, which=w, dtype=dtype) for w in ("cos", "sin"))


def _relative_sinusoidal(dtype: torch.dtype) -> Any:
    whole = relative_sinusoidal_table(9, 6, base=500.0, dtype=dtype)
    return (whole,), (relative_sinusoidal_blocks(9, 6, base=500.0, dtype=dtype),)


def _xpos(dtype: torch.dtype) -> Any:
    whole = xpos_scales(21, 8, scale_base=64.0, dtype=dtype)
    names = ("query_scale", "key_scale")
    return whole, tuple(xpos_blocks(21, 8, which=n, scale_base=64.0, dtype=dtype) for n in names)


def _alibi(dtype: torch.dtype) -> Any:
    kw: dict[str, Any] = dict(mode="symmetric", max_bias=5.0, dtype=dtype)
    return (alibi_bias(6, 7, 11, **kw),), (alibi_bias_blocks(6, 7, 11, **kw),)


def _relative(dtype: torch.dtype) -> Any:
    t5: dict[str, Any] = dict(num_buckets=8, max_distance=20, bidirectional=False)
    deberta: dict[str, Any] = dict(position_buckets=8, max_position=30)
    table = relative_bias_table(num_relative_buckets(num_buckets=8), 3, seed=5)  # (NB, H)
    return (
        relative_bias(relative_buckets(9, 40, **t5), table, dtype=dtype),
        relative_buckets(9, 40, **t5),
        relative_buckets(9, 40, max_distance=3, bucketing="clip"),
        deberta_relative_positions(9, 40, **deberta),
        swin_relative_position_index(3),
    ), (
        relative_bias_blocks(9, 40, num_heads=3, seed=5, dtype=dtype, **t5),
        relative_buckets_blocks(9, 40, **t5),
        relative_buckets_blocks(9, 40, max_distance=3, bucketing="clip"),
        deberta_positions_blocks(9, 40, **deberta),
        swin_index_blocks(3),
    )


def _masks(dtype: torch.dtype) -> Any:
    rule = mask_rule("sliding", window=3)
    padding = [[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1]]
    inputs = mask_inputs(rule, 5, 7, attention_mask=padding)
    return (
        attention_mask(rule, 5, 7, attention_mask=padding),
        attention_bias(rule, 5, 7, attention_mask=padding, dtype=dtype, masked_value="min"),
    ), (
        mask_blocks(rule, inputs),
        mask_blocks(rule, inputs, output="bias", dtype=dtype, masked_value="min"),
    )


# Kind -> the whole-table functions of its convention, each with its small case.
CASES: dict[str, dict[str, Case]] = {
    "sinusoidal": {"sinusoidal_table": _sinusoidal},
    "learned": {"learned_table": _learned},
    "rope": {"rope_cos_sin": _rope, "rope_cos_sin (seq_len)": _rope_seq_len},
    "vision_rope": {"vision_rope_cos_sin": _vision_rope, "timm_rope_cos_sin": _timm_rope},
    "relative_sinusoidal": {"relative_sinusoidal_table": _relative_sinusoidal},
    "xpos": {"xpos_scales": _xpos},
    "alibi": {"alibi_bias": _alibi},
    "relative": {
        "relative_bias, relative_buckets, deberta_relative_positions, "
        "swin_relative_position_index": _relative
    },
    "masks": {"attention_mask, attention_bias": _masks},
}

# Kinds with blocks but no public whole-table function beside them, and why.
NO_WHOLE_FUNCTION: dict[str, str] = {
    "diffusion_rope": "compute is _whole(_rope_blocks(...)): the kind has only its blocks",
    "sincos_2d": "compute is _whole(_sincos_blocks(...)): the kind has only its blocks",
    "vision_learned": "compute is its blocks filled whole (each block resamples or gathers "
    "only its rows); its engine precision of a whole-grid kernel is not streamed",
    "embed": "a model's embedding of a batch, not a table: compute and blocks both call "
    "_embed_tokens_of, on the whole batch or on a run of its tokens",
    "context_parallel": "compute is its blocks filled whole (the rope kind's rope_blocks and "
    "the masks' mask_rows at each rank's rows); M-RoPE's three rows have no blocks",
}

# Whole-table function -> the blocks twin its body must call before ``.whole()``.
DELEGATES: dict[Callable[..., Any], str] = {
    sinusoidal_table: "sinusoidal_blocks",
    learned_table: "learned_blocks",
    vision_rope_cos_sin: "vision_rope_blocks",
    timm_rope_cos_sin: "timm_rope_blocks",
    relative_sinusoidal_table: "relative_sinusoidal_blocks",
    alibi_bias: "alibi_bias_blocks",
    relative_buckets: "relative_buckets_blocks",
    relative_bias: "_bias_blocks",  # of any (T, S) buckets: relative_bias_blocks' gather
    deberta_relative_positions: "deberta_positions_blocks",
    swin_relative_position_index: "swin_index_blocks",
    attention_mask: "mask_blocks",
    attention_bias: "mask_blocks",
    # the engines' own arithmetic (posenc.engines): 1-D positions; M-RoPE's rows have no blocks
    transformers_tables: "transformers_blocks",
    vllm_tables: "vllm_blocks",
    own_tables: "own_blocks",
}

# Requests beyond each kind's own examples: the rope kind's engines, each its own arithmetic.
MORE_EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "rope": [
        {"preset": "llama-3.1-8b", "positions": [0, 5, 4000, 7, 3], "precision": "engine"},
        {"preset": "gpt-j-6b", "seq_len": 33, "precision": "engine", "dtype": "bfloat16"},
        {"preset": "qwen2.5-7b", "seq_len": 600, "engine": "llama.cpp"},
        {"preset": "qwen2.5-7b", "seq_len": 600, "engine": "llama.cpp", "precision": "engine"},
        {"preset": "phi-3.5-mini", "seq_len": 70, "engine": "vllm", "precision": "engine"},
        {"preset": "llama-3.1-8b", "positions": [9, 2, 70000], "rotation": "negative"},
    ],
}


def _calls(fn: Callable[..., Any]) -> set[str]:
    """The names called in ``fn``'s body: ``f(...)`` gives ``f``, ``x.f(...)`` gives ``.f``,
    ``torch.empty(...)`` gives ``torch.empty``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                base = func.value
                prefix = base.id if isinstance(base, ast.Name) and base.id == "torch" else ""
                names.add(f"{prefix}.{func.attr}")
    return names


def test_every_streaming_kind_is_listed() -> None:
    streaming = {name for name, kind in kinds.REGISTRY.items() if kind.blocks is not None}
    listed = set(CASES) | set(NO_WHOLE_FUNCTION)
    assert streaming - listed == set(), "add the new kind's whole-table functions to CASES"
    assert listed - streaming == set(), "a listed kind no longer streams"
    assert not set(CASES) & set(NO_WHOLE_FUNCTION)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "case", [c for cases in CASES.values() for c in cases.values()], ids=lambda c: c.__name__
)
def test_whole_function_is_its_blocks_whole(case: Case, dtype: torch.dtype) -> None:
    wholes, blocks = case(dtype)
    assert len(wholes) == len(blocks)
    for whole, table in zip(wholes, blocks, strict=True):
        _same(whole, table.whole())
        # and filled a few rows at a time, the bytes do not move
        _same(whole, table.whole(max_block_bytes=3 * table.row_elements * table.element_size))


@pytest.mark.parametrize("fn", list(DELEGATES), ids=lambda f: f.__name__)
def test_whole_function_delegates_to_its_blocks(fn: Callable[..., Any]) -> None:
    called = _calls(fn)
    assert DELEGATES[fn] in called, f"{fn.__name__} does not call {DELEGATES[fn]}"
    assert ".whole" in called, f"{fn.__name__} does not fill its blocks whole"
    own = {"torch.empty", "torch.zeros", "torch.arange", "torch.where", ".copy_", "write_rows"}
    assert not called & own, f"{fn.__name__} computes a table of its own: {called & own}"


def test_rope_cos_sin_shares_the_blocks_row_writer() -> None:
    """rope_cos_sin fills cos and sin from one pass of the angles (sin_cos_rows gives both), so
    calls the row writer that rope_blocks' fill calls, rather than two wholes (twice the work)."""
    assert "_row_writer" in _calls(rope_cos_sin)
    assert "_row_writer" in _calls(rope_blocks)
    assert "write_rope_rows" not in _calls(rope_cos_sin) | _calls(rope_blocks)
    assert "cos_sin_tables" not in _calls(rope_cos_sin)


def test_xpos_scales_share_the_blocks_row_function() -> None:
    """xpos_scales writes both scales from one pass of the exponents (write_rows); each block of
    xpos_blocks takes the same exponents from the same function, so the two cannot drift."""
    assert "write_rows" in _calls(xpos_scales)
    assert "_log_scales" in _calls(write_rows) and "_log_scales" in _calls(xpos_blocks)
    assert "_log_scales" not in _calls(xpos_scales) and "torch.exp" not in _calls(xpos_scales)


@pytest.mark.parametrize(
    "name", sorted(n for n, k in kinds.REGISTRY.items() if k.blocks is not None)
)
def test_kind_compute_is_its_blocks_whole(name: str) -> None:
    """Each streaming kind's compute equals its blocks filled whole, on its request examples
    (and, for rope, each engine's own arithmetic)."""
    kind = kinds.REGISTRY[name]
    for example in kind.request_examples() + MORE_EXAMPLES.get(name, []):
        params = resolve.resolve_fields(kind, example)
        if not kind.streamable(params):
            continue
        ctx = resolve.context(params)
        tensors = kind.compute(params, ctx)
        assert kind.blocks is not None
        tables = kind.blocks(params, ctx)
        assert list(tables) == list(tensors)
        for key, table in tables.items():
            _same(tensors[key], table.whole())
