"""Learned 2-D vision tables (posenc.vision.learned) against each tower's own embeddings forward.

The reference is transformers 5's embeddings module of each model type (or the whole encoder,
captured where the rows enter its first layer; RF-DETR's and SegGPT's own
``interpolate_pos_encoding``), built from its default config (and from published configs), with
every parameter zeroed but the position table, which holds the seeded table
(``torch.manual_seed``-equal :func:`posenc.absolute.learned.seeded_normal`): its forward on zero pixels
returns the rows it adds (tests/lib/vision_learned_reference.py).

- ``precision="engine"`` equals the forward bit for bit (``torch.equal``);
- ``precision="exact"`` (float64 weights on the float64 table) is within float32 rounding of
  it: ``|Δ| ≤ 8e-6 · max|T|`` (float32 bicubic sums 16 products; the largest seen over these
  cases is 7.3e-6 · max|T|, Hunyuan-VL's 128 × 128 table resized in float32 to 20 × 11);
- the resampling matrix is the forward itself on a table that is the identity (a config whose
  width is the table's rows), within 1e-6.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
import torch
from transformers import CONFIG_MAPPING, PreTrainedConfig

from posenc.absolute.learned import seeded_normal
from posenc.core.errors import InvalidArgument
from posenc.vision.learned import (
    LEARNED_TOWERS,
    find_learned_tower,
    position_ids,
    resample_matrix,
    resized_table,
    vision_learned_spec,
)
from tests.helpers import fast_sample, transformers_model_classes
from tests.lib.vision_learned_reference import model_rows
from tests.references import vision_subconfigs

# Grids (in patches): smaller than every table (downsample), larger (upsample), non-square
# both ways, one patch, and the native grid (None).
GRIDS: list[tuple[int, int] | None] = [(3, 5), (20, 11), (9, 40), (1, 1), None]


def _grids(model_type: str, grids: list[tuple[int, int] | None]) -> list[tuple[int, int] | None]:
    """``grids`` for this tower: the native one only for a fixed tower, whole merge blocks for
    one that orders its patches in them."""
    tower = LEARNED_TOWERS[model_type]
    if tower.rule.name == "fixed":
        return [None]
    if tower.merge_key is not None:
        return [g if g is None else (2 * ((g[0] + 1) // 2), 2 * ((g[1] + 1) // 2)) for g in grids]
    return grids


@functools.lru_cache(maxsize=1)
def _seeded_table(rows: int, width: int, seed: int) -> torch.Tensor:
    """``seeded_normal(rows, width, seed=seed)``, drawn once for a tower's grids (read only)."""
    return seeded_normal(rows, width, seed=seed)


def _compare(config, grid: tuple[int, int] | None, seed: int = 3) -> None:  # type: ignore[no-untyped-def]
    spec = vision_learned_spec(config.to_dict(), grid=list(grid) if grid else None)
    table = _seeded_table(spec.table_rows, spec.width, seed)
    reference = model_rows(config, spec.grids[0], table)
    engine = resized_table(spec, table, "engine")
    assert torch.equal(engine, reference), (config.model_type, grid)
    exact = resized_table(spec, table, "exact")
    assert exact.dtype == torch.float64
    bound = 8e-6 * float(table.abs().max())
    assert float((exact - reference.double()).abs().max()) <= bound, (config.model_type, grid)
    if spec.tokens * spec.table_rows <= 2**22:  # (N, P) float64 dense: at most 32 MiB
        matrix = resample_matrix(spec)
        assert float((matrix @ table.double() - exact).abs().max()) <= 1e-12


# every tower in the whole suite; every fourth (a fixed sample) in the fast lane
@pytest.mark.parametrize("model_type", fast_sample(sorted(LEARNED_TOWERS), 4))
def test_default_config_equals_the_towers_forward(model_type: str) -> None:
    config = CONFIG_MAPPING[model_type]()
    for grid in _grids(model_type, GRIDS):
        _compare(config, grid)


def test_fixed_tower_refuses_another_grid() -> None:
    with pytest.raises(InvalidArgument, match="without resizing") as err:
        resample_matrix(vision_learned_spec({"model_type": "ovis2_vision"}, grid=[16, 15]))
    assert err.value.field == "grid"


# Published configs (the vision keys these towers read), each checked against its tower.
PUBLISHED = {
    "openai/clip-vit-large-patch14-336": (
        "clip_vision_model", {"hidden_size": 1024, "num_attention_heads": 16, "image_size": 336, "patch_size": 14}
    ),
    "google/siglip-so400m-patch14-384": (
        "siglip_vision_model", {"hidden_size": 1152, "num_attention_heads": 16, "image_size": 384, "patch_size": 14}
    ),
    "facebook/dinov2-small": (
        "dinov2", {"hidden_size": 384, "num_attention_heads": 6, "image_size": 518, "patch_size": 14}
    ),
    "facebook/deit-small-distilled-patch16-224": (
        "deit", {"hidden_size": 384, "num_attention_heads": 6, "image_size": 224, "patch_size": 16}
    ),
    "google/siglip2-base-patch16-naflex": (
        "siglip2_vision_model", {"hidden_size": 768, "num_patches": 256, "patch_size": 16}
    ),
    "HuggingFaceTB/SmolVLM-256M-Instruct": (
        "smolvlm_vision", {"hidden_size": 768, "image_size": 512, "patch_size": 16}
    ),
    "HuggingFaceM4/Idefics3-8B-Llama3": (
        "idefics3_vision", {"hidden_size": 1152, "num_attention_heads": 16, "image_size": 364, "patch_size": 14}
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", fast_sample(sorted(PUBLISHED), 2))  # half in the fast lane
def test_published_config_equals_the_towers_forward(name: str) -> None:
    model_type, keys = PUBLISHED[name]
    config = CONFIG_MAPPING[model_type](**keys)  # type: ignore[arg-type]
    for grid in [(5, 7), (40, 26), None]:
        _compare(config, grid, seed=11)


def test_whole_multimodal_config_reads_its_vision_config() -> None:
    """A SigLIP 2 / Idefics3 / LLaVA file whole: the vision config is found, as transformers
    gives it (LLaVA's default tower is CLIP's)."""
    whole = CONFIG_MAPPING["idefics3"]().to_dict()
    spec = vision_learned_spec(whole, grid=[4, 6])
    assert (spec.model_type, spec.side, spec.width) == ("idefics3_vision", 7, 1152)
    spec = vision_learned_spec({"model_type": "siglip", "vision_config": {}}, grid=[2, 3])
    assert (spec.model_type, spec.side, spec.prefix) == ("siglip_vision_model", 14, 0)
    spec = vision_learned_spec({"model_type": "llava"})
    assert spec.model_type == "clip_vision_model" and spec.native


@pytest.mark.parametrize("model_type", ["clip_vision_model", "deit", "siglip2_vision_model",
                                        "dinov2_with_registers", "idefics3_vision"])  # fmt: skip
def test_resample_matrix_is_the_towers_resize_of_the_identity(model_type: str) -> None:
    """A tiny config whose width is the table's rows: the tower's forward on the identity table
    is its resampling matrix (float32), row for row."""
    base = CONFIG_MAPPING[model_type]()
    keys: dict[str, Any] = {"num_patches": 16} if model_type.startswith("siglip2") else {
        "image_size": 4 * (base.patch_size if isinstance(base.patch_size, int) else 14),
    }  # fmt: skip
    prefix = LEARNED_TOWERS[model_type].prefix
    config = CONFIG_MAPPING[model_type](  # type: ignore[call-arg]
        **keys,
        hidden_size=16 + prefix,
        num_attention_heads=1,
        intermediate_size=4,  # type: ignore[arg-type]
    )
    for grid in [(3, 7), (6, 5), (4, 4), (1, 2)]:
        spec = vision_learned_spec(config.to_dict(), grid=list(grid))
        assert spec.table_rows == spec.width == 16 + prefix
        reference = model_rows(config, grid, torch.eye(spec.table_rows))
        torch.testing.assert_close(resample_matrix(spec), reference.double(), rtol=0, atol=1e-6)


def test_native_grid_is_the_table_unchanged() -> None:
    for model_type in ("vit", "siglip_vision_model", "siglip2_vision_model", "idefics3_vision"):
        spec = vision_learned_spec({"model_type": model_type})
        table = seeded_normal(spec.table_rows, spec.width, seed=5)
        for precision in ("exact", "engine"):
            out = resized_table(spec, table, precision)  # type: ignore[arg-type]
            assert torch.equal(out.float(), table), (model_type, precision)
        assert torch.equal(resample_matrix(spec), torch.eye(spec.table_rows, dtype=torch.float64))


def test_class_rows_first_per_grid_and_weights_sum_to_one() -> None:
    spec = vision_learned_spec({"model_type": "deit"}, grid_thw=[[1, 3, 4], [1, 20, 2]])
    matrix = resample_matrix(spec)
    assert matrix.shape == (2 + 12 + 2 + 40, 2 + 14 * 14)
    eye2 = torch.eye(2, spec.table_rows, dtype=torch.float64)
    assert torch.equal(matrix[:2], eye2) and torch.equal(matrix[14:16], eye2)
    torch.testing.assert_close(matrix.sum(1), torch.ones(56, dtype=torch.float64))


@pytest.mark.parametrize(
    ("config", "kwargs", "field", "says"),
    [
        ({"model_type": "qwen2_5_vl"}, {}, "config.model_type", "/v1/encodings/vision-rope"),
        ({"model_type": "llama"}, {}, "config.model_type", "siglip_vision_model"),
        ({"model_type": "vit"}, {"grid_thw": [[2, 3, 3]]}, "grid_thw[0]", "t must be 1"),
        ({"model_type": "vit"}, {"grid": [3, 3], "grid_thw": [[1, 3, 3]]}, "grid_thw", "not both"),
        ({"model_type": "siglip2_vision_model", "num_patches": 250}, {}, "num_patches", "square"),
        ({"model_type": "vit", "hidden_size": 0}, {}, "hidden_size", "positive"),
        ({"model_type": "vit", "image_size": "224"}, {}, "image_size", "positive"),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field(
    config: dict, kwargs: dict, field: str, says: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        vision_learned_spec(config, **kwargs)
    assert err.value.field is not None and err.value.field.endswith(field)
    assert says in str(err.value)


# ---------------------------------------------------------------------------------------------
# The sweep: every vision tower of transformers that adds a learned 2-D position table
# ---------------------------------------------------------------------------------------------

TABLE_NAME = re.compile(r"(^|\.)position_embeddings?(\.weight)?$|pos_embed$")

# Towers with a learned table that vision-learned does not serve, and why.
NOT_COVERED: dict[str, str] = {
    "vitpose_backbone": "a fixed non-square grid (256 x 192 / 16 = 16 x 12 patches; vision-"
    "learned's tables are s x s) with the class row added into every patch row",
    "mgp-str": "a fixed non-square grid (32 x 128 / 4 = 8 x 32 patches; vision-learned's "
    "tables are s x s), the class row first",
    "yolos": "a non-square table (512 x 864 / 16 = 32 x 54 patches) followed by 100 "
    "detection-token rows, resized by its own InterpolateInitialPositionEmbeddings",
    "timesformer": "a video tower: the spatial table (nearest-resized) added per frame, then "
    "a temporal table per patch after the tokens are regrouped by time",
    "vilt": "ViLT keeps the resized patches in a random order (torch.multinomial over the "
    "valid patches), so no fixed row order exists",
}


# Towers the sweep's parameter scan finds that hold no learned 2-D image table: counted out of
# the learned towers (test_towers_without_a_learned_image_table proves each).
NO_LEARNED_IMAGE_TABLE: dict[str, str] = {
    "vit_mae": "a fixed 2-D sin-cos table (requires_grad false, the same for every seed)",
    "audio-spectrogram-transformer": "a spectrogram's frequency x time grid, not an image's",
}


def _has_learned_table(cfg: PreTrainedConfig, classes: dict[type, list[type]]) -> bool:
    """A model class of this config (built on the meta device) holds a 2-D-or-more position
    table outside its text and decoder parts."""
    for model_cls in classes.get(type(cfg), []):
        try:
            with torch.device("meta"):
                model = model_cls(cfg)
        except Exception:  # a class that needs other inputs: try the next
            continue
        for name, param in model.named_parameters():
            table = TABLE_NAME.search(name) and param.dim() >= 2
            if table and "text" not in name and "decoder" not in name:
                return True
    return False


def _served_tower(
    cfg: PreTrainedConfig, path: str, vision: PreTrainedConfig
) -> PreTrainedConfig | None:
    """The tower config vision-learned serves for this label, or None.

    - a tower config (its own model_type is one): the label's own, once the whole file is
      read as that tower; a second tower of one file (DeepSeek-VL hybrid's high-resolution SAM,
      Depth Pro's patch and field-of-view DINOv2s) is served from its own config;
    - a whole file that carries ``patch_size`` itself (MiniCPM-V, Depth Pro): the tower its
      file is read as (the forward compared is that sub-config's).
    """
    if vision.model_type in LEARNED_TOWERS:
        whole = vision_learned_spec(cfg.to_dict())
        if whole.model_type != vision.model_type:
            vision_learned_spec(vision.to_dict())  # served alone
        return vision
    if path or find_learned_tower(cfg.to_dict()) is None:
        return None
    spec = vision_learned_spec(cfg.to_dict())
    inner = cfg
    for key in spec.where.split(".")[1:]:
        inner = getattr(inner, key)
    return inner if inner.model_type == spec.model_type else None


def _compared(tower: PreTrainedConfig) -> str | None:
    """None where ``tower`` equals its forward on a non-square grid and the native one, else
    why not."""
    try:
        for grid in _grids(tower.model_type, [(3, 5), None]):
            _compare(tower, grid)
    except (AssertionError, InvalidArgument, RuntimeError) as exc:
        return str(exc)[:300]
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)  # a few minutes on two shared cores: ~85 distinct towers built and run
def test_sweep_of_learned_vision_towers_in_transformers() -> None:
    """Every model type of transformers (default config) whose image tower holds a learned
    position table: the served ones equal the tower's forward (whole config and vision config
    alone, a non-square grid and the native one); the others are in NOT_COVERED with the
    reason. Fails on an unexplained one. A tower config that is its model type's own default
    is compared by test_default_config_equals_the_towers_forward (on five grids), not again
    here: this sweep compares the towers that whole files configure otherwise."""
    classes = transformers_model_classes()
    covered: list[str] = []
    explained: list[str] = []
    no_table: list[str] = []
    failures: list[str] = []
    cache: dict[tuple[type, str], bool] = {}
    compared: dict[tuple[type, str], str | None] = {}
    defaults = set()
    for model_type in LEARNED_TOWERS:
        default = CONFIG_MAPPING[model_type]()
        defaults.add((type(default), default.to_json_string()))
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            cfg = CONFIG_MAPPING[model_type]()
        except Exception:  # configs that need arguments have no default
            continue
        for path, vision in vision_subconfigs(cfg):
            key = (type(vision), vision.to_json_string())
            if key not in cache:
                cache[key] = _has_learned_table(vision, classes)
            if not cache[key]:
                continue
            label = f"{model_type}:{path or '.'}"
            tower = _served_tower(cfg, path, vision)
            if model_type in NOT_COVERED and tower is not None:
                explained.append(f"{label} ({vision.model_type}): {NOT_COVERED[model_type]}")
            elif tower is not None:
                # a tower config met before (the same class and JSON: LLaVA-likes share CLIP's
                # default) has the same answer: compared once, its result counted per label;
                # a tower's own default config is compared, on more grids, by
                # test_default_config_equals_the_towers_forward[model_type]
                seen = (type(tower), tower.to_json_string())
                if seen not in compared:
                    compared[seen] = None if seen in defaults else _compared(tower)
                if compared[seen] is None:
                    covered.append(label)
                else:
                    failures.append(f"{label}: {compared[seen]}")
            elif vision.model_type in NO_LEARNED_IMAGE_TABLE:
                no_table.append(f"{label}: {NO_LEARNED_IMAGE_TABLE[vision.model_type]}")
            elif vision.model_type in NOT_COVERED:
                explained.append(f"{label} ({vision.model_type}): {NOT_COVERED[vision.model_type]}")
            else:
                failures.append(f"{label} ({vision.model_type}): not covered, no reason")
    learned = len(covered) + len(explained) + len(failures)
    found = learned + len(no_table)
    alone = sum(key not in defaults for key in compared)
    print(
        f"\nlearned vision sweep: {len(covered)} covered / {learned} learned towers "
        f"({found} labels with a position table, {len(no_table)} of them not a learned image table); "
        f"{len(compared)} distinct tower configs, {alone} compared here, the others by "
        "test_default_config_equals_the_towers_forward"
    )
    print("covered:", ", ".join(covered))
    print("not covered:\n  " + "\n  ".join(explained))
    print("no learned image table:\n  " + "\n  ".join(no_table))
    assert not failures, "\n".join(failures)
    # transformers 5.24: 170 of 176 learned towers (178 labels found, 2 without a learned
    # image table); was 97 of 178
    assert len(covered) >= 170


def test_configs_md_lists_every_tower_under_its_rule() -> None:
    """docs/configs.md's table of rules names each served model type in its rule's row."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "configs.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): set(re.findall(r"`([\w-]+)`", line.split("|")[3]))
        for line in text.splitlines()
        if line.startswith("| `") and line.count("|") == 4
    }
    for model_type, tower in LEARNED_TOWERS.items():
        assert model_type in rows.get(tower.rule.name, set()), (model_type, tower.rule.name)


def test_pixio_class_rows_come_from_the_config() -> None:
    config = CONFIG_MAPPING["pixio"](n_cls_tokens=3, hidden_size=64, num_attention_heads=4)  # type: ignore[call-arg]
    spec = vision_learned_spec(config.to_dict(), grid=[5, 2])
    assert (spec.prefix, spec.table_rows, spec.tokens) == (3, 3 + 16 * 16, 3 + 10)
    for grid in [(5, 2), (30, 17), None]:
        _compare(config, grid)


def test_families_vision_tower_is_transformers_default_vision_config() -> None:
    """Each record's ``vision_tower`` / ``learned_vision_tower`` is the ``model_type`` of the
    vision config transformers builds by default (LLaVA's is CLIP's, not Pixtral's), so
    vision-rope and vision-learned read a file without one alike."""
    from posenc.facts.families import FAMILIES
    from posenc.vision.rope import vision_tower

    checked = 0
    for model_type, record in FAMILIES.items():
        wanted = {record.vision_tower, record.learned_vision_tower} - {None}
        if not wanted or model_type not in CONFIG_MAPPING:
            continue
        vision = getattr(CONFIG_MAPPING[model_type](), "vision_config", None)
        if vision is None:  # nested elsewhere (thinker_config, vlm_config, image_config)
            continue
        # SAM 3: the rotary ViT is the vision config's backbone_config
        backbone = getattr(vision, "backbone_config", None)
        towers = [{vision.model_type}] + ([{backbone.model_type}] if backbone else [])
        assert wanted in towers, (model_type, wanted, vision.model_type)
        checked += 1
    assert checked >= 20
    llava = vision_tower({"model_type": "llava"})
    assert llava is not None and (llava["model_type"], llava["rotary"]) == (
        "clip_vision_model",
        False,
    )
    assert vision_learned_spec({"model_type": "llava"}).model_type == "clip_vision_model"


def test_tile_ids_hand_worked() -> None:
    """SAM 3: s = 2 tiled over 3 x 5 patches: rows 0 1 0, columns 0 1 0 1 0 -> ids 2·r + c."""
    config = {"model_type": "sam3_vit_model", "pretrain_image_size": 28, "patch_size": 14}
    spec = vision_learned_spec(config, grid=[3, 5])
    ids = position_ids(spec)
    assert ids is not None
    assert ids.tolist() == [0, 1, 0, 1, 0, 2, 3, 2, 3, 2, 0, 1, 0, 1, 0]
    matrix = resample_matrix(spec)
    assert torch.equal(matrix.argmax(1), ids) and torch.equal(
        matrix.sum(1), torch.ones(15).double()
    )


def test_dropped_class_row_is_in_the_table_not_in_the_rows() -> None:
    """ViTDet: the table has 1 + s² rows, the rows are the h·w patches only; meta says no
    class token."""
    from posenc.vision.learned.describe import vision_positions

    spec = vision_learned_spec({"model_type": "vitdet"}, grid=[3, 4])
    assert (spec.table_rows, spec.tokens, spec.kept) == (1 + 14 * 14, 12, 0)
    matrix = resample_matrix(spec)
    assert torch.equal(matrix[:, 0], torch.zeros(12, dtype=torch.float64))
    described = vision_positions({"model_type": "vitdet"})
    assert described is not None and described["class_token"] is False
    assert described["resize"]["class_row_dropped"] is True


def test_merge_block_order_hand_worked_and_odd_grid_refused() -> None:
    """Cosmos 3 Edge orders 2 x 2 blocks: a 2 x 4 grid's row-major patches 0…7 come as
    0 1 4 5 2 3 6 7; an odd side is a 422 naming grid."""
    spec = vision_learned_spec({"model_type": "cosmos3_edge_vision"}, grid=[2, 4])
    assert spec.order(2, 4).tolist() == [0, 1, 4, 5, 2, 3, 6, 7]
    table = seeded_normal(spec.table_rows, spec.width, seed=2)
    row_major = resized_table(
        vision_learned_spec(
            {"model_type": "siglip2_vision_model", "hidden_size": 1152}, grid=[2, 4]
        ),
        table,
    )
    assert torch.equal(resized_table(spec, table), row_major[spec.order(2, 4)])
    with pytest.raises(InvalidArgument, match="multiples of 2") as err:
        vision_learned_spec({"model_type": "inkling2_vision"}, grid=[3, 4])
    assert err.value.field == "grid"


def test_interpolate_mode_comes_from_the_config() -> None:
    """Hunyuan-VL's interpolate_mode: bicubic from the config equals its forward; a mode it
    cannot read is a 422 naming the key."""
    make = CONFIG_MAPPING["hunyuan_vl_vision"]
    config = make(interpolate_mode="bicubic", max_image_size=256)  # type: ignore[call-arg]
    spec = vision_learned_spec(config.to_dict(), grid=[5, 7])
    assert spec.tower.mode == "bicubic" and spec.side == 16
    for grid in [(5, 7), (30, 9), None]:
        _compare(config, grid)
    with pytest.raises(InvalidArgument) as err:
        vision_learned_spec({"model_type": "hunyuan_vl_vision", "interpolate_mode": "area"})
    assert err.value.field == "config.interpolate_mode"


def test_nested_towers_are_found_in_whole_files() -> None:
    """The SAM encoder inside DeepSeek-OCR 2's vision config, SAM 3's ViT, a DPT on a DINOv2
    backbone, Depth Pro's image encoder."""
    cases = {
        "deepseek_ocr2": ("deepseek_ocr2_sam_vision_model", "config.vision_config.sam_config"),
        "sam3": ("sam3_vit_model", "config.vision_config.backbone_config"),
        "depth_pro": ("dinov2", "config.image_model_config"),
    }
    for model_type, (tower, where) in cases.items():
        spec = vision_learned_spec(CONFIG_MAPPING[model_type]().to_dict())
        assert (spec.model_type, spec.where) == (tower, where), model_type
    dpt = {"model_type": "dpt", "backbone_config": {"model_type": "dinov2"}}
    assert vision_learned_spec(dpt).model_type == "dinov2"
    assert vision_learned_spec({"model_type": "dpt"}).model_type == "dpt"


def test_towers_without_a_learned_image_table() -> None:
    """The two labels counted out of the learned towers: ViT-MAE's table is a fixed 2-D sin-cos
    table (not trained, the same for every seed), and the Audio Spectrogram Transformer's
    grid is a spectrogram's (frequency x time), not an image's."""
    from transformers.models.vit_mae.modeling_vit_mae import ViTMAEModel

    tables = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad():
            config = CONFIG_MAPPING["vit_mae"](num_hidden_layers=1)  # type: ignore[call-arg]
            model = ViTMAEModel(config)  # type: ignore[arg-type]
        table = model.embeddings.position_embeddings
        assert not table.requires_grad
        tables.append(table.detach().clone())
    assert torch.equal(tables[0], tables[1])
    # row 1 + 0 (patch (0, 0)) is sin(0) = 0 / cos(0) = 1 in each half: no trained values
    first = tables[0][0, 1]
    assert set(first.unique().tolist()) <= {0.0, 1.0}
    ast = CONFIG_MAPPING["audio-spectrogram-transformer"]()
    assert (ast.num_mel_bins, ast.max_length) == (128, 1024) and not hasattr(ast, "image_size")
    for model_type in ("vit_mae", "audio-spectrogram-transformer"):
        assert model_type not in LEARNED_TOWERS and model_type in NO_LEARNED_IMAGE_TABLE
