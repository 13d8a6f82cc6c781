"""posenc's pytest plugin: the fixture ``posenc_reference`` (``pytest11`` entry point).

Installing posenc registers it; a test asks for the fixture by name, with no conftest and no
configuration::

    def test_my_rope(posenc_reference):
        cos, sin = my_engine.rope_tables(seq_len=4096)
        posenc_reference.assert_rope_table(cos, sin, config="config.json", seq_len=4096)

The fixture is :class:`posenc.testing.Reference`: ``assert_rope_table``, ``assert_rotated``,
``assert_mask``, ``reference_table`` and ``reference_rotation``. This module stands beside the
``posenc`` package, not in it, and imports posenc only when a test asks for the fixture: pytest
loads every plugin at start-up, in every project where posenc is installed, and a run that never
uses the fixture then pays nothing (no torch import, nothing imported before a coverage plugin
starts measuring).
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def posenc_reference() -> Any:
    """posenc's reference tables and assertions (:class:`posenc.testing.Reference`)."""
    import posenc.testing  # here, not at the top: see the module docstring

    return posenc.testing.Reference()
