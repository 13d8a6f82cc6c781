"""posenc inside a caller's own tests: reference tables and assertions, no service needed.

::

    from posenc.testing import assert_rope_table, reference_table

    cos, sin = my_engine.rope_tables(seq_len=4096)
    assert_rope_table(cos, sin, config="path/to/config.json", seq_len=4096, engine="vllm")

- :func:`assert_rope_table` / :func:`reference_table`: RoPE tables, checked by
  ``/v1/configs/check``'s own code (:func:`posenc.explain.check.check_table`);
- :func:`assert_rotated` / :func:`reference_rotation`: rotated queries and keys;
- :func:`assert_mask`: attention masks, against ``/v1/masks``' own code.

Arrays are numpy arrays or torch tensors; ``config`` is a dict, a ``config.json`` path or a GGUF
file's path. A failure raises ``AssertionError`` whose message names the largest difference and
where it is, the engine and precision that match best, and the known mistakes that explain the
caller's values (and no others). The pytest plugin (``pytest11`` entry point
``pytest_posenc``) gives the same functions as the fixture ``posenc_reference``
(:class:`Reference`). Importing this package imports the library only (torch and numpy; never
FastAPI).
"""

from __future__ import annotations

from posenc.testing.masks import MASK_MISTAKES, assert_mask
from posenc.testing.report import CheckReport
from posenc.testing.rotations import assert_rotated, reference_rotation, rotation_report
from posenc.testing.tables import assert_rope_table, reference_table, table_report


class Reference:
    """The functions of :mod:`posenc.testing` in one object: the ``posenc_reference`` fixture
    (``posenc_reference.assert_rope_table(cos, sin, preset=..., seq_len=...)``)."""

    assert_rope_table = staticmethod(assert_rope_table)
    assert_rotated = staticmethod(assert_rotated)
    assert_mask = staticmethod(assert_mask)
    reference_table = staticmethod(reference_table)
    reference_rotation = staticmethod(reference_rotation)

    def __repr__(self) -> str:
        return (
            "<posenc.testing.Reference: assert_rope_table, assert_rotated, assert_mask, "
            "reference_table, reference_rotation>"
        )


__all__ = [
    "MASK_MISTAKES",
    "CheckReport",
    "Reference",
    "assert_mask",
    "assert_rope_table",
    "assert_rotated",
    "reference_rotation",
    "reference_table",
    "rotation_report",
    "table_report",
]
