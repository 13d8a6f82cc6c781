"""posenc.facts.learned_towers: each learned vision tower's record, joined to its rule's code.

The records are data (the facts home imports nothing above it); :mod:`posenc.vision.learned`
joins each to the code of the resizing rule it names. These check that join: every name a
record may give has code, and each tower is its record plus that code, nothing else.
"""

from __future__ import annotations

import dataclasses
from typing import get_args

from posenc.facts.learned_towers import (
    LEARNED_TOWER_RECORDS,
    LearnedTowerRecord,
    Resize,
    learned_tower_record,
)
from posenc.vision.learned.tables import LEARNED_TOWERS, RESIZE_RULES

#: The name ``meta.resize`` says for each rule (the two gathers share one).
RULE_NAMES = {
    "gather_sum": "interpolate_gather",
    "embedding_bag": "interpolate_gather",
}


def test_every_rule_a_record_names_has_code() -> None:
    assert set(get_args(Resize)) == set(RESIZE_RULES)
    for resize, rule in RESIZE_RULES.items():
        assert rule.name == RULE_NAMES.get(resize, resize)
    assert {r.resize for r in LEARNED_TOWER_RECORDS.values()} == set(RESIZE_RULES)


def test_each_tower_is_its_record_and_its_rules_code() -> None:
    assert list(LEARNED_TOWERS) == list(LEARNED_TOWER_RECORDS)
    for model_type, record in LEARNED_TOWER_RECORDS.items():
        tower = LEARNED_TOWERS[model_type]
        assert learned_tower_record(model_type) is record
        assert tower.rule is RESIZE_RULES[record.resize]
        for field in dataclasses.fields(LearnedTowerRecord):
            assert getattr(tower, field.name) == getattr(record, field.name), (model_type, field)


def test_records_hold_the_towers_facts() -> None:
    """Read by hand from transformers 5.24's embeddings classes and config defaults."""
    vit = learned_tower_record("vit")
    assert vit is not None and (vit.prefix, vit.resize, vit.mode) == (
        1,
        "interpolate_pos_encoding",
        "bicubic",
    )
    deit = learned_tower_record("deit")
    assert deit is not None and deit.prefix == 2  # the class and the distillation token
    siglip2 = learned_tower_record("siglip2_vision_model")
    assert siglip2 is not None and siglip2.side_key == "num_patches"
    assert siglip2.defaults["num_patches"] == 256
    kimi = learned_tower_record("kimi_k25_vision")
    assert kimi is not None and kimi.resize == "embedding_bag"
    assert learned_tower_record("qwen2_vl_vision") is None  # rotary only
    assert learned_tower_record(None) is None
