"""``GET /v1/models`` and ``GET /v1/presets``: what the service can serve by name.

Unknown names in these paths are 404 (``/v1/models/{name}``, ``/v1/presets/{name}``); the same
names inside a request body or query are 422 (they are a field of the request).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse

from posenc.core.errors import UnknownName
from posenc.readers.models import EmbeddingModel
from posenc.readers.presets import PRESETS, PresetKind, get_preset
from service.middleware import admin_refusal
from service.models_loading import public_errors, reload_models, without_paths
from service.schemas import ModelInfo, ModelList, PresetInfo, PresetList, ReloadAnswer
from service.state import ServiceState, State
from service.statuses import Does, declared_responses

router = APIRouter(prefix="/v1", tags=["catalog"])


def model_info(model: EmbeddingModel) -> dict[str, Any]:
    return {
        "name": model.name,
        "vocab_size": model.vocab_size,
        "d_model": model.d_model,
        "max_positions": model.max_positions,
        "positional": model.positional,
        "scale": model.scale,
        "pad_token_id": model.pad_token_id,
        "source": model.source,
        "position_scheme": model.position_scheme,
        "embed_scale": model.embed_scale,
        "rope": None if model.rope is None else model.rope.as_dict(),
        "family": model.family,
        "model_type": model.model_type,
        "tokenizer": model.tokenizer is not None,
        # a GGUF's table is stored in its ggml type (Q8_0 ...), dequantized to float32 here
        "dtype": model.gguf["tensor_type"]
        if model.gguf
        else str(model.token_table.dtype).removeprefix("torch."),
        "shape": list(model.token_table.shape),
        "loaded_at": datetime.fromtimestamp(model.loaded_at, UTC).isoformat(
            timespec="microseconds"
        ),
        "warnings": list(model.warnings),
        "serves": _serves(model),
        "vision": None if model.vision is None else model.vision.describe(),
        "gguf": model.gguf,
    }


def _serves(model: EmbeddingModel) -> list[str]:
    """The endpoints that take this model's name."""
    if model.vision is not None:
        return ["/v1/encodings/vision-learned"]
    paths = ["/v1/embed", "/v1/encodings/learned"] if model.position_table is not None else [
        "/v1/embed"
    ]  # fmt: skip
    return paths + (["/v1/tokenize", "/v1/detokenize"] if model.tokenizer is not None else [])


def _preset_info(preset: Any) -> dict[str, Any]:
    return {
        "name": preset.name,
        "kind": preset.kind,
        "params": _jsonable(dict(preset.params)),
        "source": preset.source,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _model_list(state: ServiceState) -> dict[str, Any]:
    return {
        "default": state.default_model,
        "models": [model_info(m) for m in state.models.values()],
    }


@router.get(
    "/models",
    response_model=ModelList,
    responses=declared_responses("GET", "/v1/models", Does(state=True)),
    summary="Loaded embedding models",
)
def list_models(state: State) -> dict[str, Any]:
    """The default model's name and every loaded model (built-in and `POSENC_MODELS`)."""
    return _model_list(state)


def _reload_responses() -> dict[int | str, dict[str, Any]]:
    """The reload's statuses: those of what it does, its 503 also when files are unreadable."""
    out = declared_responses(
        "POST", "/v1/models/reload", Does(raw_body=True, state=True, admin=True)
    )
    out[503] = {
        **out[503],
        "description": "still starting (models loading); or some files could not be read "
        "(being written?): those models keep their old weights, the body lists `models` and "
        "`errors` too, and `Retry-After` says when to try again",
    }
    return out


@router.post(
    "/models/reload",
    response_model=ReloadAnswer,
    responses=_reload_responses(),
    summary="Read every model's files again",
)
async def reload(state: State, request: Request) -> Any:
    """Read every `POSENC_MODELS` folder and file again (SIGHUP does the same).

    Each model's new weights are read and validated whole before they replace the old ones;
    requests in flight finish on the old weights. A model whose files cannot be read keeps its
    old weights: the answer is then a 503 with `Retry-After` that lists why (without the
    server's paths).

    An operator's door: it takes `POSENC_ADMIN_KEY` or `POSENC_API_KEY` as the bearer token;
    with neither set it is a 403 unless `POSENC_ALLOW_RELOAD=1`.
    """
    settings = state.settings
    refused = admin_refusal(
        request.scope.get("headers", ()),
        api_key=settings.api_key,
        admin_key=settings.admin_key,
        allow=settings.allow_reload,
    )
    if refused is not None:
        return refused
    await request.body()  # none is needed; one over POSENC_MAX_BODY_BYTES is the usual 413
    errors = await anyio.to_thread.run_sync(reload_models, state)
    answer = {**_model_list(state), "errors": errors}
    if not errors:
        return answer
    # what failed, without the server's paths (the log has them)
    paths = settings.model_paths
    errors = public_errors(errors, paths)
    models = [
        {**m, "source": without_paths(m["source"], paths[m["name"]])} if m["name"] in paths else m
        for m in answer["models"]
    ]
    answer = {**answer, "models": models, "errors": errors}
    names = ", ".join(e["name"] for e in errors)
    detail = f"model(s) {names} could not be read again and keep their old weights: " + "; ".join(
        f"{e['name']}: {e['detail']}" for e in errors
    )
    return JSONResponse({"detail": detail, **answer}, status_code=503, headers={"Retry-After": "5"})


@router.get(
    "/models/{name}",
    response_model=ModelInfo,
    responses=declared_responses("GET", "/v1/models/{name}", Does(path_name=True, state=True)),
    summary="One model",
)
def get_model(name: str, state: State) -> dict[str, Any]:
    try:
        return model_info(state.model(name))
    except UnknownName as exc:
        raise HTTPException(404, detail=f"name: {exc.message}") from None


@router.get(
    "/presets",
    response_model=PresetList,
    responses=declared_responses("GET", "/v1/presets", Does(validates="an unknown kind")),
    summary="Published model-family settings",
)
def list_presets(
    kind: PresetKind | None = Query(None, description="only presets of this kind"),
) -> dict[str, Any]:
    """Settings of well-known model families, each with the published config it comes from.

    Use a preset's name as the `preset` field of the endpoint of its kind: its params are
    defaults that the request's own fields override.
    """
    return {
        "presets": [_preset_info(p) for p in PRESETS.values() if kind is None or p.kind == kind]
    }


@router.get(
    "/presets/{name:path}",
    response_model=PresetInfo,
    responses=declared_responses("GET", "/v1/presets/{name}", Does(path_name=True)),
    summary="One preset",
)
def get_preset_by_name(name: str) -> dict[str, Any]:
    try:
        return _preset_info(get_preset(name))
    except UnknownName as exc:
        raise HTTPException(404, detail=f"name: {exc.message}") from None
