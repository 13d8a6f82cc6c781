"""M-RoPE position ids: parity with transformers 5's ``get_rope_index`` of Qwen2-VL, Qwen2.5-VL
and Qwen3-VL, hand-worked cases, the config reader, and ``POST /v1/position-ids/mrope``.

The reference is the model class's own ``get_rope_index``, bound to a minimal object that holds
the transformers config built from the published ``config.json`` (no weights): the configs
(tests/references.py) keep the keys of the published files that the rules read, copied from
the files named.
``mm_token_type_ids`` is built as the processor builds it (``ProcessorMixin.
create_mm_token_type_ids``: 1 where the id is the image token, 2 where it is the video token).
"""

from __future__ import annotations

import copy
import random

import httpx
import pytest
import torch
from transformers import Qwen2_5_VLConfig

from posenc.core.errors import InvalidArgument
from posenc.rope.mrope_ids import mrope_position_ids, mrope_settings
from tests.helpers import json_tensor
from tests.references import (
    IMG,
    MROPE_CONFIGS,
    QWEN2_5_VL_3B,
    QWEN2_VL_7B,
    QWEN3_VL_8B,
    VE,
    VID,
    VS,
    mrope_classes,
)
from tests.references import mrope_reference as reference


def ours(rule: str, input_ids, **kwargs):  # type: ignore[no-untyped-def]
    return mrope_position_ids(input_ids, **kwargs, **mrope_settings(MROPE_CONFIGS[rule]).kwargs())


# ---------------------------------------------------------------------------------------------
# Hand-worked
# ---------------------------------------------------------------------------------------------


def test_hand_worked_qwen2_vl_image_between_text():
    # 2 text tokens, an image of 1 x 4 x 6 patches (2 x 3 merged tokens), 2 text tokens.
    ids = torch.tensor([[11, VS, IMG, IMG, IMG, IMG, IMG, IMG, VE, 12]])
    pos, deltas = ours("qwen2_vl", ids, image_grid_thw=[[1, 4, 6]])
    # text 0, 1; image at start 2: t = 2, h = 2 + row, w = 2 + col; text resumes at 2 + 3 = 5.
    expected = torch.tensor(
        [
            [0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
            [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
            [0, 1, 2, 3, 4, 2, 3, 4, 5, 6],
        ]
    )
    assert torch.equal(pos[:, 0], expected)
    assert deltas.tolist() == [[7 - 10]]  # max id 6, + 1, − 10 tokens
    assert pos.dtype == deltas.dtype == torch.int64


def test_hand_worked_qwen2_5_vl_video_time_spacing():
    # A video of 3 frames, 2 x 2 patches each (1 merged token per frame); 2 tokens/s, 1.5 s per
    # grid step: the temporal ids step by int(i * 3.0) = 0, 3, 6 from start 1.
    ids = torch.tensor([[VS, VID, VID, VID, VE]])
    pos, deltas = ours("qwen2_5_vl", ids, video_grid_thw=[[3, 2, 2]], second_per_grid_ts=[1.5])
    assert pos[:, 0].tolist() == [[0, 1, 4, 7, 2], [0, 1, 1, 1, 2], [0, 1, 1, 1, 2]]
    assert deltas.tolist() == [[8 - 5]]


def test_hand_worked_left_padding_gets_zero():
    ids = torch.tensor([[0, 0, 5, 6], [5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    pos, deltas = ours("qwen3_vl", ids, attention_mask=mask)
    assert pos.tolist() == [[[0, 0, 0, 1], [0, 1, 2, 3]]] * 3
    assert deltas.tolist() == [[0], [0]]


# ---------------------------------------------------------------------------------------------
# Parity with transformers
# ---------------------------------------------------------------------------------------------


def _random_batch(rule: str, rng: random.Random):  # type: ignore[no-untyped-def]
    """Rows of text, images and videos laid out as the Qwen processors lay them out."""
    rows, images, videos, secs = [], [], [], []
    for _ in range(rng.randint(1, 4)):
        row = [rng.randint(10, 5000) for _ in range(rng.randint(0, 3))]
        for _ in range(rng.randint(0, 3)):
            what = rng.choice(["image", "video", "text"])
            if what == "text":
                row += [rng.randint(10, 5000) for _ in range(rng.randint(1, 4))]
            elif what == "image":
                t, h, w = 1, 2 * rng.randint(1, 4), 2 * rng.randint(1, 4)
                images.append([t, h, w])
                row += [VS] + [IMG] * (t * h * w // 4) + [VE]
            else:
                t, h, w = rng.randint(1, 4), 2 * rng.randint(1, 3), 2 * rng.randint(1, 3)
                videos.append([t, h, w])
                secs.append(rng.choice([0.5, 1.0, 1.3, 0.1, 2.7, 0.333]))
                if rule == "qwen3_vl":  # <t> <vision_start> frame <vision_end> per frame
                    for _ in range(t):
                        row += [rng.randint(10, 5000), VS] + [VID] * (h * w // 4) + [VE]
                else:
                    row += [VS] + [VID] * (t * h * w // 4) + [VE]
        row += [rng.randint(10, 5000) for _ in range(rng.randint(1, 3))]
        rows.append(row)
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for b, row in enumerate(rows):
        if rng.random() < 0.5:  # left padding
            ids[b, width - len(row) :] = torch.tensor(row)
            mask[b, width - len(row) :] = 1
        else:
            ids[b, : len(row)] = torch.tensor(row)
            mask[b, : len(row)] = 1
    kwargs = {
        "attention_mask": mask,
        "image_grid_thw": torch.tensor(images).reshape(-1, 3) if images else None,
        "video_grid_thw": torch.tensor(videos).reshape(-1, 3) if videos else None,
    }
    if rule == "qwen2_5_vl" and videos:
        kwargs["second_per_grid_ts"] = torch.tensor(secs)  # float32, as the processor's
    return ids, kwargs


@pytest.mark.parametrize("rule", list(MROPE_CONFIGS))
def test_random_batches_equal_transformers(rule: str):
    rng = random.Random(f"mrope-{rule}")
    seen = {"image": 0, "video": 0, "padded": 0}
    for _ in range(60):
        ids, kwargs = _random_batch(rule, rng)
        seen["image"] += kwargs["image_grid_thw"] is not None
        seen["video"] += kwargs["video_grid_thw"] is not None
        seen["padded"] += int((kwargs["attention_mask"] == 0).any())
        # transformers' Qwen3-VL edits video_grid_thw in place: give it its own copy.
        ref_kwargs = {
            k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()
        }
        want_pos, want_deltas = reference(rule, ids, **ref_kwargs)
        got_pos, got_deltas = ours(rule, ids, **kwargs)
        assert torch.equal(got_pos, want_pos), (ids, kwargs)
        assert torch.equal(got_deltas, want_deltas), (ids, kwargs)
    assert min(seen.values()) >= 10, seen


@pytest.mark.parametrize("rule", list(MROPE_CONFIGS))
def test_text_only_and_no_mask_equal_transformers(rule: str):
    ids = torch.tensor([[5, 6, 7, 8, 9], [1, 2, 3, 4, 5]])
    want = reference(rule, ids)
    got = ours(rule, ids)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert got[0].tolist() == [[[0, 1, 2, 3, 4]] * 2] * 3


def test_qwen2_5_vl_float32_time_products_match():
    """Seconds whose float32 product truncates differently from the exact decimal one."""
    secs = [0.1, 0.7, 1 / 3, 2.9]
    for s in secs:
        ids = torch.tensor([[VS] + [VID] * 10 + [VE]])
        kwargs = {
            "video_grid_thw": torch.tensor([[10, 2, 2]]),
            "second_per_grid_ts": torch.tensor([s]),
        }
        want = reference("qwen2_5_vl", ids, **kwargs)
        got = ours("qwen2_5_vl", ids, **kwargs)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), s
    # Lists are read as float32 too.
    got_list = ours("qwen2_5_vl", ids, video_grid_thw=[[10, 2, 2]], second_per_grid_ts=[secs[-1]])
    assert torch.equal(got_list[0], got[0])


def test_qwen2_5_vl_default_seconds_is_integer_step():
    ids = torch.tensor([[VS] + [VID] * 3 + [VE]])
    want = reference("qwen2_5_vl", ids, video_grid_thw=torch.tensor([[3, 2, 2]]))
    got = ours("qwen2_5_vl", ids, video_grid_thw=[[3, 2, 2]])
    assert torch.equal(got[0], want[0])
    # tokens_per_second 2, 1 s each: 1, 3, 5; the text after resumes at start + max(h, w) / m = 2
    # (transformers 5 advances by the spatial extent only, below the video's temporal ids).
    assert got[0][0, 0].tolist() == [0, 1, 3, 5, 2]


# ---------------------------------------------------------------------------------------------
# Errors and the config reader
# ---------------------------------------------------------------------------------------------


def test_grid_not_matching_image_tokens_is_invalid_with_the_numbers():
    ids = torch.tensor([[VS, IMG, IMG, IMG, VE]])
    with pytest.raises(InvalidArgument, match=r"stands for 4 image tokens.*hold 3") as e:
        ours("qwen2_vl", ids, image_grid_thw=[[1, 4, 4]])
    assert e.value.field == "image_grid_thw"
    # Two images of 1 token each, one grid of 2 tokens and one of 0 (same total): run lengths.
    ids = torch.tensor([[VS, IMG, VE, VS, IMG, IMG, IMG, VE]])
    with pytest.raises(InvalidArgument, match=r"image 0 .*\[1, 2, 4\].* needs .* = 2 image tokens"):
        ours("qwen2_vl", ids, image_grid_thw=[[1, 2, 4], [1, 2, 4]])


def test_huge_grid_is_refused_before_expanding():
    ids = torch.tensor([[VS, VID, VE]])
    with pytest.raises(InvalidArgument, match="video_grid_thw"):
        ours("qwen3_vl", ids, video_grid_thw=[[2**50, 2, 2]])


def test_more_runs_than_grids_and_empty_rows_are_invalid():
    ids = torch.tensor([[VS, IMG, VE, VS, IMG, VE]])
    with pytest.raises(InvalidArgument, match="stands for 1 image tokens, but input_ids hold 2"):
        ours("qwen2_vl", ids, image_grid_thw=[[1, 2, 2]])
    with pytest.raises(InvalidArgument, match=r"attention_mask\[1\] has no real token"):
        ours(
            "qwen2_vl",
            torch.tensor([[1, 2], [3, 4]]),
            attention_mask=torch.tensor([[1, 1], [0, 0]]),
        )
    with pytest.raises(InvalidArgument, match="one entry per video"):
        ours(
            "qwen2_5_vl",
            torch.tensor([[VID]]),
            video_grid_thw=[[1, 2, 2]],
            second_per_grid_ts=[1, 2],
        )


def test_settings_read_as_transformers_reads_them():
    for rule, raw in MROPE_CONFIGS.items():
        config_cls, _ = mrope_classes(rule)
        s = mrope_settings(raw)
        config = config_cls(**copy.deepcopy(raw))
        assert s.rule == rule
        assert s.image_token_id == config.image_token_id
        assert s.video_token_id == config.video_token_id
        assert s.spatial_merge_size == config.vision_config.spatial_merge_size
    assert mrope_settings(QWEN2_5_VL_3B).tokens_per_second == 2
    # A key the published file lacks takes the transformers class default, and is reported.
    bare = mrope_settings({"model_type": "qwen2_5_vl"})
    config = Qwen2_5_VLConfig()
    assert bare.tokens_per_second == config.vision_config.tokens_per_second
    assert bare.spatial_merge_size == config.vision_config.spatial_merge_size
    assert "config.vision_config.tokens_per_second" in bare.defaulted
    # Other values are really read.
    custom = copy.deepcopy(QWEN2_5_VL_3B)
    custom["vision_config"]["spatial_merge_size"] = 1
    custom["image_token_id"] = 7
    assert (mrope_settings(custom).spatial_merge_size, mrope_settings(custom).image_token_id) == (
        1,
        7,
    )


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"model_type": "llama"}, "config.model_type"),
        ({}, "config.model_type"),
        ({"model_type": "qwen2_vl", "image_token_id": "x"}, "config.image_token_id"),
        (
            {"model_type": "qwen2_vl", "vision_config": {"spatial_merge_size": 0}},
            "config.vision_config.spatial_merge_size",
        ),
        ({"model_type": "qwen2_vl", "vision_config": [1]}, "config.vision_config"),
        (
            {"model_type": "qwen2_5_vl", "vision_config": {"tokens_per_second": -1}},
            "config.vision_config.tokens_per_second",
        ),
    ],
)
def test_bad_configs_name_the_key(config, field):  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgument) as e:
        mrope_settings(config)
    assert e.value.field == field


# ---------------------------------------------------------------------------------------------
# Service
# ---------------------------------------------------------------------------------------------


def test_service_equals_transformers(api: httpx.Client):
    rows = [
        [11, VS] + [IMG] * 4 + [VE, 12, VS] + [VID] * 8 + [VE, 13],
        [VS] + [VID] * 2 + [VE, 14],
    ]
    body = {
        "input_ids": rows,
        "padding_side": "left",
        "image_grid_thw": [[1, 4, 4]],
        "video_grid_thw": [[2, 4, 4], [2, 2, 2]],
        "second_per_grid_ts": [0.5, 1.3],
        "config": QWEN2_5_VL_3B,
    }
    r = api.post("/v1/position-ids/mrope", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    width = len(rows[0])
    ids = torch.zeros(2, width, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for b, row in enumerate(rows):
        ids[b, width - len(row) :] = torch.tensor(row)
        mask[b, width - len(row) :] = 1
    want_pos, want_deltas = reference(
        "qwen2_5_vl",
        ids,
        attention_mask=mask,
        image_grid_thw=torch.tensor(body["image_grid_thw"]),
        video_grid_thw=torch.tensor(body["video_grid_thw"]),
        second_per_grid_ts=torch.tensor(body["second_per_grid_ts"]),
    )
    assert json_tensor(out, "position_ids").tolist() == want_pos.tolist()
    assert json_tensor(out, "rope_deltas").tolist() == want_deltas.tolist()
    assert out["tensors"]["position_ids"]["dtype"] == "int64"
    assert out["meta"]["rule"] == "qwen2_5_vl" and out["meta"]["tokens_per_second"] == 2


def test_service_safetensors_holds_both_tensors(api: httpx.Client):
    from safetensors.torch import load

    body = {"input_ids": [[VS, IMG, VE]], "image_grid_thw": [[1, 2, 2]], "config": QWEN3_VL_8B}
    r = api.post("/v1/position-ids/mrope?format=safetensors", json=body)
    assert r.status_code == 200, r.text
    tensors = load(r.content)
    assert tensors["position_ids"].tolist() == [[[0, 1, 2]]] * 3
    assert tensors["rope_deltas"].tolist() == [[0]]


@pytest.mark.parametrize(
    ("patch", "status", "needle"),
    [
        ({"config": {"model_type": "llama"}}, 422, "config.model_type"),
        ({"image_grid_thw": [[1, 4, 4]]}, 422, "stands for 4 image tokens"),
        ({"image_grid_thw": [[1, 0, 4]]}, 422, "image_grid_thw"),
        ({"image_grid_thw": [[1, 2]]}, 422, "image_grid_thw"),
        ({"unknown": 1}, 422, "unknown"),
    ],
)
def test_service_bad_requests(api: httpx.Client, patch, status, needle):  # type: ignore[no-untyped-def]
    body = {"input_ids": [[VS, IMG, VE]], "image_grid_thw": [[1, 2, 2]], "config": QWEN2_VL_7B}
    body.update(patch)
    r = api.post("/v1/position-ids/mrope", json=body)
    assert r.status_code == status, r.text
    assert needle in r.text


def test_service_too_large_is_413_before_compute(gpt2_file):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from service.app import create_app
    from tests.helpers import make_settings

    with TestClient(create_app(make_settings(gpt2_file, max_elements=100))) as client:
        body = {"input_ids": [[1] * 11] * 3, "config": QWEN2_VL_7B}
        r = client.post("/v1/position-ids/mrope", json=body)
        assert r.status_code == 413, r.text
        assert r.json()["requested"] == 3 * 3 * 11 + 3 and r.json()["limit"] == 100
        body["input_ids"] = [[1] * 10] * 3  # 93 elements
        assert client.post("/v1/position-ids/mrope", json=body).status_code == 200
