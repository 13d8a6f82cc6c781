"""A client call before it is sent (:mod:`posenc.client.calls`): the JSON body without the
fields left to the server's defaults but with ``extra``'s ``null``s, numpy and torch values as
plain JSON; a GET's query string (lists comma-separated, objects as compact JSON, ``null``,
``true``/``false``); and the output options refused with the bad value. Expected bodies and
queries are written out here; the same calls against a live server: test_client.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.client.calls import check_output, query_params, request_body


def test_the_body_leaves_out_none_and_keeps_extras_nulls() -> None:
    fields = {
        "seq_len": 4,
        "positions": None,
        "scaling": {"type": "linear", "factor": 2.0},
        "mrope_section": (16, 24, 24),
        "ids": np.array([[1, 2], [3, 4]], dtype=np.int32),
        "base": np.float64(500000.0),
        "mask": torch.tensor([1, 0]),
    }
    body = request_body(fields, {"scaling": None, "layer_type": "full_attention"})
    assert body == {
        "seq_len": 4,
        "scaling": None,  # extra wins, and its None is sent as null
        "mrope_section": [16, 24, 24],
        "ids": [[1, 2], [3, 4]],
        "base": 500000.0,
        "mask": [1, 0],
        "layer_type": "full_attention",
    }
    assert type(body["base"]) is float and type(body["ids"][0][0]) is int


def test_the_query_of_a_get() -> None:
    query = query_params(
        {
            "seq_len": 4,
            "positions": [0, 5, 9],
            "scaling": {"type": "linear", "factor": 2.0},
            "bidirectional": False,
            "causal": True,
            "preset": None,
            "base": 10000.0,
        }
    )
    assert query == {
        "seq_len": "4",
        "positions": "0,5,9",
        "scaling": '{"type":"linear","factor":2.0}',
        "bidirectional": "false",
        "causal": "true",
        "preset": "null",
        "base": "10000.0",
    }


@pytest.mark.parametrize(
    ("format", "as_", "device", "message"),
    [
        ("npz", "numpy", None, "format must be one of ['json', 'safetensors', 'npy', 'raw', 'png'], got 'npz'"),
        ("npy", "jax", None, "as_ must be 'numpy' or 'torch', got 'jax'"),
        ("npy", "numpy", "cuda", "device='cuda' needs as_='torch' (numpy arrays live on the CPU)"),
    ],
)  # fmt: skip
def test_bad_output_options_name_the_value(format: str, as_: str, device: str | None, message: str) -> None:  # fmt: skip
    with pytest.raises(ValueError) as err:
        check_output(format, as_, device)
    assert str(err.value) == message
    check_output("safetensors", "torch", "cpu")
