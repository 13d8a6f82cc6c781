"""Vision-tower rotary tables against transformers' own modules (posenc.vision.rope).

For each rule, transformers builds the vision config (the class defaults, and published
config.json files quoted below) and the tower's rotary module, with no weights; its position ids
come from the tower itself: the tower (one block) runs on random patches and a forward hook
takes the position ids it gave its rotary module, and the module's output (Llama 4 and DINOv3
compute their positions inside the module). cos/sin are compared in the layout the tower
applies them, to float32 angle error. Then: a hand-worked small case, float64 exactness at
large positions, row blocks equal to the whole table, the 422s, and a sweep of every model type
in transformers whose vision tower has a rotary embedding.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from typing import Any

import pytest
import torch

from posenc.core.errors import InvalidArgument
from posenc.resolve import context
from posenc.vision.rope import (
    VISION_ROPE,
    VISION_RULES,
    VisionRopeSpec,
    vision_position_ids,
    vision_rope_blocks,
    vision_rope_cos_sin,
    vision_rope_spec,
)
from tests.helpers import fast_sample, transformers_model_classes, without_random_init
from tests.references import QWEN2_VL_7B, vision_subconfigs

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig, PreTrainedConfig, PreTrainedModel  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

# transformers computes angles in float32: position · f for positions below ~40 is within a
# few ulp of 40 (~4e-6); DINOv3's angles stay below 2π.
ATOL = 1e-5

# Published config.json files (the keys of the vision tower, as in the files; top-level keys
# the tower does not read are left out).
PUBLISHED: dict[str, dict[str, Any]] = {
    # Qwen/Qwen2-VL-7B-Instruct: hidden_size is the language model's; the tower is embed_dim.
    "qwen2-vl-7b": {"model_type": "qwen2_vl", "vision_config": QWEN2_VL_7B["vision_config"]},
    # Qwen/Qwen2.5-VL-7B-Instruct
    "qwen2.5-vl-7b": {
        "model_type": "qwen2_5_vl",
        "vision_config": {
            "depth": 32,
            "hidden_act": "silu",
            "hidden_size": 1280,
            "intermediate_size": 3420,
            "num_heads": 16,
            "in_chans": 3,
            "out_hidden_size": 3584,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "window_size": 112,
            "fullatt_block_indexes": [7, 15, 23, 31],
            "tokens_per_second": 2,
            "temporal_patch_size": 2,
        },
    },
    # Qwen/Qwen3-VL-8B-Instruct
    "qwen3-vl-8b": {
        "model_type": "qwen3_vl",
        "vision_config": {
            "deepstack_visual_indexes": [8, 16, 24],
            "depth": 27,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 1152,
            "in_channels": 3,
            "intermediate_size": 4304,
            "model_type": "qwen3_vl",
            "num_heads": 16,
            "num_position_embeddings": 2304,
            "out_hidden_size": 4096,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
    },
    # zai-org/GLM-4.1V-9B-Thinking
    "glm-4.1v-9b": {
        "model_type": "glm4v",
        "vision_config": {
            "hidden_size": 1536,
            "depth": 24,
            "num_heads": 12,
            "attention_bias": False,
            "intermediate_size": 13696,
            "hidden_act": "silu",
            "image_size": 336,
            "patch_size": 14,
            "out_hidden_size": 4096,
            "rms_norm_eps": 1e-05,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
    },
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503 (Mistral 3 with a Pixtral tower)
    "mistral-small-3.1": {
        "model_type": "mistral3",
        "spatial_merge_size": 2,
        "vision_config": {
            "head_dim": 64,
            "hidden_act": "silu",
            "hidden_size": 1024,
            "image_size": 1540,
            "intermediate_size": 4096,
            "model_type": "pixtral",
            "num_attention_heads": 16,
            "num_channels": 3,
            "num_hidden_layers": 24,
            "patch_size": 14,
            "rope_theta": 10000.0,
        },
    },
    # meta-llama/Llama-4-Scout-17B-16E-Instruct
    "llama-4-scout": {
        "model_type": "llama4",
        "vision_config": {
            "hidden_act": "gelu",
            "hidden_size": 1408,
            "image_size": 336,
            "intermediate_size": 5632,
            "model_type": "llama4_vision_model",
            "num_attention_heads": 16,
            "num_channels": 3,
            "num_hidden_layers": 34,
            "patch_size": 14,
            "pixel_shuffle_ratio": 0.5,
            "rope_theta": 10000,
            "vision_output_dim": 4096,
        },
    },
    # facebook/dinov3-vits16-pretrain-lvd1689m
    "dinov3-vits16": {
        "model_type": "dinov3_vit",
        "hidden_size": 384,
        "intermediate_size": 1536,
        "num_attention_heads": 6,
        "num_hidden_layers": 12,
        "num_register_tokens": 4,
        "image_size": 224,
        "patch_size": 16,
        "rope_theta": 100.0,
    },
    # DeepGlint-AI/mlcd-vit-bigG-patch14-448, spelled "mlcd" as its hub files are: the sizes
    # transformers' models/mlcd/convert_mlcd_weights_to_hf.py writes for it (COMMON_CONFIG_PARAMS;
    # no copy of the hub config.json itself was found). Dh = 1664 / 16 = 104.
    "mlcd-vit-bigG-448": {
        "model_type": "mlcd",
        "hidden_size": 1664,
        "image_size": 448,
        "intermediate_size": 8192,
        "num_attention_heads": 16,
        "num_hidden_layers": 48,
        "patch_size": 14,
    },
}


class _Stop(Exception):
    """Raised by the forward hook once the rotary module has run."""


def _modeling(cfg: PreTrainedConfig) -> Any:
    pkg = type(cfg).__module__.rsplit(".", 1)[0]
    return importlib.import_module(f"{pkg}.modeling_{pkg.rsplit('.', 1)[1]}")


def _tower_class(cfg: PreTrainedConfig) -> type[PreTrainedModel]:
    """The vision model class of this config in its own modeling module."""
    for name, obj in vars(_modeling(cfg)).items():
        if (
            inspect.isclass(obj)
            and issubclass(obj, PreTrainedModel)
            and getattr(obj, "config_class", None) is type(cfg)
            and "PreTrained" not in name
        ):
            return obj
    raise LookupError(f"no vision model for {type(cfg).__name__}")


def _one_block(cfg: PreTrainedConfig) -> PreTrainedConfig:
    for key in ("depth", "num_hidden_layers"):
        if hasattr(cfg, key):
            setattr(cfg, key, 1)
    return cfg


def _merge_sizes(grids: list[list[int]]) -> list[int]:
    """Video-LLaMA 3's processors' merge sizes: 1 for an image, 2 for a video."""
    return [1 if t == 1 else 2 for t, _, _ in grids]


def _tower_inputs(cfg: PreTrainedConfig, grids: list[list[int]]) -> tuple[tuple, dict]:
    """Random patches shaped as each tower's forward takes them."""
    ps = cfg.patch_size
    ch = getattr(cfg, "in_channels", None) or getattr(cfg, "num_channels", 3)
    grid = torch.tensor(grids)
    n = int(grid.prod(-1).sum())
    mt = cfg.model_type
    if mt in ("muse_spark_vision", "muse_glimmer_vision"):  # patches of 2 frames, flattened
        return (torch.randn(n, ch * 2 * ps * ps),), {"grid_thw": grid}
    if mt == "inkling2_vision":  # one (m·ps, m·ps, C) patch per merged token; grids merged
        m = cfg.spatial_merge_size
        merged = grid // torch.tensor([1, m, m])
        return (torch.randn(n // m**2, m * ps, m * ps, ch),), {"image_grid_thw": merged}
    if mt == "video_llama_3_vision":
        return (torch.randn(n, ch * ps * ps),), {
            "grid_thw": grid,
            "merge_sizes": torch.tensor(_merge_sizes(grids)),
        }
    if mt == "kimi_k25_vision":
        return (torch.randn(n, ch, ps, ps),), {"grid_thw": grid}
    if mt == "paddleocr_vl_vision":
        return (torch.randn(1, n, ch, ps, ps),), {"grid_thw": grid}
    if mt in ("step3p5_vision", "mlcd_vision_model"):
        (_, h, w) = grids[0]
        return (torch.randn(1, ch, h * ps, w * ps),), {}
    if mt == "pixtral":
        (_, h, w) = grids[0]
        return (torch.randn(1, ch, h * ps, w * ps),), {"image_sizes": [(h * ps, w * ps)]}
    tp = getattr(cfg, "temporal_patch_size", 1) or 1
    return (torch.randn(n, ch * tp * ps * ps),), {"grid_thw": grid}


def reference_tables(
    cfg: PreTrainedConfig, grids: list[list[int]] | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """transformers' (cos, sin) ``(N, Dh)`` in the applied layout, and the position ids the
    tower gave its rotary module (None where the module makes its own). The tower's weights
    are not drawn: the rotary module's tables come from its buffers and the ids alone."""
    with without_random_init():
        return _reference_tables(cfg, grids)


def _reference_tables(
    cfg: PreTrainedConfig, grids: list[list[int]] | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    rule = VISION_RULES[cfg.model_type]
    module_cls = getattr(_modeling(cfg), rule.reference)
    if rule.family == "llama4":
        freqs = module_cls(cfg)(torch.zeros(1))[:, 0, :]  # (N, Dh/2) complex, pairs interleaved
        return freqs.real.repeat_interleave(2, -1), freqs.imag.repeat_interleave(2, -1), None
    if cfg.model_type in MODULE_ONLY:
        return MODULE_ONLY[cfg.model_type](cfg, grids)
    if rule.family == "dinov3":
        side = cfg.image_size // cfg.patch_size
        ((_, h, w),) = grids or [[1, side, side]]
        module = module_cls(cfg).eval()
        pixels = torch.zeros(1, 3, h * cfg.patch_size, w * cfg.patch_size)
        cos, sin = module(pixels)
        return cos, sin, None
    assert grids is not None
    torch.manual_seed(0)
    tower = _tower_class(cfg)(_one_block(cfg)).eval()
    (rotary,) = [m for m in tower.modules() if type(m).__name__ == rule.reference]
    seen: dict[str, Any] = {}

    def hook(_module: Any, args: tuple, out: Any) -> None:
        seen["ids"], seen["out"] = args[1], out
        raise _Stop

    rotary.register_forward_hook(hook)
    args, kwargs = _tower_inputs(cfg, grids)
    with torch.no_grad(), pytest.raises(_Stop):
        tower(*args, **kwargs)
    cos, sin = seen["out"]
    ids = seen["ids"].reshape(-1, seen["ids"].shape[-1])
    return cos.reshape(ids.shape[0], -1), sin.reshape(ids.shape[0], -1), ids


def _gemma4_reference(cfg: PreTrainedConfig, grids: list[list[int]] | None) -> Reference:
    """Gemma 4: the ids its image processor makes (Gemma4ImageProcessor, step 5: a
    ``meshgrid(arange(w), arange(h), indexing="xy")`` of (x, y) per patch, row-major), through
    the tower's encoder with a hook on Gemma4VisionRotaryEmbedding."""
    assert grids is not None
    ((_, h, w),) = grids
    xs, ys = torch.meshgrid(torch.arange(w), torch.arange(h), indexing="xy")
    ids = torch.stack((xs, ys), dim=-1).reshape(1, h * w, 2)
    return _hooked_module(
        cfg, ids, lambda tower: tower(torch.randn(1, h * w, 3 * cfg.patch_size**2), ids)
    )


def _sam3_reference(cfg: PreTrainedConfig, grids: list[list[int]] | None) -> Reference:
    """SAM 3's ViT: the positions a layer precomputes (Sam3ViTLayer.precompute_positions, the
    window grid for window_size, the global grid image_size / patch_size for 0) through
    Sam3ViTRotaryEmbedding."""
    modeling = _modeling(cfg)
    side = cfg.image_size // cfg.patch_size
    ((_, h, w),) = grids or [[1, side, side]]
    window = 0 if (h, w) == (side, side) else cfg.window_size
    assert window == 0 or (h, w) == (window, window), (h, w)
    ids = modeling.Sam3ViTLayer.precompute_positions(cfg, window)
    cos, sin = modeling.Sam3ViTRotaryEmbedding(cfg)(torch.zeros(1), ids)
    return cos.reshape(h * w, -1), sin.reshape(h * w, -1), ids


def _hooked_module(cfg: PreTrainedConfig, ids: torch.Tensor, run: Any) -> Reference:
    torch.manual_seed(0)
    tower = _tower_class(cfg)(_one_block(cfg)).eval()
    rule = VISION_RULES[cfg.model_type]
    (rotary,) = [m for m in tower.modules() if type(m).__name__ == rule.reference]
    seen: dict[str, Any] = {}

    def hook(_module: Any, args: tuple, out: Any) -> None:
        seen["ids"], seen["out"] = args[1], out
        raise _Stop

    rotary.register_forward_hook(hook)
    with torch.no_grad(), pytest.raises(_Stop):
        run(tower)
    assert torch.equal(seen["ids"], ids)
    cos, sin = seen["out"]
    n = ids.shape[-2]
    return cos.reshape(n, -1), sin.reshape(n, -1), ids.reshape(n, -1)


# Towers whose reference is built outside a whole tower's forward (ids made by the image
# processor, or precomputed per layer).
MODULE_ONLY = {"gemma4_vision": _gemma4_reference, "sam3_vit_model": _sam3_reference}


def _model_ids(spec: VisionRopeSpec) -> torch.Tensor:
    """The ids the tower hands its rotary module, from our 0-based (row, column)."""
    ids = vision_position_ids(spec)
    mt = spec.model_type
    if mt in ("muse_spark_vision", "muse_glimmer_vision"):  # .flip(-1) + 1
        return ids.flip(-1) + 1
    if mt == "inkling2_vision":  # + 1, the class token at (0, 0)
        return torch.where(ids < 0, 0, ids + 1)
    if mt == "gemma4_vision":  # the processor's (x, y)
        return ids.flip(-1)
    if mt == "sam3_vit_model":  # (x, y) · window_size / w
        w = spec.grids[0][2]
        assert spec.scale is not None
        return ids.flip(-1).float() * (spec.scale / w)
    return ids


def _grids_for(rule_name: str) -> list[list[int]] | None:
    rule = VISION_RULES[rule_name]
    if rule.fixed_grid or rule_name == "sam3_vit_model":
        return None
    if rule.family == "dinov3":
        return [[1, 4, 6]]
    if rule.images_only:
        return [[1, 4, 6]]
    return [[1, 4, 6], [2, 2, 4], [1, 6, 2]]


Reference = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


def _compare(
    spec: VisionRopeSpec, cfg: PreTrainedConfig, ref: Reference | None = None
) -> tuple[float, float]:
    """Our tables against transformers' (computed here unless ``ref`` holds them already)."""
    grids = None if spec.rule.fixed_grid else [list(g) for g in spec.grids]
    cos_hf, sin_hf, ids = ref if ref is not None else reference_tables(cfg, grids)
    cos, sin = vision_rope_cos_sin(spec)
    assert cos.shape == cos_hf.shape, (cos.shape, cos_hf.shape)
    if ids is not None:
        assert torch.equal(_model_ids(spec), ids if ids.is_floating_point() else ids.long())
    torch.testing.assert_close(cos, cos_hf.float(), rtol=0, atol=ATOL)
    torch.testing.assert_close(sin, sin_hf.float(), rtol=0, atol=ATOL)
    # precision "engine": the module's own float32 arithmetic, bit for bit (issue 30)
    cos_e, sin_e = vision_rope_cos_sin(spec, precision="engine")
    assert torch.equal(cos_e, cos_hf.float()) and torch.equal(sin_e, sin_hf.float())
    return float((cos - cos_hf).abs().max()), float((sin - sin_hf).abs().max())


# every tower in the whole suite; every fourth (a fixed sample) in the fast lane
@pytest.mark.parametrize("model_type", fast_sample(sorted(VISION_RULES), 4))
def test_default_config_equals_the_towers_rotary_module(model_type: str) -> None:
    """Each rule, from transformers' default vision config, sent alone."""
    cfg = CONFIG_MAPPING[model_type]()
    spec = vision_rope_spec(cfg.to_dict(), _grids_for(model_type))
    assert spec.model_type == model_type
    cos_diff, sin_diff = _compare(spec, cfg)
    print(
        f"{model_type}: {VISION_RULES[model_type].reference} cos {cos_diff:.1e} sin {sin_diff:.1e}"
    )


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_config_equals_the_towers_rotary_module(name: str) -> None:
    """Whole published config.json files (Mistral 3 through its vision_config)."""
    config = PUBLISHED[name]
    hf = AutoConfig.for_model(**config)
    vision = getattr(hf, "vision_config", None) or hf
    rule = VISION_RULES[vision.model_type]
    grids = [[1, 24, 24]] if rule.family == "dinov3" else _grids_for(vision.model_type)
    spec = vision_rope_spec(config, grids)
    assert spec.model_type == vision.model_type
    _compare(spec, vision)


def test_published_head_dims_and_grids() -> None:
    """The numbers a reader of each file expects (hand-checked against the model cards)."""
    qwen2 = vision_rope_spec(PUBLISHED["qwen2-vl-7b"], [[1, 4, 4]])
    assert (qwen2.model_type, qwen2.head_dim, qwen2.merge) == ("qwen2_vl_vision", 80, 2)
    llama = vision_rope_spec(PUBLISHED["llama-4-scout"])
    assert llama.grids == ((1, 24, 24),) and llama.tokens == 577 and llama.head_dim == 88
    dino = vision_rope_spec(PUBLISHED["dinov3-vits16"])
    assert dino.grids == ((1, 14, 14),) and dino.tokens == 196 and dino.rope_theta == 100.0
    pixtral = vision_rope_spec(PUBLISHED["mistral-small-3.1"], [[1, 3, 5]])
    assert (pixtral.model_type, pixtral.merge, pixtral.tokens) == ("pixtral", 1, 15)
    # PaddleOCR-VL's tower makes its ids with merge size 1 whatever spatial_merge_size says
    paddle = vision_rope_spec({"model_type": "paddleocr_vl", "vision_config": {}}, [[1, 3, 5]])
    assert paddle.merge == 1


def test_mlcd_patch_rows_are_what_its_encoder_gets_after_the_class_token() -> None:
    """MLCDVisionModel hands its encoder cat(class row, MLCDRotaryEmbedding(patch ids)): the
    patch rows equal our table (row-major ids, no merge); the class row is cos/sin of the
    trained class_pos_emb, a weight, which the table leaves out and meta says so."""
    cfg = _one_block(AutoConfig.for_model(**PUBLISHED["mlcd-vit-bigG-448"]))
    spec = vision_rope_spec(PUBLISHED["mlcd-vit-bigG-448"], [[1, 3, 5]])
    assert (spec.model_type, spec.head_dim, spec.merge, spec.tokens) == (
        "mlcd_vision_model",
        104,
        1,
        15,
    )
    default = vision_rope_spec(PUBLISHED["mlcd-vit-bigG-448"])
    assert default.grids == ((1, 32, 32),)  # 448 / 14, when grid_thw is left out
    torch.manual_seed(0)
    tower = _tower_class(cfg)(cfg).eval()
    seen: dict[str, Any] = {}

    def hook(_module: Any, _args: tuple, kwargs: dict) -> None:
        seen["cos"], seen["sin"] = kwargs["position_embeddings"]
        raise _Stop

    tower.encoder.register_forward_pre_hook(hook, with_kwargs=True)
    with torch.no_grad(), pytest.raises(_Stop):
        tower(torch.randn(1, 3, 3 * 14, 5 * 14))
    cos, sin = vision_rope_cos_sin(spec)
    assert seen["cos"].shape == (16, 104)
    torch.testing.assert_close(cos, seen["cos"][1:].float(), rtol=0, atol=ATOL)
    torch.testing.assert_close(sin, seen["sin"][1:].float(), rtol=0, atol=ATOL)
    learned = torch.cat([tower.class_pos_emb, tower.class_pos_emb], dim=-1)[0]
    torch.testing.assert_close(seen["cos"][0], learned.cos())
    assert vision_position_ids(spec)[:6].tolist() == [[0, c] for c in range(5)] + [[1, 0]]


def test_omni_reads_the_thinkers_vision_config() -> None:
    cfg = CONFIG_MAPPING["qwen2_5_omni"]()
    spec = vision_rope_spec(cfg.to_dict(), [[1, 4, 4]])
    assert spec.model_type == "qwen2_5_omni_vision_encoder"
    _compare(spec, cfg.thinker_config.vision_config)


def test_hand_worked_small_case() -> None:
    """Dh 8, θ 10000: s = 4, f = (1, 0.01); a 2×2 grid in one 2×2 block, rows then columns."""
    config = {"model_type": "qwen2_vl_vision", "embed_dim": 16, "num_heads": 2}
    spec = vision_rope_spec(config, [[1, 2, 2]])
    cos, sin = vision_rope_cos_sin(spec, dtype=torch.float64)
    ids = [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert vision_position_ids(spec).tolist() == [list(i) for i in ids]
    expect_cos, expect_sin = [], []
    for r, c in ids:
        half = [r * 1.0, r * 0.01, c * 1.0, c * 0.01]
        expect_cos.append([math.cos(a) for a in half * 2])
        expect_sin.append([math.sin(a) for a in half * 2])
    torch.testing.assert_close(cos, torch.tensor(expect_cos, dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(sin, torch.tensor(expect_sin, dtype=torch.float64), rtol=0, atol=0)


def test_llama4_class_token_is_last_at_angle_zero() -> None:
    spec = vision_rope_spec(PUBLISHED["llama-4-scout"])
    cos, sin = vision_rope_cos_sin(spec)
    ids = vision_position_ids(spec)
    assert ids[-1].tolist() == [-1, -1] and ids[0].tolist() == [0, 0] and ids[25].tolist() == [1, 1]
    assert torch.equal(cos[-1], torch.ones(88)) and torch.equal(sin[-1], torch.zeros(88))
    assert spec.layout == "interleaved"


@pytest.mark.parametrize("model_type", ["pixtral", "qwen2_vl_vision", "kimi_k25_vision"])
def test_float64_exact_at_large_positions(model_type: str) -> None:
    """The last rows of a 2**20-wide grid, from row blocks: float64 equals the formula evaluated
    with Python floats to 1e-9 (angles near 2**20), and float32 is within 1e-6 of float64."""
    rule = VISION_RULES[model_type]
    merge = 1 if rule.merge == 1 else 2
    config = {"model_type": model_type}
    spec = vision_rope_spec(config, [[1, merge, 2**20]])
    n = spec.tokens
    rows64 = vision_rope_blocks(spec, which="cos", dtype=torch.float64).fill(n - 64, n)
    rows32 = vision_rope_blocks(spec, which="cos", dtype=torch.float32).fill(n - 64, n)
    row, col = vision_position_ids(spec)[-1].tolist()
    assert col == 2**20 - 1
    theta, d = spec.rope_theta, spec.head_dim
    if rule.family == "pixtral":
        f = [theta ** (-2 * i / d) for i in range(d // 2)]
        half = [row * x for x in f[0::2]] + [col * x for x in f[1::2]]
    else:
        f = [theta ** (-2 * i / (d // 2)) for i in range(d // 4)]
        if rule.order == "wh_pairs":
            half = [a for x in f for a in (col * x, row * x)]
        else:
            half = [row * x for x in f] + [col * x for x in f]
    expect = torch.tensor([math.cos(a) for a in half * 2], dtype=torch.float64)
    torch.testing.assert_close(rows64[-1], expect, rtol=0, atol=1e-9)
    assert float((rows32.double() - rows64).abs().max()) < 1e-6


@pytest.mark.parametrize("precision", ["exact", "engine"])
@pytest.mark.parametrize(
    ("model_type", "extra"),
    [
        ("qwen2_5_vl_vision", {}),
        ("llama4_vision_model", {}),
        ("dinov3_vit", {}),
        ("muse_spark_vision", {"pos_emb_height": 3}),
        ("inkling2_vision", {}),
        ("minimax_m3_vl_vision", {}),
        ("gemma4_vision", {}),
        ("sam3_vit_model", {"image_size": 168}),
    ],
)
def test_row_blocks_equal_the_whole_table(model_type: str, extra: dict, precision: str) -> None:
    grids = _grids_for(model_type)
    spec = vision_rope_spec({"model_type": model_type, **extra}, grids)
    cos, sin = vision_rope_cos_sin(spec, dtype=torch.float16, precision=precision)
    for which, whole in (("cos", cos), ("sin", sin)):
        blocks = vision_rope_blocks(spec, which=which, dtype=torch.float16, precision=precision)
        assert torch.equal(blocks.whole(max_block_bytes=7 * spec.head_dim * 2), whole)
    params = {"config": {"model_type": model_type, **extra}, "grid_thw": grids, "dtype": "float16"}
    ctx = context(params)  # CPU, float16
    assert VISION_ROPE.blocks is not None
    ids = VISION_ROPE.blocks(params, ctx)["position_ids"].whole(max_block_bytes=7 * 8 * spec.axes)
    assert torch.equal(ids, vision_position_ids(spec))


def test_engine_precision_through_the_kind_on_a_large_grid() -> None:
    """``precision: "engine"`` through the kind: the module's float32 numbers, which depart
    from the exact table on a grid of 256 × 256 patches (float32 row · f)."""
    from posenc.resolve import compute, resolve_fields
    from posenc.vision.rope import VISION_ROPE

    cfg = CONFIG_MAPPING["qwen2_5_vl_vision"]()
    grids = [[1, 256, 256]]
    fields = {"config": {"model_type": "qwen2_5_vl_vision"}, "grid_thw": grids}
    engine = dict(
        compute(VISION_ROPE, resolve_fields(VISION_ROPE, {**fields, "precision": "engine"}))
    )
    exact = dict(compute(VISION_ROPE, resolve_fields(VISION_ROPE, fields)))
    module = getattr(_modeling(cfg), VISION_RULES["qwen2_5_vl_vision"].reference)(cfg)
    ids = engine["position_ids"]  # (N, 2): rows, columns
    cos_hf, sin_hf = module(torch.zeros(1), ids)
    assert torch.equal(engine["cos"], cos_hf) and torch.equal(engine["sin"], sin_hf)
    assert float((engine["cos"] - exact["cos"]).abs().max()) > 1e-6


def test_grid_not_a_multiple_of_the_merge_size_names_grid_thw() -> None:
    with pytest.raises(InvalidArgument, match=r"multiples of the merge size 2.*h 5") as err:
        vision_rope_spec(PUBLISHED["qwen2.5-vl-7b"], [[1, 4, 4], [1, 5, 4]])
    assert err.value.field == "grid_thw"
    # merge size 1 in PaddleOCR-VL's tower: any h and w
    vision_rope_spec({"model_type": "paddleocr_vl"}, [[1, 5, 7]])


def test_fixed_grid_refuses_another_and_images_refuse_frames() -> None:
    with pytest.raises(InvalidArgument, match=r"fixed.*\[1, 24, 24\]") as err:
        vision_rope_spec(PUBLISHED["llama-4-scout"], [[1, 10, 10]])
    assert err.value.field == "grid_thw"
    with pytest.raises(InvalidArgument, match="t must be 1"):
        vision_rope_spec(PUBLISHED["mistral-small-3.1"], [[2, 4, 4]])
    with pytest.raises(InvalidArgument, match="grid_thw is required"):
        vision_rope_spec(PUBLISHED["qwen3-vl-8b"])


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (
            {"model_type": "paligemma", "vision_config": {"model_type": "siglip_vision_model"}},
            "learned absolute position embeddings",
        ),
        (
            {"model_type": "llava", "vision_config": {"model_type": "clip_vision_model"}},
            "learned absolute position embeddings",
        ),
        ({"model_type": "llama"}, "no rotary embedding"),
    ],
)
def test_tower_without_rotary_says_what_it_uses(config: dict, says: str) -> None:
    with pytest.raises(InvalidArgument, match=says) as err:
        vision_rope_spec(config, [[1, 2, 2]])
    assert err.value.field == "config.model_type"


# ---------------------------------------------------------------------------------------------
# The sweep: every model type whose vision tower has a rotary embedding
# ---------------------------------------------------------------------------------------------

ROTARY_NAME = re.compile(r"(Rotary|Rope)(Embedding|PositionEmbedding)", re.I)

# Vision towers with a rotary module that the rules do not cover, and why.
NOT_COVERED: dict[str, str] = {
    "deepseek_ocr2_vision": "1-D RoPE of a Qwen2 encoder over its query tokens, not 2-D",
    "sam2_video": "memory attention over a feature map, not a vision tower's patches",
    "edgetam_video": "memory attention over a feature map, not a vision tower's patches",
    "vjepa2": "3-D rotary inside the attention over (t, h, w) video tubelets",
    "blt": "the rotary is the language model's: byte patches join the text sequence, no "
    "vision tower",
    "fuyu": "the rotary is the language model's (Persimmon): image patches join the text "
    "sequence, no vision tower",
    "neomme": "the rotary is the language model's: patches join the text sequence, no vision tower",
}


def _rotary_modules(cfg: PreTrainedConfig, classes: dict[type, list[type]]) -> list[str]:
    """Rotary modules in any model class of this config (built on the meta device: no
    weights); an encoder class alone may lack the model's rotary module."""
    names: set[str] = set()
    for model_cls in classes.get(type(cfg), []):
        try:
            with torch.device("meta"):
                model = model_cls(cfg)
        except Exception:  # a class that needs other inputs: try the next
            continue
        names |= {type(m).__name__ for m in model.modules() if ROTARY_NAME.search(type(m).__name__)}
    return sorted(names)


@pytest.mark.slow
def test_sweep_of_vision_rotary_towers_in_transformers() -> None:
    """Every model type of transformers (default config) whose image tower holds a rotary
    module: covered ones equal the module (whole config and vision config alone); the others
    are listed in NOT_COVERED with the reason. Fails on an unexplained one."""
    classes = transformers_model_classes()
    covered: list[str] = []
    explained: list[str] = []
    failures: list[str] = []
    cache: dict[type, list[str]] = {}
    refs: dict[str, Reference] = {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            cfg = CONFIG_MAPPING[model_type]()
        except Exception:  # configs that need arguments have no default
            continue
        for path, vision in vision_subconfigs(cfg):
            if type(vision) not in cache:
                cache[type(vision)] = _rotary_modules(vision, classes)
            rotary = [n for n in cache[type(vision)] if "Text" not in n]
            if not rotary:
                continue
            label = f"{model_type}:{path or '.'}"
            if vision.model_type in VISION_RULES:
                whole = cfg.to_dict()
                try:
                    grids = _grids_for(vision.model_type)
                    key = vision.to_json_string()
                    if key not in refs:  # the same tower under several model types: build once
                        refs[key] = reference_tables(vision, grids)
                    for sent in (whole, vision.to_dict()):
                        spec = vision_rope_spec(sent, grids)
                        assert spec.model_type == vision.model_type, (spec.model_type, label)
                        _compare(spec, vision, refs[key])
                    covered.append(label)
                except (AssertionError, InvalidArgument) as exc:
                    failures.append(f"{label}: {str(exc)[:300]}")
            elif vision.model_type in NOT_COVERED or model_type in NOT_COVERED:
                explained.append(
                    f"{label} ({vision.model_type}): "
                    f"{NOT_COVERED.get(vision.model_type) or NOT_COVERED[model_type]}"
                )
            else:
                failures.append(f"{label} ({vision.model_type}, {rotary}): not covered, no reason")
    found = len(covered) + len(explained) + len(failures)
    print(f"\nvision rotary sweep: {len(covered)} covered / {found} found")
    print("covered:", ", ".join(covered))
    print("not covered:\n  " + "\n  ".join(explained))
    assert not failures, "\n".join(failures)
    assert len(covered) >= 81  # transformers 5.24: 81 covered of 84 found


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"model_type": "qwen2_5_vl", "vision_config": {"num_heads": 0}}, "num_heads"),
        ({"model_type": "pixtral", "rope_theta": -1.0}, "rope_theta"),
        ({"model_type": "qwen3_vl_vision", "spatial_merge_size": "2"}, "spatial_merge_size"),
    ],
)
def test_bad_keys_are_422_naming_them(config: dict, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        vision_rope_spec(config, [[1, 2, 2]])
    assert err.value.field is not None and err.value.field.endswith(field)


# ---------------------------------------------------------------------------------------------
# Towers with their own id rules (Muse, Inkling2, MiniMax-M3-VL, Video-LLaMA 3, Gemma 4, SAM 3)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["muse_spark_vision", "muse_glimmer_vision"])
def test_muse_window_order_with_small_windows(model_type: str) -> None:
    """pos_emb_height 2: 2×2-patch windows, edge windows cut (h 5, w 3), a 2-frame video: the
    tower's get_vision_window_index order of (column + 1, row + 1)."""
    cfg = CONFIG_MAPPING[model_type]()
    cfg.pos_emb_height = 2
    grids = [[1, 5, 3], [2, 4, 6]]
    spec = vision_rope_spec(cfg.to_dict(), grids)
    assert spec.window == 2
    assert vision_position_ids(spec)[:8].tolist() == [
        [0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [1, 2], [2, 0], [2, 1]
    ]  # fmt: skip
    _compare(spec, cfg)


def test_sam3_window_grid_and_global_grid() -> None:
    """The 24×24 window grid of the windowed layers (positions as they are) and the default
    72×72 global grid (positions · 24/72), against Sam3ViTLayer's precomputed positions."""
    cfg = CONFIG_MAPPING["sam3_vit_model"]()
    window = vision_rope_spec(cfg.to_dict(), [[1, 24, 24]])
    assert window.tokens == 576 and window.scale == 24.0
    _compare(window, cfg)
    whole = vision_rope_spec(CONFIG_MAPPING["sam3"]().to_dict())
    assert whole.grids == ((1, 72, 72),) and whole.model_type == "sam3_vit_model"
    _compare(whole, cfg)


def test_video_llama3_merge_sizes_from_the_request() -> None:
    """merge_sizes given per grid (2 for an image too) equal the tower fed the same."""
    cfg = CONFIG_MAPPING["video_llama_3_vision"]()
    grids = [[1, 4, 6], [3, 2, 2]]
    spec = vision_rope_spec(cfg.to_dict(), grids, merge_sizes=[2, 1])
    assert spec.grid_merges == (2, 1)
    torch.manual_seed(0)
    tower = _tower_class(cfg)(_one_block(cfg)).eval()
    seen: dict[str, Any] = {}

    def hook(_module: Any, args: tuple, out: Any) -> None:
        seen["ids"], seen["out"] = args[1], out
        raise _Stop

    (rotary,) = [m for m in tower.modules() if type(m).__name__.endswith("RotaryEmbedding")]
    rotary.register_forward_hook(hook)
    with torch.no_grad(), pytest.raises(_Stop):
        tower(torch.randn(36, 3 * 16 * 16), torch.tensor(grids), torch.tensor([2, 1]))
    assert torch.equal(vision_position_ids(spec), seen["ids"])
    cos, _sin = vision_rope_cos_sin(spec)
    torch.testing.assert_close(cos, seen["out"][0], rtol=0, atol=ATOL)
    with pytest.raises(InvalidArgument, match="one merge size per grid") as err:
        vision_rope_spec(cfg.to_dict(), grids, merge_sizes=[2])
    assert err.value.field == "merge_sizes"
    with pytest.raises(InvalidArgument, match="multiples of its merge size 4") as err:
        vision_rope_spec(cfg.to_dict(), grids, merge_sizes=[4, 1])
    assert err.value.field == "grid_thw"
    with pytest.raises(InvalidArgument, match="Video-LLaMA 3") as err:
        vision_rope_spec(PUBLISHED["qwen2.5-vl-7b"], [[1, 4, 4]], merge_sizes=[2])
    assert err.value.field == "merge_sizes"


def test_hand_worked_split_temporal_and_class_first() -> None:
    """Gemma 4 (Dh 8, θ 100: f = (1, 0.1)): [x·f, x·f, y·f, y·f]; MiniMax-M3-VL (Dh 12: F = 2,
    f = (1, 0.01), 12 rotated channels): [t·f, y·f, x·f] twice; Inkling2 (Dh 8): the class token
    first at angle 0, then (x + 1, y + 1) interleaved."""
    gemma = vision_rope_spec({"model_type": "gemma4_vision", "head_dim": 8}, [[1, 1, 2]])
    cos, _ = vision_rope_cos_sin(gemma, dtype=torch.float64)
    expect = [[math.cos(a) for a in (x, 0.1 * x, x, 0.1 * x, 0, 0, 0, 0)] for x in (0, 1)]
    torch.testing.assert_close(cos, torch.tensor(expect, dtype=torch.float64), rtol=0, atol=0)
    minimax = vision_rope_spec(
        {"model_type": "minimax_m3_vl_vision", "hidden_size": 12, "num_attention_heads": 1},
        [[2, 2, 2]],
    )
    assert (minimax.rotary_dim, minimax.axes) == (12, 3)
    _, sin = vision_rope_cos_sin(minimax, dtype=torch.float64)
    t, y, x = vision_position_ids(minimax)[7].tolist()
    assert (t, y, x) == (1, 1, 1)
    half = [t, 0.01 * t, y, 0.01 * y, x, 0.01 * x]
    torch.testing.assert_close(sin[7], torch.tensor([math.sin(a) for a in half * 2]).double())
    inkling = vision_rope_spec(
        {"model_type": "inkling2_vision", "hidden_size": 8, "num_attention_heads": 1}, [[1, 2, 2]]
    )
    cos, _ = vision_rope_cos_sin(inkling, dtype=torch.float64)
    assert vision_position_ids(inkling).tolist() == [[-1, -1], [0, 0], [0, 1], [1, 0], [1, 1]]
    assert torch.equal(cos[0], torch.ones(8, dtype=torch.float64))
    y, x = 2, 2  # the last patch, (1, 1) + 1
    pairs = [a for a in (x, 0.01 * x, y, 0.01 * y) for a in (a, a)]
    torch.testing.assert_close(cos[4], torch.tensor([math.cos(a) for a in pairs]).double())
