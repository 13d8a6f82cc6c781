"""posenc.facts.gguf_architectures: llama.cpp's architectures and what it does with their RoPE.

The rope modes are ``llama_model_rope_type`` of llama.cpp's ``src/llama-model.cpp``; DeepSeek
V2/V3's YaRN ``mscale`` is read back from ``rope.scaling.yarn_log_multiplier`` as its
``llama_model_loader`` / ``build_deepseek2`` do. The YaRN attention factors below are worked by
hand from llama.cpp's formula (``yarn_get_mscale(s, m) = 0.1·m·ln s + 1``).
"""

from __future__ import annotations

import math
import struct

import pytest

from posenc.facts.gguf_architectures import GGUF_ARCHITECTURES, gguf_architecture
from posenc.readers.gguf.metadata import ARCH_MODES, llamacpp_rope_from_gguf, read_gguf_head


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _yarn_head(arch: str, factor: float, log_multiplier: float) -> bytes:
    """A GGUF v3 head: ``arch``'s 64 rotated channels, YaRN by ``factor`` over 4096 tokens."""
    pairs = [
        _s("general.architecture") + struct.pack("<I", 8) + _s(arch),
        _s(f"{arch}.rope.dimension_count") + struct.pack("<II", 4, 64),
        _s(f"{arch}.context_length") + struct.pack("<II", 4, 4096),
        _s(f"{arch}.rope.scaling.type") + struct.pack("<I", 8) + _s("yarn"),
        _s(f"{arch}.rope.scaling.factor") + struct.pack("<If", 6, factor),
        _s(f"{arch}.rope.scaling.yarn_log_multiplier") + struct.pack("<If", 6, log_multiplier),
    ]
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs)) + b"".join(pairs)


@pytest.mark.parametrize(
    ("arch", "mode"),
    [
        ("llama", "normal"),
        ("command-r", "normal"),
        ("deepseek2", "normal"),
        ("qwen2", "neox"),
        ("gpt-oss", "neox"),
        ("qwen2vl", "mrope"),
        ("qwen3vl", "imrope"),
    ],
)
def test_records_hold_llamacpps_rope_modes(arch: str, mode: str) -> None:
    record = gguf_architecture(arch)
    assert record is not None and record.rope_mode == mode
    head = read_gguf_head(_yarn_head(arch, 4.0, 0.0))
    assert llamacpp_rope_from_gguf(head).mode == mode


def test_every_record_is_keyed_by_its_name_and_the_view_follows() -> None:
    assert all(name == a.name for name, a in GGUF_ARCHITECTURES.items())
    assert dict(ARCH_MODES) == {name: a.rope_mode for name, a in GGUF_ARCHITECTURES.items()}
    assert gguf_architecture("rwkv6") is None
    assert [a.name for a in GGUF_ARCHITECTURES.values() if a.yarn_mscale_all_dim] == ["deepseek2"]


def test_deepseek2_reads_its_mscale_from_the_log_multiplier() -> None:
    """With ``yarn_log_multiplier = 0.1·m``: DeepSeek's ``mscale`` and ``mscale_all_dim`` are
    both ``m``, so their ratio is 1 and the factor is ``1 / (1 + 0.1·ln s)``; any other
    architecture takes ``mscale = 1`` against ``0.1·m``:
    ``(1 + 0.1·ln s) / (1 + 0.01·m·ln s) / (1 + 0.1·ln s)``."""
    factor, m = 40.0, 0.707
    ln_s = math.log(factor)
    deepseek = llamacpp_rope_from_gguf(read_gguf_head(_yarn_head("deepseek2", factor, 0.1 * m)))
    llama = llamacpp_rope_from_gguf(read_gguf_head(_yarn_head("llama", factor, 0.1 * m)))
    assert deepseek.attn_factor == pytest.approx(1 / (1 + 0.1 * ln_s), rel=1e-6)
    assert llama.attn_factor == pytest.approx(1 / (1 + 0.01 * m * ln_s), rel=1e-6)
