"""Test files named after the modules they test: at least 70% of the modules of 80 lines or more
have a test file of their name, so that a reader looking for a module's tests finds them by name.

The rule, exactly:

- **Modules counted**: every ``*.py`` file of ``posenc/`` and ``service/`` (the packages the wheel
  ships, pyproject.toml) whose text has at least 80 lines (``len(text.splitlines())``).
  ``bench/`` is left out, as ``scripts/`` is: measurement programs run by hand, not shipped, not
  imported by the library or the service, and checked by the runs they make.
- **A module's names**: its path without ``.py``, a final ``__init__`` dropped and the dunders of
  ``__main__`` stripped, as parts; each name joins the last k parts with ``_``. So
  ``posenc/rope/yarn.py`` is ``yarn``, ``rope_yarn`` and ``posenc_rope_yarn``;
  ``posenc/rope/__init__.py`` is ``rope`` and ``posenc_rope``; ``service/__main__.py`` is ``main``
  and ``service_main``.
- **A name identifies a module** when no other module of ``posenc/`` or ``service/`` (of any
  length) has that name too, and it is not a bare generic stem (:data:`GENERIC`). So
  ``test_kind.py`` identifies none of the four ``kind.py``; ``test_rope_kinds_kind.py`` does.
  A test file's name therefore points at one module at most.
- **A module is covered** when a ``tests/<folder>/.../test_<name>.py`` exists for one of the
  names that identify it. The test files directly in ``tests/`` (like this one) check the tree as
  a whole (layers, lengths, names) and name no module.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("posenc", "service")
MIN_LINES = 80
SHARE = 0.70
#: Stems that say what a module is, not what it is about: only a folder-qualified name counts.
GENERIC = frozenset({"base", "kind", "main", "registry"})


def module_names(rel: str) -> list[str]:
    """The names of the module at ``rel`` (``a/b/c.py``), shortest first: ``c``, ``b_c``, ..."""
    parts = list(Path(rel).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    elif parts[-1] == "__main__":
        parts[-1] = "main"
    return ["_".join(parts[-k:]) for k in range(1, len(parts) + 1)]


def _modules(root: Path) -> dict[str, int]:
    """Every module of the packages under ``root``: path relative to ``root`` -> its lines."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines())
        for pkg in PACKAGES
        for path in sorted((root / pkg).rglob("*.py"))
    }


def _test_files(root: Path) -> dict[str, str]:
    """``name`` -> the test file ``test_<name>.py`` in a folder below ``root/tests``."""
    tests = root / "tests"
    return {
        path.stem.removeprefix("test_"): path.relative_to(root).as_posix()
        for path in sorted(tests.rglob("test_*.py"))
        if path.parent != tests
    }


def named_tests(root: Path) -> dict[str, str | None]:
    """Each module of ``MIN_LINES`` or more under ``root`` -> the test file of its name, or None."""
    modules = _modules(root)
    owners = Counter(name for rel in modules for name in set(module_names(rel)))
    files = _test_files(root)
    found: dict[str, str | None] = {}
    for rel, lines in modules.items():
        if lines < MIN_LINES:
            continue
        names = module_names(rel)
        identifying = [n for n in names if owners[n] == 1 and not (n == names[0] and n in GENERIC)]
        found[rel] = next((files[n] for n in identifying if n in files), None)
    return found


def shortfall(found: dict[str, str | None]) -> str | None:
    """Why the share of modules with a test file of their name is under ``SHARE``, or None."""
    missing = sorted(rel for rel, test in found.items() if test is None)
    share = 1 - len(missing) / len(found)
    if share >= SHARE:
        return None
    return (
        f"{len(found) - len(missing)} of {len(found)} modules of {MIN_LINES}+ lines ({share:.0%}) "
        f"have a test file of their name, under {SHARE:.0%}; without one:\n" + "\n".join(missing)
    )


def test_most_modules_have_a_test_file_of_their_name() -> None:
    problem = shortfall(named_tests(ROOT))
    assert problem is None, problem


def _write(path: Path, lines: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x = 1\n" * lines)


def test_the_names_of_a_module() -> None:
    assert module_names("posenc/rope/yarn.py") == ["yarn", "rope_yarn", "posenc_rope_yarn"]
    assert module_names("posenc/rope/__init__.py") == ["rope", "posenc_rope"]
    assert module_names("service/__main__.py") == ["main", "service_main"]


def test_the_count_on_a_made_up_tree(tmp_path: Path) -> None:
    for rel in ("rope/yarn.py", "rope/kind.py", "diffusion/kind.py", "vision/rope.py"):
        _write(tmp_path / "posenc" / rel, 80)
    _write(tmp_path / "posenc" / "rope" / "__init__.py", 120)
    _write(tmp_path / "service" / "app.py", 79)  # too short to count
    _write(tmp_path / "service" / "registry.py", 90)
    for rel in (
        "lib/test_yarn.py",  # the stem
        "lib/test_kind.py",  # two kind.py: names neither
        "lib/test_diffusion_kind.py",  # folder-qualified
        "lib/test_rope.py",  # rope/__init__.py and vision/rope.py: names neither
        "service/test_registry.py",  # a generic stem alone names nothing
        "service/test_app.py",
    ):
        _write(tmp_path / "tests" / rel, 1)
    _write(tmp_path / "tests" / "test_vision_rope.py", 1)  # directly in tests/: names nothing
    assert named_tests(tmp_path) == {
        "posenc/diffusion/kind.py": "tests/lib/test_diffusion_kind.py",
        "posenc/rope/__init__.py": None,
        "posenc/rope/kind.py": None,
        "posenc/rope/yarn.py": "tests/lib/test_yarn.py",
        "posenc/vision/rope.py": None,
        "service/registry.py": None,
    }
    problem = shortfall(named_tests(tmp_path))
    assert problem is not None
    assert problem.startswith("2 of 6 modules of 80+ lines (33%)")
    assert problem.endswith(
        "\nposenc/rope/__init__.py\nposenc/rope/kind.py\nposenc/vision/rope.py\nservice/registry.py"
    )
    _write(tmp_path / "tests" / "service" / "test_service_registry.py", 1)
    _write(tmp_path / "tests" / "lib" / "deeper" / "test_posenc_rope.py", 1)
    found = named_tests(tmp_path)
    assert found["service/registry.py"] == "tests/service/test_service_registry.py"
    assert found["posenc/rope/__init__.py"] == "tests/lib/deeper/test_posenc_rope.py"
    _write(tmp_path / "tests" / "lib" / "test_rope_kind.py", 1)
    assert shortfall(named_tests(tmp_path)) is None  # 5 of 6
