"""service.responses.plans.sliced_dumps: a request's cache key written in slices (issue 39).

The key holds the request's lists (token ids, positions, keys): one ``orjson.dumps`` of
millions of them held the GIL for 50 ms, on the event loop. Written at most ``KEY_SLICE``
numbers a call (16 here, so that every list is cut), the bytes must be those of one call.
"""

from __future__ import annotations

import httpx
import orjson
import pytest
import torch

from service.responses import plans


def test_a_cache_key_written_in_slices_is_one_dumps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: the large lists of a request's key (ids, positions, keys) are written at most
    KEY_SLICE numbers a call (16 here), inside nested dicts: the bytes of one call."""
    gen = torch.Generator().manual_seed(1)
    key = {
        "route": "/v1/x",
        "params": {
            "positions": list(range(100)),
            "input_ids": [list(range(n)) for n in (0, 5, 40, 3, 0, 17, 16)],
            "k": torch.randn(6, 2, 9, generator=gen).tolist(),
            "rows": [torch.randn(70, generator=gen).tolist(), [1.5, None, {"b": 1, "a": 2}]],
            "note": "\x00posenc-list-0\x00",
            "small": [1, 2, 3],
            "scaling": {"type": "yarn", "factor": 4.0, 7: "int key"},
        },
        "model": None,
    }
    option = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    whole = orjson.dumps(key, option=option)
    monkeypatch.setattr(plans, "KEY_SLICE", 16)
    assert plans.sliced_dumps(key, option) == whole


def test_a_large_body_s_path_is_chosen_off_the_loop_with_the_same_key(
    app_client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same request, its key written whole or in slices, is one cache entry: the second
    answer is a hit with the first one's ETag."""
    body = {"input_ids": [list(range(1, 40_000))]}
    first = app_client.post("/v1/position-ids", json=body)
    assert first.status_code == 200, first.text[:300]
    monkeypatch.setattr(plans, "KEY_SLICE", 16)
    again = app_client.post("/v1/position-ids", json=body)
    assert again.status_code == 200 and again.content == first.content
    assert again.headers["ETag"] == first.headers["ETag"]
    assert "hit" in again.headers["Server-Timing"]
