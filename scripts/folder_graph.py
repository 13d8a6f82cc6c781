"""The folder graph: the project's imports with each folder as one node, against its layers.

A node is a folder directly in ``posenc/`` or ``service/`` (``posenc.rope`` stands for every
module under ``posenc/rope/``), a module directly in ``posenc/``, ``service/`` or ``bench/``
(``posenc.cli``), the packages themselves (``posenc``, ``service``, ``bench``), and
``scripts`` as one node. Imports are read with :mod:`ast`, wherever they stand (top level,
functions, ``if TYPE_CHECKING:``). LAYERS declares the order of the nodes, bottom first; an
edge against the layers is an import of a node of a higher layer.

    python scripts/folder_graph.py            print the graph
    python scripts/folder_graph.py --write    write it into docs/DESIGN.md
    python scripts/folder_graph.py --check    exit 1 if docs/DESIGN.md's copy is stale

``tests/test_folder_layers.py`` checks every node is declared, the edges against the layers
are at most MAX_AGAINST, there is no cycle, and DESIGN.md's copy is fresh.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("posenc", "service", "bench", "scripts")
DESIGN = ROOT / "docs" / "DESIGN.md"
START = "<!-- folder-graph: written by scripts/folder_graph.py --write; do not edit -->"
END = "<!-- /folder-graph -->"
MAX_AGAINST = 2

#: The layers, bottom first: (name, nodes). A node ending in ``.*`` stands for every node
#: under that prefix that no other entry declares.
LAYERS: list[tuple[str, list[str]]] = [
    ("core", ["posenc.core"]),
    ("facts", ["posenc.facts"]),
    ("tokens", ["posenc.tokens"]),
    ("absolute tables", ["posenc.absolute"]),
    ("relative schemes", ["posenc.relative_schemes"]),
    ("RoPE", ["posenc.rope"]),
    ("engines", ["posenc.engines"]),
    ("vision and diffusion", ["posenc.vision", "posenc.diffusion"]),
    ("readers", ["posenc.readers"]),
    ("attention", ["posenc.attention"]),
    ("resolution", ["posenc.embedding", "posenc.resolve"]),
    ("RoPE's kinds, context parallelism", ["posenc.rope_kinds", "posenc.context_parallel"]),
    ("explain", ["posenc.explain"]),
    ("catalog", ["posenc.catalog"]),
    ("the package", ["posenc"]),
    ("client and testing", ["posenc.client", "posenc.testing"]),
    ("command line", ["posenc.cli_apply", "posenc.cli"]),
    ("service: settings", ["service", "service.config", "service.problem", "service.cache"]),
    (
        "service: bodies and metrics",
        ["service.error_bodies", "service.observability", "service.schemas", "service.json_slices"],
    ),
    (
        "service: statuses, budget, formats",
        ["service.statuses", "service.admission", "service.formats"],
    ),
    (
        "service: requests",
        [
            "service.query",
            "service.openapi",
            "service.body_limit",
            "service.full_collections",
            "service.sliced_validation",
        ],
    ),
    ("service: errors", ["service.errors", "service.middleware", "service.json_body"]),
    ("service: state", ["service.state", "service.gguf_body"]),
    ("service: models", ["service.models_loading"]),
    ("service: responses", ["service.responses"]),
    ("service: routes", ["service.routes"]),
    ("service: app", ["service.app", "service.__main__"]),
    ("bench", ["bench.*"]),
    ("scripts", ["scripts"]),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for top in SOURCES for p in sorted((ROOT / top).rglob("*.py"))}


def node_of(module: str) -> str:
    """The node a module belongs to."""
    parts = module.split(".")
    if parts[0] == "scripts":
        return "scripts"
    return ".".join(parts[:2])  # the folder, or the module directly in posenc/, service/, bench/


class Import(NamedTuple):
    """One import of a project module, as :func:`imports_of` reads it."""

    source: str
    target: str
    line: int
    name: str | None  # the name taken with ``from target import name``
    in_function: bool


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """The imports of project modules (``known``) in module ``name`` at ``path``, wherever they
    stand (a submodule where ``from x import sub`` names one). tests/test_layers.py checks the
    module graph with them."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, None, child.lineno, in_function)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = name.split(".")
                    keep = len(parts) - child.level + (1 if is_package else 0)
                    base = ".".join(parts[:keep] + ([child.module] if child.module else []))
                for alias in child.names:
                    if f"{base}.{alias.name}" in known:  # a submodule
                        add(f"{base}.{alias.name}", None, child.lineno, in_function)
                    else:
                        add(base, alias.name, child.lineno, in_function)
            visit(child, inner)

    def add(target: str, taken: str | None, line: int, in_function: bool) -> None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target:
            found.append(Import(name, target, line, taken, in_function))

    visit(tree, False)
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports."""
    return {i.target for i in imports_of(name, path, known)}


def node_edges() -> tuple[dict[str, list[str]], dict[tuple[str, str], list[str]]]:
    """Each node's modules, and each edge between nodes with the module imports behind it."""
    mods = modules()
    members: dict[str, list[str]] = defaultdict(list)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, path in mods.items():
        members[node_of(name)].append(name)
        for target in imported(name, path, set(mods)):
            a, b = node_of(name), node_of(target)
            if a != b:
                edges[a, b].append(f"{name} -> {target}")
    return dict(members), dict(edges)


def layer_of(nodes: list[str]) -> tuple[dict[str, int], list[str]]:
    """Each node's layer (index into LAYERS), and the nodes no entry declares."""
    exact = {n: i for i, (_, ns) in enumerate(LAYERS) for n in ns if not n.endswith(".*")}
    wild = [(n[:-2], i) for i, (_, ns) in enumerate(LAYERS) for n in ns if n.endswith(".*")]
    where: dict[str, int] = {}
    undeclared = []
    for node in nodes:
        if node in exact:
            where[node] = exact[node]
            continue
        hits = [i for prefix, i in wild if node == prefix or node.startswith(prefix + ".")]
        if hits:
            where[node] = hits[0]
        else:
            undeclared.append(node)
    return where, undeclared


def against(edges: dict[tuple[str, str], list[str]], where: dict[str, int]) -> list[str]:
    """The edges that climb: a node importing one of a higher layer, with their imports."""
    return [
        f"{a} (layer {where[a] + 1}) -> {b} (layer {where[b] + 1}): {', '.join(sorted(why))}"
        for (a, b), why in sorted(edges.items())
        if a in where and b in where and where[b] > where[a]
    ]


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def render() -> str:
    """The Markdown block of docs/DESIGN.md: the layers, each node and the nodes it imports."""
    members, edges = node_edges()
    where, undeclared = layer_of(sorted(members))
    climbing = against(edges, where)
    loops = cycles(edges)
    lines = [
        START,
        f"{len(members)} nodes, {len(edges)} edges between them, "
        f"{len(climbing)} against the layers, {len(loops)} cycles.",
        "",
        "| layer | node | modules | imports |",
        "|---|---|---|---|",
    ]
    for node in sorted(members, key=lambda n: (where.get(n, len(LAYERS)), n)):
        layer = f"{where[node] + 1}. {LAYERS[where[node]][0]}" if node in where else "undeclared"
        targets = sorted((b for a, b in edges if a == node), key=lambda n: (where.get(n, 99), n))
        listed = ", ".join(f"`{t}`" for t in targets) or "nothing"
        lines.append(f"| {layer} | `{node}` | {len(members[node])} | {listed} |")
    lines.append("")
    if climbing:
        lines.append("Edges against the layers:")
        lines.append("")
        lines += [f"- {c}" for c in climbing]
    else:
        lines.append("No edge against the layers.")
    if undeclared:
        lines += ["", "Undeclared nodes: " + ", ".join(f"`{n}`" for n in undeclared)]
    lines.append(END)
    return "\n".join(lines) + "\n"


SECTION = """## Folder layers

Each folder directly in `posenc/` or `service/` is one node, and so is each module directly in
`posenc/`, `service/` or `bench/`, and `scripts/`. `scripts/folder_graph.py` declares the
nodes' layers, bottom first, and draws the graph from the code; `tests/test_folder_layers.py`
fails on an undeclared node, a cycle, or more than two edges against the layers, and when
this table is stale (`python scripts/folder_graph.py --write` redraws it).

"""


def write() -> None:
    text = DESIGN.read_text()
    block = render()
    if START in text:
        text = re.sub(
            re.escape(START) + r".*?" + re.escape(END) + r"\n", lambda _: block, text, flags=re.S
        )
    else:
        text = text.replace("## Import layers\n", SECTION + block + "\n## Import layers\n", 1)
    DESIGN.write_text(text)


def current() -> str:
    match = re.search(re.escape(START) + r".*?" + re.escape(END) + r"\n", DESIGN.read_text(), re.S)
    return match.group(0) if match else ""


def main(argv: list[str]) -> int:
    if "--write" in argv:
        write()
        return 0
    if "--check" in argv:
        stale = current() != render()
        if stale:
            print("docs/DESIGN.md's folder graph is stale: run scripts/folder_graph.py --write")
        return 1 if stale else 0
    print(render(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
