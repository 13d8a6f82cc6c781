"""Write posenc/client/methods.py: one typed client method per kind of the registry.

    python scripts/client_methods.py           rewrite the module
    python scripts/client_methods.py --check   exit 1 when it differs from what the registry gives

Each method has the kind's fields as keyword arguments, typed from their ``FieldSpec`` (a
``Literal`` of the choices for a string field, ``Sequence[int]`` for ids...), the output options
of ``compute``, and its return type; it calls ``compute(KIND, ...)``. Editors and type checkers
see real signatures, and ``tests/client/test_client_methods.py`` keeps the module equal to
:func:`render` over :data:`posenc.core.kinds.REGISTRY`, as ``docs/api.md`` is kept equal to
``/openapi.json``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from posenc.core import kinds  # noqa: E402  (the registry, full once posenc is imported

TARGET = ROOT / "posenc" / "client" / "methods.py"

# FieldSpec.type -> the annotation a caller may pass (the client sends lists as JSON, and a 2-D
# numpy array or torch tensor of token ids as a binary body)
ANNOTATIONS = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "ints": "Sequence[int] | Sequence[Sequence[int]] | Any",
    "floats": "Sequence[float]",
    "int_rows": "Sequence[Sequence[int]] | Any",
    "object": "Mapping[str, Any]",
    "struct": "Mapping[str, Any]",
    "strs": "str | Sequence[str]",
    "tensor": "Sequence[Any] | Any",
}
OPTIONS = (
    ("format", "Format | None", "None"),
    ("as_", "ArrayKind | None", "None"),
    ("device", "str | None", "None"),
    ("method", "Method", '"POST"'),
    ("query", "Mapping[str, Any] | None", "None"),
    ("extra", "Mapping[str, Any] | None", "None"),
)

HEADER = '''"""Typed client methods, one per kind of the registry: written by scripts/client_methods.py.

Do not edit: run ``python scripts/client_methods.py`` after changing a kind (a test fails until
the module equals what the registry gives). :class:`KindMethods` is a base of
:class:`~posenc.client.PosencClient` and :class:`~posenc.client.AsyncPosencClient`; ``T`` is what
a tensor call returns (a :class:`~posenc.client.TensorResult`, or an awaitable of one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

from posenc.client.calls import Format, Method
from posenc.client.results import ArrayKind

T = TypeVar("T")

'''


def _annotation(spec: kinds.FieldSpec) -> str:
    if spec.type == "str" and spec.allowed:
        base = "Literal[" + ", ".join(repr(c) for c in spec.allowed) + "]"
    else:
        base = ANNOTATIONS[spec.type]
    return f"{base} | None"


def _doc(kind: kinds.Kind) -> str:
    verb = "GET or POST" if kind.get else "POST"
    lines = [f"``{verb} {kind.path}``: {kind.summary}.", "", *textwrap.wrap(kind.description, 88)]
    lines += ["", "Args:"]
    for f in kind.fields:
        default = (
            "" if f.default is None or f.required or f.sourced else f" (default {f.default!r})"
        )
        sent = f" (sent as {f.name})" if f.arg_name != f.name else ""
        text = f"{f.arg_name}: {f.description.rstrip('.')}{default}{sent}."
        lines += textwrap.wrap(text, 88, initial_indent="    ", subsequent_indent="        ")
    lines += ["    format, as_, device, method, query, extra: as for ``compute``.", "", "Returns:"]
    tensors = ", ".join(f"``{t.name}`` ({', '.join(t.axes)})" for t in kind.tensors)
    lines += textwrap.wrap(f"A TensorResult with {tensors}.", 88, initial_indent="    ",
                           subsequent_indent="    ")  # fmt: skip
    return "\n".join(lines)


def _method(kind: kinds.Kind) -> str:
    name = kind.name.replace("-", "_")
    params = [f"        {f.arg_name}: {_annotation(f)} = None," for f in kind.fields]
    params += [f"        {o}: {a} = {d}," for o, a, d in OPTIONS]
    doc = textwrap.indent(_doc(kind), " " * 8).lstrip()
    sends = ", ".join(f"{f.name}={f.name}" for f in kind.fields if f.arg_name == f.name)
    renamed = ", ".join(f"{f.name!r}: {f.arg_name}" for f in kind.fields if f.arg_name != f.name)
    if renamed:  # a field named by a Python keyword (``as``) goes in by its wire name
        sends = ", ".join(part for part in (sends, f"**{{{renamed}}}") if part)
    options = ", ".join(f"{o}={o}" for o, _, _ in OPTIONS)
    return (
        f"    def {name}(\n        self,\n        *,\n" + "\n".join(params) + "\n    ) -> T:\n"
        f'        """{doc}\n        """\n'
        f"        return self.compute(\n            {kind.name!r},\n"
        + "".join(f"            {part},\n" for part in (options, sends) if part)
        + "        )\n"
    )


def _formatted(text: str) -> str:
    """``text`` as ruff format writes it (the project's formatter, which CI checks)."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(TARGET), "-"],
        input=text, capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return done.stdout


def render(registry: Iterable[kinds.Kind] | None = None) -> str:
    """The module's text for these kinds (the registry's, by name, when None)."""
    every = sorted(
        registry if registry is not None else kinds.REGISTRY.values(), key=lambda k: k.name
    )
    tables = [k.name for k in every if k.blocks is not None]
    out = HEADER
    out += "TableKind = Literal[" + ", ".join(repr(n) for n in tables) + "]\n"
    out += (
        '"""The kinds whose tables stream (``save_table`` writes any of them to a file)."""\n\n\n'
    )
    out += "class KindMethods(Generic[T]):\n"
    out += '    """One method per kind; each calls :meth:`compute` with the kind\'s name."""\n\n'
    out += "    def compute(self, kind: str, /, **fields: Any) -> T:\n"
    out += '        """Any kind by name (the client\'s transport implements it)."""\n'
    out += "        raise NotImplementedError\n"
    for kind in every:
        out += "\n" + _method(kind)
    return _formatted(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the module is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET} is stale: run python scripts/client_methods.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
