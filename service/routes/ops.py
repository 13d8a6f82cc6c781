"""Operations: ``/healthz``, ``/readyz``, ``/metrics`` and ``/v1/info``."""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

import posenc
from service.formats import FORMAT_MEDIA_TYPES
from service.schemas import Info, Status
from service.state import State
from service.statuses import Does, declared_responses

router = APIRouter()
OPERATIONS: list[str | Enum] = ["operations"]


@router.get("/", include_in_schema=False)
def root() -> dict[str, str]:
    """Where to start: the API explorer and the OpenAPI document."""
    return {
        "name": "posenc",
        "version": posenc.__version__,
        "docs": "/docs",
        "openapi": "/openapi.json",
    }


@router.get("/healthz", response_model=Status, tags=OPERATIONS, summary="Liveness")
async def healthz() -> dict[str, str]:
    """200 while the process runs. On the event loop itself: it never waits for a worker
    thread, however busy they are."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Status,
    tags=OPERATIONS,
    responses=declared_responses("GET", "/readyz", Does(state=True)),
    summary="Readiness",
)
async def readyz(request: Request) -> Any:
    """200 once the device is chosen and the models are loaded; 503 before. On the event loop,
    as ``/healthz``."""
    state = getattr(request.app.state, "posenc", None)
    if state is None or not state.ready:
        return JSONResponse(
            {"detail": "not ready: models are still loading"},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    return {"status": "ready"}


@router.get(
    "/metrics",
    response_class=Response,
    tags=OPERATIONS,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    summary="Prometheus metrics",
)
def metrics(request: Request) -> Response:
    """Requests by route and status, latency histograms, cache hits and misses."""
    body, content_type = request.app.state.metrics.render()
    return Response(content=body, media_type=content_type)


@router.get(
    "/v1/info",
    response_model=Info,
    tags=["catalog"],
    responses=declared_responses("GET", "/v1/info", Does(state=True)),
    summary="Versions, device, limits",
)
def info(state: State) -> dict[str, Any]:
    """The posenc and torch versions, the device in use, CUDA availability and the limits."""
    settings = state.settings
    cuda = torch.cuda.is_available()
    return {
        "version": posenc.__version__,
        "torch_version": torch.__version__,
        "device": str(state.device),
        "cuda_available": cuda,
        "cuda_device_count": torch.cuda.device_count() if cuda else 0,
        "default_model": state.default_model,
        "formats": dict(FORMAT_MEDIA_TYPES),
        "limits": {
            "max_elements": settings.max_elements,
            "cache_bytes": settings.cache_bytes,
            "max_stream_elements": settings.max_stream_elements,
        },
        "auth": settings.api_key is not None,
    }
