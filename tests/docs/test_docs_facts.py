"""Facts the docs state that the code defines: they must agree with it."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest

from posenc.rope import ScalingType
from service.error_bodies import OverloadedBody, TooLargeBody

ROOT = Path(__file__).resolve().parents[2]


def _row(markdown: str, status: int) -> str:
    """The row of ``status`` about responses (the 413 of an output over the limits, not the
    one of a request body over ``POSENC_MAX_BODY_BYTES``)."""
    rows = [
        line
        for line in markdown.splitlines()
        if line.startswith(f"| {status} |") and "POSENC_MAX_BODY_BYTES" not in line
    ]
    assert len(rows) == 1, status
    return rows[0]


@pytest.mark.parametrize(("status", "model"), [(413, TooLargeBody), (429, OverloadedBody)])
def test_errors_md_gives_every_field_of_the_body(status: int, model: type) -> None:
    """The 429 row once gave ``{"detail"}`` alone, and pointed at a section no doc has."""
    body = _row((ROOT / "docs" / "errors.md").read_text(), status).rsplit("|", 2)[-2]
    assert {f for f in re.findall(r'"(\w+)"', body)} == set(model.model_fields), body  # type: ignore[attr-defined]


def test_errors_md_413_says_which_formats_stream() -> None:
    row = _row((ROOT / "docs" / "errors.md").read_text(), 413)
    assert "POSENC_MAX_STREAM_ELEMENTS" in row and "streamed" in row


def test_design_md_lists_every_scaling_type() -> None:
    """DESIGN.md's ScalingType lacked ``proportional``."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    (listed,) = re.findall(r"^ScalingType = Literal\[(.*)\]$", text, flags=re.M)
    assert re.findall(r'"(\w+)"', listed) == list(typing.get_args(ScalingType))


def test_configs_md_deepseek_layout_snippet_runs() -> None:
    """docs/configs.md maps posenc's interleaved DeepSeek tables to transformers' half layout
    and de-interleaved q/k; its snippet asserts that against transformers' own module."""
    pytest.importorskip("transformers.models.deepseek_v3.modeling_deepseek_v3")
    text = (ROOT / "docs" / "configs.md").read_text()
    section = text.split("## DeepSeek's layout", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    exec(compile(code, "docs/configs.md", "exec"), {})
