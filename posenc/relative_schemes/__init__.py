"""Relative positions: ALiBi, T5/DeBERTa buckets, Transformer-XL's sinusoidal relative positions."""
