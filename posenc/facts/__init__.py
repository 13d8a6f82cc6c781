"""Facts every layer reads: one record per model type, the quoted published configs, config.json keys and the one reader of a file's parts."""
