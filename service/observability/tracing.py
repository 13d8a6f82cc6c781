"""OpenTelemetry tracing of the service (the optional ``otel`` extra).

Configured by the standard ``OTEL_*`` variables, read by the OpenTelemetry SDK itself:

- ``OTEL_TRACES_EXPORTER``: ``otlp`` (needs ``opentelemetry-exporter-otlp``; the endpoint from
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), ``console``, or
  ``none``. Unset: no tracing is set up by the service (an application that embeds it can set a
  tracer provider of its own before ``create_app``, and the service then traces into it).
- ``OTEL_SERVICE_NAME`` (default ``posenc``), ``OTEL_RESOURCE_ATTRIBUTES``,
  ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``, ``OTEL_SDK_DISABLED``.

Spans: one SERVER span per HTTP request (``{method} {route template}``, with
``http.request.method``, ``http.route``, ``url.path``, ``http.response.status_code`` and
``posenc.request_id``; a W3C ``traceparent`` header continues the caller's trace), and inside it
``posenc.compute`` and ``posenc.encode`` for a table that is computed (a cache hit has neither).
Without the extra, or without a tracer provider, :func:`span` is a shared no-op context and no
middleware is installed: tracing costs nothing when it is off.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

import posenc

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["TracingMiddleware", "setup", "span"]

logger = logging.getLogger("service.tracing")
_NOOP = contextlib.nullcontext()
_tracer: Any = None  # an opentelemetry Tracer once setup() found tracing on


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[Any]:
    """A child span of the current one named ``name``, or a no-op when tracing is off."""
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, attributes=attributes)


def _exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError:
                logger.warning(
                    "OTEL_TRACES_EXPORTER=otlp needs the package opentelemetry-exporter-otlp; "
                    "no spans are exported"
                )
                return None
        return OTLPSpanExporter()
    logger.warning("OTEL_TRACES_EXPORTER=%r is not supported (otlp, console, none)", name)
    return None


def setup() -> bool:
    """Turn tracing on when a tracer provider is set, or ``OTEL_TRACES_EXPORTER`` names an
    exporter (the provider is then built here from the ``OTEL_*`` variables). Returns whether
    tracing is on."""
    global _tracer
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        names = [
            n.strip()
            for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")
            if n.strip() and n.strip() != "none"
        ]
        if not names:
            return False
        try:
            from opentelemetry.sdk.resources import SERVICE_NAME, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            logger.warning("OTEL_TRACES_EXPORTER is set but opentelemetry-sdk is not installed")
            return False
        defaults = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "posenc"}
        sdk_provider = TracerProvider(resource=Resource.create(defaults))  # reads OTEL_*
        for name in names:
            exporter = _exporter(name)
            if exporter is not None:
                sdk_provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(sdk_provider)
        provider = sdk_provider
    _tracer = provider.get_tracer("posenc.service", posenc.__version__)
    return True


class TracingMiddleware:
    """Pure ASGI middleware: one SERVER span per HTTP request (installed by ``create_app``
    only when :func:`setup` turned tracing on)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _tracer is None:
            await self.app(scope, receive, send)
            return
        from opentelemetry import propagate, trace

        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", [])
        }
        method = scope.get("method", "GET")
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with _tracer.start_as_current_span(
            method,
            context=propagate.extract(carrier),
            kind=trace.SpanKind.SERVER,
            attributes={
                "http.request.method": method,
                "url.path": scope.get("path", ""),
                "posenc.request_id": scope.get("state", {}).get("request_id", ""),
            },
        ) as current:
            try:
                await self.app(scope, receive, send_with_status)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str) and route:
                    current.update_name(f"{method} {route}")
                    current.set_attribute("http.route", route)
                current.set_attribute("http.response.status_code", status)
                if status >= 500:
                    current.set_status(trace.Status(trace.StatusCode.ERROR))
