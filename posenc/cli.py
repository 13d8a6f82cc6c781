"""The ``posenc`` command: serve the HTTP API, or write a positional table to a file.

Usage::

    posenc --version
    posenc serve [--host 127.0.0.1] [--port 8000] [--workers 1]
    posenc table sinusoidal --seq-len 2048 --d-model 768 -o pe.npy
    posenc table rope --preset llama-3.1-8b --seq-len 131072 -o rope.safetensors
    posenc table alibi --num-heads 8 --seq-len 64 -o alibi.png
    posenc table relative --seq-len 512 --num-heads 12 -o t5.safetensors
    posenc table rope --url http://gpu-box:8000 --api-key KEY --head-dim 128 --seq-len 4096 -o r.npy

``table`` computes locally with the library, or with ``--url`` asks a posenc service (through
:mod:`posenc.client`) and writes its body as received. The flags mirror the HTTP contract's body
fields (``--seq-len`` is ``seq_len``...); flags left out are not sent, so the same defaults apply
(a preset's values, then the library's). The output format follows the file's extension:

- ``.npy``: the primary tensor (``encoding``, ``cos``, ``bias``, ``buckets``); no bfloat16.
- ``.safetensors``: every tensor of the bundle, ``meta`` as JSON under ``__metadata__["meta"]``.
- ``.bin``: the primary tensor's raw bytes (C order, little-endian).
- ``.png``: a heatmap of the primary tensor (:mod:`posenc.heatmap`, needs Pillow);
  ``--index`` picks one head of a 3-D bias.

With ``--url``, ``.npy``, ``.safetensors`` and ``.bin`` are written to disk as they arrive
(:meth:`posenc.client.PosencClient.save_table`), so a table the service streams (over its
``POSENC_MAX_ELEMENTS``) is never held in memory; a progress line in bytes from
``Content-Length`` goes to stderr. Local outputs of more than ``PROGRESS_ELEMENTS`` elements are
computed in chunks of positions (query
rows for the biases), with a progress line on stderr (``--quiet`` hides it). Exit status: 0 on
success, 2 for bad arguments (argparse's usage errors, the library's or the server's
validation errors), 1 for other failures (server unreachable, other HTTP errors).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

import numpy as np
import torch

from posenc import __version__
from posenc._validate import check_int, check_lengths, first_true
from posenc.errors import InvalidArgument, PosencError

if TYPE_CHECKING:
    from posenc.client import Format

__all__ = ["PROGRESS_ELEMENTS", "compute_table", "main"]

PROGRESS_ELEMENTS = 10_000_000
"""Outputs with more elements than this are computed in chunks, with progress on stderr."""

CHUNK_ELEMENTS = 1 << 22
"""Elements per chunk (about 16 MiB of float32) of the chunked computation."""

KINDS = ("rope", "alibi", "relative")  # written here; the registry's kinds are added to them
EXTENSIONS = {".npy": "npy", ".safetensors": "safetensors", ".png": "png", ".bin": "raw"}
DTYPES = ("float32", "float16", "bfloat16", "float64")

# Request fields of each kind, in the contract's order (the flags are these with dashes).
FIELDS: dict[str, tuple[str, ...]] = {
    "rope": (
        "seq_len", "positions", "head_dim", "rotary_dim", "base", "layout", "scaling", "preset",
        "dtype", "config", "layer_type",
    ),
    "alibi": ("num_heads", "seq_len", "key_len", "mode", "max_bias", "preset", "dtype", "config"),
    "relative": (
        "seq_len", "key_len", "num_buckets", "max_distance", "bidirectional", "bucketing",
        "num_heads", "seed", "preset", "dtype", "config",
    ),
}  # fmt: skip


class CliError(Exception):
    """A failure reported as ``posenc: error: ...`` with exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------------ progress


class Progress:
    """A progress line on a text stream: ``\\r``-updated on a terminal, every 10% otherwise.

    Args:
        label: what is being computed, e.g. ``"rope cos/sin"``.
        total: units of work (rows).
        stream: where to write (stderr); ``None`` disables the output.
    """

    def __init__(self, label: str, total: int, stream: TextIO | None, unit: str = "rows") -> None:
        self.label = label
        self.unit = unit
        self.total = max(total, 1)
        self.stream = stream
        self.done = 0
        self._tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._last_decile = -1
        self._start = time.monotonic()

    def update(self, n: int) -> None:
        """Record ``n`` more units done and redraw."""
        self.done = min(self.done + n, self.total)
        if self.stream is None:
            return
        pct = 100.0 * self.done / self.total
        text = f"posenc: {self.label}: {self.done}/{self.total} {self.unit} ({pct:5.1f}%)"
        if self._tty:
            self.stream.write("\r" + text)
        elif int(pct // 10) > self._last_decile:
            self._last_decile = int(pct // 10)
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Finish the line with the elapsed time."""
        if self.stream is None:
            return
        elapsed = time.monotonic() - self._start
        end = "\r" if self._tty else ""
        self.stream.write(
            f"{end}posenc: {self.label}: done, {self.total} {self.unit} in {elapsed:.1f} s\n"
        )
        self.stream.flush()


TensorBundle = tuple[dict[str, torch.Tensor], dict[str, Any]]
"""``(tensors, meta)``: named tensors in the endpoint's order (the first is the primary one)."""

ProgressFactory = Callable[[str, int, int], Progress | None]
"""``(label, rows, elements) -> Progress`` for outputs worth a progress line, else ``None``."""


def _chunks(total: int, row_elements: int) -> list[tuple[int, int]]:
    rows = max(1, CHUNK_ELEMENTS // max(row_elements, 1))
    return [(i, min(i + rows, total)) for i in range(0, total, rows)]


# ------------------------------------------------------------------------------------ compute


def _preset_params(kind: str, name: str | None) -> dict[str, Any]:
    if name is None:
        return {}
    from posenc.presets import get_preset

    preset = get_preset(name)
    if preset.kind != kind:
        raise InvalidArgument(
            f"preset {name!r} is a {preset.kind} preset, not a {kind} one", field="preset"
        )
    params: dict[str, Any] = preset.to_dict()["params"]
    return params


def _config_params(kind: str, config: Mapping[str, Any] | None, layer_type: str | None) -> dict[str, Any]:  # fmt: skip
    """The fields a model's config.json gives ``kind`` (as the service's ``config``)."""
    if config is None:
        if layer_type is not None:
            raise InvalidArgument("layer_type needs a --config", field="layer_type")
        return {}
    from posenc.hf_config import read_positions, rope_request_fields

    mp = read_positions(config)
    if mp.kind != kind:
        raise InvalidArgument(
            f"config of model_type {mp.model_type!r} uses {mp.kind} positions, not {kind}",
            field="config",
        )
    if kind == "rope":
        fields = rope_request_fields(mp, layer_type)
        fields.pop("mrope_section", None)  # the CLI computes 1-D positions only
        fields.pop("mrope_interleaved", None)
        return fields
    source = mp.alibi if kind == "alibi" else mp.relative
    return {k: v for k, v in (source or {}).items() if v is not None}


def _merge(kind: str, given: dict[str, Any]) -> dict[str, Any]:
    """Body fields > config or preset > library defaults; a preset's or config's rotated
    fraction follows a ``head_dim`` given without ``rotary_dim``."""
    if given.get("config") is not None and given.get("preset") is not None:
        raise InvalidArgument("give --config or --preset, not both", field="config")
    defaults = {
        **_preset_params(kind, given.get("preset")),
        **_config_params(kind, given.get("config"), given.get("layer_type")),
    }
    if (
        kind == "rope"
        and "head_dim" in given
        and "rotary_dim" not in given
        and defaults.get("head_dim")
        and defaults.get("rotary_dim")
    ):
        defaults["rotary_dim"] = int(
            given["head_dim"] * defaults["rotary_dim"] / defaults["head_dim"]
        )
    return {**defaults, **given}


def _lengths(f: Mapping[str, Any]) -> tuple[int, int]:
    """``(T, S)`` of a bias request, checked before anything of that size is built."""
    return check_lengths(f.get("seq_len"), f.get("key_len"))


def _positions(f: Mapping[str, Any], offset: int = 0) -> torch.Tensor:
    """The ``(T,)`` int64 positions of a sinusoidal/rope request (``offset`` added)."""
    if (f.get("positions") is None) == (f.get("seq_len") is None):
        got = "both" if f.get("positions") is not None else "neither"
        raise InvalidArgument(
            f"give exactly one of positions or seq_len, got {got}", field="seq_len"
        )
    if f.get("seq_len") is not None:
        seq_len = check_int("seq_len", f["seq_len"], 1)
        return torch.arange(offset, offset + seq_len, dtype=torch.int64)
    pos = torch.as_tensor(list(f["positions"]), dtype=torch.int64)
    if pos.numel() == 0:
        raise InvalidArgument("positions must not be empty", field="positions")
    if bool((pos < 0).any()):
        (k,) = first_true(pos < 0)
        raise InvalidArgument(
            f"positions must be >= 0, got {int(pos[k])} at positions[{k}]", field=f"positions[{k}]"
        )
    return pos + offset


def _rope(f: dict[str, Any], dtype: torch.dtype, progress: ProgressFactory) -> TensorBundle:
    from posenc.rope import RopeScaling, rope_cos_sin

    head_dim = f.get("head_dim")
    if head_dim is None:
        raise InvalidArgument(
            "head_dim is required (or a rope preset that gives it)", field="head_dim"
        )
    rotary_dim = f.get("rotary_dim", head_dim)
    if isinstance(rotary_dim, int) and isinstance(head_dim, int) and rotary_dim > head_dim:
        raise InvalidArgument(
            f"rotary_dim must be <= head_dim, got rotary_dim={rotary_dim} and head_dim={head_dim}",
            field="rotary_dim",
        )
    scaling = RopeScaling.from_dict(f["scaling"]) if f.get("scaling") is not None else None
    base, layout = f.get("base", 10000.0), f.get("layout", "half")
    kw: dict[str, Any] = dict(
        rotary_dim=rotary_dim, base=base, layout=layout, scaling=scaling, dtype=dtype
    )
    pos = _positions(f)  # (T,)
    top = int(pos.max())
    # One row at the largest position checks the fields and gives inv_freq and the attention
    # scaling for seq_len = max(positions) + 1 (what dynamic and longrope compare).
    head = rope_cos_sin(positions=[top], **kw)
    bar = progress("rope cos/sin", pos.numel(), 2 * pos.numel() * rotary_dim)
    if bar is None:
        tables = rope_cos_sin(positions=pos, **kw)
        cos, sin = tables.cos, tables.sin  # (T, R)
    else:
        cos = torch.empty(pos.numel(), rotary_dim, dtype=dtype)  # (T, R)
        sin = torch.empty(pos.numel(), rotary_dim, dtype=dtype)  # (T, R)
        for i0, i1 in _chunks(pos.numel(), 2 * rotary_dim):
            # The largest position rides along so that every chunk sees the same seq_len.
            part = rope_cos_sin(positions=torch.cat((pos[i0:i1], pos.new_tensor([top]))), **kw)
            cos[i0:i1], sin[i0:i1] = part.cos[:-1], part.sin[:-1]
            bar.update(i1 - i0)
        bar.close()
    meta = {
        "kind": "rope", "seq_len": pos.numel(), "head_dim": head_dim, "rotary_dim": rotary_dim,
        "base": base, "layout": layout, "scaling": f.get("scaling"), "preset": f.get("preset"),
        "attention_scaling": head.attention_scaling, "dtype": f.get("dtype", "float32"),
        # as the service's meta (v1.1): the scaling type applied, and the config's layer type
        "rope_type": scaling.type if scaling is not None else "default",
        "layer_type": f.get("layer_type"),
    }  # fmt: skip
    return {"cos": cos, "sin": sin, "inv_freq": head.inv_freq}, meta


def _alibi(f: dict[str, Any], dtype: torch.dtype, progress: ProgressFactory) -> TensorBundle:
    from posenc.alibi import alibi_bias, alibi_slopes

    if f.get("num_heads") is None:
        raise InvalidArgument(
            "num_heads is required (or an alibi preset that gives it)", field="num_heads"
        )
    heads = check_int("num_heads", f["num_heads"], 1)
    mode, max_bias = f.get("mode", "causal"), f.get("max_bias", 8.0)
    seq_len, key_len = _lengths(f)
    alibi_bias(1, 1, mode=mode, max_bias=max_bias)  # checks mode and max_bias
    slopes = alibi_slopes(heads, max_bias, dtype=dtype)  # (H,)
    bar = progress("alibi bias", seq_len, heads * seq_len * key_len)
    if bar is None:
        bias = alibi_bias(heads, seq_len, key_len, mode=mode, max_bias=max_bias, dtype=dtype)
    else:
        # The bias depends on j - i' only: take the library's symmetric row of the last query
        # (every distance 0 … S-1) and gather from it, one block of query rows at a time.
        row = alibi_bias(heads, 1, key_len, mode="symmetric", max_bias=max_bias, dtype=dtype)
        strip = row[:, 0, :].flip(-1)  # (H, S): strip[h, d] = -m_h * d
        bias = torch.empty(heads, seq_len, key_len, dtype=dtype)  # (H, T, S)
        keys = torch.arange(key_len)
        for i0, i1 in _chunks(seq_len, heads * key_len):
            rel = keys[None, :] - (torch.arange(i0, i1) + key_len - seq_len)[:, None]  # (c, S)
            block = strip[:, rel.abs()]  # (H, c, S)
            if mode == "causal":
                block.masked_fill_((rel > 0)[None], float("-inf"))
            bias[:, i0:i1] = block
            bar.update(i1 - i0)
        bar.close()
    meta = {
        "kind": "alibi", "num_heads": heads, "seq_len": seq_len, "key_len": key_len, "mode": mode,
        "max_bias": max_bias, "preset": f.get("preset"), "dtype": f.get("dtype", "float32"),
    }  # fmt: skip
    return {"bias": bias, "slopes": slopes}, meta


def _relative(f: dict[str, Any], dtype: torch.dtype, progress: ProgressFactory) -> TensorBundle:
    from posenc.relative import (
        clipped_bucket,
        num_relative_buckets,
        relative_bias,
        relative_bias_table,
        relative_buckets,
        relative_position_bucket,
    )

    seq_len, key_len = _lengths(f)
    num_buckets, max_distance = f.get("num_buckets", 32), f.get("max_distance", 128)
    bidirectional, bucketing = f.get("bidirectional", True), f.get("bucketing", "log")
    heads = f.get("num_heads")
    n_buckets = num_relative_buckets(
        num_buckets=num_buckets, max_distance=max_distance, bucketing=bucketing
    )
    bkw: dict[str, Any] = dict(
        num_buckets=num_buckets,
        max_distance=max_distance,
        bidirectional=bidirectional,
        bucketing=bucketing,
    )
    relative_buckets(1, 1, **bkw)  # checks the bucketing parameters
    table = None
    if heads is not None:
        heads = check_int("num_heads", heads, 1)
        table = relative_bias_table(n_buckets, heads, seed=f.get("seed", 0))  # (NB, H)
    per_row = key_len * (1 + (heads or 0))
    bar = progress("relative buckets", seq_len, seq_len * per_row)
    if bar is None:
        buckets = relative_buckets(seq_len, key_len, **bkw)  # (T, S)
        bias = None if table is None else relative_bias(buckets, table, dtype=dtype)
    else:
        # Buckets depend on j - i' only: bucket every relative position -(S-1) … S-1 once with
        # the library, then gather, one block of query rows at a time.
        rel_all = torch.arange(-(key_len - 1), key_len)  # (2S-1,)
        if bucketing == "clip":
            lut = clipped_bucket(rel_all, max_distance=max_distance, bidirectional=bidirectional)
        else:
            lut = relative_position_bucket(
                rel_all,
                bidirectional=bidirectional,
                num_buckets=num_buckets,
                max_distance=max_distance,
            )
        buckets = torch.empty(seq_len, key_len, dtype=torch.int64)  # (T, S)
        bias = None if table is None else torch.empty(table.shape[1], seq_len, key_len, dtype=dtype)
        keys = torch.arange(key_len)
        for i0, i1 in _chunks(seq_len, per_row):
            rel = keys[None, :] - (torch.arange(i0, i1) + key_len - seq_len)[:, None]  # (c, S)
            buckets[i0:i1] = lut[rel + key_len - 1]
            if bias is not None and table is not None:
                bias[:, i0:i1] = relative_bias(buckets[i0:i1], table, dtype=dtype)  # (H, c, S)
            bar.update(i1 - i0)
        bar.close()
    meta = {
        "kind": "relative", "seq_len": seq_len, "key_len": key_len, "num_buckets": num_buckets,
        "bucket_count": n_buckets, "max_distance": max_distance, "bidirectional": bidirectional,
        "bucketing": bucketing, "num_heads": heads, "seed": f.get("seed", 0), "preset": f.get("preset"),
        "dtype": f.get("dtype", "float32"),
    }  # fmt: skip
    tensors = {"buckets": buckets}
    if bias is not None:
        tensors["bias"] = bias
    return tensors, meta


_COMPUTE: dict[str, Callable[[dict[str, Any], torch.dtype, ProgressFactory], TensorBundle]] = {
    "rope": _rope,
    "alibi": _alibi,
    "relative": _relative,
}


def _compute_in_blocks(
    spec: Any, params: Mapping[str, Any], stream: TextIO
) -> dict[str, torch.Tensor]:
    """A registered kind's tensors filled block by block (:attr:`posenc.kinds.Kind.blocks`),
    with a progress line: the same bytes as computing them whole."""
    from posenc.device import resolve_dtype

    tables = spec.blocks(params, torch.device("cpu"), resolve_dtype(params.get("dtype")))
    bar = Progress(f"{spec.name} {', '.join(tables)}", sum(t.rows for t in tables.values()), stream)
    out = {}
    for name, table in tables.items():
        whole = torch.empty(table.rows, table.row_elements, dtype=table.dtype)
        for start, stop in table.ranges(CHUNK_ELEMENTS * table.element_size):
            table.fill(start, stop, whole[start:stop])
            bar.update(stop - start)
        out[name] = whole.reshape(table.shape)
    bar.close()
    return out


def compute_table(
    kind: str, fields: Mapping[str, Any], *, progress: TextIO | None = None
) -> TensorBundle:
    """Compute a table locally, as the service's endpoint for ``kind`` would.

    Args:
        kind: ``sinusoidal``, ``rope``, ``alibi`` or ``relative``.
        fields: the request's body fields (the contract's names); ``None`` values are dropped
            and a ``preset`` supplies defaults for those not given.
        progress: stream for a progress line when the output has more than
            :data:`PROGRESS_ELEMENTS` elements (then computed in chunks); ``None``: silent,
            and unchunked.

    Returns:
        ``(tensors, meta)``: the named tensors in the endpoint's order (the first is the primary
        one) and a JSON-able ``meta`` with the effective parameters.

    Raises:
        PosencError: a bad argument (the library's message, naming the field).
    """
    given = {k: v for k, v in fields.items() if v is not None}
    if kind not in _COMPUTE:
        from posenc import kinds

        spec = kinds.REGISTRY.get(kind)
        if spec is None:
            known = [*_COMPUTE, *kinds.REGISTRY]
            raise PosencError(f"kind must be one of {known}, got {kind!r}", field="kind")
        params = kinds.resolve_fields(spec, given)
        elements = kinds.total_elements(spec, params)
        if spec.blocks is None or progress is None or elements <= PROGRESS_ELEMENTS:
            return kinds.compute(spec, params), spec.make_meta(params)
        return _compute_in_blocks(spec, params, progress), spec.make_meta(params)
    merged = _merge(kind, given)
    from posenc.device import resolve_dtype

    dtype = resolve_dtype(merged.get("dtype"))

    def factory(label: str, rows: int, elements: int) -> Progress | None:
        if progress is None or elements <= PROGRESS_ELEMENTS:
            return None
        return Progress(label, rows, progress)

    return _COMPUTE[kind](merged, dtype, factory)


# ------------------------------------------------------------------------------------ output


def _write_local(path: Path, fmt: str, tensors: dict[str, torch.Tensor], meta: dict, index: int | None) -> None:  # fmt: skip
    primary_name, primary = next(iter(tensors.items()))
    if fmt == "npy":
        if primary.dtype == torch.bfloat16:
            raise CliError(
                f"npy has no bfloat16 type, and {primary_name!r} is bfloat16: use --dtype "
                "float32, float16 or float64 with .npy, or write .safetensors",
                code=2,
            )
        np.save(path, primary.contiguous().numpy())
    elif fmt == "safetensors":
        try:
            from safetensors.torch import save_file
        except ImportError as exc:
            raise CliError(
                "writing .safetensors needs the safetensors package: "
                "pip install 'posenc[client]' (or 'posenc[service]')"
            ) from exc
        save_file(
            {k: v.contiguous() for k, v in tensors.items()},
            str(path),
            metadata={"meta": json.dumps(meta, separators=(",", ":"))},
        )
        _readable_as_other_files(path)
    elif fmt == "raw":
        path.write_bytes(primary.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    else:  # png
        try:
            from posenc.heatmap import heatmap_png
        except ImportError as exc:
            raise CliError(
                f"writing .png needs Pillow: pip install 'posenc[client]' ({exc})"
            ) from exc
        try:
            body = heatmap_png(primary_name, primary, dict(meta), index)
        except (PosencError, ValueError) as exc:
            raise CliError(str(getattr(exc, "detail", exc)), code=2) from exc
        path.write_bytes(body)


def _readable_as_other_files(path: Path) -> None:
    """The mode ``open()`` would give (0666 less the umask): safetensors writes files 0600."""
    umask = os.umask(0)
    os.umask(umask)
    path.chmod(0o666 & ~umask)


def _fetch(args: argparse.Namespace, kind: str, fields: dict[str, Any], fmt: str) -> bytes:
    try:
        from posenc.client import PosencClient, PosencClientError, PosencHTTPError
    except ImportError as exc:
        raise CliError(
            f"--url needs the client extra: pip install 'posenc[client]' ({exc})"
        ) from exc
    query = {"index": args.index} if args.index is not None and fmt == "png" else None
    try:
        with PosencClient(args.url, api_key=args.api_key, timeout=args.timeout) as client:
            if kind in _COMPUTE:
                # v1.1 body fields the client methods take through extra=
                extra = {
                    k: fields[k] for k in ("config", "layer_type") if fields.get(k) is not None
                }
                plain = {k: v for k, v in fields.items() if k not in ("config", "layer_type")}
                method = getattr(client, kind)
                result = method(**plain, format=fmt, query=query, extra=extra or None)
            else:  # a kind of the registry
                result = client.compute(kind, **fields, format=cast("Format", fmt), query=query)
    except PosencHTTPError as exc:
        code = 2 if exc.status_code in (400, 404, 406, 413, 422) else 1
        raise CliError(f"the server at {args.url} refused the request: {exc}", code=code) from exc
    except PosencClientError as exc:
        raise CliError(str(exc)) from exc
    return result.content


def _field_names(kind: str) -> tuple[str, ...]:
    """The request fields of ``kind``: the built-in kinds' or a registered kind's."""
    if kind in FIELDS:
        return FIELDS[kind]
    from posenc.kinds import REGISTRY

    return REGISTRY[kind].field_names


def _download(args: argparse.Namespace, kind: str, fields: dict[str, Any], fmt: str) -> None:
    """``--url`` with npy, safetensors or raw: the body written to disk as it arrives."""
    try:
        from posenc.client import PosencClient, PosencClientError, PosencHTTPError
    except ImportError as exc:
        raise CliError(
            f"--url needs the client extra: pip install 'posenc[client]' ({exc})"
        ) from exc
    bar: list[Progress] = []

    def progress(done: int, total: int | None) -> None:
        if args.quiet or total is None:
            return
        if not bar:
            bar.append(Progress(f"{kind} from {args.url}", total, sys.stderr, unit="bytes"))
        bar[0].update(done - bar[0].done)

    try:
        with PosencClient(args.url, api_key=args.api_key, timeout=args.timeout) as client:
            client.save_table(kind, args.output, format=fmt, progress=progress, **fields)  # type: ignore[arg-type]
    except PosencHTTPError as exc:
        code = 2 if exc.status_code in (400, 404, 406, 413, 422) else 1
        raise CliError(f"the server at {args.url} refused the request: {exc}", code=code) from exc
    except PosencClientError as exc:
        raise CliError(str(exc)) from exc
    if bar:
        bar[0].close()


# ------------------------------------------------------------------------------------ parser


def _positions_arg(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated integers, e.g. 0,1,5, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("must name at least one position")
    return values


def _json_object_arg(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f'must be a JSON object such as {{"type": "linear", "factor": 2}}, got {text!r}'
        )
    return value


def _config_file_arg(path: str) -> dict[str, Any]:
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path} as a config.json: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{path} must hold a JSON object (a config.json)")
    return value


def _add_field(p: argparse.ArgumentParser, kind: str, name: str) -> None:
    flag = "--" + name.replace("_", "-")
    spec: dict[str, dict[str, Any]] = {
        "seq_len": dict(type=int, metavar="T", help="sequence (query) length T"),
        "positions": dict(type=_positions_arg, metavar="P,P,...",
                          help="explicit positions, comma-separated (instead of --seq-len)"),
        "d_model": dict(type=int, metavar="D", help="model dimension D (even)"),
        "base": dict(type=float, help="wavelength / rope base (default 10000)"),
        "offset": dict(type=int, help="added to every position (default 0)"),
        "head_dim": dict(type=int, help="head dimension (even)"),
        "rotary_dim": dict(type=int, metavar="R", help="rotated dims R <= head_dim (default head_dim)"),
        "scaling": dict(type=_json_object_arg, metavar="JSON",
                        help='rope scaling, e.g. \'{"type": "llama3", "factor": 8, ...}\''),
        "preset": dict(help="a preset name (GET /v1/presets); its values are the defaults"),
        "config": dict(type=_config_file_arg, metavar="CONFIG_JSON",
                       help="a model's config.json (read as transformers 5 reads it); its "
                       "values are the defaults"),
        "layer_type": dict(help="with --config: which layer type's RoPE (e.g. sliding_attention)"),
        "num_heads": dict(type=int, metavar="H", help="number of heads H"),
        "key_len": dict(type=int, metavar="S", help="key length S (default T)"),
        "mode": dict(choices=["causal", "symmetric"], help="ALiBi mode (default causal)"),
        "max_bias": dict(type=float, help="ALiBi slope exponent scale (default 8)"),
        "num_buckets": dict(type=int, help="number of buckets (default 32)"),
        "max_distance": dict(type=int, help="max distance (default 128)"),
        "bidirectional": dict(action=argparse.BooleanOptionalAction,
                              help="bidirectional buckets (default true)"),
        "bucketing": dict(choices=["log", "clip"], help="T5 log buckets (default) or clip"),
        "seed": dict(type=int, help="seed of the bias table (default 0)"),
        "dtype": dict(choices=list(DTYPES), help="output dtype (default float32)"),
    }  # fmt: skip
    if name == "layout":  # rope's (the registry's kinds give their own choices)
        choices = ["half", "interleaved"]
        kw: dict[str, Any] = dict(choices=choices, help=f"layout (default {choices[0]})")
    else:
        kw = dict(spec[name])
    kw.setdefault("default", None)
    p.add_argument(flag, dest=name, **kw)


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """The options every ``posenc table KIND`` has: where to write, and where to compute."""
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="output file: .npy (primary tensor), .safetensors (all), .bin (raw bytes), .png (heatmap)")  # fmt: skip
    p.add_argument("--url", help="compute on this posenc service instead of locally")
    p.add_argument("--api-key", help="bearer key for --url (default: $POSENC_API_KEY)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds, with --url")
    p.add_argument("--index", type=int, help="png: the leading index (head) to draw")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def build_parser() -> argparse.ArgumentParser:
    """The ``posenc`` argument parser (``serve`` and ``table`` subcommands)."""
    parser = argparse.ArgumentParser(
        prog="posenc",
        description="Transformer positional encodings: serve the HTTP API, or write a table.",
    )
    parser.add_argument("--version", action="version", version=f"posenc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{serve,table}")

    serve = sub.add_parser(
        "serve", help="run the HTTP service (same as python -m service)",
        description="Run the HTTP service with uvicorn (same as python -m service).",
    )  # fmt: skip
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--workers", type=int, help="worker processes (default 1)")

    table = sub.add_parser(
        "table", help="write a positional table to .npy, .safetensors or .png",
        description="Compute a positional table (locally, or with --url on a posenc service) "
        "and write it; the format follows the extension of -o.",
    )  # fmt: skip
    kinds = table.add_subparsers(dest="kind", required=True, metavar="{" + ",".join(KINDS) + "}")
    for kind in KINDS:
        p = kinds.add_parser(kind, help=f"the {kind} table (POST /v1/... {kind})")
        for name in FIELDS[kind]:
            _add_field(p, kind, name)
        _add_output_options(p)
        p.set_defaults(kind_parser=p)
    from posenc.kinds import REGISTRY

    for name, spec in REGISTRY.items():
        if name in FIELDS:
            continue
        p = kinds.add_parser(name, help=f"{spec.summary} ({spec.path})")
        for field_spec in spec.fields:
            _add_registered_field(p, field_spec)
        _add_output_options(p)
        p.set_defaults(kind_parser=p)
    return parser


def _add_registered_field(p: argparse.ArgumentParser, spec: Any) -> None:
    """One option for a field of a registered kind (:class:`posenc.kinds.FieldSpec`)."""
    kw: dict[str, Any] = {"dest": spec.name, "default": None, "help": spec.description}
    if spec.type == "bool":
        kw["action"] = argparse.BooleanOptionalAction
    elif spec.type == "ints":
        kw["type"] = _positions_arg
    elif spec.type in ("int", "float"):
        kw["type"] = int if spec.type == "int" else float
    elif spec.choices is not None:
        kw["choices"] = list(spec.choices)
    if spec.default is not None and not spec.required:
        kw["help"] += f" (default {spec.default})"
    p.add_argument("--" + spec.name.replace("_", "-"), **kw)


# ------------------------------------------------------------------------------------ commands


def _serve(args: argparse.Namespace) -> int:
    argv = []
    for name in ("host", "port", "workers"):
        value = getattr(args, name)
        if value is not None:
            argv += [f"--{name}", str(value)]
    # The service is a separate package: run it as `python -m service` in this process's
    # place (the library never imports it), so signals reach uvicorn directly.
    if importlib.util.find_spec("service") is None or importlib.util.find_spec("uvicorn") is None:
        raise CliError("posenc serve needs the service extra: pip install 'posenc[service]'")
    os.execv(sys.executable, [sys.executable, "-m", "service", *argv])
    return 0  # only reached where execv is replaced (tests)


def _table(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.kind_parser
    fmt = EXTENSIONS.get(args.output.suffix.lower())
    if fmt is None:
        parser.error(
            f"argument -o/--output: the extension must be one of {sorted(EXTENSIONS)}, "
            f"got {args.output.name!r}"
        )
    fields = {name: getattr(args, name) for name in _field_names(args.kind)}
    fields = {k: v for k, v in fields.items() if v is not None}
    if args.output.parent and not args.output.parent.exists():
        parser.error(f"argument -o/--output: the folder {str(args.output.parent)!r} does not exist")
    if fmt == "npy" and fields.get("dtype") == "bfloat16":
        parser.error(
            "argument --dtype: npy has no bfloat16 type: use --dtype float32, float16 or "
            "float64 with .npy, or write .safetensors"
        )
    if args.url:
        args.api_key = args.api_key or os.environ.get("POSENC_API_KEY") or None
        if fmt in ("npy", "safetensors", "raw"):
            _download(args, args.kind, fields, fmt)
        else:
            args.output.write_bytes(_fetch(args, args.kind, fields, fmt))
        _report(args, f"{args.output.stat().st_size} bytes from {args.url}")
        return 0
    if args.api_key:
        parser.error("argument --api-key: only meaningful with --url")
    try:
        tensors, meta = compute_table(
            args.kind, fields, progress=None if args.quiet else sys.stderr
        )
    except PosencError as exc:
        flag = (exc.field or "").split("[")[0].split(".")[0]
        if flag in _field_names(args.kind):
            parser.error(f"argument --{flag.replace('_', '-')}: {exc}")
        parser.error(str(exc))
    except (MemoryError, RuntimeError) as exc:  # torch reports a failed allocation as either
        raise CliError(
            f"could not compute the {args.kind} table on this machine ({exc}); ask for fewer "
            "positions or heads, or use --url with a bigger server"
        ) from exc
    _write_local(args.output, fmt, tensors, meta, args.index)
    shown = tensors if fmt == "safetensors" else dict([next(iter(tensors.items()))])
    what = ", ".join(
        f"{n} {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for n, t in shown.items()
    )
    left_out = [n for n in tensors if n not in shown]
    if left_out:  # npy, bin and png hold the primary tensor only
        what += f"; {', '.join(left_out)}: write .safetensors for every tensor"
    _report(args, what)
    return 0


def _report(args: argparse.Namespace, what: str) -> None:
    """One line on stderr saying what was written (``-q``: nothing)."""
    if not args.quiet:
        print(f"posenc: wrote {args.output} ({what})", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``posenc`` command.

    Args:
        argv: the arguments (``sys.argv[1:]`` when None).

    Returns:
        The exit status (argparse exits with 2 itself on usage errors).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        return _table(args)
    except CliError as exc:
        print(f"posenc: error: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
