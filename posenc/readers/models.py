"""The embedding models the service's ``/v1/models`` and ``/v1/embed`` use.

A built-in default (seeded random tables, no download) and models read from Hugging Face
checkpoints of any common family (see :mod:`posenc.readers.checkpoints`: GPT-2, BERT, Llama, Mistral,
Qwen, Gemma, Phi, GPT-NeoX, Falcon, BLOOM, OPT, T5 tensor names, single files or sharded), with the
positional scheme, RoPE settings and embedding normaliser read from the ``config.json`` beside
the weights. Tables keep their stored dtype.

Notation used for tensor shapes: ``V`` vocabulary size, ``P`` table positions, ``D`` model
dimension.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from posenc.absolute.learned import seeded_normal
from posenc.core.device import resolve_device
from posenc.core.errors import InvalidArgument
from posenc.facts.config_parts import merged_text
from posenc.facts.families import is_known_model_type, unknown_model_type_warning
from posenc.readers.checkpoints import Checkpoint, PositionScheme, RopeSpec, read_checkpoint
from posenc.readers.gguf.model import gguf_model_fields
from posenc.readers.vision_checkpoint import VisionCheckpoint, read_vision_checkpoint
from posenc.tokens.tokenizer import builtin_tokenizer, load_tokenizer

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "posenc-base"

# What a model's input layer adds to its token embeddings: a table ("learned", "sinusoidal"),
# nothing ("none"), or nothing while its attention rotates by cos/sin ("rope").
ModelPositional = Literal["learned", "sinusoidal", "none", "rope"]

_NAMES_SHOWN = 20


@dataclass
class EmbeddingModel:
    """An input layer: token table, position table and how to combine them.

    Attributes:
        name: the name requests use (``model`` field).
        vocab_size: ``V``, rows of ``token_table``.
        d_model: ``D``, the embedding width.
        max_positions: ``P``, rows of ``position_table`` (the longest sequence it embeds).
        positional: what its input layer adds (``"learned"``, ``"sinusoidal"``, ``"none"``), or
            ``"rope"``: nothing added, its attention rotates by ``cos``/``sin`` (``rope``).
        scale: whether the token part is multiplied by ``embed_scale`` (default ``sqrt(D)``).
        pad_token_id: its padding token, or ``None`` (GPT-2 has none).
        source: where the tables come from, for ``/v1/models``.
        token_table: ``(V, D)``.
        position_table: ``(P, D)`` for learned, else ``None``.
        position_scheme: the model's positional scheme from its config (``learned``, ``rope``,
            ``alibi``, ``relative``, ``none``): alibi and relative models add nothing here.
        embed_scale: the multiplier of the token part when ``scale``, as the model computes it
            (Gemma: ``sqrt(hidden_size)`` rounded to the table dtype); None means ``sqrt(D)``.
        rope: the RoPE settings of a ``rope`` model (read from its config), else None.
        family: the tensor-naming scheme recognised (``Llama``, ``GPT-2``, ``built-in`` ...).
        model_type: the config's ``model_type``, or None.
        tokenizer: its :class:`~posenc.tokens.tokenizer.TextTokenizer` (the ``tokenizer.json`` beside
            its weights; the built-in model's own byte-level one), or None: no text.
        path: the file or folder it was loaded from (what a reload reads again), or None for
            the built-in model.
        loaded_at: when its tables were read (seconds since the epoch).
        warnings: what was guessed or overruled while reading it (an unknown ``model_type``,
            a ``vocab_size`` that is not the table's rows), each a sentence; also logged.
        vision: a vision model folder's position table (ViT, DINOv2, CLIP, SigLIP): it has no
            token table and serves ``/v1/encodings/vision-learned`` only; else None.
        gguf: a ``.gguf`` model's file facts (``file_type``, ``tensor_type``, the llama.cpp
            rope arguments), for ``/v1/models``; else None.
        no_tokenizer: why text is refused when ``tokenizer`` is None, if not the usual reason.
    """

    name: str
    vocab_size: int
    d_model: int
    max_positions: int
    positional: ModelPositional
    scale: bool
    pad_token_id: int | None
    source: str
    token_table: Tensor
    position_table: Tensor | None
    position_scheme: PositionScheme | None = None
    embed_scale: float | None = None
    rope: RopeSpec | None = None
    family: str = "built-in"
    model_type: str | None = None
    tokenizer: Any = None  # posenc.tokens.tokenizer.TextTokenizer (tokenizers is imported lazily)
    path: str | None = None
    loaded_at: float = field(default_factory=time.time)
    warnings: tuple[str, ...] = ()
    vision: VisionCheckpoint | None = None
    gguf: dict[str, Any] | None = None
    no_tokenizer: str | None = None

    def __post_init__(self) -> None:
        if self.position_scheme is None:
            self.position_scheme = self.positional


def _library_device(device: str | torch.device | None) -> torch.device:
    return torch.device("cpu") if device is None else resolve_device(device)


def default_model(device: str | torch.device | None = None) -> EmbeddingModel:
    """The built-in model ``posenc-base``: seeded tables, no download.

    Token table ``torch.manual_seed(0); nn.Embedding(32000, 512).weight``, position table
    ``torch.manual_seed(1); nn.Embedding(2048, 512).weight`` (drawn with
    :func:`~posenc.absolute.learned.seeded_normal`), learned positions, no scaling, pad token 0.

    Args:
        device: where the tables go; ``None`` means the CPU.

    Returns:
        :class:`EmbeddingModel` with float32 ``(32000, 512)`` and ``(2048, 512)`` tables, and the
        byte-level tokenizer of :mod:`posenc.tokens.tokenizer` (ids 0..256, lossless for any text).
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
        tokenizer=_builtin_tokenizer(),
    )


def _builtin_tokenizer() -> Any:
    """The built-in byte-level tokenizer (:mod:`posenc.tokens.tokenizer`), None without the
    ``tokenizers`` package (the library needs torch and numpy only)."""
    try:
        return builtin_tokenizer()
    except ImportError:  # pragma: no cover - depends on the environment
        logger.info("no 'tokenizers' package: the built-in model has no tokenizer")
        return None


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = len(names) - _NAMES_SHOWN
    return shown + (f", … and {more} more" if more > 0 else "") if names else "(none)"


def _positional(ckpt: Checkpoint) -> tuple[ModelPositional, int]:
    """The model's positional scheme and its positions: a learned table's rows, else the
    config's ``max_position_embeddings`` (0: no limit known)."""
    if ckpt.scheme == "learned" and ckpt.position_table is not None:
        return "learned", int(ckpt.position_table.shape[0])
    return ("rope" if ckpt.scheme == "rope" else "none"), _config_max_positions(ckpt.config)


def load_safetensors_model(
    name: str, path: str | os.PathLike[str], device: str | torch.device | None = None
) -> EmbeddingModel:
    """Read the input layer of a checkpoint, and what its ``config.json`` says about positions.

    ``path`` is a ``.safetensors`` file, a ``model.safetensors.index.json`` (sharded) or a folder
    holding one; the token table is found by the names of :data:`posenc.readers.checkpoints.TOKEN_LAYOUTS`
    (GPT-2 ``wte.weight`` / ``wpe.weight``, also under ``transformer.``; BERT
    ``embeddings.word_embeddings.weight`` / ``embeddings.position_embeddings.weight``, also under
    ``bert.``; Llama-style ``model.embed_tokens.weight``; ``gpt_neox.embed_in.weight``;
    ``transformer.word_embeddings.weight``; OPT; T5 ``shared.weight``; ...). The ``config.json``
    beside it gives the positional scheme (learned, rope with its parameters, alibi, relative,
    none), the pad token and the normaliser (Gemma: ``sqrt(hidden_size)`` in the table dtype).
    Without a config, GPT-2 and BERT files keep their learned tables (BERT: pad token 0) and
    the other families get ``positional "none"``. Only the tables are read; they keep their
    stored dtype. Needs the ``safetensors`` package (imported here). A ``tokenizer.json`` beside
    the weights is loaded with ``tokenizers`` (:func:`posenc.tokens.tokenizer.load_tokenizer`); a
    folder's pad token is its config's only (null without a config).

    Args:
        name: the model's name in requests.
        path: the checkpoint (file, index or folder).
        device: where the tables go; ``None`` means the CPU.

    Returns:
        :class:`EmbeddingModel`; ``positional`` is ``"learned"`` with a ``(P, D)`` table,
        ``"rope"`` with ``rope`` settings, or ``"none"``.

    Raises:
        InvalidArgument: the file cannot be read, holds no recognised token table (the message
            lists the tensor names found), lacks the position table its scheme needs, its
            tables are not 2-D floating point of one width, or its config has a bad key.
        ImportError: ``safetensors`` is not installed.
    """
    try:
        import safetensors  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "loading a safetensors model needs the 'safetensors' package "
            "(pip install 'posenc[service]')"
        ) from exc

    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"model name must be a non-empty string, got {name!r}", field="name")
    if os.fspath(path).lower().endswith(".gguf"):
        return EmbeddingModel(**gguf_model_fields(name, path, _library_device(device)))
    dev = _library_device(device)
    vision = read_vision_checkpoint(path)
    if vision is not None:
        return _vision_model(name, vision, os.fspath(path))
    ckpt = read_checkpoint(path)
    folder = os.path.dirname(os.path.abspath(ckpt.where))
    tokenizer_path = os.path.join(folder, "tokenizer.json")
    tokenizer = None
    if os.path.isfile(tokenizer_path):
        tokenizer = load_tokenizer(tokenizer_path)
    pad_token_id = ckpt.pad_token_id
    if os.path.isdir(path) and ckpt.config is None:
        pad_token_id = None  # a folder's pad token is its config's, null without one
    token_table, position_table = ckpt.token_table, ckpt.position_table
    vocab_size, d_model = token_table.shape
    positional, max_positions = _positional(ckpt)
    warnings = _load_warnings(ckpt.config, ckpt.model_type, int(vocab_size), ckpt.theta_guessed)
    for warning in warnings:
        logger.warning("model %r (%s): %s", name, ckpt.where, warning)
    tables = ckpt.token_name + (f", {ckpt.position_name}" if ckpt.position_name else "")
    config_note = f"; config {ckpt.config_path}" if ckpt.config_path else "; no config.json"
    logger.info(
        "loaded %s model %r from %s: V=%d D=%d %s, positions %s%s",
        ckpt.family,
        name,
        ckpt.where,
        vocab_size,
        d_model,
        token_table.dtype,
        ckpt.scheme,
        config_note,
    )
    return EmbeddingModel(
        name=name,
        vocab_size=int(vocab_size),
        d_model=int(d_model),
        max_positions=max_positions,
        positional=positional,
        scale=ckpt.embed_scale is not None,
        pad_token_id=pad_token_id,
        source=f"safetensors {ckpt.where} ({ckpt.family} tensor names {tables}){config_note}"
        + (f"; tokenizer {tokenizer_path}" if tokenizer is not None else ""),
        token_table=token_table.to(dev),
        position_table=None if position_table is None else position_table.to(dev),
        position_scheme=ckpt.scheme,
        embed_scale=ckpt.embed_scale,
        rope=ckpt.rope,
        family=ckpt.family,
        model_type=ckpt.model_type,
        tokenizer=tokenizer,
        path=os.fspath(path),
        warnings=warnings,
    )


def _load_warnings(
    config: dict[str, Any] | None, model_type: str | None, rows: int, theta_guessed: bool
) -> tuple[str, ...]:
    """What a checkpoint's reading guessed or overruled: an unknown ``model_type`` (read by the
    generic rules), a guessed ``rope_theta``, a ``vocab_size`` other than the table's rows (the
    table wins: its rows are the ids it can embed)."""
    warnings = []
    if model_type and not is_known_model_type(model_type):
        warnings.append(unknown_model_type_warning(model_type))
    if theta_guessed:
        warnings.append(
            "the config names no RoPE parameters: rope_theta 10000 (Llama's default) is assumed"
        )
    text = (config or {}).get("text_config")
    merged = {**(config or {}), **(text if isinstance(text, dict) else {})}
    declared = merged.get("vocab_size")
    if isinstance(declared, int) and not isinstance(declared, bool) and declared != rows:
        warnings.append(
            f"config.json's vocab_size is {declared}, but the token table has {rows} rows: "
            f"the table wins (ids 0..{rows - 1} are embedded)"
        )
    return tuple(warnings)


def _vision_model(name: str, vision: VisionCheckpoint, path: str) -> EmbeddingModel:
    """A vision folder as a model: no tokens (``vocab_size`` 0), its position table aside."""
    width, rows = vision.spec.width, vision.spec.table_rows
    logger.info("loaded vision model %r from %s: %s (%d, %d)", name, vision.where,
                vision.tensor_name, rows, width)  # fmt: skip
    return EmbeddingModel(
        name=name,
        vocab_size=0,
        d_model=width,
        max_positions=rows,
        positional="none",
        scale=False,
        pad_token_id=None,
        source=f"safetensors {vision.where} (vision tower, table {vision.tensor_name}); serves "
        "/v1/encodings/vision-learned only",
        token_table=torch.empty(0, width, dtype=vision.table.dtype),
        position_table=None,
        position_scheme="none",
        family="vision",
        model_type=str(vision.config.get("model_type")),
        vision=vision,
        path=path,
    )


def _config_max_positions(config: dict[str, Any] | None) -> int:
    """``max_position_embeddings`` (or ``n_positions``) of the config, else 0 (no limit known)."""
    if config is None:
        return 0
    merged = merged_text(config)
    for key in ("max_position_embeddings", "n_positions"):
        value = merged.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0
