"""A ``.gguf`` model file as :class:`~posenc.readers.models.EmbeddingModel` fields, for ``/v1/embed``.

The token table is the file's ``token_embd.weight``, dequantized to float32 exactly as
``gguf``'s ``quants.dequantize`` does (:mod:`posenc.readers.gguf.tensors`). Positions are read from the
metadata as llama.cpp reads them (:func:`posenc.readers.gguf.metadata.read_rope`): nothing is added to the token
part, and ``/v1/embed`` gives llama.cpp's ``cos``/``sin``: posenc's default table where the rope
is unscaled, else llama.cpp's rule in float64 with the file's scaling (linear ``freq_scale``,
YaRN, the ``rope_freqs`` / ``rope_factors_long``/``short`` tensors read from the file, M-RoPE
sections), cast once. Text is
tokenized with the file's own vocabulary, as llama.cpp tokenizes it
(:func:`posenc.readers.gguf.tokenizer.gguf_tokenizer`); a vocabulary posenc does not rebuild leaves the
model without a tokenizer, and text sent to it is a 422 naming the tokenizer (``input_ids``
work).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from posenc.core.errors import InvalidArgument
from posenc.readers.checkpoints import RopeSpec
from posenc.readers.gguf.metadata import read_rope
from posenc.readers.gguf.tensors import read_factor_tensors, read_gguf_table
from posenc.readers.gguf.tokenizer import UnsupportedGgufTokenizer, gguf_tokenizer
from posenc.rope.llamacpp import LlamaCppRope, llamacpp_inv_freq

logger = logging.getLogger(__name__)

__all__ = ["gguf_model_fields"]


def _rope(head: Any, name: str, where: str) -> tuple[RopeSpec | None, dict[str, Any] | None]:
    """The RoPE llama.cpp applies: a RopeSpec (``/v1/embed``'s cos/sin) and its arguments
    (``/v1/models``); (None, None) where the architecture's rope is not known. An unscaled rope
    is posenc's default table; a scaled one (``freq_scale``, YaRN, factor tensors, M-RoPE
    sections) carries llama.cpp's arguments, whose exact rule gives the table
    (:func:`posenc.rope.llamacpp.llamacpp_rope_tables`)."""
    try:
        rope = read_rope(read_factor_tensors(where, head))
    except (InvalidArgument, TypeError, ValueError, ZeroDivisionError) as exc:
        reason = exc.message if isinstance(exc, InvalidArgument) else str(exc)
        logger.warning("model %r (%s): positions not read: %s", name, where, reason)
        return None, None
    scaled = (
        rope.freq_scale != 1.0
        or rope.ext_factor != 0.0
        or rope.attn_factor != 1.0
        or rope.freq_factors is not None
        or rope.sections is not None
    )
    heads = head.get("attention.head_count")
    heads = max(heads) if isinstance(heads, list) else heads
    head_dim = head.get("attention.key_length")
    if head_dim is None and heads:
        head_dim = int(head.get("embedding_length")) // int(heads)
    spec = RopeSpec(
        head_dim=int(head_dim or rope.n_dims),
        rotary_dim=rope.n_dims,
        base=rope.freq_base,
        layout=rope.layout,  # type: ignore[arg-type]
        rope_type=_scaling_name(head, rope) if scaled else "default",
        scaling=None,
        attention_scaling=llamacpp_inv_freq(rope)[1] if scaled else 1.0,
        llamacpp=rope if scaled else None,
    )
    return spec, rope.to_dict()


def _scaling_name(head: Any, rope: LlamaCppRope) -> str:
    """How the file scales its rope, by llama.cpp's keys and tensors."""
    if rope.sections is not None:
        return "mrope"
    if "rope_factors_long.weight" in head.tensors or head.get("rope.scaling.type") == "longrope":
        return "longrope"
    if rope.freq_factors is not None:
        return "llama3"
    return "yarn" if rope.ext_factor != 0.0 else str(head.get("rope.scaling.type", "linear"))


def gguf_model_fields(
    name: str, path: str | os.PathLike[str], device: torch.device
) -> dict[str, Any]:
    """Read a GGUF file's token table and positions (plain reads, never mapped).

    Args:
        name: the model's name in requests.
        path: the ``.gguf`` file.
        device: where the table goes.

    Returns:
        The keyword arguments of :class:`~posenc.readers.models.EmbeddingModel`: a float32 ``(V, D)``
        table, ``positional`` ``"rope"`` (``"none"`` for an architecture whose rope posenc does
        not know), the file's own tokenizer where posenc rebuilds it (else None and why).

    Raises:
        InvalidArgument: the file is not GGUF, is truncated, or its token table cannot be read
            (:func:`posenc.readers.gguf.tensors.read_gguf_table`).
    """
    where = os.fspath(path)
    got = read_gguf_table(where)
    head = got.head
    rope, llamacpp = _rope(head, name, where)
    vocab_size, d_model = got.table.shape
    ctx = head.get("context_length")
    file_type = head.metadata.get("general.file_type")
    tokenizer, no_tokenizer = _tokenizer(head.metadata, name, where)
    warnings = [f"text: {no_tokenizer}"] if no_tokenizer else []
    if llamacpp is None:
        warnings.append(f"llama.cpp's rope for architecture {head.architecture!r} is not known")
    logger.info("loaded GGUF model %r from %s: V=%d D=%d %s", name, where, vocab_size, d_model,
                got.type_name)  # fmt: skip
    return dict(
        name=name,
        vocab_size=int(vocab_size),
        d_model=int(d_model),
        max_positions=int(ctx) if isinstance(ctx, int) and ctx > 0 else 0,
        positional="rope" if rope is not None else "none",
        scale=False,
        pad_token_id=_int_or_none(head.metadata.get("tokenizer.ggml.padding_token_id")),
        source=f"gguf {where} (token_embd.weight, {got.type_name}, dequantized to float32)",
        token_table=torch.from_numpy(got.table).to(device),
        position_table=None,
        position_scheme="rope" if llamacpp is not None else "none",
        rope=rope,
        family="GGUF",
        model_type=head.architecture or None,
        path=where,
        warnings=tuple(warnings),
        gguf={
            "version": head.version,
            "tensor_type": got.type_name,
            "file_type": file_type,
            "llamacpp_rope": llamacpp,
        },
        tokenizer=tokenizer,
        no_tokenizer=no_tokenizer,
    )


def _tokenizer(metadata: dict[str, Any], name: str, where: str) -> tuple[Any, str | None]:
    """The file's own tokenizer, or (None, why text is refused)."""
    try:
        return gguf_tokenizer(metadata, where), None
    except ImportError as exc:  # the library runs without the tokenizers package
        return None, str(exc)
    except UnsupportedGgufTokenizer as exc:
        logger.warning("model %r (%s): no tokenizer: %s", name, where, exc.message)
        return None, f"{exc.message}; send input_ids"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
