"""Record llama.cpp's token ids for GGUF vocabularies, for posenc's GGUF tokenizer tests.

Run with a Python that has ``llama-cpp-python``, ``gguf``, ``sentencepiece`` and ``tokenizers``
installed:

    python scripts/record_gguf_tokens.py

It writes, with ``gguf.GGUFWriter``, small ``llama`` files into ``tests/fixtures/gguf`` whose
vocabularies are trained here on a seeded multilingual corpus:

- ``vocab-spm.gguf``: a SentencePiece BPE model (``tokenizer.ggml.model = "llama"``) with byte
  fallback (``<0x00>``..``<0xFF>``), scores, token types and one user-defined token;
- ``vocab-spm-phi3.gguf``: the same named "Phi-3 tiny", with ``</s>`` USER_DEFINED as Phi-3's
  own file has it (llama.cpp makes it CONTROL by its text, and strips the whitespace after
  Phi-3's user-defined tokens);
- ``vocab-bpe-PRE.gguf``: one byte-level BPE vocabulary (``"gpt2"``, merges in order) under
  each pre-tokenizer PRE of :data:`PRES`, with ``<|begin_of_text|>`` as BOS.

Then, for each of those and the two files llama.cpp's own converter made
(``tests/fixtures/llamacpp/gguf/converted-*.gguf``, see scripts/record_llamacpp_tables.py), it
loads the vocabulary with llama.cpp (``vocab_only``) and records ``llama_tokenize(vocab, text,
add_special=True, parse_special=False)`` for every text of :data:`TEXTS` into
``tests/fixtures/gguf/tokens.json``. The converted files have no byte tokens, so llama.cpp
aborts on a character outside their vocabulary; for them only the texts made of their own
characters are recorded. tests/lib/test_gguf_tokenizer.py checks posenc's ids against the file.
"""

from __future__ import annotations

import ctypes
import json
import tempfile
from pathlib import Path
from typing import Any

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "gguf"
CONVERTED = ROOT / "tests" / "fixtures" / "llamacpp" / "gguf"
PRES = ("default", "llama-bpe", "qwen2", "gpt-2")
USER_TOKEN = "<|tool|>"

#: Texts tokenized by llama.cpp and posenc: ASCII, Unicode, spaces, digits, emoji, specials.
TEXTS = (
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "  two  spaces  and a trailing one ",
    " leading space",
    "tabs\tand\nnew lines\r\n\n end",
    "digits 1234567 and 3.14159, 42nd",
    "Héllo wörld, ça va? ñandú",
    "Привет, мир! Γειά σου κόσμε",
    "日本語のテキストと中文",
    "emoji 🦙🎉👍🏽 ok",
    "don't you're I'll we've SHE'S",
    "a\u00a0b\u2003c",
    "<s> not special </s> <|begin_of_text|>",
    f"user token {USER_TOKEN} in text{USER_TOKEN}end",
    f"a</s> b {USER_TOKEN}   spaces after{USER_TOKEN}\tx",
    "",
    " ",
    "zebra quack xylophone",
    "thethethe quickquick foxfox",
    'fn main() { println!("{}", x+1); } // code',
)

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "Héllo wörld, ça va? Größe, naïve café, ñandú",
    "Привет мир, как дела? Γειά σου κόσμε",
    "日本語のテキスト、中文的文本。",
    "numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000 2026",
    "don't won't I'll you're we've they'd",
    "def f(x): return x * 2  # code\n\tindent",
]


def _corpus(folder: Path) -> Path:
    rng = np.random.default_rng(30)
    lines = [CORPUS[int(i)] for i in rng.integers(0, len(CORPUS), size=400)]
    path = folder / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _writer(path: Path, vocab_size: int) -> gguf.GGUFWriter:
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(128)
    w.add_embedding_length(32)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_vocab_size(vocab_size)
    return w


def _finish(w: gguf.GGUFWriter, vocab_size: int) -> None:
    table = np.random.default_rng(vocab_size).standard_normal((vocab_size, 32)).astype(np.float32)
    w.add_tensor("token_embd.weight", table)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_spm(folder: Path, phi3: bool = False) -> Path:
    """A SentencePiece BPE vocabulary with byte fallback and a user-defined token (with
    ``phi3``: named Phi-3, ``</s>`` user-defined)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(_corpus(folder)),
        model_prefix=str(folder / ("spm-phi3" if phi3 else "spm")),
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        user_defined_symbols=[USER_TOKEN, *(["<|endoftext|>"] if phi3 else [])],
        hard_vocab_limit=False,
    )
    sp = spm.SentencePieceProcessor(
        model_file=str(folder / ("spm-phi3.model" if phi3 else "spm.model"))
    )
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        kind = gguf.TokenType.NORMAL
        if sp.is_unknown(i):
            kind = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            kind = gguf.TokenType.CONTROL
        elif sp.is_byte(i):
            kind = gguf.TokenType.BYTE
        elif sp.id_to_piece(i) == USER_TOKEN:
            kind = gguf.TokenType.USER_DEFINED
        if phi3 and sp.id_to_piece(i) == "</s>":
            kind = gguf.TokenType.USER_DEFINED
        if sp.id_to_piece(i) == "<|endoftext|>":  # llama.cpp looks it up in a Phi-3 file
            kind = gguf.TokenType.CONTROL
        types.append(int(kind))
    path = OUT / ("vocab-spm-phi3.gguf" if phi3 else "vocab-spm.gguf")
    w = _writer(path, len(tokens))
    if phi3:
        w.add_name("Phi-3 tiny")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    _finish(w, len(tokens))
    return path


def write_bpe(folder: Path) -> list[Path]:
    """One byte-level BPE vocabulary under each pre-tokenizer of :data:`PRES`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(_corpus(folder))], trainer)
    tok.add_tokens([USER_TOKEN])
    data = json.loads(tok.to_str())
    vocab = {**data["model"]["vocab"], **{a["content"]: a["id"] for a in data["added_tokens"]}}
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    types = [
        int(gguf.TokenType.CONTROL if t in specials else
            gguf.TokenType.USER_DEFINED if t == USER_TOKEN else gguf.TokenType.NORMAL)
        for t in tokens
    ]  # fmt: skip
    paths = []
    for pre in PRES:
        path = OUT / f"vocab-bpe-{pre}.gguf"
        w = _writer(path, len(tokens))
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(vocab["<|begin_of_text|>"])
        w.add_eos_token_id(vocab["<|end_of_text|>"])
        _finish(w, len(tokens))
        paths.append(path)
    return paths


def llama_cpp_ids(path: Path, texts: list[str]) -> dict[str, list[int]]:
    """``llama_tokenize(vocab, text, add_special=True, parse_special=False)`` of each text."""
    import llama_cpp

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    vocab = llama_cpp.llama_model_get_vocab(model)
    out = {}
    for text in texts:
        raw = text.encode("utf-8")
        buf = (llama_cpp.llama_token * (len(raw) + 8))()
        n = llama_cpp.llama_tokenize(vocab, raw, len(raw), buf, len(buf), True, False)
        if n < 0:
            raise RuntimeError(f"llama_tokenize({text!r}) returned {n}")
        out[text] = [int(i) for i in ctypes.cast(buf, ctypes.POINTER(ctypes.c_int32))[:n]]
    llama_cpp.llama_model_free(model)
    return out


def _own_characters(path: Path) -> list[str]:
    """The texts made only of characters of ``path``'s normal tokens (and spaces)."""
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    chars = set("".join(t for t, k in zip(tokens, types, strict=True) if k == 1)) | {" "}
    return [t for t in TEXTS if set(t) <= chars]


def main() -> None:
    import llama_cpp

    llama_cpp.llama_backend_init()
    OUT.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp())
    files: dict[str, Any] = {}
    for path in [write_spm(folder), write_spm(folder, phi3=True), *write_bpe(folder)]:
        files[str(path.relative_to(ROOT))] = llama_cpp_ids(path, list(TEXTS))
    for path in sorted(CONVERTED.glob("converted-*.gguf")):
        files[str(path.relative_to(ROOT))] = llama_cpp_ids(path, _own_characters(path))
    record = {
        "llama_cpp_python": llama_cpp.__version__,
        "call": "llama_tokenize(vocab, text, add_special=True, parse_special=False)",
        "files": files,
    }
    (OUT / "tokens.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    for name, ids in files.items():
        print(f"{name}: {len(ids)} texts")


if __name__ == "__main__":
    main()
