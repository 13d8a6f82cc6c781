"""A small "engine": RoPE tables, the rotation of queries and a sliding-window mask, written the
way an engine writes them (numpy, float32 tables), without posenc. Each function takes a
``mistake`` to plant one of the errors engines have made."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CONFIG_PATH = Path(__file__).resolve().parent / "config.json"
CONFIG = json.loads(CONFIG_PATH.read_text())
HEAD_DIM = CONFIG["hidden_size"] // CONFIG["num_attention_heads"]


def rope_tables(seq_len: int, mistake: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(T, D)`` float32 cos and sin in the half layout (``cat(θ, θ)``)."""
    base = 10000.0 if mistake == "wrong_base" else CONFIG["rope_theta"]
    inv_freq = 1.0 / base ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    positions = np.arange(seq_len, dtype=np.float64)
    if mistake == "positions_off_by_one":
        positions = positions + 1
    angles = positions[:, None] * inv_freq[None, :]
    if mistake == "wrong_layout":
        full = np.repeat(angles, 2, axis=1)
    else:
        full = np.concatenate([angles, angles], axis=1)
    return np.cos(full).astype(np.float32), np.sin(full).astype(np.float32)


def rotate(q: np.ndarray, mistake: str | None = None) -> np.ndarray:
    """``q`` ``(T, H, D)`` rotated by the engine's table (``rotate_half``, as Qwen2 does)."""
    if mistake == "not_rotated":
        return q.copy()
    cos, sin = rope_tables(q.shape[0])
    cos, sin = cos[:, None, :], sin[:, None, :]
    half = q.shape[-1] // 2
    if mistake == "wrong_pairing":  # adjacent pairs (GPT-J's rotate_every_two)
        turned = np.stack([-q[..., 1::2], q[..., 0::2]], axis=-1).reshape(q.shape)
        c = np.repeat(cos[..., :half], 2, axis=-1)
        s = np.repeat(sin[..., :half], 2, axis=-1)
        return (q * c + turned * s).astype(q.dtype)
    turned = np.concatenate([-q[..., half:], q[..., :half]], axis=-1)
    return (q * cos + turned * sin).astype(q.dtype)


def sliding_mask(seq_len: int, window: int, mistake: str | None = None) -> np.ndarray:
    """``(T, T)`` bool: a query sees itself and the ``window − 1`` keys before it."""
    if mistake == "window_off_by_one":
        window += 1
    q = np.arange(seq_len)[:, None]
    k = np.arange(seq_len)[None, :]
    return (k <= q) & (k > q - window)
