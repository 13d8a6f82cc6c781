"""Vision positions: 2-D RoPE (and timm's), learned vision tables."""
