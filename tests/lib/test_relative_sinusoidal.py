"""Transformer-XL relative sinusoidal positions against transformers' Parakeet encoder.

Reference: transformers ``models/parakeet/modeling_parakeet.py::
ParakeetEncoderRelPositionalEncoding`` built from a default ``ParakeetEncoderConfig`` (no
weights); plus the closed form and a hand-worked case.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc import resolve
from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.relative_schemes.relative_sinusoidal import (
    relative_sinusoidal_positions,
    relative_sinusoidal_table,
)

KIND = kinds.REGISTRY["relative_sinusoidal"]


def table(fields: dict) -> dict[str, torch.Tensor]:
    return resolve.compute(KIND, resolve.resolve_fields(KIND, fields))


def test_hand_worked_two_positions_d4() -> None:
    """L = 2: rows r = 1, 0, -1; D = 4: ω = 1, 1/100."""
    got = relative_sinusoidal_table(2, 4, dtype=torch.float64)
    want = torch.tensor(
        [
            [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
            [0.0, 1.0, 0.0, 1.0],
            [-math.sin(1), math.cos(1), -math.sin(0.01), math.cos(0.01)],
        ],
        dtype=torch.float64,
    )
    assert_close(got, want, rtol=0, atol=1e-15)
    assert relative_sinusoidal_positions(3).tolist() == [2, 1, 0, -1, -2]


def test_closed_form_at_large_distances() -> None:
    """Rows of L = 2^19 (distances to 2^19 − 1) against Python's math, float64."""
    seq_len, d = 2**19, 8
    got = relative_sinusoidal_table(seq_len, d, dtype=torch.float64)
    for k in (0, 1, seq_len - 1, 2 * seq_len - 2):
        r = seq_len - 1 - k
        want = []
        for i in range(d // 2):
            w = 1.0 / 10000.0 ** (2 * i / d)
            want += [math.sin(r * w), math.cos(r * w)]
        assert_close(got[k], torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-9)


@pytest.mark.parametrize("seq_len", [1, 7, 300])
def test_matches_parakeet_encoder_rel_positional_encoding(seq_len: int) -> None:
    from transformers import ParakeetEncoderConfig
    from transformers.models.parakeet.modeling_parakeet import (
        ParakeetEncoderRelPositionalEncoding,
    )

    config = ParakeetEncoderConfig()  # hidden_size 1024
    want = ParakeetEncoderRelPositionalEncoding(config)(torch.zeros(1, seq_len, 4))[0]
    got = table({"config": {"model_type": "parakeet_encoder"}, "seq_len": seq_len})
    assert got["encoding"].shape == (2 * seq_len - 1, 1024)
    assert_close(got["encoding"], want, rtol=0, atol=3e-5)  # transformers' float32 angles
    assert relative_sinusoidal_positions(seq_len).tolist() == list(range(seq_len - 1, -seq_len, -1))


def test_whole_model_config_reads_encoder_config() -> None:
    config = {"model_type": "parakeet_ctc", "encoder_config": {"hidden_size": 16}}
    got = table({"config": config, "seq_len": 3, "dtype": "float64"})["encoding"]
    assert_close(got, relative_sinusoidal_table(3, 16, dtype=torch.float64), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"seq_len": 3}, "d_model"),
        ({"seq_len": 3, "config": {"model_type": "llama"}}, "config.model_type"),
        ({"seq_len": 3, "d_model": 7}, "d_model"),
    ],
)
def test_refusals(fields: dict, where: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        table(fields)
    assert err.value.field == where
