"""Responses: content negotiation (once per request), the plan of a request, the one choice of
its path as a frozen value (hit, whole, kept or streamed), the one respond() that serves it, body
buffers, compute threads, and the replay of cached bodies. The encoders are service.formats."""
