"""Reading model files: one record per model type (:mod:`posenc.facts.families`), one reader of a
file's parts (:mod:`posenc.facts.config_parts`), and what a ``config.json`` means for positions
(:mod:`posenc.readers.hf.positions`, :mod:`posenc.readers.hf.rope`, :mod:`posenc.readers.hf.schemes`).

The package imports nothing itself, so that the conventions below the config layer (vision
RoPE, Parakeet's positions, vLLM's RoPE) may ask :mod:`posenc.facts.families` about a model type.
"""
