"""``/v1/embed`` under ``POSENC_MAX_ELEMENTS`` in raw, npy and safetensors: a batch of more than
one 1 MiB block is sent as its blocks are computed (``service.responses.streaming.kept_response``)
and kept in the body cache, with the bytes of ``wte[ids] + wpe[pos]`` (GPT-2's input layer,
pads zero) computed here from the built-in model's own tables. In process and through a real
uvicorn (the ``api`` fixture)."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.numpy import load as load_safetensors

from posenc.readers.models import default_model
from service.admission.budget import BYTES_PER_JSON_INT
from service.app import create_app
from tests.helpers import make_settings, raw_tensor

LENGTHS = [512, 377, 512, 1, 512, 200, 512, 450]  # 8 x 512 x D 512 float32: 8 MiB, 8 blocks


def _rows(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 32000, (n,), generator=g).tolist() for n in LENGTHS]


def _reference(rows: list[list[int]]) -> np.ndarray:
    """``(B, T, D)`` float32: each real token's row of wte plus its position's row of wpe (right
    padding: positions 0, 1, …), zeros in the padded slots."""
    model = default_model()
    wte, wpe = model.token_table, model.position_table
    assert wpe is not None
    out = torch.zeros(len(rows), max(LENGTHS), wte.shape[1])
    for b, row in enumerate(rows):
        n = len(row)
        out[b, :n] = wte[torch.tensor(row, dtype=torch.int64)] + wpe[:n]
    return out.numpy()


@pytest.mark.parametrize("fmt", ["raw", "npy", "safetensors"])
def test_a_batch_of_many_blocks_is_streamed_exactly_and_kept(api: httpx.Client, fmt: str) -> None:
    rows = _rows({"raw": 1, "npy": 2, "safetensors": 3}[fmt])
    body = {"input_ids": rows}
    r = api.post("/v1/embed", json=body, params={"format": fmt})
    assert r.status_code == 200, r.text
    timing = r.headers["server-timing"]
    assert 'cache;desc="miss"' in timing and "compute" not in timing  # sent as computed
    if fmt == "raw":
        name, got = raw_tensor(r)
        assert name == "embeddings"
    elif fmt == "npy":
        got = np.load(io.BytesIO(r.content))
    else:
        tensors = load_safetensors(r.content)
        got = tensors["embeddings"]
        mask = (np.arange(max(LENGTHS))[None, :] < np.array(LENGTHS)[:, None]).astype(np.int64)
        np.testing.assert_array_equal(tensors["attention_mask"], mask)
    want = _reference(rows)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # bit for bit
    again = api.post("/v1/embed", json=body, params={"format": fmt})
    assert 'cache;desc="hit"' in again.headers["server-timing"]
    assert again.content == r.content


def test_a_kept_json_batch_counts_its_ints_in_the_budget(gpt2_file: Path) -> None:
    """The same ids as a JSON body and as an npy body: the JSON request holds its lists while it
    computes, so its admission estimate is larger by exactly BYTES_PER_JSON_INT per int."""
    ids = np.array(_rows(4)[0:1] * 8, dtype=np.int64)  # 8 x 512
    buffer = io.BytesIO()
    np.save(buffer, ids)
    app = create_app(make_settings(gpt2_file))
    with TestClient(app) as client:
        budget = app.state.posenc.budget
        peaks = []
        for kwargs in (
            {"json": {"input_ids": ids.tolist()}},
            {"content": buffer.getvalue(), "headers": {"content-type": "application/x-npy"}},
        ):
            budget.peak = 0
            r = client.post("/v1/embed", params={"format": "raw"}, **kwargs)  # type: ignore[arg-type]
            assert r.status_code == 200 and "compute" not in r.headers["server-timing"]
            peaks.append(budget.peak)
    assert peaks[0] - peaks[1] == ids.size * BYTES_PER_JSON_INT
