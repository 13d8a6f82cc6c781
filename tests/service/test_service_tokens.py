"""/v1/position-ids and /v1/embed: padding rules, and embeddings equal to ``wte[ids] + wpe[pos]``
to the bit for a GPT-2-style checkpoint loaded through ``POSENC_MODELS``.

The expected position ids are written out by hand; the expected embeddings are gathered here
from the checkpoint file with numpy.
"""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import GPT2_NAME, GPT2_SHAPE, base64_tensor, json_tensor

# ---------------------------------------------------------------------------------------------
# Position ids
# ---------------------------------------------------------------------------------------------


def test_position_ids_right_padding_by_row_length(api: httpx.Client) -> None:
    r = api.post("/v1/position-ids", json={"input_ids": [[5, 6, 7], [8, 9], [4]]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert json_tensor(body, "position_ids").tolist() == [[0, 1, 2], [0, 1, 0], [0, 0, 0]]
    assert json_tensor(body, "attention_mask").tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0]]
    assert body["tensors"]["position_ids"]["dtype"] == "int64"
    assert list(body["tensors"]) == ["position_ids", "attention_mask"]


def test_position_ids_left_padding_and_pad_token(api: httpx.Client) -> None:
    r = api.post(
        "/v1/position-ids",
        json={"input_ids": [[0, 0, 5, 6], [7, 8, 9]], "pad_token_id": 0, "padding_side": "left"},
    )
    body = r.json()
    # row 0: its two leading 0s are pad tokens; row 1 is padded on the left by one slot
    assert json_tensor(body, "attention_mask").tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    assert json_tensor(body, "position_ids").tolist() == [[0, 0, 0, 1], [0, 0, 1, 2]]


def test_position_ids_roberta_start_and_pad_position(api: httpx.Client) -> None:
    """RoBERTa: padding_idx 1, real positions from padding_idx + 1, pads at padding_idx."""
    r = api.post(
        "/v1/position-ids",
        json={
            "input_ids": [[0, 31, 2], [0, 2, 1]],
            "pad_token_id": 1,
            "start": 2,
            "pad_position": 1,
        },
    )
    assert json_tensor(r.json(), "position_ids").tolist() == [[2, 3, 4], [2, 3, 1]]


def test_position_ids_attention_mask_wins_over_pad_token(api: httpx.Client) -> None:
    r = api.post(
        "/v1/position-ids",
        json={
            "input_ids": [[3, 3, 3], [4, 4]],
            "pad_token_id": 3,
            "attention_mask": [[1, 0, 1], [1, 1]],
        },
    )
    body = r.json()
    assert json_tensor(body, "attention_mask").tolist() == [[1, 0, 1], [1, 1, 0]]
    assert json_tensor(body, "position_ids").tolist() == [[0, 0, 1], [0, 1, 0]]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"input_ids": []}, "input_ids"),
        # ({"input_ids": [[]]}) is a 200 since issue 11: an empty row is a row of padding
        ({"input_ids": [[1, 2]], "attention_mask": [[1]]}, "attention_mask[0]"),
        ({"input_ids": [[1, 2]], "attention_mask": [[1, 2]]}, "attention_mask"),
        ({"input_ids": [[1, 2]], "padding_side": "middle"}, "padding_side"),
        ({"input_ids": [["a"]]}, "input_ids"),
        ({"input_ids": [[1]], "batch": 2}, "batch"),
    ],
)
def test_position_ids_invalid_requests_are_422(
    app_client: httpx.Client, body: dict, where: str
) -> None:
    r = app_client.post("/v1/position-ids", json=body)
    assert r.status_code == 422, r.text
    assert where in r.text


# ---------------------------------------------------------------------------------------------
# Embed
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_tables(gpt2_file) -> tuple[np.ndarray, np.ndarray]:
    tensors = load_file(str(gpt2_file))
    return tensors["wte.weight"].numpy(), tensors["wpe.weight"].numpy()


def test_models_lists_the_gpt2_checkpoint(api: httpx.Client) -> None:
    body = api.get("/v1/models").json()
    model = {m["name"]: m for m in body["models"]}[GPT2_NAME]
    assert model["vocab_size"] == GPT2_SHAPE["vocab"]
    assert model["d_model"] == GPT2_SHAPE["d_model"]
    assert model["max_positions"] == GPT2_SHAPE["positions"]
    assert model["positional"] == "learned" and model["scale"] is False
    assert body["default"] != GPT2_NAME  # the built-in model stays the default
    assert body["default"] in {m["name"] for m in body["models"]}
    assert model["source"]


def test_embed_is_wte_plus_wpe_to_the_bit(api: httpx.Client, gpt2_tables) -> None:
    wte, wpe = gpt2_tables
    ids = [[5, 17, 96, 0, 42], [3, 3], [60, 1, 2]]
    r = api.post(
        "/v1/embed", json={"input_ids": ids, "model": GPT2_NAME}, params={"encoding": "base64"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    got = base64_tensor(body, "embeddings")
    assert got.dtype == np.float32 and got.shape == (3, 5, GPT2_SHAPE["d_model"])
    for b, row in enumerate(ids):
        for t, token in enumerate(row):
            np.testing.assert_array_equal(got[b, t], wte[token] + wpe[t])
        assert not got[b, len(row) :].any()  # padded slots are zeros
    assert base64_tensor(body, "attention_mask").tolist() == [
        [1, 1, 1, 1, 1],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
    ]
    assert base64_tensor(body, "position_ids").tolist() == [
        [0, 1, 2, 3, 4],
        [0, 1, 0, 0, 0],
        [0, 1, 2, 0, 0],
    ]
    assert list(body["tensors"]) == ["embeddings", "position_ids", "attention_mask"]
    assert body["meta"]["model"] == GPT2_NAME


def test_embed_left_padding_pad_token_and_explicit_positions(
    app_client: httpx.Client, gpt2_tables
) -> None:
    wte, wpe = gpt2_tables
    r = app_client.post(
        "/v1/embed",
        json={
            "input_ids": [[9, 8, 7], [50, 6]],
            "model": GPT2_NAME,
            "padding_side": "left",
            "pad_token_id": 9,
        },
        params={"encoding": "base64"},
    )
    got = base64_tensor(r.json(), "embeddings")
    # row 0: id 9 is padding -> positions [_, 0, 1]; row 1 padded on the left -> [_, 0, 1]
    np.testing.assert_array_equal(got[0, 0], np.zeros(GPT2_SHAPE["d_model"], np.float32))
    np.testing.assert_array_equal(got[0, 1], wte[8] + wpe[0])
    np.testing.assert_array_equal(got[0, 2], wte[7] + wpe[1])
    np.testing.assert_array_equal(got[1, 1], wte[50] + wpe[0])
    np.testing.assert_array_equal(got[1, 2], wte[6] + wpe[1])

    r = app_client.post(
        "/v1/embed",
        json={"input_ids": [[4, 5]], "model": GPT2_NAME, "position_ids": [[10, 30]]},
        params={"encoding": "base64"},
    )
    got = base64_tensor(r.json(), "embeddings")
    np.testing.assert_array_equal(got[0], np.stack([wte[4] + wpe[10], wte[5] + wpe[30]]))


def test_embed_scaled_sinusoidal_and_none(app_client: httpx.Client, gpt2_tables) -> None:
    """Vaswani et al.: token embedding × sqrt(D) + sinusoidal PE; 'none' gives the token rows."""
    wte, _ = gpt2_tables
    d = GPT2_SHAPE["d_model"]
    r = app_client.post(
        "/v1/embed",
        json={"input_ids": [[1, 2, 3]], "model": GPT2_NAME, "positional": "none"},
        params={"encoding": "base64"},
    )
    np.testing.assert_array_equal(base64_tensor(r.json(), "embeddings")[0], wte[[1, 2, 3]])
    r = app_client.post(
        "/v1/embed",
        json={
            "input_ids": [[1, 2, 3]],
            "model": GPT2_NAME,
            "positional": "sinusoidal",
            "scale": True,
            "dtype": "float64",
        },
        params={"encoding": "base64"},
    )
    pos = np.arange(3, dtype=np.float64)[:, None]
    w = 10000.0 ** (-np.arange(0, d, 2) / d)
    pe = np.empty((3, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(pos * w), np.cos(pos * w)
    want = wte[[1, 2, 3]].astype(np.float64) * math.sqrt(d) + pe
    got = base64_tensor(r.json(), "embeddings")[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert r.json()["meta"]["scale"] is True


def test_embed_default_model_matches_its_learned_table(app_client: httpx.Client) -> None:
    """The default model's embeddings are its token rows plus /v1/encodings/learned of it."""
    default = app_client.get("/v1/models").json()["default"]
    ids = [[11, 22, 33]]
    plain = app_client.post(
        "/v1/embed", json={"input_ids": ids, "positional": "none"}, params={"encoding": "base64"}
    ).json()
    full = app_client.post(
        "/v1/embed", json={"input_ids": ids}, params={"encoding": "base64"}
    ).json()
    table = app_client.post(
        "/v1/encodings/learned",
        json={"model": default, "seq_len": 3},
        params={"encoding": "base64"},
    ).json()
    assert full["meta"]["model"] == default
    np.testing.assert_array_equal(
        base64_tensor(full, "embeddings")[0],
        base64_tensor(plain, "embeddings")[0] + base64_tensor(table, "encoding"),
    )


def test_embed_same_request_same_bytes(api: httpx.Client) -> None:
    body = {"input_ids": [[1, 2, 3], [4]], "model": GPT2_NAME}
    a = api.post("/v1/embed", json=body, params={"format": "safetensors"})
    b = api.post("/v1/embed", json=body, params={"format": "safetensors"})
    assert a.status_code == 200 and a.content == b.content
    assert a.headers["etag"] == b.headers["etag"]
    c = api.post("/v1/embed", json={**body, "input_ids": [[1, 2, 3], [5]]})
    assert c.headers["etag"] != a.headers["etag"]


@pytest.mark.parametrize(("row", "col", "token"), [(1, 2, GPT2_SHAPE["vocab"]), (0, 0, -1)])
def test_embed_token_out_of_range_is_422_naming_it(
    api: httpx.Client, row: int, col: int, token: int
) -> None:
    ids = [[1, 2, 3], [4, 5, 6, 7]]
    ids[row][col] = token
    r = api.post("/v1/embed", json={"input_ids": ids, "model": GPT2_NAME})
    assert r.status_code == 422, r.text
    body = r.json()
    assert f"input_ids[{row}][{col}]" in body["detail"]
    assert str(GPT2_SHAPE["vocab"]) in body["detail"]


def test_embed_positions_beyond_the_table_are_422(app_client: httpx.Client) -> None:
    size = GPT2_SHAPE["positions"]
    r = app_client.post("/v1/embed", json={"input_ids": [[1] * (size + 1)], "model": GPT2_NAME})
    assert r.status_code == 422
    assert str(size) in r.json()["detail"]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"input_ids": [[1]], "model": "bert-huge"}, "bert-huge"),
        ({"input_ids": [[1]], "positional": "rotary"}, "positional"),
        ({"input_ids": [[1, 2]], "position_ids": [[0]]}, "position_ids[0]"),
        ({"input_ids": [[1, 2]], "position_ids": [[0, 1], [2]]}, "position_ids"),
        ({"input_ids": [[1]], "scale": "very"}, "scale"),
    ],
)
def test_embed_invalid_requests_are_422(app_client: httpx.Client, body: dict, where: str) -> None:
    r = app_client.post("/v1/embed", json=body)
    assert r.status_code == 422, r.text
    assert where in r.text


def test_embed_half_precision_checkpoint_keeps_exact_sums(tmp_path) -> None:
    """A float16 GPT-2 file: the sum is formed in the table dtype, then cast to float32."""
    from fastapi.testclient import TestClient
    from safetensors.torch import save_file

    from service.app import create_app
    from service.config import Settings

    g = torch.Generator().manual_seed(5)
    wte = torch.randn(10, 4, generator=g).half()
    wpe = torch.randn(6, 4, generator=g).half()
    path = tmp_path / "half.safetensors"
    save_file({"wte.weight": wte, "wpe.weight": wpe}, str(path))
    with TestClient(create_app(Settings(device="cpu", models=f"half={path}"))) as client:
        r = client.post(
            "/v1/embed", json={"input_ids": [[3, 9]], "model": "half"}, params={"format": "npy"}
        )
        assert r.status_code == 200, r.text
        import io

        got = np.load(io.BytesIO(r.content))
    want = (wte.numpy()[[3, 9]] + wpe.numpy()[[0, 1]]).astype(np.float32)
    np.testing.assert_array_equal(got[0], want)


def test_embed_writes_into_the_services_reused_buffers(
    app_client: httpx.Client, gpt2_tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embed kind's output comes from the service's body-buffer pool (its Context's
    allocator), and holds the same values as a fresh output would."""
    from service.responses.buffers import BODY_BUFFERS

    asked: list[tuple[tuple[int, ...], torch.dtype]] = []
    real = BODY_BUFFERS.tensor

    def spy(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        asked.append((tuple(shape), dtype))
        return real(shape, dtype)

    monkeypatch.setattr(BODY_BUFFERS, "tensor", spy)
    ids = [[5, 6, 7], [8, 9, 10]]
    r = app_client.post(
        "/v1/embed", json={"input_ids": ids, "model": GPT2_NAME}, params={"encoding": "base64"}
    )
    assert r.status_code == 200, r.text
    wte, wpe = gpt2_tables
    assert ((2, 3, GPT2_SHAPE["d_model"]), torch.float32) in asked
    got = base64_tensor(r.json(), "embeddings")
    np.testing.assert_array_equal(got, wte[np.array(ids)] + wpe[:3][None])
