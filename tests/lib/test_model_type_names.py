"""Model-type names appear only in the facts home (``posenc/facts/``) and in quoted configs.

Every name posenc knows as a model type is collected from the facts home: the families' records
(and the vision towers, text types and old spellings they name), every ``model_type``
transformers defines a config for, the ``model_type`` values of the quoted published configs,
the rotary and learned vision towers' records and the GGUF architectures (llama.cpp's
``general.architecture`` names). The source of ``posenc/`` and ``service/`` outside
``posenc/facts/`` is then read with :mod:`ast`, and every string constant that is one of those
names is a finding, wherever it stands (a comparison, a set, a dict key, a call's argument, a
``startswith``), except

- docstrings and other bare string statements, and the pieces of an f-string (prose);
- the entries of ``__all__`` (names of the module's own functions);
- the value of a ``"model_type"`` key in a dict literal: a quoted config (an endpoint's example
  body), data rather than a rule;
- the strings listed in ``tests/lib/not_model_types.py``'s ``NOT_A_MODEL_TYPE``, by file, with what they name instead (a
  bucketing value ``"swin"``, a tokenizer's ``"gpt2"``, an M-RoPE ids rule ``"qwen2_vl"``).
  Each entry must still be found: a stale one fails, so the list cannot grow unseen.

The rule is the simplest that can be stated exactly: a literal spelt as a model type is taken
for one unless it is prose, a quoted config, or listed with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from posenc.facts.families import ALIASES, FAMILIES, TRANSFORMERS_MODEL_TYPES
from posenc.facts.gguf_architectures import GGUF_ARCHITECTURES
from posenc.facts.learned_towers import LEARNED_TOWER_RECORDS
from posenc.facts.model_configs import MODEL_CONFIGS
from posenc.facts.vision_rope_towers import NON_ROTARY, VISION_ALIASES, VISION_RULES
from tests.lib.not_model_types import NOT_A_MODEL_TYPE

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "posenc" / "facts"


def _config_model_types(value: Any) -> Iterable[str]:
    """Every ``model_type`` string in a quoted config, its nested configs included."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "model_type" and isinstance(item, str):
                yield item
            yield from _config_model_types(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _config_model_types(item)


def known_names() -> frozenset[str]:
    """Every model-type and GGUF architecture name the facts home knows."""
    records = FAMILIES.values()
    named = {
        name
        for f in records
        for name in (f.vision_tower, f.learned_vision_tower, f.text_model_type)
        if name
    }
    quoted = {t for _repo, config in MODEL_CONFIGS.values() for t in _config_model_types(config)}
    return frozenset(
        {
            *FAMILIES,
            *ALIASES,
            *named,
            *TRANSFORMERS_MODEL_TYPES,
            *quoted,
            *VISION_RULES,
            *VISION_ALIASES,
            *VISION_ALIASES.values(),
            *NON_ROTARY,
            *LEARNED_TOWER_RECORDS,
            *GGUF_ARCHITECTURES,
        }
    )


def _skipped(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are not code: prose (bare string statements,
    f-string pieces), ``__all__``'s entries and quoted configs' ``model_type`` values."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                skip.update(id(n) for n in ast.walk(node.value) if isinstance(n, ast.Constant))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "model_type":
                    skip.add(id(value))
    return skip


def names_in(text: str, rel: str, known: frozenset[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of every known name a string constant of ``text`` spells as code."""
    tree = ast.parse(text, filename=rel)
    skip = _skipped(tree)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in known
        and id(node) not in skip
    )


def findings(
    sources: Mapping[str, str], known: frozenset[str], allowed: Mapping[tuple[str, str], str]
) -> tuple[list[str], set[tuple[str, str]]]:
    """``(findings as "file:line: 'name'", the allowed pairs that were met)``."""
    found: list[str] = []
    met: set[tuple[str, str]] = set()
    for rel, text in sources.items():
        for line, name in names_in(text, rel, known):
            if (rel, name) in allowed:
                met.add((rel, name))
            else:
                found.append(f"{rel}:{line}: {name!r}")
    return found, met


def _sources() -> dict[str, str]:
    return {
        p.relative_to(ROOT).as_posix(): p.read_text()
        for pkg in ("posenc", "service")
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if not p.is_relative_to(HOME)
    }


def test_model_type_names_live_only_in_the_facts_home() -> None:
    found, _met = findings(_sources(), known_names(), NOT_A_MODEL_TYPE)
    assert not found, (
        "model-type or GGUF architecture names outside posenc/facts/ (move the fact into a "
        "record there, or list the string in NOT_A_MODEL_TYPE with what it names):\n"
        + "\n".join(found)
    )


def test_every_listed_exception_is_still_needed() -> None:
    _found, met = findings(_sources(), known_names(), NOT_A_MODEL_TYPE)
    stale = sorted(set(NOT_A_MODEL_TYPE) - met)
    assert not stale, f"NOT_A_MODEL_TYPE lists strings no longer in their file: {stale}"


def test_the_names_cover_every_home() -> None:
    """The scan knows the text types, the vision towers of both kinds, their top-level types'
    defaults, the quoted configs' types and llama.cpp's own architecture names."""
    known = known_names()
    for name in (
        "llama",  # a family
        "siglip_vision_model",  # a learned tower
        "qwen2_vl_vision",  # a rotary tower
        "mlcd",  # a rotary tower's other spelling
        "gemma3n_vision",  # a tower without rotary embedding
        "command-r",  # a GGUF architecture only
        "qwen3vlmoe",  # a GGUF architecture only
        "RefinedWebModel",  # an old spelling
        "bigbird_pegasus",  # a transformers config without a record
    ):
        assert name in known, name


def test_the_scan_finds_names_used_as_code() -> None:
    """The scan is not vacuous: a comparison, a set, a dict key, a call's argument, a
    ``startswith`` and a ``Literal`` are found; a docstring, a comment, an f-string, ``__all__``
    and a quoted config's ``model_type`` are not, and an allowed pair is met, not found."""
    known = frozenset({"llama", "qwen2", "siglip_vision_model", "command-r", "gpt2", "t5"})
    text = (
        '"""Reads llama files."""\n'
        "from typing import Literal\n"
        "# qwen2 in a comment\n"
        "def f(model_type: str, arch: str) -> bool:\n"
        '    """For qwen2."""\n'
        '    if model_type == "llama":\n'
        '        return arch in {"command-r", "qwen2"}\n'
        '    return model_type.startswith("t5")\n'
        'TOWERS = {"siglip_vision_model": 1}\n'
        'X = lookup("qwen2")\n'
        'K = Literal["llama", "other"]\n'
        'M = f"{X}llama"\n'
        'EXAMPLE = {"model_type": "llama", "vision_config": {"model_type": "qwen2"}}\n'
        '__all__ = ["gpt2"]\n'
        'TOKENIZER = "gpt2"\n'
    )
    assert names_in(text, "posenc/probe.py", known) == [
        (6, "llama"),
        (7, "command-r"),
        (7, "qwen2"),
        (8, "t5"),
        (9, "siglip_vision_model"),
        (10, "qwen2"),
        (11, "llama"),
        (15, "gpt2"),
    ]
    allowed = {("posenc/probe.py", "gpt2"): "a tokenizer's name"}
    found, met = findings({"posenc/probe.py": text}, known, allowed)
    assert met == {("posenc/probe.py", "gpt2")}
    assert "posenc/probe.py:6: 'llama'" in found
    assert not any("gpt2" in line for line in found)
