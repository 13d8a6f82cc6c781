"""Which rule a diffusers config or model name means, and what ``/v1/configs/positions`` says of it.

A diffusers ``transformer/config.json`` names its class in ``_class_name``; a pipeline's
``model_index.json`` names its transformer's class under ``transformer`` (``["diffusers",
"FluxTransformer2DModel"]``) with no numbers, so the class's published defaults are all it gives.
:func:`read_rope` and :func:`read_sincos` turn a request's ``model`` and ``config`` into one rule
and the config values it reads (each key: the config's value, or diffusers' class default, with
the keys that took the default listed). :func:`describe` is what ``POST /v1/configs/positions``
answers for such a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from posenc.core.errors import InvalidArgument
from posenc.diffusion.cogvideox import COGVIDEOX
from posenc.diffusion.flux import FLUX
from posenc.diffusion.hunyuan_video import HUNYUAN_VIDEO
from posenc.diffusion.ltx_video import LTX_VIDEO
from posenc.diffusion.published import DEFAULT_CONFIG, PUBLISHED
from posenc.diffusion.qwen_image import QWEN_IMAGE
from posenc.diffusion.rules import RopeRule
from posenc.diffusion.sincos import SINCOS_RULES
from posenc.diffusion.sweep import SWEEP
from posenc.diffusion.wan import WAN

__all__ = [
    "MODEL_NAMES",
    "ROPE_RULES",
    "SINCOS_MODEL_NAMES",
    "Reading",
    "describe",
    "is_diffusers_config",
    "read_rope",
    "read_sincos",
]

ROPE_RULES: Mapping[str, RopeRule] = {
    r.name: r for r in (FLUX, WAN, HUNYUAN_VIDEO, QWEN_IMAGE, COGVIDEOX, LTX_VIDEO)
}
"""The rotary rules by served name."""

_ROPE_CLASSES = {c: r for r in ROPE_RULES.values() for c in r.class_names}
_SINCOS_CLASSES = {c: r for r in SINCOS_RULES.values() for c in r.class_names}


MODEL_NAMES: tuple[str, ...] = (
    *ROPE_RULES,
    *(n for n, (_r, c, _v) in PUBLISHED.items() if c["_class_name"] in _ROPE_CLASSES),
    *_ROPE_CLASSES,
)
"""What ``model`` of ``diffusion-rope`` accepts: the six served names, published checkpoints
(``FLUX.1-dev``, ``Wan2.2-TI2V-5B`` …), then diffusers class names (read with the class's
defaults, as a ``config`` of that ``_class_name`` alone would be)."""

SINCOS_MODEL_NAMES: tuple[str, ...] = (
    *SINCOS_RULES,
    *(
        n
        for n, (_r, c, _v) in PUBLISHED.items()
        if c["_class_name"] in _SINCOS_CLASSES and not c.get("use_rotary_positional_embeddings")
    ),
    *_SINCOS_CLASSES,
)
"""What ``model`` of ``sincos-2d`` accepts."""


@dataclass(frozen=True)
class Reading:
    """A rule with the config values it reads.

    Attributes:
        rule: the rotary or sin-cos rule.
        class_name: the diffusers class the config names (or the rule's first).
        values: each key the rule reads: the config's value or the class default.
        defaulted: the keys that took the class default.
        source: the published checkpoint a ``model`` name stood for (``repo`` and where the
            values were checked), or None for a caller's config.
    """

    rule: Any
    class_name: str
    values: dict[str, Any]
    defaulted: tuple[str, ...]
    source: dict[str, str] | None


def is_diffusers_config(config: Any) -> bool:
    """Whether ``config`` is a diffusers transformer config or a pipeline's ``model_index.json``
    (a ``_class_name`` and no ``model_type``)."""
    return isinstance(config, Mapping) and "_class_name" in config and "model_type" not in config


def _model_index_transformer(config: Mapping[str, Any]) -> str | None:
    """The transformer class a ``model_index.json`` names, or None when this is not one."""
    entry = config.get("transformer")
    if isinstance(entry, list | tuple) and len(entry) == 2 and isinstance(entry[1], str):
        return entry[1]
    return None


def _class_of(config: Mapping[str, Any]) -> tuple[str, bool]:
    """``(transformer class, read from a model_index.json)``."""
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            f"config must be an object (a diffusers transformer/config.json), got "
            f"{type(config).__name__}",
            field="config",
        )
    from_index = _model_index_transformer(config)
    if from_index is not None:
        return from_index, True
    name = config.get("_class_name")
    if not isinstance(name, str):
        raise InvalidArgument(
            "config has no _class_name: send a diffusers transformer/config.json (or a "
            "model_index.json), or name the model",
            field="config._class_name",
        )
    return name, False


def _rule_of(class_name: str, config: Mapping[str, Any], classes: Mapping[str, Any]) -> Any:
    """The rule of a class; diffusers' legacy ``Transformer2DModel`` is DiT's with
    ``norm_type: ada_norm_zero`` and PixArt's otherwise."""
    if class_name == "Transformer2DModel" and config.get("norm_type") == "ada_norm_zero":
        return SINCOS_RULES["dit"] if classes is _SINCOS_CLASSES else None
    return classes.get(class_name)


def _values(rule: Any, config: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    values = {k: config.get(k, default) for k, default in rule.keys.items()}
    for k, v in values.items():
        if isinstance(v, tuple):
            values[k] = list(v)
    return values, tuple(k for k in rule.keys if k not in config)


def _read(
    model: str | None,
    config: Mapping[str, Any] | None,
    rules: Mapping[str, Any],
    classes: Mapping[str, Any],
    endpoint: str,
) -> Reading:
    source = None
    if config is None and model in classes:  # a class name: its defaults
        config, model = {"_class_name": model}, None
    if config is None:
        if model is None:
            raise InvalidArgument("give model or config", field="model")
        sincos = classes is _SINCOS_CLASSES
        checkpoint = DEFAULT_CONFIG.get(f"{model}-sincos" if sincos else model)
        checkpoint = checkpoint or DEFAULT_CONFIG.get(model, model)
        if checkpoint not in PUBLISHED:
            raise InvalidArgument(
                f"unknown model {model!r} for {endpoint}; known: {', '.join(rules)}",
                field="model",
            )
        repo, config, verified = PUBLISHED[checkpoint]
        source = {"checkpoint": checkpoint, "repository": repo, "verified_from": verified}
    class_name, from_index = _class_of(config)
    rule = _rule_of(class_name, config, classes)
    if model is not None and model in rules and source is not None:
        rule = rules[model]  # a short name: its rule, over the checkpoint it stands for
    if rule is None:
        raise InvalidArgument(
            f"{class_name} has no rule at {endpoint}; served there: "
            f"{', '.join(sorted(classes))} (docs/diffusion.md lists the others and why)",
            field="config._class_name",
        )
    if model is not None and model in rules and rules[model] is not rule:
        raise InvalidArgument(
            f"model {model!r} and config._class_name {class_name} disagree; give one of them",
            field="model",
        )
    values, defaulted = _values(rule, {} if from_index else config)
    if from_index:
        defaulted = tuple(rule.keys)
    return Reading(rule, class_name, values, defaulted, source)


def read_rope(model: str | None, config: Mapping[str, Any] | None) -> Reading:
    """The rotary rule a request names, with the values it reads (422 when none is served)."""
    return _read(model, config, ROPE_RULES, _ROPE_CLASSES, "/v1/encodings/diffusion-rope")


def read_sincos(model: str | None, config: Mapping[str, Any] | None) -> Reading:
    """The sin-cos rule a request names, with the values it reads (422 when none is served)."""
    if config is not None and model is None:
        name, _ = _class_of(config)
        if name == "CogVideoXTransformer3DModel" and config.get("use_rotary_positional_embeddings"):
            raise InvalidArgument(
                "this CogVideoX config has use_rotary_positional_embeddings true: it rotates "
                "(POST /v1/encodings/diffusion-rope) and adds no sin-cos table",
                field="config.use_rotary_positional_embeddings",
            )
    return _read(model, config, SINCOS_RULES, _SINCOS_CLASSES, "/v1/encodings/sincos-2d")


def describe(config: Mapping[str, Any]) -> dict[str, Any]:
    """What ``POST /v1/configs/positions`` says of a diffusers file: which file it is
    (``transformer_config`` or ``model_index``), the transformer class, which rule and endpoint
    serve it (or why none does), and the values read."""
    class_name, from_index = _class_of(config)
    uses = "model_index" if from_index else "transformer_config"
    answer: dict[str, Any] = {"file": uses, "class_name": class_name}
    rope = _ROPE_CLASSES.get(class_name)
    sincos = _SINCOS_CLASSES.get(class_name)
    reads = {} if from_index else config
    if class_name == "CogVideoXTransformer3DModel" and not reads.get(
        "use_rotary_positional_embeddings"
    ):
        rope = None  # CogVideoX without rotary adds a sin-cos table
    elif rope is not None:
        sincos = None
    if rope is not None:
        values, defaulted = _values(rope, reads)
        answer.update(
            kind="diffusion_rope",
            model=rope.name,
            endpoint="/v1/encodings/diffusion-rope",
            reference=rope.reference,
            text=rope.text,
            text_rotated=rope.text_rotated,
            values=values,
            defaulted=list(defaulted),
        )
    elif sincos is not None:
        values, defaulted = _values(sincos, reads)
        answer.update(
            kind="sincos_2d",
            model=sincos.name,
            endpoint="/v1/encodings/sincos-2d",
            reference=sincos.reference,
            values=values,
            defaulted=list(defaulted),
        )
    else:
        entry = SWEEP.get(class_name)
        answer.update(
            kind="none",
            model=None,
            endpoint=None,
            reason=entry.reason if entry else "a diffusers class posenc has no rule for",
        )
    if from_index:
        answer["warnings"] = [
            "a model_index.json names the transformer's class only: the class defaults are "
            "read; send transformer/config.json for the checkpoint's own values"
        ]
    return answer
