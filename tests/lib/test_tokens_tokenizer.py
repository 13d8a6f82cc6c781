"""posenc.tokens.tokenizer: the built-in byte-level tokenizer against the bytes of the text, and the
checks around any tokenizers.Tokenizer (unknown ids located row-major, groups of texts)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc.core import slices
from posenc.core.errors import TokenOutOfRange, TooLarge
from posenc.readers.models import default_model
from posenc.tokens.tokenizer import (
    GROUP_TEXTS,
    NoTokenizer,
    TextTokenizer,
    builtin_tokenizer,
    byte_level_tokenizer,
    element_limit,
    text_groups,
    tokenizer_of,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=5))
def test_builtin_is_one_id_per_utf8_byte_and_lossless(texts: list[str]) -> None:
    tok = builtin_tokenizer()
    rows = tok.ids(texts)
    assert rows == [[b + 1 for b in t.encode()] for t in texts]
    assert tok.decode(rows) == texts


def test_builtin_has_no_special_tokens_and_pad_zero(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tok = byte_level_tokenizer()
    assert tok.token_to_id("<pad>") == 0 and tok.get_vocab_size() == 257
    assert tok.encode("<pad>").ids == [b + 1 for b in b"<pad>"]  # text, not the pad token
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))  # the file docs/deployment.md shows how to write
    from tokenizers import Tokenizer

    assert Tokenizer.from_file(str(path)).encode("héllo").ids == tok.encode("héllo").ids
    assert default_model().tokenizer is builtin_tokenizer()
    assert max(builtin_tokenizer().ids(["\U0010ffff\x00"])[0]) < default_model().vocab_size


@pytest.mark.parametrize(
    ("rows", "where"),
    [
        ([[1, 2], [], [3, 999]], "input_ids[2][1]"),
        ([[], [], [-1]], "input_ids[2][0]"),
        ([[5, 257]], "input_ids[0][1]"),
    ],
)
def test_unknown_ids_are_named_row_major(rows: list[list[int]], where: str) -> None:
    with pytest.raises(TokenOutOfRange) as info:
        builtin_tokenizer().decode(rows)
    assert info.value.field == where and where in str(info.value)


def test_groups_cover_every_text_once() -> None:
    assert list(text_groups([])) == [(0, 0)]
    lengths = [600_000, 600_000, 10, 2_000_000, 5]
    groups = list(text_groups(lengths))
    assert groups == [(0, 1), (1, 3), (3, 4), (4, 5)]


def test_groups_hold_at_most_group_texts_texts() -> None:
    """Many short texts: cut every GROUP_TEXTS texts, well before GROUP_CHARS characters."""
    n = 2 * GROUP_TEXTS + 5
    groups = list(text_groups([1] * n))
    assert groups == [(0, GROUP_TEXTS), (GROUP_TEXTS, 2 * GROUP_TEXTS), (2 * GROUP_TEXTS, n)]


def test_element_limit_stops_tokenizing() -> None:
    plain = TextTokenizer(byte_level_tokenizer(), "test")  # no tokens_per_byte: tokenizes
    with element_limit(10):
        assert plain.ids(["abcd"], elements_per_token=2) == [[98, 99, 100, 101]]
        with pytest.raises(TooLarge) as info:
            plain.ids(["abcdef"], elements_per_token=2)
    assert info.value.limit == 10 and info.value.requested == 12
    assert plain.ids(["abcdef"], elements_per_token=2)  # no limit outside the block


def test_a_model_without_a_tokenizer() -> None:
    model = default_model()
    model.tokenizer = None
    with pytest.raises(NoTokenizer, match="no tokenizer"):
        tokenizer_of(model)


def test_ids_in_slices_decode_and_check_as_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: ids are read (checked, sized) and decoded a slice of rows at a time (16 ids
    here, so rows are grouped, a long row stands alone, and runs of empty rows are cut): the
    texts are decode_batch's of all the rows at once, and an unknown id is named as before."""
    tok = builtin_tokenizer()
    texts = ["", "héllo wörld " * 5, "a", "", "", "🎉", "b" * 40, "xyz", *[""] * 40, "end"]
    rows = tok.ids(texts)
    want = tok.tokenizer.decode_batch(rows)
    size = tok.text_size(rows)
    monkeypatch.setattr(slices, "SLICE_ITEMS", 16)
    assert tok.decode(rows) == want == texts
    assert tok.text_size(rows) == size
    rows[6][30] = 999
    with pytest.raises(TokenOutOfRange) as info:
        tok.decode(rows)
    assert info.value.field == "input_ids[6][30]"
