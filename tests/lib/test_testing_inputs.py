"""A caller's inputs to :mod:`posenc.testing` (:mod:`posenc.testing.inputs`): tensors as numpy
arrays (torch detached and on the CPU, bfloat16 widened exactly, lists taken as arrays, anything
else refused by name), leading axes of size one dropped, and positions as the rope kind takes
them (a range, a tensor, M-RoPE's three rows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posenc.testing.inputs import as_array, positions_list, squeeze_leading


def test_tensors_lists_and_arrays_become_numpy() -> None:
    t = torch.tensor([[0.1, 2.5]], dtype=torch.float32, requires_grad=True)
    a = as_array(t, "cos")
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    np.testing.assert_array_equal(a, np.array([[0.1, 2.5]], dtype=np.float32))
    b = as_array(torch.tensor([1.5, -0.0078125], dtype=torch.bfloat16), "sin")
    assert b.dtype == np.float32 and b.tolist() == [1.5, -0.0078125]  # exact in bfloat16
    assert as_array([[1, 2], [3, 4]], "q").shape == (2, 2)
    arr = np.ones(3)
    assert as_array(arr, "q") is arr


def test_anything_else_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="cos must be a numpy array or a torch tensor, got dict"):
        as_array({"cos": 1}, "cos")


def test_leading_axes_of_one_are_dropped_down_to_ndim() -> None:
    x = np.zeros((1, 1, 5, 4))
    assert squeeze_leading(x, 2).shape == (5, 4)
    assert squeeze_leading(np.zeros((2, 5, 4)), 2).shape == (2, 5, 4)  # not of size one: kept
    assert squeeze_leading(np.zeros((1, 4)), 2).shape == (1, 4)


def test_positions_as_the_rope_kind_takes_them() -> None:
    assert positions_list(None) is None
    assert positions_list(range(3)) == [0, 1, 2]
    assert positions_list(torch.tensor([[4, 7]])) == [[4, 7]]
    assert positions_list(np.array([5, 9, 1])) == [5, 9, 1]
    rows = positions_list(torch.arange(6).reshape(3, 2))  # M-RoPE's (3, T)
    assert rows == [[0, 1], [2, 3], [4, 5]] and all(type(p) is int for p in rows[0])  # type: ignore[union-attr]
