"""``posenc diff``'s library half: a config's RoPE by several engines, each pair's difference.

Built on ``/v1/configs/compare``'s code (:func:`posenc.explain.engine_pairs.pair_curves`): for each pair
of engines, the largest |difference| of cos and of sin (values per position and frequency,
magnitude included, whatever the layouts), the first position past 1e-6, and the sentences
that say why they differ.

Notation: ``T`` positions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.core.errors import InvalidArgument
from posenc.explain.engine_pairs import pair_curves


def engine_item(text: str) -> str | dict[str, str]:
    """An engine as the command line names it: ``vllm``, ``exact``, or ``llama.cpp:engine``
    (engine and precision)."""
    if ":" not in text:
        return text
    engine, _, precision = text.partition(":")
    return {"engine": engine, "precision": precision}


@dataclass(frozen=True)
class EngineDiff:
    """Each pair's difference, in words and as curves.

    Attributes:
        lines: one line per pair (and its sentences), ready to print.
        pairs: ``/v1/configs/compare``'s pairs.
        positions: ``(T,)`` the positions compared.
        curves: per pair, ``(label, (T,) the largest |difference| of cos or sin)``.
    """

    lines: tuple[str, ...]
    pairs: tuple[Mapping[str, Any], ...]
    positions: np.ndarray
    curves: tuple[tuple[str, np.ndarray], ...]


def _past(d: Mapping[str, Any]) -> str:
    first = d["first_position"]
    return f"{d['max_abs_diff']:.3g}" + (f" (past 1e-6 from position {first})" if first is not None else "")  # fmt: skip


def engine_diff(
    config: Mapping[str, Any],
    engines: Sequence[str],
    *,
    seq_len: int | None = None,
    positions: Sequence[int] | None = None,
    layer_type: str | None = None,
    max_model_len: int | None = None,
) -> EngineDiff:
    """Every pair of ``engines``' RoPE tables for ``config``.

    Args:
        config: a model's ``config.json``.
        engines: two or more of ``transformers``, ``vllm``, ``llama.cpp``, ``mlx``, ``exact``,
            each optionally ``:engine`` for the engine's own precision.
        seq_len, positions: the positions compared.

    Raises:
        InvalidArgument: fewer than two engines, an unknown one, bad fields.
    """
    if len(engines) < 2:
        raise InvalidArgument("engines: name two or more engines to compare", field="engines")
    answer, pos, deltas = pair_curves(
        config,
        [engine_item(e) for e in engines],
        seq_len=seq_len,
        positions=positions,
        max_model_len=max_model_len,
        layer_type=layer_type,
    )
    lines: list[str] = []
    curves = []
    for pair, delta in zip(answer["pairs"], deltas, strict=True):
        label = f"{pair['a']} vs {pair['b']}"
        largest = max(pair["cos"]["max_abs_diff"], pair["sin"]["max_abs_diff"])
        lines.append(
            f"{label}: largest |difference| {largest:.3g}; cos {_past(pair['cos'])}, "
            f"sin {_past(pair['sin'])}"
        )
        lines += [f"  {sentence}" for sentence in pair["differences"]]
        curves.append((label, delta.numpy()))
    return EngineDiff(tuple(lines), tuple(answer["pairs"]), pos.numpy(), tuple(curves))


__all__ = ["EngineDiff", "engine_diff", "engine_item"]
