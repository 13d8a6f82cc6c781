"""The embedding models the service's ``/v1/models`` and ``/v1/embed`` use.

A built-in default (seeded random tables, no download) and models read from safetensors files
with GPT-2 (``wte.weight``, ``wpe.weight``) or BERT (``embeddings.word_embeddings.weight``,
``embeddings.position_embeddings.weight``) tensor names. Tables keep their stored dtype.

Notation used for tensor shapes: ``V`` vocabulary size, ``P`` table positions, ``D`` model
dimension.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
from torch import Tensor

from posenc.device import resolve_device
from posenc.embedding import Positional
from posenc.errors import InvalidArgument
from posenc.learned import seeded_normal

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "posenc-base"

# (family, token-table name, position-table name, pad_token_id), tried in this order.
_LAYOUTS: tuple[tuple[str, str, str, int | None], ...] = (
    ("GPT-2", "wte.weight", "wpe.weight", None),
    ("GPT-2", "transformer.wte.weight", "transformer.wpe.weight", None),
    ("BERT", "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight", 0),
    (
        "BERT",
        "bert.embeddings.word_embeddings.weight",
        "bert.embeddings.position_embeddings.weight",
        0,
    ),
)

_NAMES_SHOWN = 20


@dataclass
class EmbeddingModel:
    """An input layer: token table, position table and how to combine them.

    Attributes:
        name: the name requests use (``model`` field).
        vocab_size: ``V``, rows of ``token_table``.
        d_model: ``D``, the embedding width.
        max_positions: ``P``, rows of ``position_table`` (the longest sequence it embeds).
        positional: its own positional encoding (``"learned"``, ``"sinusoidal"``, ``"none"``).
        scale: whether the token part is multiplied by ``sqrt(D)``.
        pad_token_id: its padding token, or ``None`` (GPT-2 has none).
        source: where the tables come from, for ``/v1/models``.
        token_table: ``(V, D)``.
        position_table: ``(P, D)`` for learned, else ``None``.
    """

    name: str
    vocab_size: int
    d_model: int
    max_positions: int
    positional: Positional
    scale: bool
    pad_token_id: int | None
    source: str
    token_table: Tensor
    position_table: Tensor | None


def _library_device(device: str | torch.device | None) -> torch.device:
    return torch.device("cpu") if device is None else resolve_device(device)


def default_model(device: str | torch.device | None = None) -> EmbeddingModel:
    """The built-in model ``posenc-base``: seeded tables, no download.

    Token table ``torch.manual_seed(0); nn.Embedding(32000, 512).weight``, position table
    ``torch.manual_seed(1); nn.Embedding(2048, 512).weight`` (drawn with
    :func:`~posenc.learned.seeded_normal`), learned positions, no scaling, pad token 0.

    Args:
        device: where the tables go; ``None`` means the CPU.

    Returns:
        :class:`EmbeddingModel` with float32 ``(32000, 512)`` and ``(2048, 512)`` tables.
    """
    dev = _library_device(device)
    vocab_size, d_model, max_positions = 32000, 512, 2048
    return EmbeddingModel(
        name=DEFAULT_MODEL_NAME,
        vocab_size=vocab_size,
        d_model=d_model,
        max_positions=max_positions,
        positional="learned",
        scale=False,
        pad_token_id=0,
        source="built-in (seeded: torch.manual_seed(0/1); nn.Embedding)",
        token_table=seeded_normal(vocab_size, d_model, seed=0).to(dev),
        position_table=seeded_normal(max_positions, d_model, seed=1).to(dev),
    )


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = len(names) - _NAMES_SHOWN
    return shown + (f", … and {more} more" if more > 0 else "") if names else "(none)"


def load_safetensors_model(
    name: str, path: str | os.PathLike[str], device: str | torch.device | None = None
) -> EmbeddingModel:
    """Read the embedding tables of a GPT-2 or BERT checkpoint from a safetensors file.

    Recognised tensor names: GPT-2 ``wte.weight`` / ``wpe.weight`` (also under
    ``transformer.``) give learned positions, no scaling, no pad token; BERT
    ``embeddings.word_embeddings.weight`` / ``embeddings.position_embeddings.weight`` (also
    under ``bert.``) give learned positions, no scaling, pad token 0. Only those two tensors are
    read; they keep their stored dtype. Needs the ``safetensors`` package (imported here).

    Args:
        name: the model's name in requests.
        path: the ``.safetensors`` file.
        device: where the tables go; ``None`` means the CPU.

    Returns:
        :class:`EmbeddingModel` with ``(V, D)`` and ``(P, D)`` tables.

    Raises:
        InvalidArgument: the file cannot be read, holds neither naming scheme (the message lists
            the tensor names found), or its tables are not 2-D floating point of one width.
        ImportError: ``safetensors`` is not installed.
    """
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "loading a safetensors model needs the 'safetensors' package "
            "(pip install 'posenc[service]')"
        ) from exc

    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"model name must be a non-empty string, got {name!r}", field="name")
    path_str = os.fspath(path)
    dev = _library_device(device)
    try:
        with safe_open(path_str, framework="pt", device="cpu") as f:
            names = sorted(f.keys())
            found = next(
                (layout for layout in _LAYOUTS if layout[1] in names and layout[2] in names), None
            )
            if found is None:
                raise InvalidArgument(
                    f"{path_str}: no GPT-2 (wte.weight, wpe.weight) or BERT "
                    "(embeddings.word_embeddings.weight, embeddings.position_embeddings.weight) "
                    f"tensor names; found {len(names)} tensor(s): {_listing(names)}",
                    field="path",
                )
            family, token_name, position_name, pad_token_id = found
            token_table = f.get_tensor(token_name)
            position_table = f.get_tensor(position_name)
    except (OSError, SafetensorError) as exc:
        raise InvalidArgument(
            f"{path_str}: cannot read as a safetensors file: {exc}", field="path"
        ) from exc

    for tensor_name, table in ((token_name, token_table), (position_name, position_table)):
        if table.dim() != 2 or not table.dtype.is_floating_point:
            raise InvalidArgument(
                f"{path_str}: {tensor_name} must be a 2-D floating-point table, got shape "
                f"{tuple(table.shape)} dtype {str(table.dtype).removeprefix('torch.')}",
                field="path",
            )
    if token_table.shape[1] != position_table.shape[1]:
        raise InvalidArgument(
            f"{path_str}: {token_name} has width {token_table.shape[1]} but {position_name} has "
            f"width {position_table.shape[1]}; they must match",
            field="path",
        )
    vocab_size, d_model = token_table.shape
    max_positions = position_table.shape[0]
    logger.info(
        "loaded %s model %r from %s: V=%d P=%d D=%d %s",
        family,
        name,
        path_str,
        vocab_size,
        max_positions,
        d_model,
        token_table.dtype,
    )
    return EmbeddingModel(
        name=name,
        vocab_size=int(vocab_size),
        d_model=int(d_model),
        max_positions=int(max_positions),
        positional="learned",
        scale=False,
        pad_token_id=pad_token_id,
        source=f"safetensors {path_str} ({family} tensor names {token_name}, {position_name})",
        token_table=token_table.to(dev),
        position_table=position_table.to(dev),
    )
