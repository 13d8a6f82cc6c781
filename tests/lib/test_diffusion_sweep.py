"""The sweep of diffusers' positional classes agrees with the rules posenc serves and the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posenc.diffusion import DIFFUSION_ROPE, SINCOS_2D, describe
from posenc.diffusion.configs import ROPE_RULES
from posenc.diffusion.sincos import SINCOS_RULES
from posenc.diffusion.sweep import SWEEP

DOC = (Path(__file__).resolve().parents[2] / "docs" / "diffusion.md").read_text()
SERVED = [n for n, e in SWEEP.items() if e.served]


@pytest.mark.parametrize("name", SERVED)
def test_a_served_class_is_read_by_the_rule_it_names(name: str) -> None:
    endpoint, model = SWEEP[name].served.split(":")  # type: ignore[union-attr]
    config = {"_class_name": name}
    if name == "CogVideoXTransformer3DModel":
        config["use_rotary_positional_embeddings"] = True  # type: ignore[assignment]
    said = describe(config)
    assert said["model"] == model or (name == "Transformer2DModel" and model == "pixart")
    kind = DIFFUSION_ROPE if endpoint == "diffusion-rope" else SINCOS_2D
    assert said["endpoint"] == kind.path
    rules = ROPE_RULES if endpoint == "diffusion-rope" else SINCOS_RULES
    assert name in rules[model].class_names or name == "Transformer2DModel"


@pytest.mark.parametrize("name", [n for n, e in SWEEP.items() if not e.served])
def test_an_unserved_class_says_why_at_configs_positions(name: str) -> None:
    said = describe({"_class_name": name})
    assert said["kind"] == "none" and said["reason"] == SWEEP[name].reason
    assert SWEEP[name].reason


def test_every_rule_class_is_in_the_sweep_as_served() -> None:
    for rules in (ROPE_RULES, SINCOS_RULES):
        for rule in rules.values():
            for name in rule.class_names:
                assert SWEEP[name].served is not None, name


@pytest.mark.parametrize("name", list(SWEEP))
def test_the_docs_table_lists_every_class(name: str) -> None:
    short = re.sub(r"Transformer[0-9]DModel$", "", name)
    assert name in DOC or re.search(rf"\b{re.escape(short)}\b", DOC), name
