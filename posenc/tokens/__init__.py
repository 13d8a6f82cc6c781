"""Tokens: a model's tokenizer and position ids (padding, masks)."""
