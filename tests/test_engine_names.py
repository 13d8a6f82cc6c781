"""Fitness: the registry (``posenc/engines/``) is the only place that knows engines by name.

Every ``.py`` of ``posenc/`` and ``service/`` outside ``posenc/engines/`` is read with
:mod:`ast`. The test fails on

- an engine's name compared as a string: ``engine == "vllm"``, ``x != "timm"``,
  ``e in ("llama.cpp", "mlx")`` (a comparison with a string constant, or with a tuple, list
  or set of them, that is an engine's name);
- a list of engines written out: a tuple, list or set literal holding two or more engines'
  names (``("transformers", "vllm")``), wherever it stands.

The engines' names are the registry's (:data:`posenc.engines.ENGINES`), not a list here. The
typed client (``posenc/client/methods.py``) is generated from the registry by
``scripts/client_methods.py`` (its ``Literal`` of each ``engine`` field), and
``tests/client/test_client_methods.py`` fails when it is not what the registry gives now.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from posenc.engines import ENGINES

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "posenc" / "engines"
GENERATED = ROOT / "posenc" / "client" / "methods.py"
NAMES = frozenset(ENGINES)


def _strings(node: ast.AST) -> list[str]:
    """The string constants of ``node``: itself, or the items of a tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for item in node.elts for s in _strings(item) if isinstance(item, ast.Constant)]
    return []


def findings(source: str, where: str) -> list[str]:
    """Each engine-name comparison and written-out list of engines in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                named = sorted(NAMES & set(_strings(side)))
                if named:
                    found.append(f"{where}:{node.lineno} compares with {', '.join(named)}")
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            named = [s for s in _strings(node) if s in NAMES]
            if len(named) >= 2:
                found.append(f"{where}:{node.lineno} lists engines {named}")
    return sorted(set(found))


def sources() -> list[Path]:
    paths = [p for pkg in ("posenc", "service") for p in sorted((ROOT / pkg).rglob("*.py"))]
    return [p for p in paths if REGISTRY not in p.parents and p != GENERATED]


def test_the_registry_knows_the_six_engines() -> None:
    assert {"transformers", "vllm", "llama.cpp", "mlx", "timm", "diffusers"} <= NAMES


def test_no_engine_name_is_compared_or_listed_outside_the_registry() -> None:
    found = [f for p in sources() for f in findings(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        'if engine == "vllm":\n    pass\n',
        'ok = p.get("engine") != "timm"\n',
        'own = engine in ("llama.cpp", "mlx")\n',
        'ENGINE_NAMES = ("transformers", "vllm", "mlx")\n',
        'default = ["diffusers", "transformers"]\n',
    ],
)
def test_the_scan_sees_what_it_looks_for(text: str) -> None:
    assert findings(text, "probe")


def test_the_scan_leaves_other_strings_alone() -> None:
    text = 'meta = {"engine": "vllm"}\nif precision == "exact":\n    pass\nx = ("vllm", 3)\n'
    assert not findings(text, "probe")
