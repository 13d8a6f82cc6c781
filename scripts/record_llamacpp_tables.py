"""Record llama.cpp's own RoPE (libggml's ``ggml_rope_ext`` / ``ggml_rope_multi`` on the CPU)
into tests/fixtures/llamacpp/tables.json.

Runs in a separate virtual environment that has ``llama-cpp-python`` (which builds and ships
libggml; never the service's environment)::

    python -m venv /work/venvs/llamacpp
    /work/venvs/llamacpp/bin/pip install numpy torch==2.13.0 llama-cpp-python
    /work/venvs/llamacpp/bin/python scripts/record_llamacpp_tables.py          # rewrite
    /work/venvs/llamacpp/bin/python scripts/record_llamacpp_tables.py --check  # compare only

For each case, posenc's :func:`posenc.rope.llamacpp.llamacpp_rope_for` gives the arguments
llama.cpp passes for a published config (``n_dims``, mode, ``freq_base``, ``freq_scale``, YaRN's
``ext_factor``/``attn_factor``/``beta_fast``/``beta_slow``/``n_ctx_orig``, M-RoPE sections and the
``freq_factors`` tensor). The script builds a one-head input whose rotated pairs are ``(1, 0)``
(adjacent pairs in normal mode, ``x[i]`` and ``x[i + R/2]`` otherwise), so ggml's output holds
``cos`` and ``sin`` of each pair exactly (``1·cos − 0·sin``), runs one ggml graph through ctypes
and stores them as float32 bytes (base64), with the arguments, per position.
``tests/lib/test_llamacpp.py`` checks posenc's ``precision: "engine"`` against them within 2
float32 ulp in the default test lane.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "llamacpp" / "tables.json"

#: Positions recorded for every case: the first 16, a spread, and both sides of 131,072.
POSITIONS = (
    *range(16),
    100,
    1000,
    4095,
    4096,
    8191,
    8192,
    16384,
    32767,
    65536,
    100_000,
    131_071,
    131_072,
    262_143,
    1_000_000,
)

#: (case name, preset, llama.cpp context size or None for the training context)
CASES = (
    ("llama-2-7b", "llama-2-7b", None),
    ("llama-3.1-8b", "llama-3.1-8b", None),
    ("qwen2.5-7b", "qwen2.5-7b", None),
    ("phi-2", "phi-2", None),
    ("phi-3.5-mini-long", "phi-3.5-mini", None),
    ("phi-3.5-mini-short", "phi-3.5-mini", 4096),
    ("deepseek-v3", "deepseek-v3", None),
    ("gpt-oss-20b", "gpt-oss-20b", None),
    ("gemma-3-4b", "gemma-3-4b", None),
    ("ministral-3-8b", "ministral-3-8b", None),
    ("qwen2.5-vl-7b", "qwen2.5-vl-7b", None),
    ("qwen3-vl-8b", "qwen3-vl-8b", None),
)

GGML_TYPE_F32 = 0
GGML_TYPE_I32 = 26


class _InitParams(ctypes.Structure):
    _fields_ = [
        ("mem_size", ctypes.c_size_t),
        ("mem_buffer", ctypes.c_void_p),
        ("no_alloc", ctypes.c_bool),
    ]


#: A folder holding libggml-base.so and libggml-cpu.so to use instead of llama_cpp's own
#: (``POSENC_GGML_LIB``: the same libraries from a llama-cpp-python build folder).
GGML_LIB_ENV = "POSENC_GGML_LIB"

_LOADED: list[tuple[ctypes.CDLL, ctypes.CDLL, str]] = []


def _libs() -> tuple[ctypes.CDLL, ctypes.CDLL, str]:
    if not _LOADED:
        _LOADED.append(_load())
    return _LOADED[0]


def _load() -> tuple[ctypes.CDLL, ctypes.CDLL, str]:
    if os.environ.get(GGML_LIB_ENV):
        lib_dir, version = Path(os.environ[GGML_LIB_ENV]), "libggml from " + GGML_LIB_ENV
    else:
        import llama_cpp  # loads its libggml

        lib_dir = Path(llama_cpp.__file__).parent / "lib"
        version = "llama-cpp-python " + getattr(llama_cpp, "__version__", "?")
    base = ctypes.CDLL(str(next(lib_dir.glob("libggml-base.so*"))), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(next(lib_dir.glob("libggml-cpu.so*"))), mode=ctypes.RTLD_GLOBAL)
    vp = ctypes.c_void_p
    base.ggml_init.argtypes, base.ggml_init.restype = [_InitParams], vp
    base.ggml_free.argtypes = [vp]
    base.ggml_new_tensor_1d.argtypes, base.ggml_new_tensor_1d.restype = (
        [vp, ctypes.c_int, ctypes.c_int64],
        vp,
    )
    base.ggml_new_tensor_3d.argtypes = [
        vp,
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
    ]
    base.ggml_new_tensor_3d.restype = vp
    f, i = ctypes.c_float, ctypes.c_int
    base.ggml_rope_ext.argtypes = [vp, vp, vp, vp, i, i, i, f, f, f, f, f, f]
    base.ggml_rope_ext.restype = vp
    base.ggml_rope_multi.argtypes = [vp, vp, vp, vp, i, ctypes.POINTER(i), i, i, f, f, f, f, f, f]
    base.ggml_rope_multi.restype = vp
    base.ggml_new_graph.argtypes, base.ggml_new_graph.restype = [vp], vp
    base.ggml_build_forward_expand.argtypes = [vp, vp]
    base.ggml_get_data.argtypes, base.ggml_get_data.restype = [vp], vp
    cpu.ggml_graph_compute_with_ctx.argtypes, cpu.ggml_graph_compute_with_ctx.restype = (
        [vp, vp, i],
        i,
    )
    base.ggml_version.restype = ctypes.c_char_p
    return base, cpu, f"{version}, ggml {base.ggml_version().decode()}"


def ggml_rope(positions: list[int], rope: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """ggml's cos and sin, ``(T, R/2)`` float32 each, for the arguments in ``rope``."""
    base, cpu, _ = _libs()
    n, t = int(rope["n_dims"]), len(positions)
    modes = {"normal": 0, "neox": 2, "mrope": 8, "imrope": 40}
    mode = modes[rope["mode"]]
    multi = rope["sections"] is not None
    ctx = base.ggml_init(_InitParams(64 * 1024 * 1024 + 64 * n * t, None, False))
    try:
        x = base.ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n, 1, t)
        npos = 4 * t if multi else t
        pos = base.ggml_new_tensor_1d(ctx, GGML_TYPE_I32, npos)
        row = np.zeros(n, dtype=np.float32)
        if mode == 0:
            row[0::2] = 1.0
        else:
            row[: n // 2] = 1.0
        xa = np.ctypeslib.as_array((ctypes.c_float * (n * t)).from_address(base.ggml_get_data(x)))
        xa[:] = np.tile(row, t)
        pa = np.ctypeslib.as_array((ctypes.c_int32 * npos).from_address(base.ggml_get_data(pos)))
        pa[:] = np.tile(np.asarray(positions, dtype=np.int32), 4 if multi else 1)
        factors = None
        if rope["freq_factors"] is not None:
            factors = base.ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n // 2)
            fa = np.ctypeslib.as_array(
                (ctypes.c_float * (n // 2)).from_address(base.ggml_get_data(factors))
            )
            fa[:] = np.asarray(rope["freq_factors"], dtype=np.float32)
        args = (
            rope["n_ctx_orig"],
            rope["freq_base"],
            rope["freq_scale"],
            rope["ext_factor"],
            rope["attn_factor"],
            rope["beta_fast"],
            rope["beta_slow"],
        )
        if multi:
            sections = (ctypes.c_int * 4)(*rope["sections"])
            out = base.ggml_rope_multi(ctx, x, pos, factors, n, sections, mode, *args)
        else:
            out = base.ggml_rope_ext(ctx, x, pos, factors, n, mode, *args)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, out)
        if cpu.ggml_graph_compute_with_ctx(ctx, graph, 1) != 0:
            raise RuntimeError("ggml_graph_compute_with_ctx failed")
        oa = np.ctypeslib.as_array((ctypes.c_float * (n * t)).from_address(base.ggml_get_data(out)))
        table = oa.reshape(t, n).copy()
    finally:
        base.ggml_free(ctx)
    if mode == 0:
        return table[:, 0::2], table[:, 1::2]
    return table[:, : n // 2], table[:, n // 2 :]


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode()


def record() -> dict[str, Any]:
    from posenc.facts.model_configs import model_config
    from posenc.readers.hf.positions import read_positions
    from posenc.readers.presets import PRESETS
    from posenc.rope.llamacpp import llamacpp_rope_for
    from posenc.rope.precision import model_type_of

    _, _, version = _libs()
    cases = []
    for name, preset, n_ctx in CASES:
        params = dict(PRESETS[preset].params)
        mp = read_positions(model_config(preset))
        rope = llamacpp_rope_for(
            model_type=model_type_of({"preset": preset}),
            rotary_dim=params["rotary_dim"],
            base=params["base"],
            layout=params["layout"],
            scaling=params["scaling"],
            max_position_embeddings=mp.max_position_embeddings,
            n_ctx=n_ctx,
            mrope_section=mp.mrope_section,
        )
        spec = rope.to_dict()
        cos, sin = ggml_rope(list(POSITIONS), spec)
        cases.append(
            {
                "name": name,
                "preset": preset,
                "n_ctx": n_ctx,
                "rope": spec,
                "cos": _b64(cos),
                "sin": _b64(sin),
            }
        )
    return {"library": version, "positions": list(POSITIONS), "cases": cases}


GGUF_DIR = FIXTURE.parent / "gguf"

#: GGUF fixtures: (file, preset, architecture). Written by gguf's own GGUFWriter with the keys
#: and tensors llama.cpp's converter writes for the preset's config (conversion/base.py,
#: llama.py, phi.py, deepseek.py), and a tiny F16 token_embd.
GGUF_CASES = (
    ("llama-3.1-8b.gguf", "llama-3.1-8b", "llama"),
    ("qwen2.5-7b.gguf", "qwen2.5-7b", "qwen2"),
    ("phi-3.5-mini.gguf", "phi-3.5-mini", "phi3"),
    ("deepseek-v3.gguf", "deepseek-v3", "deepseek2"),
    ("gpt-oss-20b.gguf", "gpt-oss-20b", "gpt-oss"),
    ("qwen2.5-vl-7b.gguf", "qwen2.5-vl-7b", "qwen2vl"),
)


def write_gguf(path: Path, preset: str, arch: str) -> None:
    """One GGUF fixture: the converter's rope keys and factor tensors for ``preset``."""
    import gguf

    from posenc.facts.model_configs import model_config
    from posenc.readers.hf.positions import read_positions
    from posenc.readers.presets import PRESETS
    from posenc.rope.llamacpp import llama3_freq_factors

    params = PRESETS[preset].params
    mp = read_positions(model_config(preset))
    s = dict(params["scaling"] or {})
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(int(mp.max_position_embeddings))
    w.add_embedding_length(8 * params["head_dim"])
    w.add_head_count(8)
    w.add_key_length(params["head_dim"])
    w.add_rope_dimension_count(params["rotary_dim"])
    w.add_rope_freq_base(params["base"])
    kind = s.get("type")
    if kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(s["factor"])
        w.add_rope_scaling_orig_ctx_len(s["original_max_position_embeddings"])
        if s.get("beta_fast") is not None:
            w.add_rope_scaling_yarn_beta_fast(s["beta_fast"])
        if s.get("beta_slow") is not None:
            w.add_rope_scaling_yarn_beta_slow(s["beta_slow"])
        if arch == "deepseek2" and s.get("mscale_all_dim") is not None:
            w.add_rope_scaling_yarn_log_mul(0.1 * s["mscale_all_dim"])
    elif kind == "longrope":
        omax = s["original_max_position_embeddings"]
        scale = mp.max_position_embeddings / omax
        w.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
        w.add_rope_scaling_orig_ctx_len(omax)
        w.add_rope_scaling_attn_factors(
            np.sqrt(1 + np.log(scale) / np.log(omax)) if scale > 1.0 else 1.0
        )
    if mp.mrope_section is not None:
        w.add_rope_dimension_sections([*mp.mrope_section, 0][:4])
    if kind == "llama3":
        factors = llama3_freq_factors(params["rotary_dim"], params["base"], s)
        w.add_tensor("rope_freqs.weight", np.asarray(factors, dtype=np.float32))
    if kind == "longrope":
        w.add_tensor("rope_factors_long.weight", np.asarray(s["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.asarray(s["short_factor"], dtype=np.float32))
    w.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


#: Tiny models built here and converted by llama.cpp's own convert_hf_to_gguf.py (the
#: llama.cpp source folder in ``POSENC_LLAMA_CPP_SRC``, e.g. the one vendored in the
#: llama-cpp-python sdist): (file, config keys). Each has a SentencePiece tokenizer trained on a
#: line of text and float32 weights from a seeded model.
CONVERTED = (
    (
        "converted-llama3.gguf",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "rope_theta": 500000.0,
            "max_position_embeddings": 131072,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
    ),
    (
        "converted-phi3-longrope.gguf",
        {
            "architectures": ["Phi3ForCausalLM"],
            "model_type": "phi3",
            "rope_theta": 10000.0,
            "max_position_embeddings": 131072,
            "original_max_position_embeddings": 4096,
            "rope_scaling": {
                "type": "longrope",
                "short_factor": [1.0, 1.1, 1.2, 1.5, 2.0, 3.0, 5.0, 8.0],
                "long_factor": [1.0, 1.5, 2.5, 4.0, 8.0, 16.0, 32.0, 64.0],
            },
        },
    ),
)


def convert(path: Path, keys: dict[str, Any], source: Path) -> dict[str, Any]:
    """Build a tiny model with ``keys`` (2 heads of 16, one layer), convert it with llama.cpp's
    converter into ``path``; returns its config.json."""
    import subprocess
    import tempfile

    import sentencepiece as spm
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = Path(tempfile.mkdtemp())
    lines = "\n".join(f"the quick brown fox jumps over the lazy dog {i}" for i in range(200))
    (folder / "corpus.txt").write_text(lines)
    spm.SentencePieceTrainer.train(
        input=str(folder / "corpus.txt"),
        model_prefix=str(folder / "tokenizer"),
        vocab_size=64,
        model_type="unigram",
        hard_vocab_limit=False,
    )
    size = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    config = AutoConfig.for_model(**{**size, **keys})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    script = source / "convert_hf_to_gguf.py"
    cmd = [sys.executable, str(script), str(folder), "--outfile", str(path), "--outtype", "f32"]
    subprocess.run(cmd, check=True, capture_output=True)
    return dict(json.loads((folder / "config.json").read_text()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the fixture, write nothing"
    )
    args = parser.parse_args()
    data = record()
    if args.check:
        old = json.loads(FIXTURE.read_text())
        same = old["cases"] == data["cases"]
        print("fixture matches" if same else "fixture differs")
        return 0 if same else 1
    GGUF_DIR.mkdir(parents=True, exist_ok=True)
    for file, preset, arch in GGUF_CASES:
        write_gguf(GGUF_DIR / file, preset, arch)
    if os.environ.get("POSENC_LLAMA_CPP_SRC"):
        configs = {}
        for file, keys in CONVERTED:
            source = Path(os.environ["POSENC_LLAMA_CPP_SRC"])
            configs[file] = convert(GGUF_DIR / file, keys, source)
        (GGUF_DIR / "converted.json").write_text(json.dumps(configs, indent=1) + "\n")
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(data, indent=1) + "\n")
    print(
        f"wrote {len(data['cases'])} cases to {FIXTURE.relative_to(ROOT)}, GGUF files to "
        f"{GGUF_DIR.relative_to(ROOT)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
