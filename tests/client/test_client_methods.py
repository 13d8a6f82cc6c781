"""posenc/client/methods.py: the typed client methods, generated from the registry."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import pytest

from posenc import kinds
from posenc.client import AsyncPosencClient, PosencClient
from posenc.client.methods import KindMethods, TableKind

ROOT = Path(__file__).resolve().parents[2]


def test_the_module_is_what_the_registry_gives() -> None:
    """Run scripts/client_methods.py after changing a kind: this fails until then."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "client_methods.py"), "--check"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", sorted(kinds.REGISTRY))
def test_every_kind_is_a_typed_method_of_both_clients(name: str) -> None:
    kind = kinds.REGISTRY[name]
    method = getattr(KindMethods, name.replace("-", "_"))
    assert getattr(PosencClient, method.__name__) is method
    assert getattr(AsyncPosencClient, method.__name__) is method
    hints = get_type_hints(method)
    params = list(inspect.signature(method).parameters)[1:]
    assert params[: len(kind.fields)] == list(kind.field_names)
    for f in kind.fields:
        assert hints[f.name] is not inspect.Parameter.empty, f.name
    assert kind.path in (method.__doc__ or "")


def test_save_table_takes_every_kind_whose_tables_stream() -> None:
    streaming = {k.name for k in kinds.REGISTRY.values() if k.blocks is not None}
    assert set(TableKind.__args__) == streaming  # type: ignore[attr-defined]
    hints = get_type_hints(PosencClient.save_table)
    assert hints["kind"] == TableKind
