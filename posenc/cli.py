"""The ``posenc`` command: serve the HTTP API, or write a positional table to a file.

Usage::

    posenc --version
    posenc serve [--host 127.0.0.1] [--port 8000] [--workers 1]
    posenc table sinusoidal --seq-len 2048 --d-model 768 -o pe.npy
    posenc table rope --preset llama-3.1-8b --seq-len 131072 -o rope.safetensors
    posenc table alibi --num-heads 8 --seq-len 64 -o alibi.png
    posenc table relative --seq-len 512 --num-heads 12 -o t5.safetensors
    posenc table rope --url http://gpu-box:8000 --api-key KEY --head-dim 128 --seq-len 4096 -o r.npy
    posenc tokenize --url http://127.0.0.1:8000 --model wordy "Hello world" "héllo"
    echo "one text per line" | posenc tokenize
    posenc check rope.safetensors --config config.json --engine vllm --atol 1e-6
    posenc diff --config config.json --engines vllm llama.cpp --seq-len 32768 --png diff.png

``table`` computes locally with the library, or with ``--url`` asks a posenc service (through
:mod:`posenc.client`) and writes its body as received. Its kinds and their flags are the
library's registry (:mod:`posenc.core.kinds`): one flag per request field (``--seq-len`` is
``seq_len``...; lists comma-separated, objects as JSON text, ``--config`` a file or JSON text);
flags left out are not sent, so the same defaults apply (a preset's or config's values, then
the library's). The output format follows the file's extension:

- ``.npy``: the primary tensor (``encoding``, ``cos``, ``bias``, ``buckets``); no bfloat16.
- ``.safetensors``: every tensor of the bundle, ``meta`` as JSON under ``__metadata__["meta"]``.
- ``.bin``: the primary tensor's raw bytes (C order, little-endian).
- ``.png``: a heatmap of the primary tensor (:mod:`posenc.core.heatmap`, needs Pillow);
  ``--index`` picks one head of a 3-D bias.

With ``--url``, ``.npy``, ``.safetensors`` and ``.bin`` are written to disk as they arrive
(:meth:`posenc.client.PosencClient.save_table`), so a table the service streams (over its
``POSENC_MAX_ELEMENTS``) is never held in memory; a progress line in bytes from
``Content-Length`` goes to stderr. Local outputs of more than ``PROGRESS_ELEMENTS`` elements are
computed in blocks of rows (the kind's ``blocks``), with a progress line on stderr (``--quiet``
hides it). ``tokenize`` prints ``/v1/tokenize``'s JSON (ids, tokens, offsets) for each text
(the arguments, else each line of stdin): with ``--url`` from a service's model, else from the
built-in model's own byte-level tokenizer (:mod:`posenc.tokens.tokenizer`). Exit status: 0 on
success, 2 for bad arguments (argparse's usage errors, the library's or the server's
validation errors), 1 for other failures (server unreachable, other HTTP errors).

``check`` and ``diff`` need no service (:mod:`posenc.testing.files`, :mod:`posenc.testing.diffs`):
``check FILE`` reads ``cos``/``sin`` or ``q_in``/``q_out`` from a ``.npy``, ``.npz`` or
``.safetensors`` file, prints the matches and ``/v1/configs/check``'s diagnosis, and exits 0 when
the named engine matches within ``--atol``, 1 when it does not (2 for bad arguments). ``diff``
prints the largest difference of each pair of engines for a config (``--png``: the curves).
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

import torch

from posenc import __version__, resolve
from posenc.cli_apply import add_apply_parser, run_apply
from posenc.core import codec, kinds
from posenc.core.errors import PosencError, TooLarge
from posenc.core.limits import check_elements
from posenc.engines import check_candidates, engine_names

if TYPE_CHECKING:
    from posenc.client import Format

__all__ = ["PROGRESS_ELEMENTS", "compute_table", "main"]

PROGRESS_ELEMENTS = 10_000_000
"""Outputs with more elements than this are computed in chunks, with progress on stderr."""

CHUNK_ELEMENTS = 1 << 22
"""Elements per chunk (about 16 MiB of float32) of the chunked computation."""

EXTENSIONS = {".npy": "npy", ".safetensors": "safetensors", ".png": "png", ".bin": "raw"}

#: ``posenc serve --log-level``: the levels ``python -m service --log-level`` takes.
LOG_LEVELS = ["critical", "error", "warning", "info", "debug", "trace"]


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

# ------------------------------------------------------------------------------------ compute


def _compute_in_blocks(
    spec: kinds.Kind, params: Mapping[str, Any], stream: TextIO
) -> dict[str, torch.Tensor]:
    """A registered kind's tensors filled block by block (:attr:`posenc.core.kinds.Kind.blocks`),
    with a progress line: the same bytes as computing them whole."""

    if spec.blocks is None or not spec.streamable(params):  # e.g. M-RoPE's three rows
        return resolve.compute(spec, params)
    tables = spec.blocks(params, resolve.context(params))
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
    kind: str,
    fields: Mapping[str, Any],
    *,
    progress: TextIO | None = None,
    max_elements: int | None = None,
) -> TensorBundle:
    """Compute a table locally, as the service's endpoint for ``kind`` would.

    Args:
        kind: a kind of :data:`posenc.core.kinds.REGISTRY` (``sinusoidal``, ``rope``, ``alibi``,
            ``relative``, ``learned``...).
        fields: the request's body fields (the contract's names); ``None`` values are dropped;
            a ``preset`` or ``config`` supplies defaults for those not given.
        progress: stream for a progress line when the output has more than
            :data:`PROGRESS_ELEMENTS` elements (then computed in blocks); ``None``: silent,
            and whole.
        max_elements: refuse an output (all its tensors) larger than this, from the numbers,
            before anything is allocated; None: the library's
            :data:`posenc.core.limits.MAX_ELEMENTS`.

    Returns:
        ``(tensors, meta)``: the named tensors in the endpoint's order (the first is the primary
        one) and a JSON-able ``meta`` with the effective parameters.

    Raises:
        PosencError: a bad argument (the library's message, naming the field); ``TooLarge``
            over ``max_elements``.
    """
    spec = kinds.REGISTRY.get(kind)
    if spec is None:
        raise PosencError(f"kind must be one of {list(kinds.REGISTRY)}, got {kind!r}", field="kind")
    params = resolve.resolve_fields(spec, {k: v for k, v in fields.items() if v is not None})
    elements = kinds.total_elements(spec, params)
    # the row-block path allocates the whole output first: refuse from the numbers, at once
    check_elements(elements, what=f"the {kind} output", max_elements=max_elements)
    if spec.blocks is None or progress is None or elements <= PROGRESS_ELEMENTS:
        return resolve.compute(spec, params), spec.make_meta(params)
    return _compute_in_blocks(spec, params, progress), spec.make_meta(params)


# ------------------------------------------------------------------------------------ output


def _write_local(path: Path, fmt: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any], index: int | None) -> None:  # fmt: skip
    primary_name, primary = next(iter(tensors.items()))
    if fmt == "npy":
        if primary.dtype == torch.bfloat16:
            raise CliError(
                f"{codec.no_bfloat16_npy(primary_name)}: use --dtype "
                "float32, float16 or float64 with .npy, or write .safetensors",
                code=2,
            )
        path.write_bytes(codec.encode_npy(primary))
    elif fmt == "safetensors":
        try:
            body = codec.encode_safetensors(
                tensors, {"meta": json.dumps(meta, separators=(",", ":"))}
            )
        except ImportError as exc:
            raise CliError(
                "writing .safetensors needs the safetensors package: "
                "pip install 'posenc[client]' (or 'posenc[service]')"
            ) from exc
        path.write_bytes(body)
    elif fmt == "raw":
        path.write_bytes(codec.encode_raw(primary))
    else:  # png
        try:
            from posenc.core.heatmap import heatmap_png
        except ImportError as exc:
            raise CliError(
                f"writing .png needs Pillow: pip install 'posenc[client]' ({exc})"
            ) from exc
        try:
            body = heatmap_png(primary_name, primary, dict(meta), index)
        except (PosencError, ValueError) as exc:
            raise CliError(str(getattr(exc, "detail", exc)), code=2) from exc
        path.write_bytes(body)


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
            result = client.compute(kind, **fields, format=cast("Format", fmt), query=query)
    except PosencHTTPError as exc:
        code = 2 if exc.status_code in (400, 404, 406, 413, 422) else 1
        raise CliError(f"the server at {args.url} refused the request: {exc}", code=code) from exc
    except PosencClientError as exc:
        raise CliError(str(exc)) from exc
    return result.content


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


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """The options every ``posenc table KIND`` has: where to write, and where to compute."""
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="output file: .npy (primary tensor), .safetensors (all), .bin (raw bytes), .png (heatmap)")  # fmt: skip
    p.add_argument("--url", help="compute on this posenc service instead of locally")
    p.add_argument("--api-key", help="bearer key for --url (default: $POSENC_API_KEY)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds, with --url")
    p.add_argument("--index", type=int, help="png: the leading index (head) to draw")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--max-elements", type=int,
                   help="computing locally, refuse outputs larger than this many elements "
                   "(default 2**31, 8 GiB of float32: posenc.core.limits.MAX_ELEMENTS)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``posenc`` argument parser (``serve`` and ``table`` subcommands)."""
    parser = argparse.ArgumentParser(
        prog="posenc",
        description="Transformer positional encodings: serve the HTTP API, write a table, or "
        "check a table or rotation of yours (check, diff: no service needed).",
    )
    parser.add_argument("--version", action="version", version=f"posenc {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="{serve,table,tokenize,shift,apply,check,diff}"
    )

    serve = sub.add_parser(
        "serve", help="run the HTTP service (same as python -m service)",
        description="Run the HTTP service with uvicorn (same as python -m service).",
    )  # fmt: skip
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--workers", type=int, help="worker processes (default 1)")
    serve.add_argument("--log-level", choices=LOG_LEVELS,
                       help="log level (default $POSENC_LOG_LEVEL, else info)")  # fmt: skip

    tok = sub.add_parser(
        "tokenize", help="tokenize texts (a service's model with --url, else the built-in one)",
        description="Print the JSON of POST /v1/tokenize (input_ids, tokens, offsets) for each "
        "text: the arguments, else each line of stdin.",
    )  # fmt: skip
    tok.add_argument("text", nargs="*", help="the texts (default: each line of stdin)")
    tok.add_argument("--url", help="tokenize with this posenc service's model")
    tok.add_argument("--model", help="with --url: a model from GET /v1/models that has a tokenizer")
    tok.add_argument("--api-key", help="bearer key for --url (default: $POSENC_API_KEY)")
    tok.add_argument("--timeout", type=float, default=60.0, help="seconds, with --url")
    tok.add_argument("--no-special-tokens", dest="add_special_tokens", action="store_false",
                     help="leave out the tokenizer's special tokens")  # fmt: skip

    add_apply_parser(sub)  # posenc apply: q and k rotated (POST /v1/rope/apply)

    table = sub.add_parser(
        "table", help="write a positional table to .npy, .safetensors or .png",
        description="Compute a positional table (locally, or with --url on a posenc service) "
        "and write it; the format follows the extension of -o.",
    )  # fmt: skip
    names = sorted(kinds.REGISTRY)
    sub_kinds = table.add_subparsers(
        dest="table_kind", required=True, metavar="{" + ",".join(names) + "}"
    )
    for name in names:
        spec = kinds.REGISTRY[name]
        p = sub_kinds.add_parser(name, help=f"{spec.summary} ({spec.path})")
        for field_spec in spec.fields:
            _add_field(p, field_spec)
        _add_output_options(p)
        p.set_defaults(kind_parser=p)
    shift = sub.add_parser(
        "shift", help="move cached keys from one position to another (table rope_shift)",
        description="The rotation that moves keys rotated at from to to, and the keys moved "
        "(POST /v1/rope/shift; the same as posenc table rope_shift): --k takes JSON, --seed "
        "seeds them; --engine llama.cpp --precision engine is llama.cpp's K-shift.",
    )  # fmt: skip
    for field_spec in kinds.REGISTRY["rope_shift"].fields:
        _add_field(shift, field_spec)
    _add_output_options(shift)
    shift.set_defaults(kind_parser=shift, table_kind="rope_shift")
    _add_check(sub)
    _add_diff(sub)
    return parser


def _checked_engines() -> tuple[str, ...]:
    """The engines ``/v1/configs/check`` compares a table with, in the registry's order."""
    return tuple(dict.fromkeys(name for name, _precision in check_candidates()))


def _add_check(sub: Any) -> None:
    """``posenc check FILE``: a table or rotation from a file against an engine, no service."""
    p = sub.add_parser(
        "check", help="check a RoPE table or rotation in a file (no service needed)",
        description="Check cos/sin (or q_in/q_out) in a .npy, .npz or .safetensors file against "
        "an engine; print the matches and the diagnosis of /v1/configs/check. Exit 0 when the "
        "engine matches within --atol, 1 when it does not.",
    )  # fmt: skip
    p.add_argument("file", type=Path, help=".npz/.safetensors with cos and sin or q_in and "
                   "q_out; .npy with them stacked, (2, T, R) or (2, T, H, D)")  # fmt: skip
    model = p.add_mutually_exclusive_group()  # or the request in a safetensors file
    model.add_argument("--config", type=Path, help="the model's config.json (or a GGUF file)")
    model.add_argument("--preset", help="a preset name (posenc table rope --help lists them)")
    model.add_argument("--gguf", type=Path, help="a GGUF file: its rope as llama.cpp reads it")
    p.add_argument("--positions", type=_positions_arg, help="the rows' positions, e.g. 0,1,5 "
                   "(default 0 … T−1, T the file's rows)")  # fmt: skip
    p.add_argument("--seq-len", type=int, help="positions 0 … T−1")
    engines = _checked_engines()
    p.add_argument("--engine", choices=engines, default=engines[0],
                   help=f"the engine the file must match (default {engines[0]})")  # fmt: skip
    p.add_argument("--precision", choices=("exact", "engine"), default="exact",
                   help="exact (default: float64 angles) or engine (its own arithmetic)")  # fmt: skip
    p.add_argument("--atol", type=float, default=1e-6, help="largest |difference| allowed (1e-6)")
    p.add_argument("--layer-type", help="for a config with RoPE per layer type")
    p.add_argument("--max-model-len", type=int, help="vLLM's --max-model-len, llama.cpp's n_ctx")


def _add_diff(sub: Any) -> None:
    """``posenc diff``: each pair of engines' RoPE tables for a config, no service."""
    p = sub.add_parser(
        "diff", help="the largest difference of each pair of engines for a config",
        description="Compare a config's RoPE tables as engines build them (POST "
        "/v1/configs/compare without a service): the largest |difference| of each pair.",
    )  # fmt: skip
    p.add_argument("--config", type=Path, required=True, help="the model's config.json")
    engines = engine_names()
    p.add_argument("--engines", nargs="+", default=list(engines[:2]),
                   help=f"two or more of {', '.join(engines)}, exact; ENGINE:engine for its "
                   f"own precision (default {' '.join(engines[:2])})")  # fmt: skip
    p.add_argument("--seq-len", type=int, default=4096, help="positions 0 … N−1 (default 4096)")
    p.add_argument("--positions", type=_positions_arg, help="explicit positions instead")
    p.add_argument("--layer-type", help="for a config with RoPE per layer type")
    p.add_argument("--max-model-len", type=int, help="vLLM's --max-model-len, llama.cpp's n_ctx")
    p.add_argument("--png", type=Path, help="also draw |difference| against position (Pillow)")


def _json_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"must be JSON text: {exc}") from None


def _object_arg(text: str) -> dict[str, Any]:
    """An ``object`` field (a model's config.json): a file's path, or the JSON text itself."""
    if text.lstrip().startswith("{"):
        value = _json_arg(text)
    else:
        try:
            value = json.loads(Path(text).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise argparse.ArgumentTypeError(
                f"cannot read {text} as a JSON object: {exc}"
            ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text} must hold a JSON object")
    return value


def _struct_arg(text: str) -> dict[str, Any]:
    value = _json_arg(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f'must be a JSON object such as {{"type": "linear", "factor": 2}}, got {text!r}'
        )
    return value


# How a field of each type is read from the command line (argparse's type=).
_ARG_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "ints": _positions_arg,
    "floats": _json_arg,
    "int_rows": _json_arg,
    "object": _object_arg,
    "struct": _struct_arg,
    "strs": _json_arg,
    "tensor": _json_arg,
}
_METAVARS = {"object": "FILE_OR_JSON", "struct": "JSON", "floats": "JSON", "int_rows": "JSON",
             "strs": "JSON", "tensor": "JSON"}  # fmt: skip


def _add_field(p: argparse.ArgumentParser, spec: kinds.FieldSpec) -> None:
    """One option for a field of a kind (:class:`posenc.core.kinds.FieldSpec`): ``--seq-len``..."""
    kw: dict[str, Any] = {"dest": spec.name, "default": None, "help": spec.description}
    if spec.type == "bool":
        kw["action"] = argparse.BooleanOptionalAction
    elif spec.type in _ARG_TYPES:
        kw["type"] = _ARG_TYPES[spec.type]
        if spec.type in _METAVARS:
            kw["metavar"] = _METAVARS[spec.type]
    elif spec.allowed is not None:
        kw["choices"] = list(spec.allowed)
    if spec.default is not None and not spec.required and "default" not in spec.description:
        kw["help"] += f" (default {spec.default})"  # once: some descriptions say it themselves
    p.add_argument("--" + spec.name.replace("_", "-"), **kw)


# ------------------------------------------------------------------------------------ commands


def _serve(args: argparse.Namespace) -> int:
    argv = []
    for name in ("host", "port", "workers", "log_level"):
        value = getattr(args, name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
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
    fields = {name: getattr(args, name) for name in kinds.REGISTRY[args.table_kind].field_names}
    fields = {k: v for k, v in fields.items() if v is not None}
    if args.output.parent and not args.output.parent.exists():
        parser.error(f"argument -o/--output: the folder {str(args.output.parent)!r} does not exist")
    if fmt == "npy" and fields.get("dtype") == "bfloat16":
        primary = kinds.REGISTRY[args.table_kind].tensors[0].name
        parser.error(
            f"argument --dtype: {codec.no_bfloat16_npy(primary)}: use --dtype float32, float16 "
            "or float64 with .npy, or write .safetensors"
        )
    if args.url:
        args.api_key = args.api_key or os.environ.get("POSENC_API_KEY") or None
        if fmt in ("npy", "safetensors", "raw"):
            _download(args, args.table_kind, fields, fmt)
        else:
            args.output.write_bytes(_fetch(args, args.table_kind, fields, fmt))
        _report(args, f"{args.output.stat().st_size} bytes from {args.url}")
        return 0
    if args.api_key:
        parser.error("argument --api-key: only meaningful with --url")
    try:
        tensors, meta = compute_table(
            args.table_kind,
            fields,
            progress=None if args.quiet else sys.stderr,
            max_elements=args.max_elements,
        )
    except TooLarge as exc:
        dtype = fields.get("dtype") or "float32"
        size = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
        parser.error(
            f"{exc.args[0].split('; ')[0]}: {exc.requested * size / 2**30:.1f} GiB of {dtype} "
            "in memory before the file is written; ask for less, raise --max-elements (this "
            "machine must hold it), or use --url (a posenc service streams npy, safetensors "
            "and raw up to its POSENC_MAX_STREAM_ELEMENTS)"
        )
    except PosencError as exc:
        flag = (exc.field or "").split("[")[0].split(".")[0]
        if flag in kinds.REGISTRY[args.table_kind].field_names:
            parser.error(f"argument --{flag.replace('_', '-')}: {exc}")
        parser.error(str(exc))
    except (MemoryError, RuntimeError) as exc:  # torch reports a failed allocation as either
        raise CliError(
            f"could not compute the {args.table_kind} table on this machine ({exc}); ask for fewer "
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


def _tokenize(args: argparse.Namespace) -> int:
    texts = list(args.text) if args.text else sys.stdin.read().splitlines()
    if not texts:
        raise CliError("no text: give texts as arguments or lines on stdin", code=2)
    if args.url is None:
        from posenc.readers.models import DEFAULT_MODEL_NAME

        if args.model not in (None, DEFAULT_MODEL_NAME):
            raise CliError(
                f"--model {args.model!r} needs --url (locally only the built-in "
                f"{DEFAULT_MODEL_NAME!r} has a tokenizer)",
                code=2,
            )
        from posenc.tokens.tokenizer import builtin_tokenizer

        try:
            encodings = builtin_tokenizer().encode(
                texts, add_special_tokens=args.add_special_tokens
            )
        except PosencError as exc:
            raise CliError(str(exc), code=2) from exc
        body: Any = {
            "input_ids": [e.ids for e in encodings],
            "tokens": [e.tokens for e in encodings],
            "offsets": [[list(o) for o in e.offsets] for e in encodings],
        }
    else:
        try:
            from posenc.client import PosencClient, PosencClientError, PosencHTTPError
        except ImportError as exc:
            raise CliError(
                f"--url needs the client extra: pip install 'posenc[client]' ({exc})"
            ) from exc
        api_key = args.api_key or os.environ.get("POSENC_API_KEY") or None
        try:
            with PosencClient(args.url, api_key=api_key, timeout=args.timeout) as client:
                body = client.tokenize(
                    texts, model=args.model, add_special_tokens=args.add_special_tokens
                )
        except PosencHTTPError as exc:
            code = 2 if exc.status_code in (400, 404, 413, 422) else 1
            raise CliError(
                f"the server at {args.url} refused the request: {exc}", code=code
            ) from exc
        except PosencClientError as exc:
            raise CliError(str(exc)) from exc
    print(json.dumps(body, ensure_ascii=False))
    return 0


def _check(args: argparse.Namespace) -> int:
    from posenc.testing.files import check_file

    try:
        reports = check_file(
            args.file,
            atol=args.atol,
            config=args.config or args.gguf,
            preset=args.preset,
            positions=args.positions,
            seq_len=args.seq_len,
            engine=args.engine,
            precision=args.precision,
            layer_type=args.layer_type,
            max_model_len=args.max_model_len,
        )
    except AssertionError as exc:  # arrays of another shape than the reference's
        print(f"posenc check: {exc}")
        return 1
    except PosencError as exc:
        raise CliError(str(exc), code=2) from exc
    for report in reports:
        print(report.text())
    return 0 if all(r.passed for r in reports) else 1


def _diff(args: argparse.Namespace) -> int:
    from posenc.testing.diffs import engine_diff
    from posenc.testing.inputs import config_fields

    try:
        fields = config_fields(args.config)
        if "config" not in fields:
            raise CliError("posenc diff takes a config.json (a GGUF has one engine)", code=2)
        result = engine_diff(
            fields["config"],
            args.engines,
            seq_len=None if args.positions else args.seq_len,
            positions=args.positions,
            layer_type=args.layer_type,
            max_model_len=args.max_model_len,
        )
    except PosencError as exc:
        raise CliError(str(exc), code=2) from exc
    print("\n".join(result.lines))
    if args.png is not None:
        try:
            from posenc.core.difference_plot import difference_png
        except ImportError as exc:
            raise CliError(f"--png needs Pillow: pip install 'posenc[client]' ({exc})") from exc
        model = fields["config"].get("model_type", "config")
        args.png.write_bytes(
            difference_png(
                result.positions,
                list(result.curves),
                title=f"|difference| of cos and sin against position ({model})",
            )
        )
        print(f"posenc: wrote {args.png}", file=sys.stderr)
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
        if args.command == "tokenize":
            return _tokenize(args)
        if args.command == "check":
            return _check(args)
        if args.command == "diff":
            return _diff(args)
        if args.command == "apply":
            try:
                return run_apply(args)
            except (PosencError, ValueError, OSError) as exc:
                raise CliError(str(getattr(exc, "message", exc)), code=2) from exc
        return _table(args)  # table KIND, and shift (table rope_shift)
    except CliError as exc:
        print(f"posenc: error: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
