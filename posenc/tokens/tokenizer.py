"""Text in and out: the tokenizer of a model, on Hugging Face's ``tokenizers`` library.

A model folder's ``tokenizer.json`` (the ``tokenizers`` format) is loaded as it is
(:func:`load_tokenizer`); the built-in model ``posenc-base`` gets :func:`byte_level_tokenizer`,
built here with the same library at start-up (nothing to download, no file):

- id 0 is ``<pad>`` (the model's pad token), ids 1..256 are the 256 bytes, in the GPT-2
  byte-to-unicode alphabet (``ByteLevel`` pre-tokenizer without its regex split, a ``BPE``
  model with no merges, the ``ByteLevel`` decoder); no added or special tokens, so no text is
  ever read as one (``"<pad>"`` in a text is five byte tokens);
- so every UTF-8 text is one token per byte, ``decode(encode(x)) == x`` for any text, and every
  id is below 257, well inside the model's 32000 rows.

``tokenizer.json`` of it: ``byte_level_tokenizer().save(path)``.

Batches go through ``encode_batch`` / ``decode_batch`` (the Rust side's threads, the GIL
released), never a Python loop over the texts.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from posenc.core import slices
from posenc.core.errors import InvalidArgument, TokenOutOfRange, TooLarge

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

__all__ = [
    "NoTokenizer",
    "TextTokenizer",
    "builtin_tokenizer",
    "byte_level_tokenizer",
    "element_limit",
    "load_tokenizer",
    "text_groups",
    "tokenizer_of",
]

PAD_TOKEN = "<pad>"


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "text needs Hugging Face's 'tokenizers' package (pip install 'posenc[service]')"
        ) from exc
    return tokenizers


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (``ByteLevel``'s alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    chars = dict(zip(printable, printable, strict=True))
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {b: chr(c) for b, c in chars.items()}


def byte_level_tokenizer() -> Tokenizer:
    """The built-in model's tokenizer: ``<pad>`` = 0, byte ``b`` = ``b + 1`` (module docstring)."""
    tk = _import_tokenizers()
    vocab = {PAD_TOKEN: 0}
    for byte, char in _bytes_to_unicode().items():
        vocab[char] = byte + 1
    tokenizer = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    return cast("Tokenizer", tokenizer)


GROUP_CHARS = 1 << 20
"""Characters of text given to one ``encode_batch`` call (a single longer text goes alone)."""

GROUP_TEXTS = 1 << 13
"""Texts given to one ``encode_batch`` call: making each text's ``Encoding`` holds the GIL, so
four million one-character texts in one call held every other thread (a service's event loop)
for seconds; 8,192 a call keep each hold to milliseconds."""

_ELEMENT_LIMIT: ContextVar[int | None] = ContextVar("posenc_text_element_limit", default=None)


@contextmanager
def element_limit(limit: int | None) -> Iterator[None]:
    """Within the block, :meth:`TextTokenizer.ids` stops at ``limit`` output elements (a
    server's ``POSENC_MAX_ELEMENTS``), so a batch too large to answer is not tokenized whole."""
    token = _ELEMENT_LIMIT.set(limit)
    try:
        yield
    finally:
        _ELEMENT_LIMIT.reset(token)


def text_groups(lengths: list[int]) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of consecutive texts of about :data:`GROUP_CHARS` characters in all,
    and at most :data:`GROUP_TEXTS` of them."""
    start, size = 0, 0
    for i, n in enumerate(lengths):
        if i > start and (size + n > GROUP_CHARS or i - start >= GROUP_TEXTS):
            yield start, i
            start, size = i, 0
        size += n
    yield start, len(lengths)


class TextTokenizer:
    """A ``tokenizers.Tokenizer`` with the checks a service needs around it.

    Attributes:
        tokenizer: the ``tokenizers.Tokenizer``.
        source: where it comes from (a path, or ``built-in``).
        vocab_size: ids it knows, added tokens included.
    """

    def __init__(
        self, tokenizer: Tokenizer, source: str, *, tokens_per_byte: float | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.source = source
        # the fewest tokens each UTF-8 byte of a text makes, where known (byte-level without
        # merges: exactly 1), so a batch too large to answer is refused before it is tokenized
        self.tokens_per_byte = tokens_per_byte
        ids = np.fromiter(tokenizer.get_vocab(with_added_tokens=True).values(), dtype=np.int64)
        self._known = np.zeros(int(ids.max()) + 1 if ids.size else 0, dtype=bool)  # (max id + 1,)
        self._known[ids] = True
        self.vocab_size = int(ids.size)
        self._lengths: np.ndarray | None = None  # (max id + 1,) characters of each token

    def encode(
        self,
        texts: Sequence[str],
        *,
        add_special_tokens: bool = True,
        field: str = "text",
        first_row: int = 0,
    ) -> list[Encoding]:
        """``encode_batch(texts, add_special_tokens=...)``: one ``Encoding`` per text, no
        padding, no truncation (``first_row``: the first text's row in messages).

        Raises:
            InvalidArgument: a text that is not a string of valid Unicode (a lone surrogate
                such as ``"\\ud800"`` is not UTF-8), naming it as ``text[ROW]``.
        """
        texts = list(texts)
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidArgument(
                    f"{field}[{row + first_row}] must be a string, got {type(text).__name__}",
                    field=f"{field}[{row + first_row}]",
                )
        try:
            return list(self.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens))
        except (TypeError, ValueError, UnicodeError, OverflowError) as exc:
            for row, text in enumerate(texts):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as bad:
                    where = f"{field}[{row + first_row}]"
                    raise InvalidArgument(
                        f"{where} is not valid Unicode text (character {bad.start}, "
                        f"{text[bad.start]!r}, is a lone surrogate): send UTF-8 text",
                        field=where,
                    ) from None
            raise InvalidArgument(f"{field} could not be tokenized: {exc}", field=field) from exc

    def ids(
        self,
        texts: Sequence[str],
        *,
        add_special_tokens: bool = True,
        field: str = "text",
        elements_per_token: int = 1,
    ) -> list[list[int]]:
        """The token ids of each text (ragged rows), from :meth:`encode`.

        The texts go to ``encode_batch`` in groups of about :data:`GROUP_CHARS` characters, each
        group's encodings dropped once its ids are taken, so a large batch never holds all its
        encodings (about 200 bytes per token) at once. Under :func:`element_limit`, a batch
        whose tokens already make more than the limit (``elements_per_token`` each, a lower
        bound of the output per token) stops with ``TooLarge`` at the group that crosses it.
        """
        limit = _ELEMENT_LIMIT.get()
        if limit is not None and self.tokens_per_byte is not None:
            least = int(self.tokens_per_byte * sum(len(t.encode("utf-8", "replace")) for t in texts
                                                   if isinstance(t, str)))  # fmt: skip
            if least * elements_per_token > limit:
                raise TooLarge(
                    f"{field} makes at least {least} tokens of {elements_per_token} output "
                    f"elements each ({least * elements_per_token}), over the limit of {limit} "
                    "elements (POSENC_MAX_ELEMENTS); send fewer or shorter texts",
                    limit=limit,
                    requested=least * elements_per_token,
                    field=field,
                )
        rows: list[list[int]] = []
        tokens = 0
        for start, stop in text_groups([len(t) if isinstance(t, str) else 0 for t in texts]):
            encodings = self.encode(
                texts[start:stop],
                add_special_tokens=add_special_tokens,
                field=field,
                first_row=start,
            )
            rows.extend(e.ids for e in encodings)
            del encodings
            tokens += sum(len(r) for r in rows[start:stop])
            if limit is not None and tokens * elements_per_token > limit:
                raise TooLarge(
                    f"{field} makes at least {tokens} tokens of {elements_per_token} output "
                    f"elements each ({tokens * elements_per_token}), over the limit of {limit} "
                    "elements (POSENC_MAX_ELEMENTS); send fewer or shorter texts",
                    limit=limit,
                    requested=tokens * elements_per_token,
                    field=field,
                )
        return rows

    def check_ids(self, rows: Any, field: str = "input_ids") -> None:
        """Every id of ``rows`` (ragged lists, or a 2-D array) is one the tokenizer knows.

        Raises:
            TokenOutOfRange: the first unknown id, row-major, as ``input_ids[ROW][COL]``.
        """
        if isinstance(rows, np.ndarray):
            lengths = np.full(rows.shape[0], rows.shape[1], dtype=np.int64)
            flat = rows.reshape(-1).astype(np.int64)
        else:  # in slices: one C call over millions of ids holds the GIL (issue 39)
            flat, lengths = slices.flat_ints(rows)
        inside = (flat >= 0) & (flat < self._known.size)
        good = np.zeros(flat.shape, dtype=bool)
        good[inside] = self._known[flat[inside]]
        if good.all():
            return
        at = int(np.argmin(good))  # the first False
        starts = np.cumsum(lengths) - lengths
        row = int(np.searchsorted(starts, at, side="right")) - 1
        while lengths[row] == 0:  # empty rows share their start with the next
            row += 1
        col = at - int(starts[row])
        raise TokenOutOfRange(
            f"token id {int(flat[at])} at {field}[{row}][{col}] is not in the tokenizer's "
            f"vocabulary ({self.vocab_size} ids, the largest {self._known.size - 1})",
            field=f"{field}[{row}][{col}]",
        )

    def text_size(self, rows: Sequence[Sequence[int]]) -> int:
        """The characters of the tokens ``rows`` name, all together (known ids only): a bound
        on what decoding them makes, for decoders that shorten or join tokens (byte-level,
        WordPiece, Metaspace), plus one per id for a joining space."""
        if self._lengths is None:
            lengths = np.zeros(self._known.size, dtype=np.int64)
            for token, i in self.tokenizer.get_vocab(with_added_tokens=True).items():
                lengths[i] = len(token)
            self._lengths = lengths
        flat, _lengths = slices.flat_ints(rows)
        return int(self._lengths[flat].sum()) if flat.size else 0

    def decode(
        self, rows: Sequence[Sequence[int]], *, skip_special_tokens: bool = True
    ) -> list[str]:
        """``decode_batch(rows, skip_special_tokens=...)`` after :meth:`check_ids`, in runs of
        rows of about :data:`~posenc.core.slices.SLICE_ITEMS` ids (``decode_batch`` reads its
        ids from Python with the GIL held, then decodes without it; a row is decoded whole)."""
        self.check_ids(rows)
        lengths = slices.lengths_of(rows)
        ends = np.cumsum(lengths)
        out: list[str] = []
        lo = 0
        while lo < len(rows):
            done = int(ends[lo - 1]) if lo else 0
            hi = int(np.searchsorted(ends, done + slices.SLICE_ITEMS, side="right"))
            hi = max(lo + 1, min(hi, lo + slices.SLICE_ITEMS))
            group = [r if isinstance(r, list) else list(r) for r in rows[lo:hi]]
            out += self.tokenizer.decode_batch(group, skip_special_tokens=skip_special_tokens)
            lo = hi
            slices.pause()
        return out


def load_tokenizer(path: str | os.PathLike[str]) -> TextTokenizer:
    """``Tokenizer.from_file(path)`` (a ``tokenizer.json``).

    Raises:
        InvalidArgument: the file cannot be read as a tokenizer (the library's message).
    """
    tk = _import_tokenizers()
    where = os.fspath(path)
    try:
        tokenizer = tk.Tokenizer.from_file(where)
    except Exception as exc:  # the Rust side raises a plain Exception on a bad file
        raise InvalidArgument(
            f"{where}: cannot read as a tokenizers tokenizer.json: {exc}", field="tokenizer"
        ) from exc
    return TextTokenizer(tokenizer, where)


@functools.cache
def builtin_tokenizer() -> TextTokenizer:
    """:func:`byte_level_tokenizer`, built once per process."""
    return TextTokenizer(
        byte_level_tokenizer(),
        "built-in (byte-level, posenc.tokens.tokenizer)",
        tokens_per_byte=1.0,
    )


class NoTokenizer(InvalidArgument):
    """Text sent to a model without a tokenizer (HTTP 422); ``model`` is its name."""

    def __init__(
        self, model: str, *, with_tokenizer: Sequence[str] = (), reason: str | None = None
    ) -> None:
        message = (
            f"model {model!r} has no tokenizer (no tokenizer.json beside its weights), so it "
            "cannot read text; send input_ids, or name a model that has one"
        )
        if reason:
            message = f"model {model!r} cannot read text: {reason}; or name a model that has one"
        if with_tokenizer:
            message += f" ({', '.join(with_tokenizer)})"
        super().__init__(message, field="model")
        self.model = model
        self.reason = reason


def tokenizer_of(model: Any) -> TextTokenizer:
    """The model's tokenizer, or :class:`NoTokenizer`."""
    if getattr(model, "tokenizer", None) is None:
        raise NoTokenizer(model.name, reason=getattr(model, "no_tokenizer", None))
    return cast(TextTokenizer, model.tokenizer)
