"""``/v1/configs/compare``'s ``masks`` entry (issue 32): each layer's window in both engines."""

from __future__ import annotations

import httpx


def test_qwen2_answer_names_the_layers_vllm_slides_and_transformers_does_not(
    api: httpx.Client,
) -> None:
    config = {"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 4096,
              "use_sliding_window": True, "max_window_layers": 4, "head_dim": 64,
              "num_attention_heads": 8, "hidden_size": 512}  # fmt: skip
    r = api.post("/v1/configs/compare", json={"config": config, "seq_len": 4})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["engines"] == ["transformers", "vllm"]  # the 1.2 answer is still there
    assert "cos" in out
    masks = out["masks"]
    assert [d["index"] for d in masks["differences"]] == [0, 1, 2, 3]
    d = masks["differences"][0]
    assert (d["transformers_window"], d["vllm_window"], d["first_position"]) == (None, 4096, 4096)
    assert masks["agree"] is False


def test_mistral_answer_says_the_engines_agree(api: httpx.Client) -> None:
    config = {"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 4096,
              "head_dim": 128, "num_attention_heads": 32, "hidden_size": 4096}  # fmt: skip
    r = api.post("/v1/configs/compare", json={"config": config, "seq_len": 4})
    assert r.status_code == 200, r.text
    masks = r.json()["masks"]
    assert masks["differences"] == [] and masks["agree"] is True
    assert [x["vllm"]["window"] for x in masks["layers"]] == [4096, 4096]
