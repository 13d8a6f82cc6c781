"""A vision model's folder (ViT, DINOv2, CLIP, SigLIP...): its learned 2-D position table.

A folder of ``POSENC_MODELS`` whose ``config.json`` is a vision tower with a learned table (its
``model_type`` one of :data:`~posenc.vision.learned.tables.LEARNED_TOWERS`: ``vit``,
``dinov2``...) or a dual encoder whose image side has one (``clip``, ``siglip``...) is read here
instead of as a text model: it has no token table for ``/v1/embed``, and serves its position
table through ``/v1/encodings/vision-learned``. The table is the tensor
``…embeddings.<parameter>`` of the tower (``vision_model.embeddings.position_embedding.weight``
for CLIP and SigLIP, ``embeddings.position_embeddings`` for ViT and DINOv2), from a
``.safetensors`` file or a sharded index, checked against the size the config gives.

Notation used for tensor shapes: ``P`` table rows, ``D`` width.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.facts.families import types_where
from posenc.readers.weights_file import read_index, read_tensor
from posenc.vision.learned.tables import (
    LEARNED_TOWERS,
    VisionLearnedSpec,
    check_table,
    find_learned_tower,
    vision_learned_spec,
)

__all__ = ["DUAL_ENCODERS", "VisionCheckpoint", "read_vision_checkpoint"]

DUAL_ENCODERS: frozenset[str] = types_where(lambda f: f.dual_encoder)
"""Top-level model types of image-text dual encoders: their folders are vision models here."""


@dataclass(frozen=True)
class VisionCheckpoint:
    """A vision model folder's position table and config.

    Attributes:
        config: its ``config.json``.
        table: ``(P, D)`` float32.
        tensor_name: the checkpoint's name of the table.
        where: the file or index it was read from.
        spec: the config read at its native grid.
        stored_dtype: the table's dtype in the checkpoint (it is held in float32).
    """

    config: Mapping[str, Any]
    table: Tensor
    tensor_name: str
    where: str
    spec: VisionLearnedSpec
    stored_dtype: str

    def describe(self) -> dict[str, Any]:
        """What ``GET /v1/models`` says of it."""
        return {
            "model_type": self.spec.model_type,
            "tensor": self.tensor_name,
            "table_rows": self.spec.table_rows,
            "width": self.spec.width,
            "native_grid": [self.spec.side, self.spec.side],
            "class_token": self.spec.kept > 0,
            "resize": self.spec.tower.describe(),
            "dtype": self.stored_dtype,
        }


def _config(folder: str) -> dict[str, Any] | None:
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None  # the text reader reports an unreadable config
    return config if isinstance(config, dict) else None


def _files(path: str) -> tuple[list[str], str]:
    """The safetensors files of a checkpoint (one, or an index's shards), and its main path."""
    if os.path.isdir(path):
        for name in ("model.safetensors", "model.safetensors.index.json"):
            if os.path.isfile(os.path.join(path, name)):
                return _files(os.path.join(path, name))
        raise InvalidArgument(
            f"{path}: no model.safetensors or model.safetensors.index.json", field="model"
        )
    if path.endswith(".index.json"):
        with open(path, encoding="utf-8") as f:
            shards = sorted(set(json.load(f).get("weight_map", {}).values()))
        folder = os.path.dirname(path)
        return [os.path.join(folder, s) for s in shards], path
    return [path], path


def _find_table(files: list[str], suffix: str) -> tuple[Tensor, str]:
    found: list[tuple[str, str]] = []
    for file in files:
        names = read_index(file).names
        found += [(n, file) for n in names if n.endswith(suffix) and "text" not in n]
    if not found:
        raise InvalidArgument(
            f"no vision position table (a tensor named ...{suffix}) in {', '.join(files)}",
            field="model",
        )
    name, file = sorted(found, key=lambda item: ("vision" not in item[0], len(item[0])))[0]
    tensor = read_tensor(file, name)  # copied into process memory, never mapped
    return tensor.reshape(-1, tensor.shape[-1]), name


def read_vision_checkpoint(path: str | os.PathLike[str]) -> VisionCheckpoint | None:
    """The position table of a vision model folder, or None when ``path`` is not one (its
    config is a text or multimodal model's, or absent).

    Raises:
        InvalidArgument: a vision folder whose table is missing or of another size than its
            config says.
    """
    path = os.fspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    config = _config(folder)
    if config is None:
        return None
    found = find_learned_tower(config)
    if found is None or (found[2] != "config" and config.get("model_type") not in DUAL_ENCODERS):
        return None
    spec = vision_learned_spec(config)
    files, where = _files(path)
    tower = LEARNED_TOWERS[spec.model_type]
    table, name = _find_table(
        files, f"embeddings.{tower.parameter}" if tower.in_embeddings else f".{tower.parameter}"
    )
    if not table.is_floating_point():
        raise InvalidArgument(
            f"{name} in {where} is {table.dtype}, not a float table", field="model"
        )
    check_table(spec, table)
    return VisionCheckpoint(
        config=config,
        table=table.to(torch.float32),
        tensor_name=name,
        where=where,
        spec=spec,
        stored_dtype=str(table.dtype).removeprefix("torch."),
    )
