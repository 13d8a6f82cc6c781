"""A GGUF's own vocabulary tokenizes as llama.cpp does (:mod:`posenc.readers.gguf.tokenizer`).

Reference: ``llama_tokenize(vocab, text, add_special=True, parse_special=False)`` of
llama-cpp-python (libllama's ``src/llama-vocab.cpp``), recorded by
scripts/record_gguf_tokens.py into tests/fixtures/gguf/tokens.json for files written by
``gguf``'s own writer (a SentencePiece vocabulary with byte fallback, one byte-level BPE
vocabulary under four pre-tokenizers) and two files made by llama.cpp's converter from tiny
transformers models; the live test calls llama.cpp itself where it is installed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from posenc.readers.gguf.tensors import read_gguf_file_head
from posenc.readers.gguf.tokenizer import UnsupportedGgufTokenizer, gguf_tokenizer

pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parent.parent.parent
RECORD = json.loads((ROOT / "tests" / "fixtures" / "gguf" / "tokens.json").read_text("utf-8"))
FILES: dict[str, dict[str, list[int]]] = RECORD["files"]
CASES = [(f, t) for f, texts in FILES.items() for t in texts]


def _metadata(file: str) -> dict[str, Any]:
    head, _ = read_gguf_file_head(str(ROOT / file))
    return head.metadata


def test_every_kind_of_file_is_recorded() -> None:
    models = {_metadata(f)["tokenizer.ggml.model"] for f in FILES}
    pres = {_metadata(f).get("tokenizer.ggml.pre") for f in FILES if "bpe" in f}
    assert models == {"llama", "gpt2"}
    assert pres == {"default", "llama-bpe", "qwen2", "gpt-2"}
    assert any("converted-" in f for f in FILES) and min(map(len, FILES.values())) >= 8


@pytest.mark.parametrize("file", list(FILES))
def test_ids_equal_llama_cpp(file: str) -> None:
    tokenizer = gguf_tokenizer(_metadata(file), file)
    texts = list(FILES[file])
    got = tokenizer.ids(texts)
    for text, ids in zip(texts, got, strict=True):
        assert ids == FILES[file][text], (file, text)


def test_the_recorded_ids_differ_between_pre_tokenizers() -> None:
    """The fixtures can tell the pre-tokenizers apart (and BOS: llama-bpe adds it)."""
    digits = "digits 1234567 and 3.14159, 42nd"
    runs = {f: FILES[f][digits] for f in FILES if "vocab-bpe" in f}
    assert len({tuple(v) for v in runs.values()}) >= 3
    assert FILES["tests/fixtures/gguf/vocab-bpe-llama-bpe.gguf"][""] == [0]
    assert FILES["tests/fixtures/gguf/vocab-bpe-gpt-2.gguf"][""] == []


def test_user_defined_tokens_are_found_and_control_tokens_are_text() -> None:
    file = "tests/fixtures/gguf/vocab-spm.gguf"
    meta = _metadata(file)
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    user = tokens.index("<|tool|>")
    assert types[user] == 4
    tokenizer = gguf_tokenizer(meta, file)
    ids = tokenizer.ids(["a<|tool|>b <s>"])[0]
    assert ids.count(user) == 1 and ids[0] == 1 and ids.count(1) == 1  # only the BOS is <s>


def test_phi3_files_read_end_of_text_as_text_and_strip_after_user_tokens() -> None:
    """llama.cpp makes ``</s>`` CONTROL by its text although the Phi-3 file says USER_DEFINED,
    and strips the whitespace after a Phi-3 file's user-defined tokens (by general.name)."""
    text = "a</s> b <|tool|>   spaces after<|tool|>\tx"
    pieces = {}
    for file in ("tests/fixtures/gguf/vocab-spm.gguf", "tests/fixtures/gguf/vocab-spm-phi3.gguf"):
        meta = _metadata(file)
        tokens = meta["tokenizer.ggml.tokens"]
        ids = gguf_tokenizer(meta, file).ids([text])[0]
        assert ids == FILES[file][text]
        pieces[file] = [tokens[i] for i in ids]
    plain, phi3 = pieces.values()
    assert "</s>" not in plain and "</s>" not in phi3
    assert plain[plain.index("<|tool|>") + 1 : plain.index("<|tool|>") + 5] == ["▁"] * 4
    assert phi3[phi3.index("<|tool|>") + 1 : phi3.index("<|tool|>") + 3] == ["▁", "s"]
    assert phi3[-1] == "▁x"  # the tab after the second one is stripped too


def _spm(tokens: list[str], scores: list[float], **extra: Any) -> dict[str, Any]:
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": [2, 3, 3] + [1] * (len(tokens) - 3),
        **extra,
    }


def test_spm_merges_the_best_scored_pair_first_by_hand() -> None:
    """``"abc"`` is ``"▁abc"``. Scores ab -1, bc -2, abc -3, ▁a -5: ab merges first, then
    ab + c = abc (-3): ``▁ abc``. Scores bc -1, ab -2, ▁a -5, abc -6: bc first, then ▁a (-5)
    beats a + bc (-6), and ▁a + bc is no token: ``▁a bc``."""
    tokens = ["<unk>", "<s>", "</s>", "▁", "a", "b", "c", "ab", "bc", "▁a", "abc"]
    first = _spm(tokens, [0, 0, 0, -9, -9, -9, -9, -1, -2, -5, -3])
    assert gguf_tokenizer(first, "hand").ids(["abc"]) == [[1, 3, 10]]
    second = _spm(tokens, [0, 0, 0, -9, -9, -9, -9, -2, -1, -5, -6])
    assert gguf_tokenizer(second, "hand").ids(["abc"]) == [[1, 9, 8]]
    first.update({"tokenizer.ggml.add_space_prefix": False, "tokenizer.ggml.add_bos_token": False})
    assert gguf_tokenizer(first, "hand").ids(["abc", "a b"]) == [[10], [4, 3, 5]]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"tokenizer.ggml.model": "bert"}, "'bert'"),
        ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "mystery"}, "'mystery'"),
        ({"tokenizer.ggml.tokens": []}, "tokenizer.ggml.tokens"),
    ],
)
def test_unsupported_tokenizers_are_refused_by_name(change: dict[str, Any], named: str) -> None:
    meta = {**_spm(["<unk>", "<s>", "</s>", "a"], [0, 0, 0, -1]), **change}
    with pytest.raises(UnsupportedGgufTokenizer) as err:
        gguf_tokenizer(meta, "x.gguf")
    assert named in err.value.message and err.value.field == "model"


LIVE_TEXTS = ("mixed 🦙 text\twith ÆØÅ and 12345", "   ", "x<|tool|><|tool|>y", "naïve café")


def test_live_llama_cpp() -> None:
    """Where llama-cpp-python imports: llama.cpp's own ids, recorded files and new texts."""
    pytest.importorskip("llama_cpp")
    from scripts.record_gguf_tokens import llama_cpp_ids

    for file in FILES:
        if "converted-" in file:
            continue
        want = llama_cpp_ids(ROOT / file, [*FILES[file], *LIVE_TEXTS])
        tokenizer = gguf_tokenizer(_metadata(file), file)
        assert tokenizer.ids(list(want)) == list(want.values()), file


#: llama.cpp's own test vocabularies (``models/ggml-vocab-NAME.gguf`` with ``.inp`` texts) that
#: posenc rebuilds: Llama 2 and Phi-3 (SentencePiece); Llama 3, Qwen2, GPT-2, MPT, StarCoder,
#: Refact, Command-R and Falcon (BPE).
REAL_VOCABS = (
    "llama-spm",
    "phi-3",
    "llama-bpe",
    "qwen2",
    "gpt-2",
    "mpt",
    "starcoder",
    "refact",
    "command-r",
    "falcon",
)


@pytest.mark.parametrize("name", REAL_VOCABS)
def test_live_llama_cpp_test_vocabularies(name: str) -> None:
    """Where llama-cpp-python imports and ``POSENC_LLAMA_CPP_SRC`` names a llama.cpp source
    folder: its test vocabularies on their own test texts and on :data:`TEXTS`."""
    pytest.importorskip("llama_cpp")
    source = os.environ.get("POSENC_LLAMA_CPP_SRC")
    if not source:
        pytest.skip("POSENC_LLAMA_CPP_SRC is not set")
    from scripts.record_gguf_tokens import TEXTS, llama_cpp_ids

    path = Path(source) / "models" / f"ggml-vocab-{name}.gguf"
    inp = path.with_name(path.name + ".inp")
    texts = inp.read_text("utf-8").split("\n__ggml_vocab_test__\n") if inp.exists() else []
    want = llama_cpp_ids(path, [*texts, *TEXTS, *LIVE_TEXTS])
    head, _ = read_gguf_file_head(str(path))
    assert gguf_tokenizer(head.metadata, str(path)).ids(list(want)) == list(want.values())
