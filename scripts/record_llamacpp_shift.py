"""Record llama.cpp's own rotation of vectors (libggml's ``ggml_rope_ext`` / ``ggml_rope_multi``
on F32 tensors, CPU) and its K-shift into tests/fixtures/llamacpp/shift.json.

Runs where ``llama-cpp-python`` is installed with torch (scripts/record_llamacpp_tables.py says
how to make that environment)::

    python scripts/record_llamacpp_shift.py          # rewrite
    python scripts/record_llamacpp_shift.py --check  # compare only

or, from posenc's own environment, with ``POSENC_GGML_LIB`` naming a folder that holds
``libggml-base.so`` and ``libggml-cpu.so`` (a llama-cpp-python build's ``lib`` or ``bin``).

Each case is a published config read by posenc's :func:`posenc.rope.llamacpp.llamacpp_rope_for`
(the arguments llama.cpp passes ``ggml_rope_ext``), a seeded float32 input ``(T, H, D)`` in the
channel order llama.cpp holds, and libggml's output:

- ``apply``: one ``ggml_rope_ext`` (``ggml_rope_multi`` for M-RoPE) at the positions, as
  llama.cpp rotates q and k;
- ``kshift``: ``build_rope_shift``'s graph (:func:`posenc.rope.llamacpp_rotate.kshift_rope`'s
  arguments) at each token's delta, ``steps`` times in a row, each on the previous output, as a
  cache shifted again and again.

``tests/lib/test_llamacpp_rotate.py`` checks posenc's emulation against them within 2 float32 ulp
of each rotated pair's magnitude per step, in the default lane, and calls libggml directly where
``llama_cpp`` is importable.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
FIXTURE = ROOT / "tests" / "fixtures" / "llamacpp" / "shift.json"

from record_llamacpp_tables import _InitParams, _libs  # noqa: E402

GGML_TYPE_F32 = 0
GGML_TYPE_I32 = 26
MODES = {"normal": 0, "neox": 2, "mrope": 8, "imrope": 40}

#: The positions of the apply cases (8 tokens, up to 131,072).
APPLY_POSITIONS = (0, 1, 7, 4095, 4096, 65_536, 131_071, 131_072)

#: (name, preset, n_ctx, what, deltas or None, steps)
CASES = (
    ("llama-3.1-8b apply", "llama-3.1-8b", None, "apply", None, 1),
    ("qwen2.5-7b apply", "qwen2.5-7b", None, "apply", None, 1),
    ("phi-3.5-mini apply", "phi-3.5-mini", None, "apply", None, 1),
    ("gpt-oss-20b apply", "gpt-oss-20b", None, "apply", None, 1),
    ("deepseek-v3 apply", "deepseek-v3", None, "apply", None, 1),
    ("qwen2.5-vl-7b apply", "qwen2.5-vl-7b", None, "apply", None, 1),
    ("llama-3.1-8b kshift x1", "llama-3.1-8b", None, "kshift", -1000, 1),
    ("llama-3.1-8b kshift x10", "llama-3.1-8b", None, "kshift", -1000, 10),
    ("qwen2.5-7b kshift x10", "qwen2.5-7b", None, "kshift", 7, 10),
    ("phi-3.5-mini kshift x10", "phi-3.5-mini", None, "kshift", -4096, 10),
    ("gpt-oss-20b kshift x10", "gpt-oss-20b", None, "kshift", 13_107, 10),
    ("deepseek-v3 kshift x1", "deepseek-v3", None, "kshift", -64, 1),
)


def _array(ctx: int, kind: int, n: int, values: np.ndarray) -> int:
    base, _cpu, _ = _libs()
    t = base.ggml_new_tensor_1d(ctx, kind, n)
    ctype = ctypes.c_float if kind == GGML_TYPE_F32 else ctypes.c_int32
    view = np.ctypeslib.as_array((ctype * n).from_address(base.ggml_get_data(t)))
    view[:] = values.reshape(-1)
    return int(t)


def ggml_rotate(x: np.ndarray, positions: np.ndarray, rope: dict[str, Any]) -> np.ndarray:
    """libggml's ``ggml_rope_ext`` (``ggml_rope_multi`` with sections) of ``x`` ``(T, H, D)``
    float32 at ``positions`` (``(T,)``, or ``(4, T)`` rows for M-RoPE), one thread."""
    base, cpu, _ = _libs()
    t, h, d = x.shape
    n = int(rope["n_dims"])
    multi = rope["sections"] is not None
    ctx = base.ggml_init(_InitParams(64 * 1024 * 1024 + 16 * x.size, None, False))
    try:
        xt = base.ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, h, t)  # ne0 = D, ne1 = H, ne2 = T
        xa = np.ctypeslib.as_array((ctypes.c_float * x.size).from_address(base.ggml_get_data(xt)))
        xa[:] = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        pos = np.asarray(positions, dtype=np.int32)
        pt = _array(ctx, GGML_TYPE_I32, pos.size, pos)
        factors = None
        if rope["freq_factors"] is not None:
            ff = np.asarray(rope["freq_factors"][: n // 2], dtype=np.float32)
            factors = _array(ctx, GGML_TYPE_F32, n // 2, ff)
        args = (
            rope["n_ctx_orig"], rope["freq_base"], rope["freq_scale"], rope["ext_factor"],
            rope["attn_factor"], rope["beta_fast"], rope["beta_slow"],
        )  # fmt: skip
        mode = MODES[rope["mode"]]
        if multi:
            sections = (ctypes.c_int * 4)(*rope["sections"])
            out = base.ggml_rope_multi(ctx, xt, pt, factors, n, sections, mode, *args)
        else:
            out = base.ggml_rope_ext(ctx, xt, pt, factors, n, mode, *args)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, out)
        if cpu.ggml_graph_compute_with_ctx(ctx, graph, 1) != 0:
            raise RuntimeError("ggml_graph_compute_with_ctx failed")
        oa = np.ctypeslib.as_array((ctypes.c_float * x.size).from_address(base.ggml_get_data(out)))
        return oa.reshape(t, h, d).copy()
    finally:
        base.ggml_free(ctx)


def ggml_kshift(x: np.ndarray, deltas: np.ndarray, rope: dict[str, Any], steps: int) -> np.ndarray:
    """llama.cpp's K-shift ``steps`` times: ``ggml_rope_ext`` on the keys at the deltas."""
    out = np.ascontiguousarray(x, dtype=np.float32)
    for _ in range(steps):
        out = ggml_rotate(out, deltas, rope)
    return out


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode()


def case_rope(preset: str, n_ctx: int | None, what: str) -> tuple[dict[str, Any], str]:
    """The arguments llama.cpp passes (the K-shift's for ``kshift``) and the model type."""
    from posenc.facts.model_configs import model_config
    from posenc.readers.hf.positions import read_positions
    from posenc.readers.presets import PRESETS
    from posenc.rope.llamacpp import llamacpp_rope_for
    from posenc.rope.llamacpp_rotate import kshift_rope
    from posenc.rope.precision import model_type_of

    params = dict(PRESETS[preset].params)
    mp = read_positions(model_config(preset))
    model_type = model_type_of({"preset": preset})
    rope = llamacpp_rope_for(
        model_type=model_type,
        rotary_dim=params["rotary_dim"],
        base=params["base"],
        layout=params["layout"],
        scaling=params["scaling"],
        max_position_embeddings=mp.max_position_embeddings,
        n_ctx=n_ctx,
        mrope_section=mp.mrope_section,
    )
    if what == "kshift":
        rope = kshift_rope(rope, model_type=model_type)
    return rope.to_dict(), model_type


def record() -> dict[str, Any]:
    from posenc.readers.presets import PRESETS

    _, _, version = _libs()
    cases = []
    for i, (name, preset, n_ctx, what, delta, steps) in enumerate(CASES):
        rope, model_type = case_rope(preset, n_ctx, what)
        head_dim = int(PRESETS[preset].params["head_dim"])
        rng = np.random.default_rng(i)
        x = rng.standard_normal((len(APPLY_POSITIONS), 2, head_dim)).astype(np.float32)
        if what == "apply":
            positions = np.asarray(APPLY_POSITIONS, dtype=np.int32)
            rows = np.tile(positions, 4) if rope["sections"] is not None else positions
            out = ggml_rotate(x, rows, rope)
            at: list[int] = [int(p) for p in positions]
        else:
            at = [int(delta)] * len(APPLY_POSITIONS)  # type: ignore[arg-type]
            out = ggml_kshift(x, np.asarray(at, dtype=np.int32), rope, steps)
        cases.append(
            {
                "name": name, "preset": preset, "n_ctx": n_ctx, "what": what,
                "model_type": model_type, "rope": rope, "positions": at, "steps": steps,
                "shape": list(x.shape), "x": _b64(x), "out": _b64(out),
            }
        )  # fmt: skip
    return {"library": version, "cases": cases}


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
    FIXTURE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {FIXTURE.relative_to(ROOT)} ({len(data['cases'])} cases, {data['library']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
