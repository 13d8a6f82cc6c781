"""posenc table masks: the CLI's options for a kind with fields named kind and as."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posenc import cli
from posenc.attention.masks import attention_bias, attention_mask, mask_rule


def test_table_masks_bias_and_mask(tmp_path: Path) -> None:
    out = tmp_path / "b.npy"
    argv = ["table", "masks", "--seq-len", "5", "--kind", "sliding", "--window", "2"]
    assert cli.main([*argv, "--as", "bias", "-o", str(out), "-q"]) == 0
    want = attention_bias(mask_rule("sliding", window=2), 5).numpy()
    np.testing.assert_array_equal(np.load(out), want)
    mask = tmp_path / "m.npy"
    packed = ["table", "masks", "--seq-len", "5", "--cu-seqlens", "0,2,5", "-o", str(mask), "-q"]
    assert cli.main(packed) == 0
    want_mask = attention_mask(mask_rule("causal"), 5, cu_seqlens=[0, 2, 5]).numpy()
    np.testing.assert_array_equal(np.load(mask), want_mask)
