"""What a caller's test hands :mod:`posenc.testing`: arrays and a model, as the library takes them.

- Arrays are numpy arrays or torch tensors, any float dtype (bfloat16 is widened to float32
  exactly). Leading axes of size one (transformers' ``(1, T, R)`` cos) are dropped.
- ``config`` is a dict (a ``config.json`` read), the path of a ``config.json`` (or of the folder
  holding one), or the path of a GGUF file. A GGUF is read as llama.cpp reads it
  (:func:`posenc.readers.gguf.metadata.llamacpp_rope_from_gguf`): the ``llama.cpp`` rows take ``ggml_rope_ext``'s
  arguments from the file, and the other engines the same rope written as
  ``/v1/encodings/rope``'s fields (base, rotated width, linear or YaRN scaling, M-RoPE
  sections) in the layout llama.cpp applies to the file's (converted) weights. A rope with
  ``rope_freqs`` factors (Llama 3, LongRoPE) has no such form: llama.cpp's rows alone.

Notation: ``T`` positions, ``R`` rotary dimension.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posenc.core.errors import InvalidArgument
from posenc.readers.gguf.metadata import MAGIC, gguf_summary, llamacpp_rope_from_gguf
from posenc.readers.gguf.tensors import read_gguf_file_head
from posenc.rope.llamacpp import LlamaCppRope

ConfigArg = Mapping[str, Any] | str | os.PathLike[str] | None
"""``config``: a dict, a ``config.json`` path (or its folder), or a GGUF file's path."""

#: The engine whose rows read a GGUF's own arguments.
GGUF_ENGINE = "llama.cpp"


def as_array(value: Any, name: str) -> np.ndarray:
    """A caller's tensor as a numpy array: torch tensors detached and moved to the CPU,
    bfloat16 widened to float32 (exactly), leading axes of size one dropped down to two axes.

    Raises:
        TypeError: not an array or tensor.
    """
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        array = t.numpy()
    elif isinstance(value, np.ndarray):
        array = value
    elif isinstance(value, list | tuple):
        array = np.asarray(value)
    else:
        raise TypeError(
            f"{name} must be a numpy array or a torch tensor, got {type(value).__name__}"
        )
    return array


def squeeze_leading(array: np.ndarray, ndim: int) -> np.ndarray:
    """``array`` with leading axes of size one removed until it has ``ndim`` axes."""
    while array.ndim > ndim and array.shape[0] == 1:
        array = array[0]
    return array


def positions_list(positions: Any) -> list[int] | list[list[int]] | None:
    """Positions as the rope kind takes them: a list of ints, or M-RoPE's rows."""
    if positions is None:
        return None
    array = as_array(positions, "positions") if not isinstance(positions, range) else None
    if array is None:
        return list(positions)
    if array.ndim == 2:
        return [[int(p) for p in row] for row in array]
    return [int(p) for p in array.reshape(-1)]


def _gguf_scaling(rope: LlamaCppRope) -> dict[str, Any] | None:
    """The ``scaling`` (transformers' names) of a GGUF's rope where there is one: YaRN from
    ``ext_factor``, linear from ``freq_scale``; None for unscaled and for M-RoPE."""
    if rope.freq_scale == 1.0 or rope.sections is not None:
        return None
    factor = 1.0 / rope.freq_scale
    if rope.ext_factor == 0.0:
        return {"type": "linear", "factor": factor}
    scaling: dict[str, Any] = {
        "type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": rope.n_ctx_orig,
        "beta_fast": rope.beta_fast,
        "beta_slow": rope.beta_slow,
    }
    if abs(rope.attn_factor - (0.1 * math.log(factor) + 1.0)) > 1e-6:
        scaling["attention_factor"] = rope.attn_factor
    return scaling


def gguf_fields(path: str | os.PathLike[str], max_model_len: int | None = None) -> dict[str, Any]:
    """A GGUF file's rope as the rope kind's fields, with ``llamacpp`` (``ggml_rope_ext``'s
    arguments, for the ``llama.cpp`` rows) and ``gguf_transformers_form``: whether the other
    engines' fields say the same rope (not for ``rope_freqs`` factors: Llama 3's, LongRoPE's).

    Raises:
        InvalidArgument: not GGUF, truncated, or an architecture whose rope is not known.
    """
    head, _size = read_gguf_file_head(os.fspath(path))
    rope = llamacpp_rope_from_gguf(head, n_ctx=max_model_len)
    summary = gguf_summary(head, rope)
    fields: dict[str, Any] = {
        "head_dim": int(summary["head_dim"] or rope.n_dims),
        "rotary_dim": rope.n_dims,
        "base": rope.freq_base,
        "layout": rope.layout,
        "scaling": _gguf_scaling(rope),
        "llamacpp": rope.to_dict(),
        "gguf_transformers_form": rope.freq_factors is None,
    }
    if rope.sections is not None:
        fields["mrope_section"] = list(rope.sections[:3])
        fields["mrope_interleaved"] = rope.mode == "imrope"
    return fields


def _is_gguf(path: Path) -> bool:
    if path.suffix.lower() == ".gguf":
        return True
    with open(path, "rb") as f:
        return f.read(4) == MAGIC


def config_fields(config: ConfigArg, max_model_len: int | None = None) -> dict[str, Any]:
    """The request fields ``config`` gives: ``{"config": dict}`` or a GGUF's rope fields
    (:func:`gguf_fields`).

    Raises:
        InvalidArgument: a path that cannot be read as JSON or GGUF.
    """
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return {"config": dict(config)}
    path = Path(config)
    if path.is_dir():
        path = path / "config.json"
    try:
        if _is_gguf(path):
            return gguf_fields(path, max_model_len)
        value = json.loads(path.read_text())
    except OSError as exc:
        raise InvalidArgument(f"config: cannot read {path}: {exc}", field="config") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(
            f"config: {path} is neither a GGUF file nor a JSON config.json ({exc})", field="config"
        ) from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"config: {path} must hold a JSON object", field="config")
    return {"config": value}


def rope_request(
    config: ConfigArg,
    preset: str | None,
    positions: Any,
    seq_len: int | None,
    fields: Mapping[str, Any],
) -> dict[str, Any]:
    """The rope kind's request (without engine, precision and dtype) for these arguments;
    ``llamacpp`` and ``gguf_transformers_form`` included when ``config`` is a GGUF."""
    request = {
        **config_fields(config, fields.get("max_model_len")),
        "preset": preset,
        "positions": positions_list(positions),
        "seq_len": seq_len,
    }
    for name, value in fields.items():
        if value is not None:
            request[name] = value
    return {k: v for k, v in request.items() if v is not None}


def engine_request(request: Mapping[str, Any], engine: str) -> dict[str, Any]:
    """``request`` for one engine: a GGUF's ``llamacpp`` arguments for the llama.cpp rows only.

    Raises:
        InvalidArgument: another engine for a GGUF whose rope has ``rope_freqs`` factors, which
            no transformers-style field says.
    """
    out = {k: v for k, v in request.items() if k != "gguf_transformers_form"}
    if "llamacpp" in out and engine != GGUF_ENGINE:
        if not request.get("gguf_transformers_form", True):
            raise InvalidArgument(
                f"this GGUF's rope divides its frequencies by rope_freqs factors (Llama 3, "
                f"LongRoPE), which only llama.cpp's arguments say; ask engine={GGUF_ENGINE!r}, "
                f"or give the config.json the file was converted from, for engine {engine!r}",
                field="engine",
            )
        del out["llamacpp"]
    return out


def check_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` for :func:`posenc.explain.check.check_table`, which compares every engine."""
    return {k: v for k, v in request.items() if k != "gguf_transformers_form"}


__all__ = [
    "GGUF_ENGINE",
    "ConfigArg",
    "as_array",
    "check_request",
    "config_fields",
    "engine_request",
    "gguf_fields",
    "positions_list",
    "rope_request",
    "squeeze_leading",
]
