"""Kinds that read their ``config`` themselves (vision-rope, query-scale, relative-sinusoidal)
keep it in the cache key and the ETag: two requests whose configs differ only in a value that
changes the table get two tables. Before, the key left every config out (the kinds whose
sources merge a config keep what was read of it), so the second request was the first one's
cached body, ETag included."""

from __future__ import annotations

import httpx
import pytest
from transformers import AutoConfig


def _ministral(beta: float) -> dict:
    return {
        "model_type": "ministral3",
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 16.0,
            "original_max_position_embeddings": 16384,
            "llama_4_scaling_beta": beta,
        },
    }


CASES = [
    (
        "/v1/encodings/relative-sinusoidal",
        {"seq_len": 3},
        [{"model_type": "parakeet_encoder", "hidden_size": h} for h in (1024, 96)],
        lambda body: body["meta"]["d_model"],
        [1024, 96],
    ),
    (
        "/v1/encodings/query-scale",
        {"seq_len": 3},
        [_ministral(0.1), _ministral(0.5)],
        lambda body: body["meta"]["alpha"],
        [0.1, 0.5],
    ),
    (
        "/v1/encodings/vision-rope",
        {"grid_thw": [[1, 4, 4]]},
        [AutoConfig.for_model(mt).to_dict() for mt in ("qwen2_vl", "qwen2_5_vl")],
        lambda body: body["meta"]["model_type"],
        ["qwen2_vl_vision", "qwen2_5_vl_vision"],
    ),
]


@pytest.mark.parametrize(
    ("route", "fields", "configs", "read", "want"),
    CASES,
    ids=[c[0].rsplit("/", 1)[1] for c in CASES],
)
def test_two_configs_give_two_tables(
    app_client: httpx.Client, route: str, fields: dict, configs: list, read, want: list
) -> None:  # type: ignore[no-untyped-def]
    etags = []
    for config, expected in zip(configs, want, strict=True):
        r = app_client.post(route, json={**fields, "config": config})
        assert r.status_code == 200, r.text
        assert read(r.json()) == expected
        etags.append(r.headers["etag"])
    assert etags[0] != etags[1]
    again = app_client.post(route, json={**fields, "config": configs[0]})
    assert again.headers["etag"] == etags[0] and read(again.json()) == want[0]
