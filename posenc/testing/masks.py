"""Attention masks in a caller's tests: ``assert_mask`` against ``/v1/masks``' own code.

The reference is the masks kind (:data:`posenc.attention.masks.MASKS`: transformers' ``masking_utils``)
for the fields given. A mask that differs is compared with the same layer as vLLM runs it
(:func:`posenc.attention.mask_engines.vllm_layer_masks`, where a config names the layer) and with the
masks a known mistake gives, each built by the same kind with one field changed
(:data:`MASK_MISTAKES`); the message names the mistakes that give the caller's mask exactly,
and no others.

Notation: ``B`` batch rows, ``T`` queries (the last ``T`` of the ``S`` positions), ``S`` keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.attention.layers import layer_rule
from posenc.attention.mask_engines import vllm_layer_masks
from posenc.attention.masks import MASKS
from posenc.core.errors import InvalidArgument, PosencError
from posenc.resolve import compute, resolve_fields
from posenc.testing.inputs import ConfigArg, as_array, config_fields

#: A mistake: the resolved fields -> the field changes that make it (none where it does not
#: apply to the mask asked for).
Change = Callable[[Mapping[str, Any]], list[dict[str, Any]]]


def _window_off_by_one(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    rule = p["rule"]
    if rule["window"] is None:
        return []
    return [
        {"kind": rule["kind"], "window": rule["window"] + d} for d in (1, -1) if rule["window"] + d
    ]


def _kind(kind: str, *of: str) -> Change:
    def change(p: Mapping[str, Any]) -> list[dict[str, Any]]:
        changed = {"kind": kind, "window": None, "chunk_size": None}
        return [changed] if p["rule"]["kind"] in of else []

    return change


def _dropped(*names: str) -> Change:
    def change(p: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [] if all(p.get(n) is None for n in names) else [dict.fromkeys(names)]

    return change


MASK_MISTAKES: dict[str, Change] = {
    # W + 1: the window counted without the query (Cohere's [pos − W, pos]); W − 1: flash-attn's
    # left size (W − 1) taken for transformers' W
    "window_off_by_one": _window_off_by_one,
    "window_ignored": _kind("causal", "sliding"),
    "chunks_ignored": _kind("causal", "chunked"),
    "not_causal": _kind("bidirectional", "causal", "sliding", "chunked"),
    "causal_for_bidirectional": _kind("causal", "bidirectional"),
    "padding_ignored": _dropped("attention_mask"),
    "documents_ignored": _dropped("cu_seqlens", "position_ids"),
    "image_spans_ignored": _dropped("token_type_ids"),
}


@dataclass(frozen=True)
class MaskReport:
    """A caller's mask against ``/v1/masks``: where it differs and what explains it."""

    passed: bool
    lines: tuple[str, ...]
    explained_by: tuple[str, ...]

    def text(self) -> str:
        return "\n".join(self.lines)


def _allowed(mask: Any) -> np.ndarray:
    """A caller's mask as booleans, true where attention is allowed: a bool or 0/1 mask as
    is, an additive bias (0 allowed, −inf or the dtype's minimum masked) by its finite zeros."""
    array = as_array(mask, "mask")
    if array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer):
        return array.astype(bool)
    values = array.astype(np.float64)
    allowed: np.ndarray = np.isfinite(values) & (values > np.finfo(array.dtype).min / 2)
    return allowed


def _mask_of(fields: Mapping[str, Any]) -> np.ndarray:
    """``(B, T, S)`` bool: the masks kind's ``mask`` for request fields."""
    p = resolve_fields(MASKS, {**fields, "as": "mask"})
    mask: np.ndarray = compute(MASKS, p)["mask"].numpy()
    return mask


def _vllm_fields(fields: Mapping[str, Any], p: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request for the same layer as vLLM runs it (None without a config)."""
    config = fields.get("config")
    if config is None:
        return None
    index = fields.get("layer")
    if index is None:
        index = layer_rule(config, layer_type=fields.get("layer_type")).index
    entry = vllm_layer_masks(config)[index]
    if entry["mask"] is None:
        return None
    base = {k: v for k, v in fields.items() if k not in ("config", "layer", "layer_type")}
    return {**base, "kind": entry["mask"], "window": entry["window"],
            "chunk_size": entry["chunk_size"]}  # fmt: skip


def _differences(got: np.ndarray, want: np.ndarray) -> tuple[int, list[str]]:
    """How many entries differ, and a line on the first (batch, query, key)."""
    diff = got != want
    count = int(diff.sum())
    if not count:
        return 0, []
    b, q, k = (int(i) for i in np.argwhere(diff)[0])
    seen = "allowed" if got[b, q, k] else "masked"
    return count, [
        f"first at [batch {b}, query {q}, key {k}]: {seen} there, the reference "
        f"{'masks' if seen == 'allowed' else 'allows'} it"
    ]


def mask_report(mask: Any, fields: Mapping[str, Any]) -> MaskReport:
    """The caller's mask against the masks kind for ``fields`` (``/v1/masks``' fields)."""
    got = _allowed(mask)
    if got.ndim == 4 and got.shape[1] == 1:  # transformers' (B, 1, T, S), one for every head
        got = got[:, 0]
    if got.ndim == 2:
        got = got[None]
    want = _mask_of(fields)
    if got.shape != want.shape:
        return MaskReport(False, (
            f"mask has shape {tuple(got.shape)}; /v1/masks gives {tuple(want.shape)} (B, T, S) "
            "for these fields",
        ), ())  # fmt: skip
    count, where = _differences(got, want)
    if not count:
        return MaskReport(True, ("mask equals /v1/masks' (transformers' masking_utils)",), ())
    p = resolve_fields(MASKS, {**fields, "as": "mask"})
    rule = p["rule"]
    lines = [
        f"mask differs from /v1/masks' ({rule['kind']}, window {rule['window']}, chunk_size "
        f"{rule['chunk_size']}) at {count} of {got.size} entries",
        *where,
    ]
    vllm = _vllm_fields(fields, p)
    if vllm is not None:
        same = bool(np.array_equal(_mask_of(vllm), got))
        lines.append(f"vllm's mask of this layer: {'equal' if same else 'differs too'}")
    named = []
    for name, change in MASK_MISTAKES.items():
        for changed in change(p):
            try:
                variant = _mask_of({**fields, **changed})
            except PosencError:
                continue
            if not np.array_equal(variant, want) and np.array_equal(variant, got):
                named.append(name)
                break
    said = ", ".join(named) if named else "no known mistake explains it"
    lines.append(f"diagnosis: {said}")
    return MaskReport(False, tuple(lines), tuple(named))


def mask_fields(mask: Any, config: ConfigArg, given: Mapping[str, Any]) -> dict[str, Any]:
    """``/v1/masks``' fields for a caller's mask: ``seq_len`` and ``key_len`` from its shape
    where they are not given."""
    shape = as_array(mask, "mask").shape
    read = config_fields(config)
    if config is not None and "config" not in read:
        raise InvalidArgument(
            "a GGUF file gives its rope, not its layers' masks: give the config.json, or kind",
            field="config",
        )
    fields = {**read, **{k: v for k, v in given.items() if v is not None}}
    if len(shape) >= 2:
        fields.setdefault("seq_len", int(shape[-2]))
        fields.setdefault("key_len", int(shape[-1]))
    return fields


def assert_mask(
    mask: Any,
    *,
    config: ConfigArg = None,
    kind: str | None = None,
    seq_len: int | None = None,
    key_len: int | None = None,
    window: int | None = None,
    chunk_size: int | None = None,
    layer_type: str | None = None,
    layer: int | None = None,
    attention_mask: Any = None,
    cu_seqlens: Any = None,
    position_ids: Any = None,
    token_type_ids: Any = None,
) -> None:
    """Assert that a mask equals the one ``/v1/masks`` gives (transformers' ``masking_utils``).

    Args:
        mask: ``(B, T, S)`` or ``(T, S)`` (or transformers' ``(B, 1, T, S)``): bool (true:
            allowed), 0/1, or an additive bias (0 allowed, −inf or the dtype's minimum masked);
            numpy or torch.
        config: a ``config.json`` dict or path (with ``layer_type`` or ``layer``), or ``kind``
            (``causal``, ``sliding`` with ``window``, ``chunked`` with ``chunk_size``,
            ``bidirectional``, ``sliding_bidirectional``).
        seq_len, key_len: T and S (default: the mask's own).
        attention_mask, cu_seqlens, position_ids, token_type_ids: as ``/v1/masks`` takes them.

    Raises:
        AssertionError: how many entries differ and the first (batch, query, key), whether
            vLLM's mask of the layer equals the caller's, and the mistakes that give it.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not posenc's
    rows = {
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
        "cu_seqlens": cu_seqlens,
        "position_ids": position_ids,
    }
    given = {k: _plain(v) for k, v in rows.items()}
    given.update(kind=kind, seq_len=seq_len, key_len=key_len, window=window,
                 chunk_size=chunk_size, layer_type=layer_type, layer=layer)  # fmt: skip
    report = mask_report(mask, mask_fields(mask, config, given))
    if not report.passed:
        raise AssertionError(report.text())


def _plain(value: Any) -> Any:
    """Rows as nested lists of ints (numpy or torch rows too)."""
    if value is None or isinstance(value, list):
        return value
    return as_array(value, "rows").astype(np.int64).tolist()


__all__ = ["MASK_MISTAKES", "MaskReport", "assert_mask", "mask_fields", "mask_report"]
