"""posenc.facts.vision_rope_towers: the rotary vision towers' rules and their lookups."""

from __future__ import annotations

from posenc.facts.families import FAMILIES
from posenc.facts.vision_rope_towers import (
    NON_ROTARY,
    VISION_RULES,
    non_rotary_use,
    vision_rope_alias,
    vision_rope_rule,
)
from posenc.vision.rope import vision_rope_spec


def test_lookups() -> None:
    assert vision_rope_rule("qwen2_vl_vision") is VISION_RULES["qwen2_vl_vision"]
    assert vision_rope_rule("siglip_vision_model") is None
    assert vision_rope_rule(None) is None
    assert vision_rope_alias("mlcd") == "mlcd_vision_model"
    assert vision_rope_alias("mlcd_vision_model") is None
    assert non_rotary_use("gemma3n_vision") == NON_ROTARY["gemma3n_vision"]
    assert non_rotary_use("qwen2_vl_vision") is None


def test_no_tower_is_both_rotary_and_not() -> None:
    assert not set(VISION_RULES) & set(NON_ROTARY)


def test_every_default_tower_of_a_family_is_known() -> None:
    """A record's ``vision_tower`` (the tower transformers gives a file without one) is a
    tower vision-rope computes, or one it knows uses something else (LLaVA's CLIP), so a whole
    config of that type is read or refused with what its tower uses."""
    towers = {f.vision_tower for f in FAMILIES.values() if f.vision_tower}
    known = set(VISION_RULES) | set(NON_ROTARY)
    assert towers <= known, sorted(towers - known)


def test_rules_hold_transformers_defaults() -> None:
    """Read by hand from transformers 5.24: Qwen2VLVisionConfig's embed_dim 1280 and 16 heads
    (head 80), merge 2; Pixtral's head_dim 64, merge 1; DINOv3's rope_theta 100."""
    qwen = vision_rope_spec({"model_type": "qwen2_vl_vision"}, [[1, 4, 4]])
    assert (qwen.head_dim, qwen.merge, qwen.rope_theta) == (80, 2, 10000.0)
    pixtral = vision_rope_spec({"model_type": "pixtral"}, [[1, 3, 5]])
    assert (pixtral.head_dim, pixtral.merge, pixtral.tokens) == (64, 1, 15)
    dinov3 = vision_rope_spec({"model_type": "dinov3_vit"})
    assert dinov3.rope_theta == 100.0 and dinov3.grids == ((1, 14, 14),)
