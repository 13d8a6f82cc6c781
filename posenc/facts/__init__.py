"""Facts every layer reads: one record per model type, per vision tower and per GGUF architecture, the quoted published configs, config.json keys and the one reader of a file's parts."""
