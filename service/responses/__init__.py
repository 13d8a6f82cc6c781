"""Responses: content negotiation and encoding, the plan of a request, the one respond() (whole,
streamed or kept), body buffers, compute threads, and the replay of cached bodies."""
