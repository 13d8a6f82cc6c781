"""Absolute position tables: sinusoidal and learned."""
