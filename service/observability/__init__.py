"""Observability: Prometheus metrics, text and JSON logs, OpenTelemetry traces, request ids and
the access log."""
