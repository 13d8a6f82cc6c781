"""Explaining configs: describe, compare engines, check a caller's table."""
