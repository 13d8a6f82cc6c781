"""Record GGUF model files and gguf's own dequantized token tables for posenc's tests.

Run with a Python that has ``gguf`` (the package that ships with llama.cpp) installed:

    python scripts/record_gguf_fixtures.py

For each ggml type posenc dequantizes it writes ``tests/fixtures/gguf/tiny-TYPE.gguf`` (a
``llama`` file holding only ``token_embd.weight``, 4 x 256, written by ``gguf.GGUFWriter``) and
``tiny-TYPE.npy``: ``gguf.quants.dequantize`` of the stored bytes, float32 (V, D). F32, F16,
BF16, Q8_0 and Q4_0 tables are ``gguf.quants.quantize`` of seeded normal values; gguf has no
quantizer for the K-quants, so their blocks are seeded random bytes with finite float16 scales.
tests/lib/test_gguf_tensors.py checks posenc's dequantization against the ``.npy`` bit for bit.
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


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(30)
    for qtype in QUANTIZED + RANDOM_BLOCKS:
        record(qtype, rng)
        print(f"recorded tiny-{qtype.name}")


if __name__ == "__main__":
    main()
