"""Admission: the byte budget of responses in flight (429 with Retry-After) and the byte-bounded
LRU cache of tables and encoded bodies."""
