"""A client generated from /openapi.json by a standard tool can call every endpoint, correctly.

``openapi-python-client`` turns the document into a typed package; the test calls every
operation through it against a real server with the document's own examples, and checks that
what the generated client gets equals what a hand-written JSON request gets. Standard clients
send every schema default explicitly, which is how a preset silently lost to ``base: 10000``
once: the preset requests below catch that.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.app import create_app
from service.config import Settings

pytestmark = pytest.mark.slow

PACKAGE = "posenc_generated_client"
# Values for path parameters, which the document gives no example for.
PATH_VALUES = {"name": {"/v1/models/{name}": "posenc-base", "/v1/presets/{name}": "llama-3.1-8b"}}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tool = shutil.which("openapi-python-client") or str(
        Path(sys.executable).parent / "openapi-python-client"
    )
    if not Path(tool).exists():
        pytest.skip("openapi-python-client is not installed (the test extra has it)")
    spec = create_app(Settings(api_key=None)).openapi()
    work = tmp_path_factory.mktemp("generated")
    (work / "openapi.json").write_text(json.dumps(spec))
    out = work / PACKAGE
    config = Path(__file__).parents[2] / "docs" / "openapi-python-client.yaml"
    command = [tool, "generate", "--path", "openapi.json", "--output-path", str(out)]
    command += ["--meta", "none", "--config", str(config)]
    run = subprocess.run(
        command,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # every request body and response is understood: no "Unsupported content type" skipped
    assert "Unsupported content type" not in run.stdout + run.stderr, run.stdout + run.stderr
    assert "WARNING parsing" not in run.stdout + run.stderr, run.stdout + run.stderr
    sys.path.insert(0, str(work))
    try:
        yield spec, importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(work))
        for name in [m for m in sys.modules if m.startswith(PACKAGE)]:
            del sys.modules[name]


def _module_for(package: Any, op: dict[str, Any]) -> Any:
    tag = _snake(op["tags"][0])
    return importlib.import_module(f"{package.__name__}.api.{tag}.{_snake(op['operationId'])}")


def _body_model(module: Any, op: dict[str, Any]) -> type | None:
    """The generated model class of the operation's JSON body (``body``'s annotation)."""
    if "application/json" not in op.get("requestBody", {}).get("content", {}):
        return None
    hint = typing.get_type_hints(module._get_kwargs)["body"]
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and hasattr(candidate, "from_dict"):
            return candidate
    raise AssertionError(f"no model class in {hint!r}")


def _snake(name: str) -> str:
    """The generator's naming of modules and arguments (runs of other characters to one _)."""
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", name.lower())).strip("_")


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if method in ("get", "post")
    ]


def _example_body(spec: dict[str, Any], op: dict[str, Any]) -> dict[str, Any] | None:
    content = op.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return None
    schema = content["schema"]
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    examples = schema.get("examples") or [{}]
    return dict(examples[0])


def _client(package: Any, request: pytest.FixtureRequest, **options: Any) -> Any:
    """A generated client whose httpx connections close when the test ends."""
    client = package.Client(**options)
    request.addfinalizer(lambda: client.get_httpx_client().close())
    return client


def test_every_operation_through_the_generated_client(
    generated: Any, live_server: str, request: pytest.FixtureRequest
) -> None:
    spec, package = generated
    client = _client(
        package, request, base_url=live_server, raise_on_unexpected_status=True, timeout=60
    )
    called = []
    for method, path, op in _operations(spec):
        module = _module_for(package, op)
        kwargs: dict[str, Any] = {}
        url = path
        for param in op.get("parameters", []):
            if param["in"] == "path":
                value = PATH_VALUES[param["name"]][path]
                kwargs[_snake(param["name"])] = value
                url = url.replace("{" + param["name"] + "}", value)
        body = _example_body(spec, op)
        query: dict[str, Any] = {}
        if body is not None:
            model = _body_model(module, op)
            assert model is not None, (method, path)
            kwargs["body"] = model.from_dict(body)  # type: ignore[attr-defined]
        elif method == "get":
            for param in op.get("parameters", []):
                if param["in"] == "query" and "example" in param:
                    query[param["name"]] = param["example"]
                    kwargs[_snake(param["name"])] = _coerce(param, param["example"])
        response = module.sync_detailed(client=client, **kwargs)
        direct = httpx.request(
            method.upper(), live_server + url, json=body, params=query, timeout=60
        )
        assert response.status_code == direct.status_code == 200, (method, path, response)
        # /v1/info's uptime and a reload's loaded_at change from one call to the next
        same_each_call = path not in ("/v1/info", "/v1/models/reload")
        if direct.headers["content-type"].startswith("application/json") and same_each_call:
            assert json.loads(response.content) == direct.json(), (method, path)
        called.append(f"{method.upper()} {path}")
    assert len(called) == len(_operations(spec))


def _coerce(param: dict[str, Any], value: Any) -> Any:
    kind = param.get("schema", {}).get("type")
    if kind == "integer" or (
        isinstance(kind, list) and "integer" in kind and isinstance(value, str)
    ):
        return int(value)
    return value


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/encodings/rope", {"seq_len": 8, "preset": "llama-3.1-8b"}),
        ("/v1/encodings/rope", {"seq_len": 8, "preset": "gpt-j-6b"}),
        ("/v1/biases/alibi", {"seq_len": 4, "preset": "bloom-7b1"}),
        ("/v1/biases/relative", {"seq_len": 4, "preset": "t5-base"}),
    ],
)
def test_presets_are_not_overridden_by_schema_defaults(
    generated: Any,
    live_server: str,
    path: str,
    body: dict[str, Any],
    request: pytest.FixtureRequest,
) -> None:
    """A generated client sends every default the schema declares; the preset must still win."""
    spec, package = generated
    op = spec["paths"][path]["post"]
    module = _module_for(package, op)
    model = _body_model(module, op)
    assert model is not None
    sent = model(**body)  # as a user writes it: the constructor fills in the schema defaults
    client = _client(package, request, base_url=live_server, timeout=60)
    via_generated = json.loads(module.sync_detailed(client=client, body=sent).content)
    by_hand = httpx.post(live_server + path, json=body, timeout=60).json()
    assert via_generated == by_hand


def test_request_and_response_models_have_their_own_names(generated: Any) -> None:
    """Every JSON body and response is a named component, so the generated classes are
    ``EmbedRequest`` and ``PositionIdsRequest``, not ``PostV1EmbedJsonEmbedRequest``."""
    spec, package = generated
    for method, path, op in _operations(spec):
        bodies = [op.get("requestBody", {}), *op["responses"].values()]
        for body in bodies:
            schema = body.get("content", {}).get("application/json", {}).get("schema")
            if schema is not None:
                assert "$ref" in schema, (method, path, schema)
    models = importlib.import_module(f"{package.__name__}.models")
    for name in ("EmbedRequest", "PositionIdsRequest", "RopeRequest", "TensorBundleJSON"):
        assert isinstance(getattr(models, name), type), name
    assert not [n for n in dir(models) if n.startswith(("PostV1", "GetV1")) and "Request" in n]


@pytest.mark.parametrize("fmt", ["safetensors", "npy", "raw", "png", "json"])
def test_the_generated_client_returns_the_bytes_of_every_format(
    generated: Any, live_server: str, fmt: str, request: pytest.FixtureRequest
) -> None:
    """safetensors, npy, raw and png once raised UnicodeDecodeError in the generated client
    (it called response.json() on them): it hands back the body's bytes, equal to what a
    plain request gets, in every format."""
    spec, package = generated
    path = "/v1/encodings/sinusoidal"
    op = spec["paths"][path]["post"]
    module = _module_for(package, op)
    model = _body_model(module, op)
    assert model is not None
    body = {"seq_len": 4, "d_model": 8}
    format_type = next(
        t
        for t in typing.get_args(typing.get_type_hints(module._get_kwargs)["format_"])
        if isinstance(t, type) and hasattr(t, "__members__")
    )
    client = _client(
        package, request, base_url=live_server, raise_on_unexpected_status=True, timeout=60
    )
    response = module.sync_detailed(
        client=client,
        body=model.from_dict(body),  # type: ignore[attr-defined]
        format_=format_type(fmt),  # type: ignore[attr-defined]
    )
    direct = httpx.post(live_server + path, params={"format": fmt}, json=body, timeout=60)
    assert response.status_code == direct.status_code == 200
    assert response.parsed.payload.read() == response.content == direct.content
    if fmt == "npy":
        assert direct.content.startswith(b"\x93NUMPY")
