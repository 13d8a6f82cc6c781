"""POST/GET /v1/encodings/xpos against the closed form of tests/lib/test_xpos.py."""

from __future__ import annotations

import httpx
import numpy as np

from tests.helpers import json_tensor
from tests.references import xpos_scale


def test_post_and_get(app_client: httpx.Client) -> None:
    body = app_client.post(
        "/v1/encodings/xpos", json={"seq_len": 9, "dim": 8, "scale_base": 3, "dtype": "float64"}
    ).json()
    want = xpos_scale(9, 8, 3.0).numpy()
    np.testing.assert_allclose(json_tensor(body, "query_scale"), want, rtol=1e-13)
    np.testing.assert_allclose(json_tensor(body, "key_scale"), 1 / want, rtol=1e-13)
    assert body["meta"]["layout"] == "interleaved"
    r = app_client.get("/v1/encodings/xpos", params={"seq_len": 4, "dim": 2})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(
        json_tensor(r.json(), "query_scale"), xpos_scale(4, 2, 512.0).numpy(), rtol=1e-6
    )
    bad = app_client.post("/v1/encodings/xpos", json={"seq_len": 4, "dim": 3})
    assert bad.status_code == 422 and "dim" in bad.text
