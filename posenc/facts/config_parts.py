"""The one reader of a model file's parts: the language model, the vision tower, the encoder.

Every module that reads a ``config.json`` finds its parts here:

- :func:`language_part`: the mapping that holds the language model, following ColPali's
  ``vlm_config``, Qwen2.5-Omni's ``thinker_config`` and an encoder-decoder's
  ``decoder_config`` / ``decoder``; :func:`text_config` merges a multimodal file's
  ``text_config`` over it; :func:`text_part` is the ``text_config`` alone (or the file).
- :func:`vision_part`: the vision tower's config and where it was found.
- :func:`encoder_part`: an encoder-decoder's ``encoder_config`` (Parakeet).

:class:`ConfigReader` reads one mapping with typed getters that name the key in their errors
(``config.text_config.head_dim must be an integer >= 1, got 0``).
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping
from typing import Any

from posenc.core.errors import InvalidArgument


class ConfigReader:
    """A config mapping with typed getters that name the key in their errors."""

    def __init__(self, config: Mapping[str, Any], prefix: str) -> None:
        self.config = config
        self.prefix = prefix
        self.warnings: list[str] = []

    def has(self, key: str) -> bool:
        return self.config.get(key) is not None

    def field(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def int(
        self, key: str, default: builtins.int | None = None, *, minimum: builtins.int = 1
    ) -> builtins.int | None:
        value = self.config.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)  # int() of inf or NaN raises
            or value != int(value)
        ):
            raise InvalidArgument(
                f"{self.field(key)} must be an integer >= {minimum}, got {value!r}",
                field=self.field(key),
            )
        if value < minimum:
            raise InvalidArgument(
                f"{self.field(key)} must be an integer >= {minimum}, got {value!r}",
                field=self.field(key),
            )
        return int(value)

    def float(
        self, key: str, default: builtins.float | None = None, *, positive: builtins.bool = True
    ) -> builtins.float | None:
        value = self.config.get(key)
        if value is None:
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise InvalidArgument(
                f"{self.field(key)} must be a finite number, got {value!r}", field=self.field(key)
            )
        if positive and value <= 0:
            raise InvalidArgument(
                f"{self.field(key)} must be > 0, got {value!r}", field=self.field(key)
            )
        return float(value)

    def bool(self, key: str, default: builtins.bool) -> builtins.bool:
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InvalidArgument(
                f"{self.field(key)} must be true or false, got {value!r}", field=self.field(key)
            )
        return value


#: Where a file that is not itself a language model keeps one, in the order looked at:
#: ColPali's and ColQwen2's ``vlm_config``, Qwen2.5-Omni's ``thinker_config``, and the decoder
#: of an encoder-decoder (Dia's ``decoder_config``, T5Gemma's ``decoder``).
LANGUAGE_PARTS = ("vlm_config", "thinker_config", "decoder_config", "decoder")


def language_part(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The mapping that holds the language model (with its own ``text_config`` if any) and its
    path: the file itself, unless it has no ``text_config`` and one of :data:`LANGUAGE_PARTS`."""
    prefix = "config."
    while config.get("text_config") is None:
        for key in LANGUAGE_PARTS:
            sub = config.get(key)
            if isinstance(sub, Mapping):
                config, prefix = sub, f"{prefix}{key}."
                break
        else:
            break
    return config, prefix


def text_config(config: Mapping[str, Any], root: str = "config.") -> tuple[dict[str, Any], str]:
    """The language model's settings: a multimodal file's ``text_config`` over its top level."""
    text = config.get("text_config")
    if text is None:
        return dict(config), root
    if not isinstance(text, Mapping):
        raise InvalidArgument(
            f"{root}text_config must be an object (the language model's config), got "
            f"{type(text).__name__}",
            field=f"{root}text_config",
        )
    skip = {"text_config", "vision_config", "audio_config", "model_type"}
    # a text config with its own geometry or RoPE keeps the top level's for another part of
    # the model (MusicFlamingo's top-level head_dim and rope_parameters are its audio-timestamp
    # rotary's)
    if any(text.get(k) is not None for k in ("hidden_size", "num_attention_heads")):
        skip |= {"head_dim"}
    if any(text.get(k) is not None for k in ("rope_parameters", "rope_scaling")):
        skip |= {"rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"}
    merged = {k: v for k, v in config.items() if k not in skip}
    merged.update(text)
    return merged, f"{root}text_config."


def text_part(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """A multimodal file's ``text_config`` (or the file itself) and its path prefix: the text
    model's own keys, not merged with the top level's."""
    text = config.get("text_config")
    if isinstance(text, Mapping):
        return text, "config.text_config."
    return config, "config."


#: Where a file keeps its vision tower's config, in the order looked at: the usual
#: ``vision_config``, Qwen2.5-Omni's thinker's, ColPali's VLM's, and a DINOv3 backbone (CHMv2).
VISION_PARTS = (
    "vision_config",
    "thinker_config.vision_config",
    "vlm_config.vision_config",
    "backbone_config",
)


def vision_part(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str, Any] | None:
    """The vision tower's config of a whole file: ``(its mapping, its path, the model_type of
    the part that holds it)``, or None where the file has none of :data:`VISION_PARTS`.

    Raises:
        InvalidArgument: a vision part that is not an object (``field`` its path).
    """
    top = config.get("model_type")
    for path in VISION_PARTS:
        holder: Any = config
        for key in path.split("."):
            holder = holder.get(key) if isinstance(holder, Mapping) else None
        if holder is None:
            continue
        if not isinstance(holder, Mapping):
            raise InvalidArgument(
                f"config.{path} must be an object, got {type(holder).__name__}",
                field=f"config.{path}",
            )
        outer = top
        if path != "vision_config":
            outer = config.get(path.split(".")[0], {}).get("model_type", top)
        return holder, f"config.{path}", outer
    return None


def encoder_part(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """A whole encoder-decoder model's ``encoder_config`` and the prefix of its keys; ``{}``
    where the file gives none (the model class's default encoder).

    Raises:
        InvalidArgument: an ``encoder_config`` that is not an object.
    """
    encoder = config.get("encoder_config")
    if encoder is None:
        return {}, "config.encoder_config."
    if not isinstance(encoder, Mapping):
        raise InvalidArgument(
            "config.encoder_config must be an object", field="config.encoder_config"
        )
    return encoder, "config.encoder_config."


def merged_text(config: Mapping[str, Any]) -> dict[str, Any]:
    """The top level with a multimodal file's ``text_config`` over it (no key kept apart, unlike
    :func:`text_config`): what a checkpoint's or a model's input layer reads."""
    merged = dict(config)
    text = config.get("text_config")
    if isinstance(text, Mapping):
        merged.update(text)
    return merged


__all__ = [
    "LANGUAGE_PARTS",
    "VISION_PARTS",
    "ConfigReader",
    "encoder_part",
    "language_part",
    "merged_text",
    "text_config",
    "text_part",
    "vision_part",
]
