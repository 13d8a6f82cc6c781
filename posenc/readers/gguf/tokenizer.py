"""A GGUF file's own vocabulary as a Hugging Face ``tokenizers`` tokenizer, tokenizing as
llama.cpp does.

llama.cpp (``src/llama-vocab.cpp``) reads ``tokenizer.ggml.*`` from the file. Two of its
tokenizer models are rebuilt here, so that the ids equal ``llama_tokenize(vocab, text,
add_special=True, parse_special=False)`` (llama.cpp's defaults):

- ``"llama"`` (SentencePiece-style, ``LLAMA_VOCAB_TYPE_SPM``): the text starts as its UTF-8
  characters; the adjacent pair whose concatenation is a token of highest score merges first,
  until no pair is a token; a character that is no token becomes its ``<0xXX>`` byte tokens.
  Spaces become ``▁`` and, with ``tokenizer.ggml.add_space_prefix`` (default true), each piece
  of text at the start or after a special token gets a ``▁`` first. Here: a ``BPE`` model whose
  merges are every split ``a + b`` of a token into two tokens, ranked by the whole token's
  score (highest first), with ``byte_fallback``; normalizers ``Prepend("▁")`` and
  ``Replace(" ", "▁")``. BOS (``tokenizer.ggml.bos_token_id``, default 1) is added unless
  ``tokenizer.ggml.add_bos_token`` is false; EOS only where ``add_eos_token`` is true.
- ``"gpt2"`` (byte-level BPE, ``LLAMA_VOCAB_TYPE_BPE``): the pre-tokenizer regexes llama.cpp
  uses for ``tokenizer.ggml.pre`` (one ``Split`` each, isolated, in llama.cpp's order), the
  ``ByteLevel`` alphabet, then a ``BPE`` model with the file's ``tokenizer.ggml.merges`` in
  order (``ignore_merges`` where llama.cpp sets it: a word that is a token is that token). BOS
  and EOS only where ``add_bos_token``/``add_eos_token`` (or the pre-tokenizer, e.g. llama3)
  asks.

Tokens of type USER_DEFINED (4) are found in the text before anything else, as llama.cpp does
even with ``parse_special=False``; CONTROL tokens (``<s>``) in a text are read as text, and so
are the user-defined tokens llama.cpp makes CONTROL by their text (``</s>``, ``<|im_end|>``,
FIM tokens: ``llama_vocab::impl::load``). In a file whose ``general.name`` says Phi-3, the
whitespace after a user-defined token is dropped, as llama.cpp's RSTRIP attribute does.
CONTROL tokens are the tokenizer's special tokens with ``encode_special_tokens`` on: encoding
reads them as text, and decoding with ``skip_special_tokens`` leaves them (BOS) out.

Limits (a clear :class:`UnsupportedGgufTokenizer` at load): other tokenizer models (``bert``,
``t5``, ``rwkv``, ...) and ``gpt2`` pre-tokenizers outside :data:`PRE_REGEXES`. Where two
SentencePiece pairs of equal score could merge at once, llama.cpp takes the leftmost and this
BPE the one whose token comes first in the vocabulary; vocabularies with distinct scores (and
every test fixture) give the same ids.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from posenc.core.errors import InvalidArgument
from posenc.tokens.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)

__all__ = ["PRE_REGEXES", "UnsupportedGgufTokenizer", "gguf_tokenizer"]

_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
    r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
    r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_DEFAULT = (
    r"[\p{P}\$\+<=>\^~\|]+",
    _GPT2,
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
)

#: ``tokenizer.ggml.pre`` -> (llama.cpp's pre-tokenizer regexes in order, ignore_merges,
#: add_bos by default), as ``llama_vocab::impl::load`` and ``llm_tokenizer_bpe`` set them.
PRE_REGEXES: dict[str, tuple[tuple[str, ...], bool, bool]] = {
    "": (_DEFAULT, False, False),
    "default": (_DEFAULT, False, False),
    **{p: ((_LLAMA3,), True, True) for p in ("llama3", "llama-v3", "llama-bpe", "falcon3")},
    **{p: ((_QWEN2,), False, False) for p in ("qwen2", "deepseek-r1-qwen")},
    **{p: ((_GPT2,), False, False) for p in ("gpt-2", "phi-2", "mpt", "olmo")},
    **{
        p: ((r"\p{N}", _GPT2), False, False)
        for p in ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone")
    },
    "stablelm2": ((_QWEN2,), False, False),
    "falcon": (
        (
            r"[\p{P}\$\+<=>\^~\|`]+",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
            r"[0-9][0-9][0-9]",
        ),
        False,
        False,
    ),
}

#: ``tokenizer.ggml.token_type`` values (llama.cpp's ``llama_token_type``).
_CONTROL, _USER_DEFINED, _BYTE = 3, 4, 6

#: Token texts llama.cpp makes CONTROL whatever their type (``llama_vocab::impl::load``: the
#: end-of-generation list), so that ``parse_special=False`` reads them as text.
_EOG_TEXTS = frozenset(
    {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
     "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
     "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
     "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~["}
)  # fmt: skip
#: Token texts llama.cpp makes CONTROL when the file names no id of their kind (FIM tokens and
#: end of turn), by ``tokenizer.ggml.*_token_id`` key.
_BY_KIND: dict[str, frozenset[str]] = {
    "eot": frozenset({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                      "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>",
                      "<\uff5cend\u2581of\u2581sentence\uff5c>"}),
    "eom": frozenset({"<|eom_id|>"}),
    "fim_pre": frozenset({"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\u2581<PRE>",
                          "<|code_prefix|>", "<|prefix|>", "<\uff5cfim\u2581begin\uff5c>"}),
    "fim_suf": frozenset({"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\u2581<SUF>",
                          "<|code_suffix|>", "<|suffix|>", "<\uff5cfim\u2581hole\uff5c>"}),
    "fim_mid": frozenset({"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\u2581<MID>",
                          "<|code_middle|>", "<|middle|>", "<\uff5cfim\u2581end\uff5c>"}),
    "fim_pad": frozenset({"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}),
    "fim_rep": frozenset({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}),
    "fim_sep": frozenset({"<|file_sep|>"}),
}  # fmt: skip
#: Tokens of a Phi-3 file (by ``general.name``) that keep the whitespace after them.
_PHI3_KEEP_SPACE = frozenset({"<unk>", "<s>", "<|endoftext|>"})


class UnsupportedGgufTokenizer(InvalidArgument):
    """The GGUF's tokenizer is one posenc does not rebuild; the message names it."""


def _flag(metadata: Mapping[str, Any], key: str, default: bool) -> bool:
    value = metadata.get(f"tokenizer.ggml.{key}")
    return bool(value) if isinstance(value, bool) else default


def _special_id(metadata: Mapping[str, Any], key: str, default: int | None, n: int) -> int | None:
    value = metadata.get(f"tokenizer.ggml.{key}_token_id")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n:
        return value
    return default if default is not None and default < n else None


def _spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """Every split of a token into two tokens, the whole token's score highest first (ties:
    the token's id, then the split point)."""
    ids = {t: i for i, t in enumerate(tokens)}
    ranked: list[tuple[float, int, int, tuple[str, str]]] = []
    for i, token in enumerate(tokens):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ids and right in ids:
                ranked.append((-scores[i], i, cut, (left, right)))
    ranked.sort()
    return [pair for *_, pair in ranked]


def _spm(tk: Any, metadata: Mapping[str, Any], tokens: list[str]) -> Any:
    scores = metadata.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    unk = _special_id(metadata, "unknown", 0, len(tokens))
    model = tk.models.BPE(
        vocab=vocab,
        merges=_spm_merges(tokens, [float(s) for s in scores]),
        unk_token=tokens[unk] if unk is not None else None,
        byte_fallback=True,
        fuse_unk=False,
    )
    tokenizer = tk.Tokenizer(model)
    steps = [tk.normalizers.Replace(" ", "▁")]
    if _flag(metadata, "add_space_prefix", True):
        steps.insert(0, tk.normalizers.Prepend("▁"))
    tokenizer.normalizer = tk.normalizers.Sequence(steps)
    tokenizer.decoder = tk.decoders.Sequence(
        [tk.decoders.Replace("▁", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
        + ([tk.decoders.Strip(" ", 1, 0)] if _flag(metadata, "add_space_prefix", True) else [])
    )
    return tokenizer, True


def _bpe(tk: Any, metadata: Mapping[str, Any], tokens: list[str]) -> Any:
    pre = str(metadata.get("tokenizer.ggml.pre", ""))
    if pre not in PRE_REGEXES:
        raise UnsupportedGgufTokenizer(
            f"GGUF pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not rebuilt by posenc; it "
            f"rebuilds {', '.join(repr(p) for p in PRE_REGEXES if p)}",
            field="model",
        )
    regexes, ignore_merges, add_bos = PRE_REGEXES[pre]
    merges = []
    for line in metadata.get("tokenizer.ggml.merges") or []:
        cut = str(line).find(" ", 1)  # as llama.cpp splits: the first space after the first byte
        if cut > 0:
            merges.append((line[:cut], line[cut + 1 :]))
    model = tk.models.BPE(
        vocab={t: i for i, t in enumerate(tokens)}, merges=merges, ignore_merges=ignore_merges
    )
    tokenizer = tk.Tokenizer(model)
    splits = [
        tk.pre_tokenizers.Split(tk.Regex(r), behavior="isolated", invert=False) for r in regexes
    ]
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [*splits, tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = tk.decoders.ByteLevel()
    return tokenizer, add_bos


def _post(tk: Any, tokenizer: Any, metadata: Mapping[str, Any], tokens: list[str],
          bos_default: int | None, add_bos: bool) -> None:  # fmt: skip
    """BOS/EOS as llama.cpp adds them with ``add_special``."""
    n = len(tokens)
    bos = _special_id(metadata, "bos", bos_default, n)
    eos = _special_id(metadata, "eos", bos_default + 1 if bos_default == 1 else bos_default, n)
    first = [bos] if _flag(metadata, "add_bos_token", add_bos) and bos is not None else []
    last = [eos] if _flag(metadata, "add_eos_token", False) and eos is not None else []
    if not first and not last:
        return
    tokenizer.post_processor = tk.processors.TemplateProcessing(
        single=[tokens[i] for i in first] + ["$A"] + [tokens[i] for i in last],
        pair=[tokens[i] for i in first] + ["$A", "$B"] + [tokens[i] for i in last],
        special_tokens=[(tokens[i], i) for i in dict.fromkeys(first + last)],
    )


def _control_texts(metadata: Mapping[str, Any]) -> set[str]:
    """Texts llama.cpp makes CONTROL whatever their type (:data:`_EOG_TEXTS`, :data:`_BY_KIND`)."""
    control = set(_EOG_TEXTS)
    for kind, texts in _BY_KIND.items():
        if f"tokenizer.ggml.{kind}_token_id" not in metadata:
            control |= texts
    return control


def _user_defined(metadata: Mapping[str, Any], tokens: list[str]) -> list[str]:
    """The USER_DEFINED tokens that llama.cpp finds in text with ``parse_special=False``: not
    those it makes CONTROL by their text."""
    control = _control_texts(metadata)
    types = metadata.get("tokenizer.ggml.token_type") or []
    return [
        tokens[i]
        for i, t in enumerate(types[: len(tokens)])
        if t == _USER_DEFINED and tokens[i] not in control
    ]


def _control(metadata: Mapping[str, Any], tokens: list[str]) -> list[str]:
    """The CONTROL tokens (by type, or made so by their text), which decoding skips."""
    by_text = _control_texts(metadata)
    types = metadata.get("tokenizer.ggml.token_type") or []
    return [
        tokens[i]
        for i, t in enumerate(types[: len(tokens)])
        if t == _CONTROL or (t == _USER_DEFINED and tokens[i] in by_text)
    ]


def gguf_tokenizer(metadata: Mapping[str, Any], source: str) -> TextTokenizer:
    """The tokenizer llama.cpp builds from a GGUF's ``tokenizer.ggml.*`` keys (module
    docstring).

    Args:
        metadata: the GGUF's key/value pairs (:attr:`posenc.readers.gguf.metadata.GgufHead.metadata`).
        source: where it comes from, for messages.

    Raises:
        UnsupportedGgufTokenizer: no vocabulary, or a tokenizer model or pre-tokenizer not
            rebuilt here (named).
    """
    model = metadata.get("tokenizer.ggml.model")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise UnsupportedGgufTokenizer(
            "the GGUF has no vocabulary (tokenizer.ggml.tokens)", field="model"
        )
    if model not in ("llama", "gpt2"):
        raise UnsupportedGgufTokenizer(
            f"GGUF tokenizer model {model!r} (tokenizer.ggml.model) is not rebuilt by posenc; "
            "it rebuilds 'llama' (SentencePiece-style) and 'gpt2' (byte-level BPE)",
            field="model",
        )
    try:
        import tokenizers as tk
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "text needs Hugging Face's 'tokenizers' package (pip install 'posenc[service]')"
        ) from exc
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(map(str, tokens))]
    if model == "llama":
        tokenizer, add_bos = _spm(tk, metadata, tokens)
        bos_default: int | None = 1
    else:
        tokenizer, add_bos = _bpe(tk, metadata, tokens)
        bos_default = 11
    control = _control(metadata, tokens)
    if control:  # known to decode (skip_special_tokens), read as text when encoding
        tokenizer.add_special_tokens(
            [tk.AddedToken(t, normalized=False, special=True) for t in control]
        )
        tokenizer.encode_special_tokens = True
    user = _user_defined(metadata, tokens)
    if user:
        name = str(metadata.get("general.name", "")).lower()
        phi3 = "phi-3" in name or "phi3" in name  # llama.cpp strips the space after them
        tokenizer.add_tokens([tk.AddedToken(t, normalized=False, special=False,
                                            rstrip=phi3 and t not in _PHI3_KEEP_SPACE)
                              for t in user])  # fmt: skip
    _post(tk, tokenizer, metadata, tokens, bos_default, add_bos)
    logger.info(
        "GGUF tokenizer %s: model %r, %d tokens, %d user-defined",
        source, model, len(tokens), len(user),
    )  # fmt: skip
    return TextTokenizer(cast("Any", tokenizer), f"gguf {source} ({model})")
