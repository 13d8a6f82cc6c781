"""The house: the import graph of ``posenc/`` and ``service/`` against the layers in docs/DESIGN.md.

Every project import is read from the source with :mod:`ast`, wherever it stands: at the top,
inside a function, or under ``if TYPE_CHECKING:``. The test fails on

- a module that is not in exactly one layer of DESIGN.md's "Import layers" list;
- an import that climbs: a module importing one of a higher layer;
- any cycle (also inside one layer);
- an import of another module's private name (``from posenc.x import _y``);
- an import inside a function, except in the entry points, which may import lazily.
"""

from __future__ import annotations

import re
import runpy
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("posenc", "service")
ENTRY_POINTS = frozenset({"posenc.cli", "service.__main__"})
#: scripts/folder_graph.py: its reader of imports (``imports_of``) and its ``cycles``
GRAPH: dict[str, Any] = runpy.run_path(str(ROOT / "scripts" / "folder_graph.py"))
imports_of = GRAPH["imports_of"]


def project_modules() -> dict[str, Path]:
    return {n: p for n, p in GRAPH["modules"]().items() if n.split(".")[0] in PACKAGES}


def design_layers() -> list[set[str]]:
    """The numbered list under DESIGN.md's "## Import layers", bottom first: the backticked
    module names of each item."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    section = re.search(r"^## Import layers\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert section, "docs/DESIGN.md has no '## Import layers' section"
    items = re.findall(r"^\d+\. (.*?)(?=^\d+\. |\Z)", section.group(1), re.S | re.M)
    return [set(re.findall(r"`((?:posenc|service)(?:\.[\w.]+)?)`", item)) for item in items]


MODULES = project_modules()
IMPORTS = [i for n, p in MODULES.items() for i in imports_of(n, p, set(MODULES))]
LAYERS = design_layers()


def test_every_module_is_in_exactly_one_layer() -> None:
    where: dict[str, list[int]] = defaultdict(list)
    for n, layer in enumerate(LAYERS):
        for module in layer:
            where[module].append(n)
    missing = sorted(set(MODULES) - set(where))
    unknown = sorted(set(where) - set(MODULES))
    twice = sorted(m for m, ns in where.items() if len(ns) > 1)
    assert not missing, f"modules not in DESIGN.md's import layers: {missing}"
    assert not unknown, f"DESIGN.md's import layers name modules that do not exist: {unknown}"
    assert not twice, f"modules in more than one layer: {twice}"


def test_no_import_climbs_the_layers() -> None:
    layer = {m: n for n, modules in enumerate(LAYERS) for m in modules}
    climbing = [
        f"{i.source} (layer {layer[i.source] + 1}) imports {i.target} (layer {layer[i.target] + 1}) "
        f"at line {i.line}"
        for i in IMPORTS
        if i.source in layer and i.target in layer and layer[i.target] > layer[i.source]
    ]
    assert not climbing, "\n".join(climbing)


def test_the_import_graph_has_no_cycle() -> None:
    edges: dict[tuple[str, str], list[str]] = {
        (i.source, i.target): [] for i in IMPORTS if i.target != i.source
    }
    cycles = GRAPH["cycles"](edges)
    assert not cycles, f"import cycles: {cycles}"


def test_no_module_imports_another_modules_private_name() -> None:
    private = [
        f"{i.source}:{i.line} takes {i.name} from {i.target}"
        for i in IMPORTS
        if i.name and i.name.startswith("_") and not i.name.startswith("__")
    ]
    assert not private, "\n".join(private)


def test_only_entry_points_import_inside_functions() -> None:
    hidden = [
        f"{i.source}:{i.line} imports {i.target} inside a function"
        for i in IMPORTS
        if i.in_function and i.source not in ENTRY_POINTS
    ]
    assert not hidden, "\n".join(hidden)


@pytest.mark.parametrize(
    ("source", "text", "problem"),
    [
        ("posenc.core.kinds", "from posenc.rope import ROPE\n", "climbs"),
        ("posenc.rope", "def f():\n    from posenc.core.blocks import write_pair\n", "in_function"),
        (
            "posenc.relative_schemes.alibi",
            "from posenc.relative_schemes.relative import _check_log_buckets\n",
            "private",
        ),
    ],
)
def test_the_checks_see_what_they_look_for(
    source: str, text: str, problem: str, tmp_path: Path
) -> None:
    """The reader finds a climbing import, one inside a function and a private name."""
    path = tmp_path / "probe.py"
    path.write_text(text)
    (found,) = imports_of(source, path, set(MODULES))
    layer = {m: n for n, modules in enumerate(LAYERS) for m in modules}
    if problem == "climbs":
        assert layer[found.target] > layer[found.source]
    elif problem == "in_function":
        assert found.in_function and found.target == "posenc.core.blocks"
    else:
        assert (
            found.name == "_check_log_buckets"
            and found.target == "posenc.relative_schemes.relative"
        )
