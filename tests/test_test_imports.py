"""Test files do not import one another: what several share is in tests/helpers.py (clients,
servers, decoding) or tests/references.py (closed forms, transformers' own functions, published
configs), so each test file can move, be renamed or be run alone."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the file's package
                base = ".".join(
                    path.relative_to(TESTS.parent).parent.parts[: 1 - node.level or None]
                )
                module = f"{base}.{node.module}" if node.module else base
                found += [(node.lineno, module)]
                found += [(node.lineno, f"{module}.{a.name}") for a in node.names]
            elif node.module:
                found += [(node.lineno, node.module)]
                found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def test_no_test_file_imports_another() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, module in _imported_modules(path)
        if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert not offenders, "\n".join(offenders)


def test_the_check_sees_an_import_of_a_test_file(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom tests.service.test_text import make_folder\n")
    assert (2, "tests.service.test_text") in _imported_modules(sample)
    assert (1, "os") in _imported_modules(sample)
