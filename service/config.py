"""Service settings, read from the environment with the prefix ``POSENC_``.

``get_settings()`` (cached) gives the process-wide settings from the environment, and is what
``create_app()`` uses when it is given none; a test builds an app with its own settings as
``create_app(Settings(...))`` (or overrides ``get_settings`` before calling ``create_app()``).
Routes read the app's settings from its state, so one process can hold apps that differ.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]


class Settings(BaseSettings):
    """Every knob of the service; each maps to the environment variable ``POSENC_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="POSENC_", extra="ignore")

    device: str = Field(
        "auto", description="auto (CUDA when available, else CPU), cpu, cuda or cuda:N"
    )
    models: str = Field(
        "",
        description="extra models, 'name=path,name=path' of safetensors checkpoints (a file, a "
        "model.safetensors.index.json or a folder; GPT-2, BERT, Llama, Mistral, Qwen, Gemma, Phi, "
        "GPT-NeoX, Falcon, BLOOM, OPT, T5 tensor names), with the config.json beside them read",
    )
    default_model: str | None = Field(
        None,
        description="the default model (what a request without 'model' gets): a name from "
        "POSENC_MODELS or the built-in posenc-base (the default); a name not loaded stops the "
        "start-up",
    )
    watch_seconds: float = Field(
        0.0,
        ge=0,
        description="poll the POSENC_MODELS files (size, mtime, inode) every this many seconds "
        "and reload the models once a change has held still for one poll (0: never; SIGHUP "
        "and POST /v1/models/reload reload on demand)",
    )
    max_elements: int = Field(
        67_108_864, ge=1, description="largest output, in elements over all tensors, of one request"
    )
    max_stream_elements: int = Field(
        2**31,
        ge=1,
        description="largest table, in elements over all tensors, streamed in raw, npy or "
        "safetensors when it is over max_elements (computed in row blocks as it is sent)",
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1,
        description="largest request body, in bytes, of every media type (JSON, GGUF, npy, "
        "safetensors) and framing (chunked included), counted as it arrives: a 413 before it is "
        "parsed; npy and safetensors token bodies are also bounded by max_elements",
    )
    max_json_containers: int = Field(
        1 << 18,  # 262,144: service.json_slices.MAX_CONTAINERS, the parser's own default
        ge=1024,
        description="most arrays and objects a JSON request body may hold, counted as it is "
        "parsed: a 413 past it (every cost of a parsed body grows with its containers, not its "
        "bytes); raise it with max_body_bytes for large nested float tensors",
    )
    max_gguf_head_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="bytes of a GGUF body that are parsed (its head: key/value section and "
        "tensor directory), at most max_body_bytes; the rest of the body is read and dropped",
    )
    cache_bytes: int = Field(
        256 * 1024 * 1024, ge=0, description="byte budget of the table and response cache (0: off)"
    )
    max_inflight_bytes: int = Field(
        1024 * 1024 * 1024,
        ge=1,
        description="bytes held at once by responses being computed and sent; a request that "
        "does not fit waits (POSENC_QUEUE_TIMEOUT), then gets 429 (one larger than the whole "
        "budget is admitted alone)",
    )
    max_request_cpu_seconds: float = Field(
        120.0,
        gt=0,
        description="largest CPU cost of one request, estimated from its numbers before it "
        "runs (elements, engine and precision, format, streamed or not): a 413 that names the "
        "cost (docs/sizing.md)",
    )
    max_inflight_cpu_seconds: float = Field(
        120.0,
        gt=0,
        description="estimated CPU-seconds of the requests computing at once; a request that "
        "does not fit waits (POSENC_QUEUE_TIMEOUT), then gets 429 (one larger than the whole "
        "budget is admitted alone)",
    )
    queue_timeout: float = Field(
        2.0, ge=0, description="seconds a request waits for room in the in-flight budget, then 429"
    )
    api_key: str | None = Field(
        None, description="when set, every /v1/ request needs 'Authorization: Bearer <key>'"
    )
    admin_key: str | None = Field(
        None,
        description="when set, POST /v1/models/reload needs 'Authorization: Bearer <key>' "
        "(this key or POSENC_API_KEY); without either key, reload is a 403 unless "
        "POSENC_ALLOW_RELOAD=1",
    )
    allow_reload: bool = Field(
        False,
        description="allow POST /v1/models/reload without a key when neither POSENC_API_KEY nor "
        "POSENC_ADMIN_KEY is set (SIGHUP reloads in every case)",
    )
    cors_origins: str = Field("", description="comma-separated origins allowed by CORS ('*': any)")
    log_level: LogLevel = Field("info", description="uvicorn and service log level")
    access_log: bool = Field(
        True,
        description="log one line per request (service.access, with the request id); false saves CPU",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="text, or json: one JSON object per log line (service.observability.logs)",
    )
    gc_freeze: bool = Field(
        True,
        description="after start-up, one full garbage collection and gc.freeze() of what is "
        "left, so that later collections skip it (false: a process that builds many apps, such "
        "as a test run, where every start-up would walk the whole heap)",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("api_key", "admin_key", "default_model", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("models")
    @classmethod
    def _check_models(cls, value: str) -> str:
        parse_models(value)  # raises ValueError with the offending entry
        return value

    @property
    def model_paths(self) -> dict[str, str]:
        """``POSENC_MODELS`` as ``{name: path}``, in the order given."""
        return parse_models(self.models)

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]


def parse_models(spec: str) -> dict[str, str]:
    """Parse ``name=path,name=path``; raise ``ValueError`` naming a malformed or repeated entry."""
    models: dict[str, str] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, path = entry.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ValueError(f"POSENC_MODELS entries must be name=path, got {entry!r}")
        if name in models:
            raise ValueError(f"POSENC_MODELS names model {name!r} twice")
        models[name] = path
    return models


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (a dependency; tests override it or pass settings to create_app)."""
    return Settings()
