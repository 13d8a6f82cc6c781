"""posenc/client/methods.py: the typed client methods, generated from the registry."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import pytest

from posenc.client import AsyncPosencClient, PosencClient
from posenc.client.methods import KindMethods, TableKind
from posenc.core import kinds

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
    assert params[: len(kind.fields)] == [f.arg_name for f in kind.fields]
    for f in kind.fields:
        assert hints[f.arg_name] is not inspect.Parameter.empty, f.name
    assert kind.path in (method.__doc__ or "")


def test_save_table_takes_every_kind_whose_tables_stream() -> None:
    streaming = {k.name for k in kinds.REGISTRY.values() if k.blocks is not None}
    assert set(TableKind.__args__) == streaming  # type: ignore[attr-defined]
    hints = get_type_hints(PosencClient.save_table)
    assert hints["kind"] == TableKind


def test_a_field_named_by_a_keyword_is_sent_by_its_wire_name() -> None:
    """``as`` (a Python keyword) is the ``output`` argument, sent as ``as``."""
    sent: dict[str, object] = {}

    class Recorder:
        def compute(self, name: str, **kwargs: object) -> None:
            sent.update(name=name, **kwargs)

    KindMethods.masks(Recorder(), seq_len=3, output="bias")  # type: ignore[arg-type]
    assert sent["as"] == "bias" and "output" not in sent and sent["name"] == "masks"
