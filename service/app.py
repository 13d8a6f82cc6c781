"""The FastAPI application's factory, ``create_app(settings)``: ``python -m service`` calls it,
and with ``--workers`` uvicorn calls it in each worker (``service.app:create_app``, factory
mode). Importing this module builds nothing; ``service.app.app`` (``uvicorn service.app:app``)
is the app built from the environment on first use.

The lifespan picks the device (``POSENC_DEVICE``; CUDA asked for where there is none stops the
start-up), loads the built-in default model and the ``POSENC_MODELS`` files, and only then marks
the service ready (``/readyz``). Middleware, outermost first: metrics, CORS (when
``POSENC_CORS_ORIGINS`` is set), ``Vary``/``Server-Timing`` on every response, bearer auth on
``/v1/`` (when ``POSENC_API_KEY`` is set), and the replay of cached responses to repeated
compute requests (``service.responses.replay``); the middleware classes are in ``service.middleware``,
the OpenAPI document and ``/docs`` in ``service.openapi``, the routes in ``service.routes``.
"""

from __future__ import annotations

import gc
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse

import posenc
from posenc.core.device import resolve_device
from service.admission.budget import tune_allocator
from service.body_limit import BodyLimitMiddleware, BodyTooLarge
from service.cache import ByteLRU
from service.config import Settings, get_settings
from service.errors import install_error_handlers
from service.full_collections import FullCollectionHold
from service.gguf_body import GgufBodyMiddleware
from service.json_slices import TooManyContainers
from service.middleware import BearerAuthMiddleware, ResponseHeadersMiddleware
from service.models_loading import install_sighup, install_watch, load_models
from service.observability.metrics import Metrics, MetricsMiddleware
from service.observability.request_id import RequestIdMiddleware
from service.observability.tracing import TracingMiddleware
from service.observability.tracing import setup as setup_tracing
from service.openapi import custom_openapi, install_docs
from service.problem import ProblemJsonMiddleware
from service.responses.replay import ReplayMiddleware
from service.routes import apply, catalog, check, configs, ops, text
from service.routes.registered import registered_kind_routers
from service.state import ServiceState

logger = logging.getLogger("service")

DESCRIPTION = """\
Transformer positional encodings, exact to the published conventions, as bundles of named
tensors. Choose the format with `?format=` (json, safetensors, npy, raw, png) or `Accept`;
`?encoding=base64` gives JSON data as base64. Every table is computed in float64 and cast once.

Errors: 422 for an invalid field (a `model` or `preset` name unknown in a request is a 422 too;
in a path it is a 404), 413 when the output would exceed `POSENC_MAX_ELEMENTS` or the body
`POSENC_MAX_BODY_BYTES`, 406 when no
acceptable format can be made, 401 without the bearer token when `POSENC_API_KEY` is set.
"""


# ---------------------------------------------------------------------------------------------
# Start-up
# ---------------------------------------------------------------------------------------------


def freeze_startup_objects() -> None:
    """Move every object alive after start-up (the imported modules, the app, the models: some
    220,000 of them) out of the garbage collector's reach (``gc.freeze``). A full collection
    traverses them all: 30–80 ms on the 2-core machines posenc is measured on, a pause that fell on
    whichever request happened to trigger it, so a cold request's cost depended on how much had
    been allocated before it. Frozen, a full collection takes well under a millisecond; the
    objects themselves stay as they are (nothing made at start-up is freed before shutdown,
    which unfreezes them)."""
    gc.collect()
    gc.freeze()


def _lifespan(
    settings: Settings, metrics: Metrics
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            device = resolve_device(settings.device)
        except posenc.PosencError as exc:
            logger.error("cannot start: POSENC_DEVICE=%r: %s", settings.device, exc.message)
            raise
        tune_allocator()  # freed tensors and bodies go back to the system (docs/sizing.md)
        cache = ByteLRU(settings.cache_bytes)
        metrics.watch_cache("responses", cache)
        state = ServiceState(settings=settings, device=device, metrics=metrics, cache=cache)
        app.state.posenc = state
        try:
            await anyio.to_thread.run_sync(load_models, state)
        except Exception as exc:
            logger.error("cannot start: loading the models failed: %s", exc)
            raise
        if settings.gc_freeze:
            freeze_startup_objects()
        state.ready = True
        logger.info(
            "posenc %s ready on %s with models %s (default %s)",
            posenc.__version__,
            device,
            ", ".join(state.models),
            state.default_model,
        )
        remove_sighup = install_sighup(state)  # SIGHUP reloads the models (models_loading)
        stop_watch = install_watch(state)  # and so do changed files, with POSENC_WATCH_SECONDS
        try:
            yield
        finally:
            if stop_watch is not None:
                stop_watch()
            if remove_sighup is not None:
                remove_sighup()
            state.ready = False
            cache.clear()
            if settings.gc_freeze:
                gc.unfreeze()  # collectable again: a process that builds apps frees them

    return lifespan


# ---------------------------------------------------------------------------------------------
# The app
# ---------------------------------------------------------------------------------------------


# Recent FastAPI releases trace every request themselves once an OpenTelemetry SDK is set up; the
# service has its own SERVER span (service.observability.tracing, with the request id and the compute and
# encode spans inside), so FastAPI's is turned off rather than doubled. Older FastAPI has none.
_OWN_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


async def _body_too_large(request: Any, exc: Exception) -> JSONResponse:
    """The 413 of a body over POSENC_MAX_BODY_BYTES found inside a route or FastAPI's parsing."""
    if not isinstance(exc, BodyTooLarge):
        raise exc
    return JSONResponse(exc.body(), status_code=413, headers={"Connection": "close"})


async def _too_many_containers(request: Any, exc: Exception) -> JSONResponse:
    """The 413 of a JSON body of more arrays and objects than any request needs (issue 39)."""
    if not isinstance(exc, TooManyContainers):
        raise exc
    body = {"detail": str(exc), "field": "body", "limit": exc.limit}
    return JSONResponse(body, status_code=413)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service. ``settings`` defaults to the environment (``get_settings()``)."""
    settings = settings if settings is not None else get_settings()
    metrics = Metrics()
    app = FastAPI(
        **_OWN_TELEMETRY,
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
    modules = (text, catalog, configs, check, apply, ops)  # check: issue 30; apply: 40
    # every kind of posenc.core.kinds.REGISTRY, derived, then the hand-written endpoints
    routers = [*registered_kind_routers(), *(m.router for m in modules)]
    for router in routers:
        app.include_router(router)
    install_docs(app)
    app.openapi = custom_openapi(app, settings)  # type: ignore[method-assign]

    # add_middleware puts each new one outside the previous: this is innermost first.
    app.add_middleware(ReplayMiddleware, fastapi_app=app)
    # issue 30: GGUF bodies, their head parsed on a worker thread, inside the body limit
    app.add_middleware(
        GgufBodyMiddleware,
        head_bytes=min(settings.max_gguf_head_bytes, settings.max_body_bytes),
    )
    # issue 39: no full garbage collection walks a large body while its request runs
    app.add_middleware(FullCollectionHold)
    # a body of any type over POSENC_MAX_BODY_BYTES is a 413 before anything inside reads it
    app.add_middleware(
        BodyLimitMiddleware,
        limit=settings.max_body_bytes,
        max_elements=settings.max_elements,
        max_containers=settings.max_json_containers,
    )
    app.add_exception_handler(BodyTooLarge, _body_too_large)
    app.add_exception_handler(TooManyContainers, _too_many_containers)
    routes = [route for router in routers for route in router.routes]
    app.state.routes = routes  # every route with its path and methods (a 405's Allow)
    if settings.api_key is not None:
        app.add_middleware(
            BearerAuthMiddleware,
            api_key=settings.api_key,
            routes=routes,
            admin_key=settings.admin_key,
        )
    # errors as RFC 9457 problem details where Accept asks (401 included)
    app.add_middleware(ProblemJsonMiddleware)
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
                "X-Request-ID",
            ],
        )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if setup_tracing():  # OTEL_* (the otel extra): a SERVER span per request
        app.add_middleware(TracingMiddleware)
    # Outermost: X-Request-ID on every response (401, 404, 500 included) and the access log.
    app.add_middleware(RequestIdMiddleware, access_log=settings.access_log)
    return app


def __getattr__(name: str) -> Any:
    """``service.app.app``: one app built from the environment when first asked for."""
    if name == "app":
        built = create_app()
        globals()["app"] = built
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
