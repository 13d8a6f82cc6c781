"""``posenc apply``: q and k rotated as the model applies RoPE, locally or on a service
(``POST /v1/rope/apply``, :func:`posenc.rope_kinds.rotate.rotate`).

The vectors come from ``--input`` (a ``.safetensors`` file with tensors ``q`` and optionally ``k``,
or an ``.npy`` of ``q``), or are seeded (``--seed`` with ``--num-heads``); the answer goes to
``--output`` (``.safetensors``: ``q``, ``k`` and ``meta``; ``.npy``: ``q``), and ``meta`` is
printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from posenc.core import codec
from posenc.engines import ENGINES, engine_names
from posenc.rope_kinds.rotate import rotate


def _applying_engines() -> tuple[str, ...]:
    """The engines with an ``apply`` hook, in the registry's order."""
    return tuple(name for name in engine_names() if ENGINES[name].apply is not None)


def add_apply_parser(sub: Any) -> None:
    """The ``apply`` subcommand's options."""
    p = sub.add_parser(
        "apply", help="rotate q and k as the model applies RoPE (.safetensors / .npy)",
        description="Rotate q (and k) at positions with a model's RoPE (POST /v1/rope/apply), "
        "exact (float64) or as an engine's own apply runs.",
    )  # fmt: skip
    src = p.add_mutually_exclusive_group()
    src.add_argument("--config", type=Path, help="a model's config.json")
    src.add_argument("--preset", help="a preset name (GET /v1/presets)")
    p.add_argument("--head-dim", type=int, help="D, without config or preset")
    p.add_argument("--positions", help="comma-separated positions")
    p.add_argument("--seq-len", type=int, help="positions 0 … T−1")
    p.add_argument("--offset", type=int, help="added to every position")
    p.add_argument("--layer-type", help="for configs with per-layer-type RoPE (Gemma 3)")
    engines = _applying_engines()
    p.add_argument("--engine", choices=engines, default=engines[0])
    p.add_argument("--precision", choices=("exact", "engine"), default="exact")
    p.add_argument("--input", type=Path, help=".safetensors (q, k) or .npy (q) of (T, H, D)")
    p.add_argument("--seed", type=int, help="seeded vectors (no --input)")
    p.add_argument("--num-heads", type=int, help="H of the seeded q")
    p.add_argument("--num-kv-heads", type=int, help="H_kv of the seeded k")
    p.add_argument("-o", "--output", type=Path, required=True, help=".safetensors or .npy")


def _read_input(path: Path) -> tuple[torch.Tensor, torch.Tensor | None]:
    body = path.read_bytes()
    if path.suffix == ".npy":
        return torch.from_numpy(np.array(codec.decode_npy(body, "q"))), None
    tensors, _meta = codec.decode_safetensors(body)
    q, k = tensors.get("q"), tensors.get("k")
    if q is None:
        raise ValueError(f"{path} holds no tensor 'q'")

    def as_tensor(v: Any) -> torch.Tensor:
        return v if isinstance(v, torch.Tensor) else torch.from_numpy(np.array(v))

    return as_tensor(q), None if k is None else as_tensor(k)


def run_apply(args: argparse.Namespace) -> int:
    """Rotate, write ``--output`` and print ``meta``; bad arguments are an exit status 2."""
    request: dict[str, Any] = {
        "config": json.loads(args.config.read_text()) if args.config else None,
        "preset": args.preset,
        "head_dim": args.head_dim,
        "positions": [int(p) for p in args.positions.split(",")] if args.positions else None,
        "seq_len": args.seq_len,
        "offset": args.offset,
        "layer_type": args.layer_type,
        "seed": args.seed,
        "num_heads": args.num_heads,
        "num_kv_heads": args.num_kv_heads,
    }
    request = {k: v for k, v in request.items() if v is not None}
    q, k = _read_input(args.input) if args.input else (None, None)
    out = rotate(request, q, k, engine=args.engine, precision=args.precision)
    tensors = {n: out[n] for n in ("q", "k") if out[n] is not None}
    if args.output.suffix == ".npy":
        args.output.write_bytes(codec.encode_npy(tensors["q"]))
    else:
        args.output.write_bytes(
            codec.encode_safetensors(tensors, {"meta": json.dumps(out["meta"])})
        )
    print(json.dumps(out["meta"]), file=sys.stdout)
    return 0


__all__ = ["add_apply_parser", "run_apply"]
