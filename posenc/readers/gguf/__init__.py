"""GGUF files: metadata, token table, tokenizer, the file as a model."""
