"""Readers of model files: config.json (hf), GGUF, weights files, checkpoints, models, presets and sources."""
