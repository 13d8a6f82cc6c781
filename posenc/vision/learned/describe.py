"""What ``POST /v1/configs/positions`` says of a config's vision tower, rotary or learned.

:func:`vision_positions` is :func:`posenc.vision.rope.vision_tower` for a rotary tower, and for
a tower with a learned 2-D table the table's size, its resizing rule and the endpoint that
serves it (``/v1/encodings/vision-learned``). A tower that has neither keeps what
``vision_tower`` says it uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posenc.vision.learned.kind import VISION_LEARNED_PATH
from posenc.vision.learned.tables import find_learned_tower, vision_learned_spec
from posenc.vision.rope import is_vision_config_alone, vision_tower

__all__ = ["is_vision_tower_alone", "vision_positions"]


def vision_positions(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The config's vision tower: None without one; ``rotary`` true (vision-rope's numbers), or
    ``learned`` true (its table and resize rule), or what it uses instead.

    Raises:
        InvalidArgument: a key of the tower that cannot be read (``field`` names it).
    """
    rotary = vision_tower(config)
    if rotary is not None and rotary["rotary"]:
        return {**rotary, "learned": False}
    if find_learned_tower(config) is None:
        return None if rotary is None else {**rotary, "learned": False}
    spec = vision_learned_spec(config)
    tower = spec.tower
    return {
        "model_type": spec.model_type,
        "rotary": False,
        "learned": True,
        "uses": f"a learned absolute 2-D position table ({spec.side} x {spec.side} patches"
        f"{', with class rows first' if spec.kept else ''}), resized by "
        f"{tower.rule.name}",
        "endpoint": VISION_LEARNED_PATH,
        "resize": tower.describe(),
        "class_token": spec.kept > 0,
        "prefix_tokens": spec.kept,
        "native_grid": [spec.side, spec.side],
        "table_rows": spec.table_rows,
        "width": spec.width,
        "reference": tower.reference,
        "defaulted": list(spec.defaulted),
    }


def is_vision_tower_alone(config: Mapping[str, Any]) -> bool:
    """A vision tower's own config sent alone (rotary or learned), not a whole model's file."""
    if is_vision_config_alone(config):
        return True
    found = find_learned_tower(config)
    return found is not None and found[2] == "config"
