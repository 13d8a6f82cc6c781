"""Each fact has one home: a model type's facts live in its record in the facts home,
``posenc/facts/`` (families.py; its vision towers' and GGUF architectures' records beside it).

The source of ``posenc/`` and ``service/`` is read with :mod:`ast`. Outside ``posenc/facts/`` no
code may name a model type in a comparison (``base == "gemma2"``, ``mt in {"t5", "mt5"}``), in a
set, tuple or list literal, or as a dict key: such a table or check is a second home for a fact
that a record's field holds. (Quoted configs, ``{"model_type": "llama", ...}``, name a model
type as a value, which is data, not a rule.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from posenc.facts.families import FAMILIES, Family, family, field_names, is_known, types_where
from tests.lib.not_model_types import NOT_A_MODEL_TYPE

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "posenc" / "facts"


def _names(node: ast.AST) -> list[str]:
    """The model-type names a literal spells: a string, or the strings of a set, tuple or list."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in FAMILIES else []
    if isinstance(node, ast.Set | ast.Tuple | ast.List):
        return [n for elt in node.elts for n in _names(elt)]
    return []


def _second_homes(path: Path) -> list[str]:
    return _second_homes_in(path.read_text(), path.relative_to(ROOT).as_posix())


def _second_homes_in(text: str, rel: str) -> list[str]:
    found: list[str] = []
    tree = ast.parse(text, filename=rel)
    exported = {  # __all__ lists names of this module, not model types
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    }
    for node in ast.walk(tree):
        if id(node) in exported:
            continue
        names: list[str] = []
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                names += _names(side)
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            names += [n for elt in node.elts for n in _names(elt) if isinstance(elt, ast.Constant)]
        elif isinstance(node, ast.Dict):
            names += [n for key in node.keys if key is not None for n in _names(key)]
        found += [
            f"{rel}:{node.lineno}: {name!r}"  # type: ignore[attr-defined]
            for name in dict.fromkeys(names)
            if (rel, name) not in NOT_A_MODEL_TYPE
        ]
    return found


def _sources() -> list[Path]:
    return [
        p
        for pkg in ("posenc", "service")
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if not p.is_relative_to(HOME)
    ]


def test_no_model_type_is_named_outside_its_record() -> None:
    found = [line for path in _sources() for line in _second_homes(path)]
    assert not found, "model types named outside posenc/facts/:\n" + "\n".join(found)


def test_the_check_finds_a_second_home() -> None:
    """The check is not vacuous: a set of model types, a comparison and a dict key are found,
    and a quoted config's ``model_type`` value and ``__all__`` are not."""
    text = (
        'X = frozenset({"gemma2", "t5"})\n'
        'def f(base: str) -> bool:\n    return base == "llama4"\n'
        'Y = {"bloom": 1}\n'
        'Z = {"model_type": "llama"}\n'
        '__all__ = ["gpt2"]\n'
    )
    found = _second_homes_in(text, "posenc/probe.py")
    assert sorted(line.split(": ", 1)[1] for line in found) == sorted(
        ["'gemma2'", "'t5'", "'llama4'", "'bloom'"]
    )


def test_every_record_is_keyed_by_its_own_model_type() -> None:
    assert all(t == f.model_type for t, f in FAMILIES.items())
    assert field_names()[0] == "model_type"


def test_unknown_model_types_get_the_default_record() -> None:
    """A type with no record reads as every field's default, the same as before the records."""
    assert family("not_a_model_type") == Family("not_a_model_type")
    assert family(None) == Family("")
    assert not is_known("not_a_model_type")
    assert is_known("llama") and is_known("llama4_text") and is_known("RefinedWebModel")


@pytest.mark.parametrize(
    ("model_type", "field", "value"),
    [
        # transformers 5.24 configuration_*.py / modeling_*.py, read by hand
        ("llama4", "default_theta", 500000.0),  # Llama4TextConfig.default_theta
        ("gptj", "layout", "interleaved"),  # rotate_every_two
        ("gpt_neox", "partial_rotary", 0.25),  # GPTNeoXConfig rotary_pct
        ("qwen2_vl", "mrope_section", (16, 24, 24)),
        ("qwen3_vl", "mrope_interleaved", True),
        ("nanochat", "rotation", "negative"),  # cat(x2, -x1)
        ("deepseek_v4", "rotated_channels", "trailing"),
        ("deepseek_v3", "mla", True),
        ("bart", "learned_offset", 2),  # LearnedPositionalEmbedding.offset
        ("ministral3", "query_scale", "llama4_beta"),
        ("qwen2_vl", "vision_tower", "qwen2_vl_vision"),
        ("bloom", "scheme", "alibi"),
    ],
)
def test_records_hold_the_models_facts(model_type: str, field: str, value: object) -> None:
    assert getattr(family(model_type), field) == value


def test_views_are_the_records() -> None:
    """The names other modules import are derived from the records, not kept beside them."""
    from posenc.attention.query_scale import BETA_MODEL_TYPES
    from posenc.explain.vllm_compare import LLAMA4_QUERY_SCALE_TYPES
    from posenc.facts.families import INTERLEAVED_MODEL_TYPES
    from posenc.relative_schemes.relative_sinusoidal import PARAKEET_MODEL_TYPES
    from posenc.rope.vllm import DEEPSEEK_MODEL_TYPES
    from posenc.vision.rope import TOP_LEVEL_VISION

    assert BETA_MODEL_TYPES == LLAMA4_QUERY_SCALE_TYPES == types_where(lambda f: f.query_scale)
    assert types_where(lambda f: f.layout == "interleaved") == INTERLEAVED_MODEL_TYPES
    assert types_where(lambda f: f.vllm_deepseek_yarn) == DEEPSEEK_MODEL_TYPES
    assert types_where(lambda f: f.scheme == "relative_sinusoidal") == PARAKEET_MODEL_TYPES
    assert {t: f.vision_tower for t, f in FAMILIES.items() if f.vision_tower} == TOP_LEVEL_VISION
