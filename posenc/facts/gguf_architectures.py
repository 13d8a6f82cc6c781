"""One record per GGUF ``general.architecture``: what llama.cpp does with that architecture's
RoPE, read by :mod:`posenc.readers.gguf.metadata`.

llama.cpp names its architectures itself (``llama``, ``qwen2``, ``command-r``, ``deepseek2``);
they are not transformers' ``model_type`` names, though many are spelled alike. Each
:class:`GgufArchitecture` holds the ggml rope mode ``llama_model_rope_type``
(``src/llama-model.cpp``) gives it, and what llama.cpp reads of its YaRN keys its own way.
:func:`gguf_architecture` is the one lookup; adding an architecture is adding its record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

__all__ = ["GGUF_ARCHITECTURES", "GgufArchitecture", "RopeMode", "gguf_architecture"]

#: ggml's rope modes: ``normal`` (adjacent pairs), ``neox`` (halves), M-RoPE's two.
RopeMode = Literal["normal", "neox", "mrope", "imrope"]


@dataclass(frozen=True)
class GgufArchitecture:
    """What posenc knows of one GGUF ``general.architecture``.

    Attributes:
        name: llama.cpp's architecture name (``general.architecture``).
        rope_mode: the ggml rope mode ``llama_model_rope_type`` gives it.
        yarn_mscale_all_dim: llama.cpp's converter wrote ``rope.scaling.yarn_log_multiplier``
            as ``0.1 · mscale_all_dim`` and the model takes YaRN's ``mscale`` from it
            (DeepSeek V2/V3's ``deepseek2``).
    """

    name: str
    rope_mode: RopeMode
    yarn_mscale_all_dim: bool = False


def _records(mode: RopeMode, *names: str) -> tuple[GgufArchitecture, ...]:
    return tuple(GgufArchitecture(name, mode) for name in names)


_RECORDS = (
    *_records(
        "normal",
        "llama",
        "llama4",
        "deci",
        "baichuan",
        "starcoder",
        "internlm2",
        "minicpm",
        "xverse",
        "command-r",
        "cohere2",
        "olmo",
        "arctic",
        "deepseek",
    ),
    GgufArchitecture("deepseek2", "normal", yarn_mscale_all_dim=True),
    *_records(
        "normal",
        "chatglm",
        "glm4",
        "granite",
        "granitemoe",
        "chameleon",
        "bailingmoe",
        "smollm3",
        "arcee",
        "ernie4_5",
        "ernie4_5-moe",
        "mistral3",
        "plm",
    ),
    *_records(
        "neox",
        "falcon",
        "grok",
        "dbrx",
        "bert",
        "stablelm",
        "bitnet",
        "qwen",
        "qwen2",
        "qwen2moe",
        "qwen3",
        "qwen3moe",
        "olmo2",
        "olmoe",
        "phi2",
        "phi3",
        "phimoe",
        "plamo",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3n",
        "starcoder2",
        "openelm",
        "gptneox",
        "codeshell",
        "orion",
        "nemotron",
        "exaone",
        "exaone4",
        "minicpm3",
        "dots1",
        "hunyuan-moe",
        "gpt-oss",
        "hunyuan-dense",
        "lfm2",
        "seed_oss",
        "glm4moe",
        "qwen3next",
    ),
    GgufArchitecture("qwen2vl", "mrope"),
    GgufArchitecture("qwen3vl", "imrope"),
    GgufArchitecture("qwen3vlmoe", "imrope"),
)

#: Every record, by ``general.architecture``.
GGUF_ARCHITECTURES: Mapping[str, GgufArchitecture] = MappingProxyType({a.name: a for a in _RECORDS})


def gguf_architecture(name: str) -> GgufArchitecture | None:
    """The record of GGUF architecture ``name``, or None where posenc has none."""
    return GGUF_ARCHITECTURES.get(name)
