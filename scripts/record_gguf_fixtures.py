"""Record GGUF model files and gguf's own dequantized token tables for posenc's tests.

Run with a Python that has ``gguf`` (the package that ships with llama.cpp) installed:

    python scripts/record_gguf_fixtures.py

For each ggml type posenc dequantizes it writes ``tests/fixtures/gguf/tiny-TYPE.gguf`` (a
``llama`` file holding only ``token_embd.weight``, 4 x 256, written by ``gguf.GGUFWriter``) and
``tiny-TYPE.npy``: ``gguf.quants.dequantize`` of the stored bytes, float32 (V, D). F32, F16,
BF16, Q8_0 and Q4_0 tables are ``gguf.quants.quantize`` of seeded normal values; gguf has no
quantizer for the K-quants, so their blocks are seeded random bytes with finite float16 scales.
tests/lib/test_gguf_tensors.py checks posenc's dequantization against the ``.npy`` bit for bit.

It also writes ``scaled-linear.gguf``, ``scaled-yarn.gguf`` (``llama``) and ``scaled-mrope.gguf``
(``qwen2vl``, ``rope.dimension_sections``): F32 token tables (8 x 64, 4 heads of 16) whose
rope llama.cpp scales, for tests/service/test_gguf_model.py's cos/sin of scaled GGUF models.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "gguf"
V, D = 4, 256
QUANTIZED = (T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0)
RANDOM_BLOCKS = (T.Q4_K, T.Q5_K, T.Q6_K)


def _random_blocks(qtype: T, rng: np.random.Generator) -> np.ndarray:
    """Seeded random K-quant blocks whose float16 fields are finite scales."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(V * D // block, size), dtype=np.uint8)
    scale = rng.uniform(1e-4, 1e-2, size=(blocks.shape[0], 2)).astype(np.float16)
    if qtype == T.Q6_K:  # ..., d last
        blocks[:, -2:] = scale[:, :1].view(np.uint8)
    else:  # d, dmin first
        blocks[:, :4] = scale.view(np.uint8).reshape(-1, 4)
    return blocks.reshape(V, -1)


def record(qtype: T, rng: np.random.Generator) -> None:
    if qtype in QUANTIZED:
        data = quants.quantize(rng.standard_normal((V, D)).astype(np.float32), qtype)
    else:
        data = _random_blocks(qtype, rng)
    writer = gguf.GGUFWriter(OUT / f"tiny-{qtype.name}.gguf", "llama")
    writer.add_context_length(128)
    writer.add_embedding_length(D)
    writer.add_head_count(4)
    writer.add_rope_freq_base(500000.0)
    file_type = {"F32": "ALL_F32", "Q4_K": "MOSTLY_Q4_K_M", "Q5_K": "MOSTLY_Q5_K_M"}.get(
        qtype.name, f"MOSTLY_{qtype.name}"
    )
    writer.add_file_type(int(getattr(gguf.LlamaFileType, file_type)))
    raw = None if qtype in (T.F32, T.F16) else qtype
    writer.add_tensor("token_embd.weight", data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    table = quants.dequantize(data, qtype).reshape(V, D).astype(np.float32)
    np.save(OUT / f"tiny-{qtype.name}.npy", table)


#: (file, architecture, rope keys) of the scaled-rope fixtures.
SCALED = (
    ("scaled-linear.gguf", "llama", {"rope.scaling.type": "linear", "rope.scaling.factor": 4.0}),
    (
        "scaled-yarn.gguf",
        "llama",
        {
            "rope.scaling.type": "yarn",
            "rope.scaling.factor": 4.0,
            "rope.scaling.original_context_length": 4096,
        },
    ),
    ("scaled-mrope.gguf", "qwen2vl", {"rope.dimension_sections": [2, 3, 3, 0]}),
)


def record_scaled(file: str, arch: str, keys: dict[str, object], rng: np.random.Generator) -> None:
    writer = gguf.GGUFWriter(OUT / file, arch)
    writer.add_context_length(16384)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_rope_freq_base(10000.0)
    for key, value in keys.items():
        name = f"{arch}.{key}"
        if isinstance(value, str):
            writer.add_string(name, value)
        elif isinstance(value, float):
            writer.add_float32(name, value)
        elif isinstance(value, list):
            writer.add_array(name, value)
        else:
            writer.add_uint32(name, int(value))  # type: ignore[call-overload]
    writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    writer.add_tensor("token_embd.weight", rng.standard_normal((8, 64)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(30)
    for qtype in QUANTIZED + RANDOM_BLOCKS:
        record(qtype, rng)
        print(f"recorded tiny-{qtype.name}")
    for file, arch, keys in SCALED:
        record_scaled(file, arch, keys, rng)
        print(f"recorded {file}")


if __name__ == "__main__":
    main()
