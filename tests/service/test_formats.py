"""service.formats: every encoder, checked by decoding the bytes (negotiation:
tests/service/test_negotiation.py).

Each format is read back with the standard reader of that format (``json``, ``base64``,
``safetensors.torch.load`` / ``safe_open``, ``numpy.load``, ``numpy.frombuffer``, PIL) and
compared whole with the tensors that went in, bit for bit where the format is exact.
"""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import load as safetensors_load

from posenc.core.errors import InvalidArgument
from posenc.resolve import compute, resolve_fields
from posenc.rope_kinds.kind import ROPE
from service import formats
from service.formats import (
    FORMAT_MEDIA_TYPES,
    Bundle,
    NotAcceptable,
    bundle_nbytes,
    dtype_name,
    encode_bundle,
    tensor_nbytes,
)

ALL_MEDIA = list(FORMAT_MEDIA_TYPES.values())


def masked_bias() -> torch.Tensor:
    """A causal ALiBi-like bias (H=2, T=3, S=3): −slope·(i − j) below the diagonal, −inf above."""
    i = torch.arange(3)[:, None]
    j = torch.arange(3)[None, :]
    slopes = torch.tensor([0.5, 0.25])[:, None, None]
    bias = -slopes * (i - j).float()
    return bias.masked_fill(j > i, float("-inf"))


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def test_dtype_names_and_sizes():
    names = {
        torch.float32: "float32",
        torch.float16: "float16",
        torch.bfloat16: "bfloat16",
        torch.float64: "float64",
        torch.int64: "int64",
        torch.bool: "bool",
    }
    assert {d: dtype_name(d) for d in names} == names
    assert tensor_nbytes(torch.zeros(2048, 768)) == 2048 * 768 * 4
    assert tensor_nbytes(torch.zeros(3, dtype=torch.bfloat16)) == 6
    bundle = Bundle({"a": torch.zeros(4, 5), "b": torch.zeros(7, dtype=torch.int64)}, {})
    assert bundle_nbytes(bundle) == bundle.nbytes == 4 * 5 * 4 + 7 * 8
    assert bundle.primary_name == "a"
    with pytest.raises(ValueError, match="no tensors"):
        _ = Bundle({}, {}).primary


def test_unknown_format_in_encode_bundle():
    with pytest.raises(NotAcceptable) as err:
        encode_bundle(Bundle({"x": torch.zeros(2)}, {}), "csv")
    assert err.value.available == ALL_MEDIA


# --------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------


def test_json_structure_and_exact_float32_values():
    table = torch.randn(64, 48, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[0, 1, 2], [2**62, -5, 7]])
    meta = {"seq_len": 64, "layout": "interleaved", "nested": {"a": [1, 2.5]}}
    out = encode_bundle(Bundle({"encoding": table, "ids": ids}, meta), "json")
    assert out.media_type == "application/json"
    doc = json.loads(out.body)
    assert list(doc) == ["tensors", "meta"]
    assert list(doc["tensors"]) == ["encoding", "ids"]  # the endpoint's order
    assert doc["meta"] == meta
    enc = doc["tensors"]["encoding"]
    assert enc["shape"] == [64, 48] and enc["dtype"] == "float32"
    back = np.array(enc["data"], dtype=np.float32)
    np.testing.assert_array_equal(back.view(np.uint32), table.numpy().view(np.uint32))
    assert doc["tensors"]["ids"] == {"shape": [2, 3], "dtype": "int64", "data": ids.tolist()}


def _significant_digits(text: str) -> int:
    mantissa = re.split("[eE]", text.lstrip("-"))[0].replace(".", "").lstrip("0").rstrip("0")
    return max(len(mantissa), 1)


def test_float32_numbers_are_shortest_round_trip():
    """Random bit patterns over the whole float32 range: each number parses back to the same
    bits and has no more significant digits than numpy's shortest repr (Dragon4, unique)."""
    bits = np.random.default_rng(1).integers(0, 2**32, size=20000, dtype=np.uint64)
    values = bits.astype(np.uint32).view(np.float32)
    values = values[np.isfinite(values)]
    body = encode_bundle(Bundle({"x": torch.from_numpy(values.copy())}, {}), "json").body
    data_text = body.split(b'"data":[', 1)[1].split(b"]", 1)[0].decode()
    texts = data_text.split(",")
    assert len(texts) == values.size
    back = np.array([float(t) for t in texts]).astype(np.float32)
    np.testing.assert_array_equal(back.view(np.uint32), values.view(np.uint32))
    shortest = [_significant_digits(np.format_float_scientific(v, unique=True)) for v in values]
    ours = [_significant_digits(t) for t in texts]
    assert max(o - s for o, s in zip(ours, shortest, strict=True)) <= 0


def test_non_finite_values_are_null_and_the_body_is_strict_json():
    x = torch.tensor([1.0, float("-inf"), float("nan"), float("inf"), -0.0])
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        body = encode_bundle(Bundle({"x": x.to(dtype)}, {}), "json").body
        assert b"Infinity" not in body and b"NaN" not in body
        data = json.loads(body, parse_constant=pytest.fail)["tensors"]["x"]["data"]
        assert data[:4] == [1.0, None, None, None]
        assert str(data[4]) == "-0.0"


def test_masked_bias_in_json():
    bias = masked_bias()
    data = json.loads(encode_bundle(Bundle({"bias": bias}, {}), "json").body)
    expected = [
        [[None if v == float("-inf") else v for v in row] for row in h] for h in bias.tolist()
    ]
    assert data["tensors"]["bias"]["data"] == expected


def test_every_float16_value_round_trips():
    all_bits = np.arange(2**16, dtype=np.uint16)
    values = all_bits.view(np.float16)
    data = json.loads(encode_bundle(Bundle({"x": torch.from_numpy(values)}, {}), "json").body)
    entry = data["tensors"]["x"]
    assert entry["dtype"] == "float16"
    finite = np.isfinite(values)
    parsed = entry["data"]
    assert all(parsed[i] is None for i in np.flatnonzero(~finite))
    back = np.array([parsed[i] for i in np.flatnonzero(finite)], dtype=np.float64).astype(
        np.float16
    )
    np.testing.assert_array_equal(back.view(np.uint16), all_bits[finite])


def test_every_bfloat16_value_is_written_as_its_float32_number():
    all_bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    values = all_bits.view(torch.bfloat16)
    entry = json.loads(encode_bundle(Bundle({"x": values}, {}), "json").body)["tensors"]["x"]
    assert entry["dtype"] == "bfloat16" and entry["shape"] == [2**16]
    finite = torch.isfinite(values)
    parsed = entry["data"]
    assert all(parsed[i] is None for i in torch.nonzero(~finite).flatten().tolist())
    kept = [parsed[i] for i in torch.nonzero(finite).flatten().tolist()]
    back = torch.tensor(kept, dtype=torch.float32)
    torch.testing.assert_close(back, values[finite].float(), rtol=0, atol=0)
    assert torch.equal(back.to(torch.bfloat16).view(torch.int16), all_bits[finite])


def test_float64_values_round_trip_exactly():
    x = torch.randn(100, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 1e5
    data = json.loads(encode_bundle(Bundle({"x": x}, {}), "json").body)["tensors"]["x"]["data"]
    assert data == x.tolist()


def test_odd_shapes_and_layouts():
    table = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    bundle = Bundle(
        {
            "t": table.T,  # not contiguous
            "scalar": torch.tensor(2.5),
            "empty": torch.zeros(0, 3),
            "flag": torch.tensor([True, False]),
        },
        {},
    )
    doc = json.loads(encode_bundle(bundle, "json").body)["tensors"]
    assert doc["t"] == {"shape": [4, 3], "dtype": "float32", "data": table.T.tolist()}
    assert doc["scalar"] == {"shape": [], "dtype": "float32", "data": 2.5}
    assert doc["empty"] == {"shape": [0, 3], "dtype": "float32", "data": []}
    assert doc["flag"]["data"] == [True, False]


def test_meta_may_hold_numpy_scalars_small_tensors_and_dtypes(tmp_path):
    meta = {"scale": np.float32(0.5), "slopes": torch.tensor([0.5, 0.25]), "dtype": torch.bfloat16}
    expected = {"scale": 0.5, "slopes": [0.5, 0.25], "dtype": "bfloat16"}
    bundle = Bundle({"x": torch.zeros(1)}, meta)
    assert json.loads(encode_bundle(bundle, "json").body)["meta"] == expected
    path = tmp_path / "m.safetensors"
    path.write_bytes(encode_bundle(bundle, "safetensors").body)
    with safe_open(str(path), framework="pt") as f:
        assert json.loads(f.metadata()["meta"]) == expected
    with pytest.raises(TypeError, match="object"):
        encode_bundle(Bundle({"x": torch.zeros(1)}, {"bad": object()}), "json")


def test_identical_bundles_give_identical_bytes():
    def make():
        return Bundle({"bias": masked_bias(), "slopes": torch.tensor([0.5, 0.25])}, {"h": 2})

    for fmt in FORMAT_MEDIA_TYPES:
        assert encode_bundle(make(), fmt).body == encode_bundle(make(), fmt).body


# --------------------------------------------------------------------------------------------
# JSON with base64 data
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "np_dtype"),
    [(torch.float32, "<f4"), (torch.float16, "<f2"), (torch.float64, "<f8"), (torch.int64, "<i8")],
)
def test_base64_is_the_raw_little_endian_bytes(dtype, np_dtype):
    x = (torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) - 7.25).to(dtype)
    if dtype.is_floating_point:
        x[0, 0, 1] = float("-inf")
    entry = json.loads(encode_bundle(Bundle({"x": x}, {}), "json", base64=True).body)["tensors"][
        "x"
    ]
    assert entry["shape"] == [2, 3, 4] and entry["dtype"] == dtype_name(dtype)
    back = np.frombuffer(base64.b64decode(entry["data"]), dtype=np_dtype).reshape(entry["shape"])
    np.testing.assert_array_equal(back, x.numpy())


def test_base64_of_bfloat16_gives_its_bit_patterns():
    x = torch.tensor([[1.0, -2.5, float("-inf")], [3.140625, 0.0, 1e-3]], dtype=torch.bfloat16)
    entry = json.loads(encode_bundle(Bundle({"x": x}, {}), "json", base64=True).body)["tensors"][
        "x"
    ]
    assert entry["dtype"] == "bfloat16"
    raw = np.frombuffer(base64.b64decode(entry["data"]), dtype="<i2").reshape(2, 3)
    np.testing.assert_array_equal(raw, x.view(torch.int16).numpy())


def test_base64_of_transposed_and_empty_tensors():
    table = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    doc = json.loads(
        encode_bundle(Bundle({"t": table.T, "e": torch.zeros(0, 2)}, {}), "json", base64=True).body
    )["tensors"]
    np.testing.assert_array_equal(
        np.frombuffer(base64.b64decode(doc["t"]["data"]), "<f4").reshape(3, 2), table.T.numpy()
    )
    assert doc["e"]["data"] == ""


# --------------------------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------------------------


def test_safetensors_holds_every_tensor_and_the_meta(tmp_path):
    bundle = Bundle(
        {
            "bias": masked_bias(),
            "slopes": torch.tensor([0.5, 0.25]),
            "buckets": torch.tensor([[0, 1], [17, 31]]),
            "half": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        },
        {"mode": "causal", "max_bias": 8.0, "heads": [0, 1]},
    )
    out = encode_bundle(bundle, "safetensors")
    assert out.media_type == "application/vnd.safetensors"
    loaded = safetensors_load(out.body)
    assert set(loaded) == set(bundle.tensors)
    for name, tensor in bundle.tensors.items():
        assert loaded[name].dtype == tensor.dtype
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0)
    path = tmp_path / "bundle.safetensors"
    path.write_bytes(out.body)
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    assert json.loads(metadata["meta"]) == bundle.meta


def test_safetensors_accepts_views_sharing_one_table():
    table = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    cos, sin = table.chunk(2, dim=1)  # two non-contiguous views of one storage
    loaded = safetensors_load(
        encode_bundle(Bundle({"cos": cos, "sin": sin}, {}), "safetensors").body
    )
    torch.testing.assert_close(loaded["cos"], cos, rtol=0, atol=0)
    torch.testing.assert_close(loaded["sin"], sin, rtol=0, atol=0)
    half = table[:2]  # a contiguous view over part of the storage
    loaded = safetensors_load(
        encode_bundle(Bundle({"a": half, "b": table}, {}), "safetensors").body
    )
    torch.testing.assert_close(loaded["a"], half, rtol=0, atol=0)
    torch.testing.assert_close(loaded["b"], table, rtol=0, atol=0)


# --------------------------------------------------------------------------------------------
# npy and raw
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int64])
def test_npy_is_the_primary_tensor(dtype):
    primary = (masked_bias() if dtype.is_floating_point else torch.arange(6).reshape(2, 3)).to(
        dtype
    )
    out = encode_bundle(Bundle({"bias": primary, "slopes": torch.ones(2)}, {}), "npy")
    assert out.media_type == "application/x-npy"
    arr = np.load(io.BytesIO(out.body), allow_pickle=False)
    assert arr.dtype == primary.numpy().dtype and arr.shape == tuple(primary.shape)
    np.testing.assert_array_equal(arr, primary.numpy())  # −inf stays −inf
    assert out.headers["X-Tensor-Name"] == "bias"


def test_npy_of_a_transposed_tensor_is_c_order():
    table = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    arr = np.load(io.BytesIO(encode_bundle(Bundle({"t": table.T}, {}), "npy").body))
    assert arr.flags.c_contiguous
    np.testing.assert_array_equal(arr, table.T.numpy())


def test_npy_has_no_bfloat16():
    bundle = Bundle({"encoding": torch.zeros(2, 2, dtype=torch.bfloat16)}, {})
    with pytest.raises(NotAcceptable) as err:
        encode_bundle(bundle, "npy")
    assert "bfloat16" in err.value.detail and "npy" in err.value.detail
    assert "float32" in err.value.detail
    assert "application/x-npy" not in err.value.available
    assert "application/vnd.safetensors" in err.value.available
    # the formats it names do work
    for fmt in ("json", "safetensors", "raw", "png"):
        encode_bundle(bundle, fmt)


@pytest.mark.parametrize(
    ("dtype", "np_dtype"),
    [(torch.float32, "<f4"), (torch.float16, "<f2"), (torch.bfloat16, "<i2"), (torch.int64, "<i8")],
)
def test_raw_is_the_primary_tensors_bytes_with_headers(dtype, np_dtype):
    primary = torch.linspace(-3, 3, 2 * 5 * 7).reshape(2, 5, 7).to(dtype)
    out = encode_bundle(Bundle({"bias": primary, "slopes": torch.ones(2)}, {}), "raw")
    assert out.media_type == "application/octet-stream"
    assert out.headers == {
        "X-Tensor-Name": "bias",
        "X-Tensor-Shape": "2,5,7",
        "X-Tensor-Dtype": dtype_name(dtype),
    }
    back = np.frombuffer(out.body, dtype=np_dtype).reshape(2, 5, 7)
    expected = primary.view(torch.int16) if dtype == torch.bfloat16 else primary
    np.testing.assert_array_equal(back, expected.numpy())


def test_raw_of_views_scalars_and_masks():
    table = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    out = encode_bundle(Bundle({"t": table[:, 1:3].T}, {}), "raw")
    assert out.headers["X-Tensor-Shape"] == "2,3"
    np.testing.assert_array_equal(np.frombuffer(out.body, "<f4").reshape(2, 3), table[:, 1:3].T)
    out = encode_bundle(Bundle({"s": torch.tensor(1.5)}, {}), "raw")
    assert out.headers["X-Tensor-Shape"] == "" and out.body == np.float32(1.5).tobytes()
    out = encode_bundle(Bundle({"bias": masked_bias()}, {}), "raw")
    assert np.isneginf(np.frombuffer(out.body, "<f4")).sum() == 2 * 3


# --------------------------------------------------------------------------------------------
# png
# --------------------------------------------------------------------------------------------


def render(tensor: torch.Tensor, name: str = "encoding", **kwargs) -> tuple[Image.Image, dict]:
    """Encode ``tensor`` as png; the decoded RGB image and its layout (with its ``title``)."""
    out = encode_bundle(Bundle({name: tensor}, {}), "png", **kwargs)
    assert out.media_type == "image/png"
    image = Image.open(io.BytesIO(out.body))
    image.load()
    assert image.format == "PNG" and image.mode == "RGB"
    assert image.width <= 1024 and image.height <= 1024
    layout = json.loads(image.text["posenc:layout"])  # type: ignore[attr-defined]
    layout["title"] = image.text["Title"]  # type: ignore[attr-defined]
    return image.convert("RGB"), layout


def cell_colours(image: Image.Image, panel: list[int], rows: int, cols: int) -> np.ndarray:
    """(rows, cols, 3) colour at the centre of each cell of one panel [x0, y0, w, h]."""
    x0, y0, w, h = panel
    pixels = np.asarray(image)
    ys = y0 + ((np.arange(rows) + 0.5) * h / rows).astype(int)
    xs = x0 + ((np.arange(cols) + 0.5) * w / cols).astype(int)
    return pixels[ys][:, xs]


def test_png_distinct_values_get_distinct_colours_on_viridis():
    table = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    image, layout = render(table)
    assert layout["colormap"] == "viridis" and (layout["vmin"], layout["vmax"]) == (0.0, 23.0)
    assert layout["axes"] == {"y": "position", "x": "dim"}
    assert len(layout["panels"]) == 1
    colours = cell_colours(image, layout["panels"][0], 4, 6).reshape(-1, 3)
    assert len({tuple(c) for c in colours}) == 24
    # the ends of viridis: dark purple for the minimum, yellow for the maximum
    np.testing.assert_allclose(colours[0], [68, 1, 84], atol=2)
    np.testing.assert_allclose(colours[-1], [253, 231, 37], atol=2)
    assert layout["title"].startswith("encoding") and "(4, 6)" in layout["title"]


def test_png_masked_entries_are_grey():
    bias = masked_bias()[0]  # (3, 3): −inf above the diagonal
    bias[2, 0] = float("nan")
    image, layout = render(bias, name="bias")
    colours = cell_colours(image, layout["panels"][0], 3, 3)
    grey = tuple(layout["masked_rgb"])
    finite = torch.isfinite(bias).numpy()
    assert all(tuple(c) == grey for c in colours[~finite])
    assert all(tuple(c) != grey for c in colours[finite])
    assert layout["axes"] == {"y": "query position i", "x": "key position j"}


def test_png_signed_data_uses_a_diverging_map_centred_on_zero():
    table = torch.tensor([[-1.0, 0.0, 1.0]])
    image, layout = render(table)
    assert layout["colormap"] == "RdBu_r" and (layout["vmin"], layout["vmax"]) == (-1.0, 1.0)
    neg, zero, pos = cell_colours(image, layout["panels"][0], 1, 3)[0].astype(int)
    assert neg[2] > neg[0] + 40  # blue
    assert pos[0] > pos[2] + 40  # red
    assert min(zero) > 230  # near white


def test_png_3d_is_a_grid_of_the_leading_index():
    heads = torch.arange(5, dtype=torch.float32)[:, None, None].expand(5, 6, 7)
    image, layout = render(heads, name="bias")
    assert len(layout["panels"]) == 5
    assert layout["panel_labels"] == [f"head {h}" for h in range(5)]
    boxes = [tuple(p) for p in layout["panels"]]
    assert len(set(boxes)) == 5
    for a in range(5):  # panels do not overlap
        for b in range(a + 1, 5):
            (xa, ya, w, h), (xb, yb, _, _) = boxes[a], boxes[b]
            assert abs(xa - xb) >= w or abs(ya - yb) >= h
    firsts = [tuple(cell_colours(image, p, 6, 7)[0, 0]) for p in layout["panels"]]
    assert len(set(firsts)) == 5  # each head its own colour
    for p, colour in zip(layout["panels"], firsts, strict=True):
        assert {tuple(c) for c in cell_colours(image, p, 6, 7).reshape(-1, 3)} == {colour}


def test_png_index_picks_one_panel():
    heads = torch.arange(5, dtype=torch.float32)[:, None, None] * torch.ones(5, 6, 7)
    heads[3] = torch.arange(42, dtype=torch.float32).reshape(6, 7)
    image, layout = render(heads, name="bias", index=3)
    assert len(layout["panels"]) == 1 and layout["panel_labels"] == ["head 3"]
    assert (layout["vmin"], layout["vmax"]) == (0.0, 41.0)  # the scale of that panel alone
    colours = cell_colours(image, layout["panels"][0], 6, 7).reshape(-1, 3)
    assert len({tuple(c) for c in colours}) == 42
    assert "head 3" in layout["title"]


@pytest.mark.parametrize("index", [5, -1, 100])
def test_png_index_out_of_range(index):
    with pytest.raises(InvalidArgument) as err:
        render(torch.zeros(5, 2, 2), name="bias", index=index)
    assert err.value.field == "index"
    assert "[0, 4]" in str(err.value) and str(index) in str(err.value)


def test_png_index_needs_a_3d_tensor():
    with pytest.raises(InvalidArgument) as err:
        render(torch.zeros(4, 4), index=0)
    assert err.value.field == "index" and "3-D" in str(err.value)


def test_png_1d_is_one_row():
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    image, layout = render(slopes, name="slopes")
    x0, y0, w, h = layout["panels"][0]
    assert layout["cells"] == [1, 4] and h >= 40
    assert layout["axes"] == {"y": "", "x": "head"}
    column = np.asarray(image)[y0 : y0 + h, x0 + w // 8]
    assert len({tuple(c) for c in column}) == 1  # one row: constant down each column
    colours = cell_colours(image, layout["panels"][0], 1, 4)[0]
    assert len({tuple(c) for c in colours}) == 4


def test_png_large_tensors_are_downsampled_to_the_cap():
    rows, cols = 3000, 2500
    gradient = torch.arange(rows, dtype=torch.float32)[:, None].expand(rows, cols)
    image, layout = render(gradient)
    x0, y0, w, h = layout["panels"][0]
    assert h < rows and w < cols
    column = np.asarray(image)[y0 : y0 + h, x0 + w // 2].astype(int)
    # the gradient runs down the rows: viridis green rises from top to bottom
    assert column[0, 1] < column[h // 2, 1] < column[-1, 1]


def test_png_other_dtypes_and_the_colour_bar():
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int64):
        image, layout = render(torch.arange(12).reshape(3, 4).to(dtype), name="buckets")
        assert (layout["vmin"], layout["vmax"]) == (0.0, 11.0)
        bx, by, bw, bh = layout["colorbar"]
        bar = np.asarray(image)[by : by + bh, bx + bw // 2].astype(int)
        np.testing.assert_allclose(bar[0], [253, 231, 37], atol=3)  # max at the top
        np.testing.assert_allclose(bar[-1], [68, 1, 84], atol=3)  # min at the bottom


def test_png_grid_is_capped_for_many_panels():
    _, layout = render(torch.rand(80, 4, 4), name="bias")
    assert len(layout["panels"]) == 64
    assert "first 64 of 80" in layout["title"]


def test_a_large_json_answer_written_in_slices_is_one_dumps(monkeypatch):
    """Issue 39: a JSON answer over formats.JSON_SLICE numbers (16 here) is written a slice
    at a time and spliced into its document: the bytes are those of one ``orjson.dumps``
    (every dtype, non-finite values, rows longer than a slice, 0-d and empty tensors, a
    layout that moves the entries, meta strings that look like the placeholders)."""
    gen = torch.Generator().manual_seed(0)
    bias = masked_bias().repeat(3, 5, 5)  # (6, 15, 15) with -inf
    tensors = {
        "bias": bias,
        "long_rows": torch.randn(2, 40, generator=gen, dtype=torch.float64),
        "half": torch.randn(50, generator=gen).half(),
        "brain": torch.randn(7, 9, generator=gen).bfloat16(),
        "ids": torch.arange(100).reshape(4, 25),
        "flag": torch.arange(30) % 3 == 0,
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "one_long": torch.randn(1, 1, 70, generator=gen),
    }
    meta = {"note": "\x00posenc-array-0\x00", "n": np.int64(3)}

    def layout(raw, entries, meta):  # a kind's own layout: entries moved under other keys
        return {"rank": {"b": entries["bias"]}, "rest": entries, "meta": meta}

    for bundle in (Bundle(tensors, meta), Bundle(tensors, meta, layout)):
        whole = encode_bundle(bundle, "json").body
        monkeypatch.setattr(formats, "JSON_SLICE", 16)
        sliced = bytes(encode_bundle(bundle, "json").body)
        monkeypatch.setattr(formats, "JSON_SLICE", 1 << 16)
        assert sliced == whole
        assert json.loads(sliced)["meta"]["note"] == "\x00posenc-array-0\x00"


def test_a_large_json_answer_over_http_is_the_table(app_client):
    """The whole path sends a sliced JSON answer (2 x 256 x 512 numbers, over JSON_SLICE) as
    it sends any body: its numbers are the library's table."""
    body = {"seq_len": 256, "head_dim": 512}
    r = app_client.post("/v1/encodings/rope", json=body)
    assert r.status_code == 200, r.text[:300]
    got = r.json()["tensors"]
    want = compute(ROPE, resolve_fields(ROPE, dict(body)))
    for name in ("cos", "sin"):
        assert got[name]["shape"] == [256, 512]
        assert np.array_equal(np.asarray(got[name]["data"], dtype=np.float32), want[name].numpy())
