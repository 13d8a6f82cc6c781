"""GGUF metadata (:mod:`posenc.readers.gguf.metadata`) on files written by ``gguf``'s own ``GGUFWriter``.

tests/fixtures/llamacpp/gguf holds small GGUF files that scripts/record_llamacpp_tables.py
writes with ``gguf.GGUFWriter``, with the rope keys and factor tensors llama.cpp's converter
writes for each preset's config. Read by posenc, each gives the same ``ggml_rope_ext``
arguments as posenc's reading of the Hugging Face config (:func:`llamacpp_rope_for`), whole or
cut after the key/value section (factor tensors then missing, and said so). A live test writes
files with ``GGUFWriter`` where ``gguf`` is importable.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from posenc.core.errors import InvalidArgument
from posenc.facts.model_configs import model_config
from posenc.readers.gguf.metadata import llamacpp_rope_from_gguf, read_gguf_head
from posenc.readers.hf.positions import read_positions
from posenc.readers.presets import PRESETS
from posenc.rope.llamacpp import llamacpp_rope_for
from posenc.rope.precision import model_type_of

GGUF_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "gguf"
FILES = sorted(p.name for p in GGUF_DIR.glob("*.gguf") if not p.name.startswith("converted-"))
CONVERTED = json.loads((GGUF_DIR / "converted.json").read_text())


def _from_config(preset: str, n_ctx: int | None = None) -> dict:
    params = PRESETS[preset].params
    mp = read_positions(model_config(preset))
    return llamacpp_rope_for(
        model_type=model_type_of({"preset": preset}),
        rotary_dim=params["rotary_dim"],
        base=params["base"],
        layout=params["layout"],
        scaling=params["scaling"],
        max_position_embeddings=mp.max_position_embeddings,
        n_ctx=n_ctx,
        mrope_section=mp.mrope_section,
    ).to_dict()


def test_every_fixture_is_there() -> None:
    assert len(FILES) == 6


@pytest.mark.parametrize("name", FILES)
def test_gguf_reads_as_the_config_does(name: str) -> None:
    """The GGUF's reading equals the config's: mode, base, YaRN, factors, sections."""
    head = read_gguf_head((GGUF_DIR / name).read_bytes())
    assert head.version == 3 and "token_embd.weight" in head.tensors
    assert llamacpp_rope_from_gguf(head).to_dict() == _from_config(name.removesuffix(".gguf"))


@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_files_from_llamacpps_converter_read_as_their_config(name: str) -> None:
    """Tiny models converted by llama.cpp's own convert_hf_to_gguf.py (Llama 3's rope_freqs,
    Phi-3's LongRoPE factors and attn_factor): the file's reading equals posenc's reading of
    the config.json the converter read."""
    config = CONVERTED[name]
    mp = read_positions(config)
    layer = mp.rope_for(None)
    fields = mp.rope_fields(None)
    for n_ctx in (None, 4096):
        want = llamacpp_rope_for(
            model_type=mp.model_type,
            rotary_dim=layer.rotary_dim,
            base=layer.rope_theta,
            layout=mp.layout or "half",
            scaling=fields["scaling"],
            max_position_embeddings=mp.max_position_embeddings,
            n_ctx=n_ctx,
        )
        head = read_gguf_head((GGUF_DIR / name).read_bytes())
        assert llamacpp_rope_from_gguf(head, n_ctx=n_ctx).to_dict() == want.to_dict()


def test_longrope_short_factors_for_a_short_context() -> None:
    head = read_gguf_head((GGUF_DIR / "phi-3.5-mini.gguf").read_bytes())
    short = llamacpp_rope_from_gguf(head, n_ctx=4096).to_dict()
    assert short == _from_config("phi-3.5-mini", 4096)
    assert short["freq_factors"] != _from_config("phi-3.5-mini")["freq_factors"]


def test_head_up_to_the_key_value_section() -> None:
    """The head alone: same metadata, no tensors, and the missing factors are said."""
    data = (GGUF_DIR / "llama-3.1-8b.gguf").read_bytes()
    whole = read_gguf_head(data)
    head = read_gguf_head(data[: whole.kv_end])
    assert head.metadata == whole.metadata and head.tensors == {}
    rope = llamacpp_rope_from_gguf(head)
    assert rope.freq_factors is None
    assert any("tensor directory" in n for n in rope.notes)


@pytest.mark.parametrize("cut", [0, 3, 4, 10, 23, 24, 40, 100, 300])
def test_truncated_or_not_gguf_is_refused_with_the_byte_count(cut: int) -> None:
    data = (GGUF_DIR / "llama-3.1-8b.gguf").read_bytes()
    kv_end = read_gguf_head(data).kv_end
    cut = min(cut, kv_end - 1)
    with pytest.raises(InvalidArgument) as err:
        read_gguf_head(data[:cut])
    message = str(err.value)
    assert f"read {cut} bytes" in message
    assert ("not a GGUF file" in message) if cut < 4 else ("needs" in message)


def test_other_bytes_are_not_gguf() -> None:
    with pytest.raises(InvalidArgument, match="not a GGUF file: read 9 bytes"):
        read_gguf_head(b'{"a": 1}\n')
    bad_version = b"GGUF" + struct.pack("<IQQ", 7, 0, 0)
    with pytest.raises(InvalidArgument, match="version 7"):
        read_gguf_head(bad_version)


def test_hand_written_head() -> None:
    """A head written here byte by byte (v3, two keys, an array), independent of gguf."""

    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    body = b"GGUF" + struct.pack("<IQQ", 3, 0, 3)
    body += s("general.architecture") + struct.pack("<I", 8) + s("qwen2")
    body += s("qwen2.rope.freq_base") + struct.pack("<If", 6, 1e6)
    body += s("qwen2.rope.dimension_sections") + struct.pack("<IIQ4i", 9, 5, 4, 16, 24, 24, 0)
    head = read_gguf_head(body)
    assert head.metadata["qwen2.rope.dimension_sections"] == [16, 24, 24, 0]
    assert head.kv_end == len(body)
    assert head.get("rope.freq_base") == np.float32(1e6)


def test_live_gguf_writer_where_importable(tmp_path: Path) -> None:
    """Where gguf is installed: a file GGUFWriter writes now, with a YaRN Qwen2 config."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_context_length(131072)
    w.add_rope_dimension_count(128)
    w.add_rope_freq_base(1e6)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(4.0)
    w.add_rope_scaling_orig_ctx_len(32768)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    rope = llamacpp_rope_from_gguf(read_gguf_head(path.read_bytes()))
    want = llamacpp_rope_for(
        model_type="qwen2",
        rotary_dim=128,
        base=1e6,
        scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        max_position_embeddings=131072,
    )
    assert rope.to_dict() == want.to_dict()
