"""Reading the input layer of a Hugging Face checkpoint of any common family.

What a decoder or encoder feeds its first layer is the token embedding (times the model's own
normaliser where it has one: Gemma's ``sqrt(hidden_size)`` rounded to the model dtype, BART's
``scale_embedding``), plus, depending on the positional scheme in its ``config.json``:

- ``learned``: a position table added to it (GPT-2 ``wpe``, BERT ``position_embeddings``, OPT
  ``embed_positions`` whose first two rows are an offset that transformers skips);
- ``rope``: nothing added; the attention layers rotate queries and keys by ``cos`` / ``sin`` of
  the position ids (transformers' ``*RotaryEmbedding``), whose parameters come from the config;
- ``alibi`` (BLOOM, MPT, Falcon with ``alibi``), ``relative`` (T5): nothing added; a bias in the
  attention scores;
- ``none``: nothing.

Token-table names recognised (with and without the usual prefixes): ``model.embed_tokens``
(Llama, Mistral, Qwen, Gemma, Phi), ``model.language_model.embed_tokens`` (transformers 5
multimodal layouts), ``transformer.wte`` / ``wte`` (GPT-2, GPT-J), ``gpt_neox.embed_in``,
``transformer.word_embeddings`` (BLOOM, Falcon), ``model.decoder.embed_tokens`` (OPT),
``shared`` (T5), ``embeddings.word_embeddings`` (BERT), ``tok_embeddings`` (InternLM, Meta's
original Llama). A sharded checkpoint is read through its ``model.safetensors.index.json``.

The RoPE settings are read by the library's config reader, :func:`posenc.readers.hf.positions.read_positions`
(every convention it knows: legacy ``rope_scaling``, Llama 3 / YaRN / LongRoPE scaling, partial
rotary factors, DeepSeek's ``qk_rope_head_dim``, the interleaved layouts, Gemma 3's per-layer-type
parameters and ``rope_local_base_freq``). Where a config gives RoPE parameters per layer type,
:attr:`Checkpoint.rope` is the RoPE of the model's **first layer that applies RoPE** (Gemma 3:
``sliding_attention``, theta ``rope_local_base_freq``): what ``/v1/embed`` returns, the input
of the first layer, goes with the ``cos`` / ``sin`` that layer applies.

Notation used for tensor shapes: ``V`` vocabulary size, ``P`` table positions, ``D`` model
dimension, ``R`` rotary dimension.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.core.errors import InvalidArgument
from posenc.facts import families
from posenc.facts.config_parts import merged_text
from posenc.readers.hf.positions import read_positions
from posenc.readers.hf.results import ModelPositions
from posenc.readers.weights_file import read_index, read_tensor
from posenc.rope import RopeLayout, RopeScaling
from posenc.rope.llamacpp import LlamaCppRope

logger = logging.getLogger(__name__)

PositionScheme = Literal["learned", "sinusoidal", "rope", "alibi", "relative", "none"]

# (family, token-table name, position-table name or None, rows of the position table to skip).
TOKEN_LAYOUTS: tuple[tuple[str, str, str | None, int], ...] = (
    ("GPT-2", "wte.weight", "wpe.weight", 0),
    ("GPT-2", "transformer.wte.weight", "transformer.wpe.weight", 0),
    ("BERT", "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight", 0),
    (
        "BERT",
        "bert.embeddings.word_embeddings.weight",
        "bert.embeddings.position_embeddings.weight",
        0,
    ),
    (
        "RoBERTa",
        "roberta.embeddings.word_embeddings.weight",
        "roberta.embeddings.position_embeddings.weight",
        0,
    ),
    ("OPT", "model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight", 2),
    ("OPT", "decoder.embed_tokens.weight", "decoder.embed_positions.weight", 2),
    ("Llama", "model.embed_tokens.weight", None, 0),
    ("Llama", "model.language_model.embed_tokens.weight", None, 0),
    ("Llama", "language_model.model.embed_tokens.weight", None, 0),
    ("Llama", "embed_tokens.weight", None, 0),
    ("GPT-NeoX", "gpt_neox.embed_in.weight", None, 0),
    ("GPT-NeoX", "embed_in.weight", None, 0),
    ("BLOOM/Falcon", "transformer.word_embeddings.weight", None, 0),
    ("BLOOM/Falcon", "word_embeddings.weight", None, 0),
    ("T5", "shared.weight", None, 0),
    ("T5", "encoder.embed_tokens.weight", None, 0),
    ("InternLM", "model.tok_embeddings.weight", None, 0),
    ("InternLM", "tok_embeddings.weight", None, 0),
    ("ChatGLM", "transformer.embedding.word_embeddings.weight", None, 0),
)

# Families whose files name a learned table: without a config, that table is required.
_LEARNED_FAMILIES = {"GPT-2", "BERT", "RoBERTa", "OPT"}

_ROPE_KEYS = ("rope_parameters", "rope_scaling", "rope_theta", "rotary_emb_base", "rotary_pct")

_NAMES_SHOWN = 20


@dataclass(frozen=True)
class RopeSpec:
    """The RoPE tables a model's attention applies, as read from its config.

    Attributes:
        head_dim: ``Dh``.
        rotary_dim: ``R = int(Dh · partial_rotary_factor)``.
        base: ``rope_theta``.
        layout: ``half`` (GPT-NeoX, Llama) or ``interleaved`` (GPT-J, GLM).
        rope_type: ``default`` or the scaling type.
        scaling: the scaling scheme, or None.
        layer_type: for a config with RoPE parameters per layer type, the one these are (the
            first layer's); None where one set serves every layer.
        attention_scaling: the factor the model multiplies ``cos`` and ``sin`` by.
        llamacpp: a GGUF model's scaled rope, as llama.cpp's arguments
            (:class:`posenc.rope.llamacpp.LlamaCppRope`): its rule gives the tables; else None.
    """

    head_dim: int
    rotary_dim: int
    base: float
    layout: RopeLayout
    rope_type: str
    scaling: RopeScaling | None
    layer_type: str | None = None
    attention_scaling: float = 1.0
    llamacpp: LlamaCppRope | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (for ``/v1/models``)."""
        scaling = None
        if self.scaling is not None:
            scaling = {
                k: (list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self.scaling).items()
                if v is not None
            }
        return {
            "head_dim": self.head_dim,
            "rotary_dim": self.rotary_dim,
            "base": self.base,
            "layout": self.layout,
            "rope_type": self.rope_type,
            "scaling": scaling,
            "layer_type": self.layer_type,
            "attention_scaling": self.attention_scaling,
        } | ({"llamacpp": self.llamacpp.to_dict()} if self.llamacpp is not None else {})


@dataclass(frozen=True)
class Checkpoint:
    """The input layer of a checkpoint, before it goes to a device.

    Attributes:
        family: the naming scheme recognised (``Llama``, ``GPT-2``, ...).
        token_name: the token table's tensor name.
        position_name: the learned position table's name, or None.
        token_table: ``(V, D)`` in its stored dtype.
        position_table: ``(P, D)`` (offset rows dropped), or None.
        scheme: the model's positional scheme.
        rope: its RoPE settings where ``scheme`` is ``rope``.
        embed_scale: the multiplier of the token embeddings (already in the value the model
            uses, e.g. ``sqrt(D)`` rounded to the table dtype for Gemma), or None.
        pad_token_id: from the config, else the family's (BERT 0), else None.
        model_type: the config's ``model_type``, or None without a config.
        config_path: the ``config.json`` read, or None.
        config: its contents, or None.
        where: the file(s) read, for messages.
        theta_guessed: the config named no RoPE key and its model type is unknown, so Llama's
            default ``rope_theta`` 10000 was assumed.
    """

    family: str
    token_name: str
    position_name: str | None
    token_table: Tensor
    position_table: Tensor | None
    scheme: PositionScheme
    rope: RopeSpec | None
    embed_scale: float | None
    pad_token_id: int | None
    model_type: str | None
    config_path: str | None
    config: dict[str, Any] | None
    where: str
    theta_guessed: bool = False


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = len(names) - _NAMES_SHOWN
    return shown + (f", … and {more} more" if more > 0 else "") if names else "(none)"


def _check_shard_name(index: str, tensor: str, shard: object) -> None:
    """A ``weight_map`` entry names a file inside the index's folder: a relative path that does
    not climb out of it (``..``) and is not absolute. What the folder holds may be a link
    (a Hugging Face cache snapshot's files link to ``../../blobs/``): the name is checked, the
    link is followed.

    Raises:
        InvalidArgument: a name that is not a string, is absolute, or leaves the folder.
    """
    if not isinstance(shard, str) or not shard:
        why = f"is {shard!r}, not a file name"
    elif os.path.isabs(shard) or shard.startswith(("/", "\\")) or os.path.splitdrive(shard)[0]:
        why = f"is the absolute path {shard!r}"
    elif ".." in shard.replace("\\", "/").split("/"):
        why = f"is {shard!r}, which climbs out of the model's folder"
    else:
        return
    message = (
        f"{index}: weight_map entry of {tensor!r} {why}; a shard must be a file in the index's "
        "own folder"
    )
    logger.error("refused to load %s", message)
    raise InvalidArgument(message, field="path")


def _open_tensors(path: str) -> tuple[list[str], Callable[[str], Tensor], str, str]:
    """``(names, get, where, folder)`` of a safetensors file, a sharded index, or a folder.

    ``get`` copies a tensor into memory the process owns (:mod:`posenc.readers.weights_file`), never a
    memory map: a shard truncated or replaced later cannot fault the process.
    """
    if os.path.isdir(path):
        single = os.path.join(path, "model.safetensors")
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(single):
            path = single
        elif os.path.exists(index):
            path = index
        else:
            raise InvalidArgument(
                f"{path}: a folder without model.safetensors or model.safetensors.index.json",
                field="path",
            )
    folder = os.path.dirname(os.path.abspath(path))
    if path.endswith(".json"):
        try:
            with open(path, encoding="utf-8") as fh:
                weight_map = json.load(fh)["weight_map"]
            if not isinstance(weight_map, Mapping):
                raise TypeError(f"weight_map is a {type(weight_map).__name__}, not an object")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(
                f"{path}: cannot read as a safetensors index (model.safetensors.index.json with "
                f"a weight_map): {exc}",
                field="path",
            ) from exc
        for name, shard in weight_map.items():
            _check_shard_name(path, str(name), shard)

        def get_sharded(name: str) -> Tensor:
            shard = os.path.join(folder, str(weight_map[name]))
            try:
                return read_tensor(shard, name)
            except InvalidArgument as exc:
                raise InvalidArgument(f"{exc.message} (shard of {path})", field="path") from exc

        return sorted(weight_map), get_sharded, path, folder

    names = read_index(path).names
    return names, lambda name: read_tensor(path, name), path, folder


def read_config(folder: str) -> tuple[dict[str, Any] | None, str | None]:
    """The ``config.json`` in ``folder`` (None when there is none); InvalidArgument if unparsable."""
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        return None, None
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"{path}: cannot read as JSON: {exc}", field="config") from exc
    if not isinstance(config, dict):
        raise InvalidArgument(
            f"{path}: must hold a JSON object, got {type(config).__name__}", field="config"
        )
    return config, path


def _rope_positions(config: Mapping[str, Any], where: str) -> tuple[ModelPositions, bool]:
    """:func:`posenc.readers.hf.positions.read_positions` of a RoPE model's config, messages led by ``where``.

    A decoder whose ``model_type`` the reader does not know and whose config names no RoPE key
    (a Llama-style token table beside it) is read with Llama's default ``rope_theta`` 10000;
    the second value says so.
    """
    guessed = False
    try:
        try:
            positions = read_positions(config)
        except InvalidArgument as exc:
            if exc.field != "config.model_type":
                raise
            fallback = copy.deepcopy(dict(config))
            text = fallback.get("text_config")
            target = text if isinstance(text, dict) else fallback
            target.setdefault("rope_theta", 10000.0)
            positions = read_positions(fallback)
            guessed = True
    except InvalidArgument as exc:
        raise InvalidArgument(f"{where}: {exc.message}", field=exc.field) from exc
    if positions.kind != "rope" or not positions.rope:
        raise InvalidArgument(
            f"{where}: the tensor names and config keys say RoPE, but model_type "
            f"{positions.model_type!r} uses {positions.kind} positions",
            field="config",
        )
    return positions, guessed


def first_rope_layer_type(positions: ModelPositions) -> str | None:
    """The layer type whose RoPE ``/v1/embed`` gives: None for one set for every layer; else
    the type of the first layer that applies RoPE (Gemma 3: ``sliding_attention``), or, for a
    config that does not say how many layers it has, the first type its parameters list."""
    if not positions.per_layer_type:
        return None
    first = next((t for t in positions.layer_types if t in positions.rope), None)
    return first if first is not None else next(iter(positions.rope))


def rope_spec(positions: ModelPositions, layer_type: str | None = None) -> RopeSpec:
    """The :class:`RopeSpec` of a RoPE config's ``layer_type`` (default: the first layer's).

    Raises:
        InvalidArgument: not a RoPE config; a layer type that is not one of the config's.
    """
    if layer_type is None:
        layer_type = first_rope_layer_type(positions)
    layer = positions.rope_for(layer_type)
    return RopeSpec(
        head_dim=layer.head_dim,
        rotary_dim=layer.rotary_dim,
        base=layer.rope_theta,
        layout="interleaved" if positions.layout == "interleaved" else "half",
        rope_type=layer.rope_type,
        scaling=layer.scaling(),
        layer_type=layer_type,
        attention_scaling=layer.attention_scaling,
    )


def _scheme(cfg: Mapping[str, Any] | None, family: str, has_table: bool) -> PositionScheme:
    if cfg is None:
        return "learned" if has_table else "none"
    model_type = str(cfg.get("model_type", ""))
    # what the model type means before the keys: posenc.facts.families' checkpoint_scheme
    assumed = families.family(model_type).checkpoint_scheme
    attn = cfg.get("attn_config")
    if (
        assumed == "alibi"
        or cfg.get("alibi") is True
        or (isinstance(attn, Mapping) and attn.get("alibi") is True)
    ):
        return "alibi"
    if assumed == "relative":
        return "relative"
    if has_table or assumed == "learned":
        return "learned"
    if assumed == "rope" or any(key in cfg for key in _ROPE_KEYS):
        return "rope"
    if family not in _LEARNED_FAMILIES and model_type:
        return "rope"  # Llama-style decoders without rope keys take the default theta
    return "none"


def _scale_value(d_model: int, dtype: torch.dtype) -> float:
    """``sqrt(D)`` as Gemma computes it: a float32 tensor cast to the table dtype."""
    return float(torch.tensor(d_model**0.5, dtype=torch.float32).to(dtype).item())


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Find the input layer of a checkpoint and read what its ``config.json`` says about it.

    Args:
        path: a ``.safetensors`` file, a ``model.safetensors.index.json``, or a folder holding
            one of them; a ``config.json`` beside it is read when present.

    Returns:
        :class:`Checkpoint` (tables on the CPU, stored dtype).

    Raises:
        InvalidArgument: unreadable files, no recognised token table (the message lists the
            names looked for and the tensors found), a learned scheme whose table is missing,
            tables that are not 2-D floating point or whose widths differ, a bad config key.
    """
    path_str = os.fspath(path)
    names, get, where, folder = _open_tensors(path_str)
    present = set(names)
    found = next((layout for layout in TOKEN_LAYOUTS if layout[1] in present), None)
    config, config_path = read_config(folder)
    if found is None:
        looked = ", ".join(dict.fromkeys(name for _, name, _, _ in TOKEN_LAYOUTS))
        raise InvalidArgument(
            f"{where}: no token embedding table among the names recognised ({looked}); found "
            f"{len(names)} tensor(s): {_listing(names)}",
            field="path",
        )
    family, token_name, position_name, skip = found
    has_table = position_name is not None and position_name in present
    cfg = merged_text(config) if config is not None else None
    scheme = _scheme(cfg, family, has_table)
    if family in _LEARNED_FAMILIES and cfg is None and not has_table:
        raise InvalidArgument(
            f"{where}: {token_name} ({family} tensor names) needs its position table "
            f"{position_name} (or a config.json beside it that names another scheme); found "
            f"{len(names)} tensor(s): {_listing(names)}",
            field="path",
        )
    if scheme == "learned" and not has_table:
        raise InvalidArgument(
            f"{where}: {config_path} describes a model with learned positions, but "
            f"{position_name or 'no position table name of the ' + family + ' layout'} is not "
            f"in the file; found {len(names)} tensor(s): {_listing(names)}",
            field="path",
        )
    token_table = get(token_name)
    position_table = get(position_name) if has_table and scheme == "learned" else None  # type: ignore[arg-type]
    position_table = _checked_tables(
        where, family, skip, (token_name, token_table), (position_name, position_table)
    )

    rope, theta_guessed = None, False
    if scheme == "rope":
        positions, theta_guessed = _rope_positions(config or {}, config_path or where)
        rope = rope_spec(positions)
    embed_scale, pad_token_id, model_type = _scale_and_pad(cfg, family, token_table)
    return Checkpoint(
        family=family,
        token_name=token_name,
        position_name=position_name if position_table is not None else None,
        token_table=token_table,
        position_table=position_table,
        scheme=scheme,
        rope=rope,
        embed_scale=embed_scale,
        pad_token_id=pad_token_id,
        model_type=model_type,
        config_path=config_path,
        config=config,
        where=where,
        theta_guessed=theta_guessed,
    )


def _checked_tables(
    where: str,
    family: str,
    skip: int,
    token: tuple[str, Tensor],
    position: tuple[str | None, Tensor | None],
) -> Tensor | None:
    """The position table with the rows ``family`` skips removed, once both tables are checked
    (2-D floating point, the same width, more rows than the skipped ones)."""
    (token_name, token_table), (position_name, position_table) = token, position
    for tensor_name, table in (token, position):
        if table is not None and (table.dim() != 2 or not table.dtype.is_floating_point):
            raise InvalidArgument(
                f"{where}: {tensor_name} must be a 2-D floating-point table, got shape "
                f"{tuple(table.shape)} dtype {str(table.dtype).removeprefix('torch.')}",
                field="path",
            )
    if position_table is None:
        return None
    if token_table.shape[1] != position_table.shape[1]:
        raise InvalidArgument(
            f"{where}: {token_name} has width {token_table.shape[1]} but {position_name} has "
            f"width {position_table.shape[1]}; they must match",
            field="path",
        )
    if skip:
        if position_table.shape[0] <= skip:
            raise InvalidArgument(
                f"{where}: {position_name} has {position_table.shape[0]} rows, fewer than "
                f"the {skip} offset rows {family} skips",
                field="path",
            )
        position_table = position_table[skip:]
    return position_table


def _scale_and_pad(
    cfg: Mapping[str, Any] | None, family: str, token_table: Tensor
) -> tuple[float | None, int | None, str | None]:
    """``(embed_scale, pad_token_id, model_type)`` of the input layer: Gemma's √hidden rounded
    to the model dtype, or √D where ``scale_embedding`` is set; the config's pad token (BERT's
    and RoBERTa's 0 without a config)."""
    d_model = int(token_table.shape[1])
    embed_scale = None
    model_type = None if cfg is None else str(cfg.get("model_type", "")) or None
    if cfg is not None and families.family(model_type).embed_scale == "sqrt_hidden":
        embed_scale = _scale_value(int(cfg.get("hidden_size", d_model)), token_table.dtype)
    elif cfg is not None and cfg.get("scale_embedding") is True:
        embed_scale = math.sqrt(d_model)
    pad_token_id = 0 if family in ("BERT", "RoBERTa") and cfg is None else None
    if cfg is not None:
        pad = cfg.get("pad_token_id")
        pad_token_id = pad if isinstance(pad, int) and not isinstance(pad, bool) else None
    return embed_scale, pad_token_id, model_type
