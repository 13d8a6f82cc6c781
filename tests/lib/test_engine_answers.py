"""``/v1/configs/positions``' answer per engine comes from the engine's module
(:mod:`posenc.engines`): one layout, the scaling type as each engine names it, and a GGUF's
YaRN named, agreeing with the same model's config read by the same engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from posenc.engines import ENGINES, engine_names
from posenc.explain.describe import describe
from posenc.facts.model_configs import model_config
from posenc.readers.gguf.metadata import gguf_summary, llamacpp_rope_from_gguf, read_gguf_head

GGUF_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "gguf"
YARN = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
}


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "qwen2.5-7b", "deepseek-v3", "gemma-3-4b"])
@pytest.mark.parametrize("engine", engine_names())
def test_one_layout_per_answer(preset: str, engine: str) -> None:
    """The top-level layout is the one every RoPE layer entry gives (llama.cpp rotates Llama's
    adjacent pairs: it said ``half`` at the top beside ``interleaved`` entries)."""
    answer = describe(model_config(preset), engine)
    entries = {e.get("layout", answer["layout"]) for e in answer["rope"].values()}
    assert entries == {answer["layout"]}, (preset, engine, entries)


def test_llamacpp_reads_llama_as_adjacent_pairs() -> None:
    answer = describe(model_config("llama-3.1-8b"), "llama.cpp")
    assert answer["layout"] == "interleaved"  # LLM_ARCH_LLAMA: LLAMA_ROPE_TYPE_NORM
    assert describe(model_config("llama-3.1-8b"), "transformers")["layout"] == "half"


def test_each_engine_names_the_scaling_type_its_own_way() -> None:
    named = {}
    for engine in engine_names():
        (entry,) = describe(YARN, engine)["rope"].values()
        key = ENGINES[engine].rope_type_key
        named[engine] = entry[key] if key is not None else entry["rope_type"]
    assert named == {"transformers": "yarn", "vllm": "yarn", "llama.cpp": "yarn", "mlx": "yarn"}
    (plain,) = describe(model_config("llama-3.1-8b"), "llama.cpp")["rope"].values()
    assert plain["llamacpp_rope_type"] == "none"  # Llama 3's factors ride on rope_freqs


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("gpt-oss-20b", "yarn"),
        ("deepseek-v3", "yarn"),
        ("phi-3.5-mini", "longrope"),
        ("qwen2.5-7b", "none"),
    ],
)
def test_a_gguf_names_its_scaling_type_as_its_config_does(name: str, named: str) -> None:
    head = read_gguf_head((GGUF_DIR / f"{name}.gguf").read_bytes())
    entry = gguf_summary(head, llamacpp_rope_from_gguf(head))["rope"]["default"]
    assert entry["llamacpp_rope_type"] == named
    from_config = describe(model_config(name), "llama.cpp")["rope"]
    (layer,) = {e["llamacpp_rope_type"] for e in from_config.values()}
    assert layer == named
    magnitudes = {e["attention_scaling"] for e in from_config.values()}
    assert entry["attention_scaling"] in magnitudes
