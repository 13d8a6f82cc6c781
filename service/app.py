"""The FastAPI application: ``create_app(settings)`` and the module-level ``app``.

The lifespan picks the device (``POSENC_DEVICE``; CUDA asked for where there is none stops the
start-up), loads the built-in default model and the ``POSENC_MODELS`` files, and only then marks
the service ready (``/readyz``). Middleware, outermost first: metrics, CORS (when
``POSENC_CORS_ORIGINS`` is set), ``Vary``/``Server-Timing`` on every response, bearer auth on
``/v1/`` (when ``POSENC_API_KEY`` is set), and the replay of cached responses to repeated
compute requests (``service.replay``). ``/docs`` is Swagger UI served from the
``swagger_ui_bundle`` package by this process: no CDN, no internet.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from swagger_ui_bundle import swagger_ui_path

import posenc
from posenc.device import resolve_device
from posenc.models import EmbeddingModel, default_model, load_safetensors_model
from service.cache import ByteLRU
from service.config import Settings, get_settings
from service.errors import install_error_handlers
from service.metrics import Metrics, MetricsMiddleware
from service.replay import ReplayMiddleware
from service.routes import biases, catalog, configs, embed, encodings, ops, position_ids
from service.routes.common import ServiceState

logger = logging.getLogger("service")

DESCRIPTION = """\
Transformer positional encodings, exact to the published conventions, as bundles of named
tensors. Choose the format with `?format=` (json, safetensors, npy, raw, png) or `Accept`;
`?encoding=base64` gives JSON data as base64. Every table is computed in float64 and cast once.

Errors: 422 for an invalid field (a `model` or `preset` name unknown in a request is a 422 too;
in a path it is a 404), 413 when the output would exceed `POSENC_MAX_ELEMENTS`, 406 when no
acceptable format can be made, 401 without the bearer token when `POSENC_API_KEY` is set.
"""

OPEN_PATHS = ("/healthz", "/readyz", "/docs", "/openapi.json", "/metrics")


# ---------------------------------------------------------------------------------------------
# Middleware
# ---------------------------------------------------------------------------------------------


class BearerAuthMiddleware:
    """401 with ``WWW-Authenticate: Bearer`` for ``/v1/`` requests without the right token."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.api_key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope.get("method") == "OPTIONS"  # CORS preflight carries no credentials
            or not (path == "/v1" or path.startswith("/v1/"))
        ):
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.api_key):
            await self.app(scope, receive, send)
            return
        _label_route(scope)
        error = ', error="invalid_token"' if header else ""
        response = JSONResponse(
            {
                "detail": "Authorization: this endpoint needs the header "
                "'Authorization: Bearer <POSENC_API_KEY>'"
                + (" (the token given is not valid)" if header else ""),
                "field": "Authorization",
            },
            status_code=401,
            headers={"WWW-Authenticate": f'Bearer realm="posenc"{error}'},
        )
        await response(scope, receive, send)


def _label_route(scope: Scope) -> None:
    """Set ``scope["route"]`` for a request refused before routing, so metrics name it."""

    def find(routes: list[Any]) -> Any:
        for route in routes:
            inner = getattr(route, "original_router", None)  # FastAPI's included routers
            found = find(inner.routes) if inner is not None else None
            if found is not None:
                return found
            if inner is None and route.matches(scope)[0] == Match.FULL:
                return route
        return None

    route = find(getattr(getattr(scope.get("app"), "router", None), "routes", []))
    if route is not None:
        scope["route"] = route


class ResponseHeadersMiddleware:
    """``Vary: Accept`` on every response, and ``Server-Timing`` where a route set none."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                if b"vary" not in names:
                    headers.append((b"vary", b"Accept"))
                else:
                    headers = [
                        (
                            n,
                            v
                            if n.lower() != b"vary" or b"accept" in v.lower()
                            else v + b", Accept",
                        )
                        for n, v in headers
                    ]
                if b"server-timing" not in names:
                    total = (time.perf_counter() - start) * 1000
                    headers.append((b"server-timing", f"app;dur={total:.3f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


# ---------------------------------------------------------------------------------------------
# Start-up
# ---------------------------------------------------------------------------------------------


def _file_fingerprint(name: str, path: str) -> str:
    stat = os.stat(path)
    key = f"{name}|{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def load_models(state: ServiceState) -> None:
    """Resolve the device and load every model into ``state`` (blocking; run in a thread)."""
    settings = state.settings
    base = default_model(state.device)
    models: dict[str, EmbeddingModel] = {base.name: base}
    fingerprints = {base.name: f"builtin:{base.name}:{posenc.__version__}"}
    for name, path in settings.model_paths.items():
        if name in models:
            raise ValueError(f"POSENC_MODELS: the name {name!r} is taken by the built-in model")
        logger.info("loading model %r from %s", name, path)
        models[name] = load_safetensors_model(name, path, device=state.device)
        fingerprints[name] = _file_fingerprint(name, path)
    state.models, state.fingerprints, state.default_model = models, fingerprints, base.name


def _lifespan(settings: Settings, metrics: Metrics):  # type: ignore[no-untyped-def]
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            device = resolve_device(settings.device)
        except posenc.PosencError as exc:
            logger.error("cannot start: POSENC_DEVICE=%r: %s", settings.device, exc.message)
            raise
        cache = ByteLRU(settings.cache_bytes)
        metrics.watch_cache("responses", cache)
        state = ServiceState(settings=settings, device=device, metrics=metrics, cache=cache)
        app.state.posenc = state
        try:
            await anyio.to_thread.run_sync(load_models, state)
        except Exception as exc:
            logger.error("cannot start: loading the models failed: %s", exc)
            raise
        state.ready = True
        logger.info(
            "posenc %s ready on %s with models %s (default %s)",
            posenc.__version__,
            device,
            ", ".join(state.models),
            state.default_model,
        )
        try:
            yield
        finally:
            state.ready = False
            cache.clear()

    return lifespan


# ---------------------------------------------------------------------------------------------
# OpenAPI and docs
# ---------------------------------------------------------------------------------------------


def openapi_30(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of an OpenAPI 3.1 document that Swagger UI 4 (OpenAPI 3.0 only) can render.

    ``anyOf [X, null]`` becomes ``nullable``, schema ``examples`` lists become ``example``,
    ``const`` becomes a one-value ``enum`` and numeric ``exclusiveMinimum`` the 3.0 boolean form.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items()}
        any_of = out.get("anyOf")
        if isinstance(any_of, list) and {"type": "null"} in any_of:
            rest = [s for s in any_of if s != {"type": "null"}]
            del out["anyOf"]
            if len(rest) == 1 and "$ref" not in rest[0]:
                out = {**rest[0], **out}
            elif len(rest) == 1:
                out["allOf"] = rest
            else:
                out["anyOf"] = rest
            out["nullable"] = True
        if isinstance(out.get("type"), list):
            types = [t for t in out["type"] if t != "null"]
            out["type"] = types[0] if len(types) == 1 else types
            if len(types) < len(node["type"]):
                out["nullable"] = True
        if isinstance(out.get("examples"), list) and out["examples"]:
            out["example"] = out.pop("examples")[0]
        if "const" in out:
            out["enum"] = [out.pop("const")]
        for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            value = out.get(bound)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[plain] = value
                out[bound] = True
        return out

    doc = walk(copy.deepcopy(spec))
    doc["openapi"] = "3.0.3"
    return doc


def _install_docs(app: FastAPI) -> None:
    app.mount("/docs/static", StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=f"{root}/docs/openapi.json",
            title="posenc API",
            swagger_js_url=f"{root}/docs/static/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/static/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/static/favicon-32x32.png",
            swagger_ui_parameters={
                "tryItOutEnabled": True,
                "deepLinking": True,
                "displayRequestDuration": True,
                "defaultModelsExpandDepth": 0,
            },
        )

    @app.get("/docs/openapi.json", include_in_schema=False)
    def swagger_openapi() -> JSONResponse:
        """The schema as OpenAPI 3.0 for the bundled Swagger UI (4.x renders no 3.1)."""
        return JSONResponse(openapi_30(app.openapi()))


def _custom_openapi(app: FastAPI, settings: Settings):  # type: ignore[no-untyped-def]
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
                tags=app.openapi_tags,
            )
            if settings.api_key is not None:
                components = schema.setdefault("components", {})
                components.setdefault("securitySchemes", {})["bearerAuth"] = {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "POSENC_API_KEY",
                }
                for path, operations in schema.get("paths", {}).items():
                    if path.startswith("/v1/"):
                        for operation in operations.values():
                            operation["security"] = [{"bearerAuth": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


# ---------------------------------------------------------------------------------------------
# The app
# ---------------------------------------------------------------------------------------------


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service. ``settings`` defaults to the environment (``get_settings()``)."""
    settings = settings if settings is not None else get_settings()
    metrics = Metrics()
    app = FastAPI(
        title="posenc",
        version=posenc.__version__,
        description=DESCRIPTION,
        lifespan=_lifespan(settings, metrics),
        docs_url=None,
        redoc_url=None,
        openapi_tags=[
            {"name": "encodings", "description": "positional encoding tables"},
            {"name": "biases", "description": "attention biases"},
            {"name": "tokens", "description": "token batches: position ids and embeddings"},
            {"name": "catalog", "description": "models, presets, service info"},
            {"name": "configs", "description": "what a model's config.json means for positions"},
            {"name": "operations", "description": "health, readiness, metrics"},
        ],
    )
    app.state.metrics = metrics
    # No dependency_overrides entry for get_settings: the routes read state.settings, and any
    # override makes FastAPI rebuild every route's dependencies on every request.
    app.state.settings = settings

    install_error_handlers(app)
    for module in (encodings, biases, position_ids, embed, catalog, configs, ops):
        app.include_router(module.router)
    _install_docs(app)
    app.openapi = _custom_openapi(app, settings)  # type: ignore[method-assign]

    # add_middleware puts each new one outside the previous: this is innermost first.
    app.add_middleware(ReplayMiddleware, fastapi_app=app)
    if settings.api_key is not None:
        app.add_middleware(BearerAuthMiddleware, api_key=settings.api_key)
    app.add_middleware(ResponseHeadersMiddleware)
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "Accept", "If-None-Match"],
            expose_headers=[
                "ETag",
                "Server-Timing",
                "X-Tensor-Name",
                "X-Tensor-Shape",
                "X-Tensor-Dtype",
                "Content-Disposition",
            ],
        )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app


app = create_app()
