"""Reading model files: one record per model type (:mod:`posenc.hf.families`), one reader of a
file's parts (:mod:`posenc.hf.reader`), and what a ``config.json`` means for positions
(:mod:`posenc.hf.positions`, :mod:`posenc.hf.rope`, :mod:`posenc.hf.schemes`).

The package imports nothing itself, so that the conventions below the config layer (vision
RoPE, Parakeet's positions, vLLM's RoPE) may ask :mod:`posenc.hf.families` about a model type.
"""
