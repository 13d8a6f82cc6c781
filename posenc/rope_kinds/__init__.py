"""RoPE's endpoint kinds: the rope kind, apply (q and k rotated) and shift, above the engines they ask."""
