"""The registry of kinds: a convention is one library function plus one registry entry.

The kind below exists only in this test. Registering it, and touching no other file, makes it
served (POST and GET, every format, the 413 and 422 rules), documented in ``/openapi.json`` with
its fields and bounds, callable from the client and from the CLI, each checked against the
closed form it computes.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
import uvicorn
from fastapi.testclient import TestClient
from safetensors.numpy import load_file

from posenc import cli, resolve
from posenc.client import PosencClient
from posenc.core import kinds
from posenc.core.errors import InvalidArgument, TooLarge
from service.app import create_app
from service.config import Settings

HOST = "127.0.0.1"


def ramp_table(
    seq_len: int, width: int, *, step: float, offset: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """``(T, W)`` with ``x[p, w] = (p + offset) * step ** w``, in float64, cast once."""
    positions = torch.arange(offset, offset + seq_len, dtype=torch.float64, device=device)
    powers = step ** torch.arange(width, dtype=torch.float64, device=device)
    return torch.outer(positions, powers).to(dtype)


def _check(params: Any) -> None:
    if params["width"] > 2 * params["seq_len"]:
        raise InvalidArgument(
            f"width must be <= 2 * seq_len, got {params['width']} > {2 * params['seq_len']}",
            field="width",
        )


TOY = kinds.Kind(
    name="test-ramp",
    path="/v1/encodings/test-ramp",
    tag="encodings",
    summary="A test-only ramp table",
    description="x[p, w] = (p + offset) * step^w, registered by tests/service/test_kinds.py.",
    fields=(
        kinds.FieldSpec("seq_len", "int", "T, the number of positions", minimum=1, example=3),
        kinds.FieldSpec("width", "int", "W, even", minimum=2, multiple_of=2, example=4),
        kinds.FieldSpec("step", "float", "ratio between columns", default=2.0, exclusive_minimum=0),
        kinds.FieldSpec("offset", "int", "added to every position", default=0, minimum=0),
        kinds.FieldSpec("signed", "bool", "also the negated table", default=False),
    ),
    tensors=(kinds.TensorSpec("ramp", ("T", "W")), kinds.TensorSpec("steps", ("W",), integer=True)),
    shapes=lambda p: {"ramp": (p["seq_len"], p["width"]), "steps": (p["width"],)},
    compute=lambda p, ctx: {
        "ramp": ramp_table(
            p["seq_len"],
            p["width"],
            step=p["step"],
            offset=p["offset"],
            device=ctx.device,
            dtype=ctx.dtype,
        )
        * (-1 if p["signed"] else 1),
        "steps": torch.arange(p["width"], device=ctx.device),
    },
    check=_check,
)


def expected(seq_len: int, width: int, step: float = 2.0, offset: int = 0) -> np.ndarray:
    return np.array(
        [[(p + offset) * step**w for w in range(width)] for p in range(seq_len)], dtype=np.float32
    )


@pytest.fixture()
def toy() -> Iterator[kinds.Kind]:
    kinds.register(TOY)
    try:
        yield TOY
    finally:
        kinds.unregister(TOY.name)


@pytest.fixture()
def toy_server(toy: kinds.Kind) -> Iterator[str]:
    """A real uvicorn on loopback, in this process (the registration lives here)."""
    with __import__("socket").socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(Settings(max_elements=1000)), host=HOST, port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_library_resolves_checks_and_computes(toy: kinds.Kind) -> None:
    params = resolve.resolve_fields(toy, {"seq_len": 3, "width": 4, "step": 0.5})
    assert params == {
        "seq_len": 3,
        "width": 4,
        "step": 0.5,
        "offset": 0,
        "signed": False,
        "dtype": "float32",
    }
    tensors = resolve.compute(toy, params)
    np.testing.assert_array_equal(tensors["ramp"].numpy(), expected(3, 4, 0.5))
    assert tensors["steps"].dtype == torch.int64
    with pytest.raises(InvalidArgument, match="width must be even, got 3"):
        resolve.resolve_fields(toy, {"seq_len": 3, "width": 3})
    with pytest.raises(InvalidArgument, match=r"unknown field\(s\) \['heads'\]"):
        resolve.resolve_fields(toy, {"seq_len": 3, "width": 4, "heads": 1})
    with pytest.raises(InvalidArgument, match="seq_len is required"):
        resolve.resolve_fields(toy, {"width": 4})
    with pytest.raises(InvalidArgument, match="width must be <= 2 \\* seq_len"):
        resolve.resolve_fields(toy, {"seq_len": 1, "width": 4})
    huge = resolve.resolve_fields(toy, {"seq_len": 2**40, "width": 2**12})
    with pytest.raises(TooLarge):  # sized from the numbers: nothing is allocated
        resolve.compute(toy, huge, max_elements=10**6)


def test_served_documented_and_exact(toy: kinds.Kind) -> None:
    app = create_app(Settings(max_elements=1000))
    with TestClient(app) as client:
        body = {"seq_len": 3, "width": 4, "offset": 2}
        post = client.post(toy.path, json=body)
        assert post.status_code == 200, post.text
        data = post.json()
        assert list(data["tensors"]) == ["ramp", "steps"]
        np.testing.assert_array_equal(data["tensors"]["ramp"]["data"], expected(3, 4, offset=2))
        assert data["meta"]["kind"] == "test-ramp" and data["meta"]["offset"] == 2
        get = client.get(toy.path, params=body, headers={"accept": "application/octet-stream"})
        assert get.headers["x-tensor-name"] == "ramp" and get.headers["x-tensor-shape"] == "3,4"
        np.testing.assert_array_equal(
            np.frombuffer(get.content, "<f4").reshape(3, 4), expected(3, 4, offset=2)
        )
        assert client.post(toy.path, json={**body, "width": 3}).status_code == 422
        assert client.post(toy.path, json={**body, "extra": 1}).status_code == 422
        too_big = client.post(toy.path, json={"seq_len": 500, "width": 2})
        assert too_big.status_code == 413 and too_big.json()["requested"] == 1002

        spec = client.get("/openapi.json").json()
    assert set(spec["paths"][toy.path]) == {"get", "post"}
    ref = spec["paths"][toy.path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schema = spec["components"]["schemas"][ref["$ref"].rsplit("/", 1)[-1]]
    assert schema["required"] == ["seq_len", "width"]
    assert schema["properties"]["width"]["multipleOf"] == 2
    assert schema["properties"]["step"]["exclusiveMinimum"] == 0
    assert schema["examples"] == [{"seq_len": 3, "width": 4}]
    params = {p["name"] for p in spec["paths"][toy.path]["get"]["parameters"]}
    assert {"seq_len", "width", "step", "offset", "signed", "dtype", "format"} <= params


def test_client_and_cli(toy: kinds.Kind, toy_server: str, tmp_path: Path) -> None:
    with PosencClient(toy_server) as client:
        result = client.compute("test-ramp", seq_len=3, width=4, step=3.0)
        np.testing.assert_array_equal(result["ramp"], expected(3, 4, 3.0))
        # registered at run time: a method of its name, as the generated ones are
        by_name = client.test_ramp(seq_len=3, width=4, step=3.0)
        np.testing.assert_array_equal(by_name["ramp"], expected(3, 4, 3.0))
        assert list(result.tensors) == ["ramp", "steps"]
        with pytest.raises(ValueError, match="no field"):
            client.compute("test-ramp", seq_len=3, width=4, heads=2)

    local = tmp_path / "local.safetensors"
    assert (
        cli.main(
            ["table", "test-ramp", "--seq-len", "3", "--width", "4", "--signed", "-o", str(local)]
        )
        == 0
    )
    np.testing.assert_array_equal(load_file(str(local))["ramp"], -expected(3, 4))
    remote = tmp_path / "remote.npy"
    argv = [
        "table",
        "test-ramp",
        "--seq-len",
        "2",
        "--width",
        "2",
        "--url",
        toy_server,
        "-o",
        str(remote),
    ]
    assert cli.main(argv) == 0
    np.testing.assert_array_equal(np.load(remote), expected(2, 2))
    assert math.isclose(float(np.load(remote)[1, 1]), 2.0)


@functools.cache
def _openapi() -> dict[str, Any]:
    """The served ``/openapi.json`` of a default app, fetched once a process (each kind's case
    reads its own operation from it)."""
    with TestClient(create_app(Settings())) as client:
        spec: dict[str, Any] = client.get("/openapi.json").json()
    return spec


@pytest.mark.parametrize("name", sorted(kinds.REGISTRY))
def test_every_field_of_every_kind_reaches_schema_client_and_cli(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each built-in kind's fields, written once in its library module, are what the request
    schema, the client method's keyword arguments and the CLI's options are made of: the same
    names, the same required ones, the schema's defaults none where a preset may give a value."""
    import inspect

    kind = kinds.REGISTRY[name]
    spec = _openapi()
    operation = spec["paths"][kind.path]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in body:
        body = spec["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert list(body["properties"]) == list(kind.field_names)
    assert set(body.get("required", [])) == {f.name for f in kind.fields if f.schema_required}
    for f in kind.fields:
        schema_default = body["properties"][f.name].get("default")
        assert schema_default == f.schema_default, f.name
        if f.sourced:  # a generated client must not send a default that overrides a preset
            assert schema_default is None, f.name

    method = getattr(PosencClient, name)
    keywords = list(inspect.signature(method).parameters)[1:]
    assert keywords[: len(kind.fields)] == [f.arg_name for f in kind.fields]

    with pytest.raises(SystemExit):
        cli.main(["table", name, "--help"])
    usage = capsys.readouterr().out
    for f in kind.fields:
        assert f"--{f.name.replace('_', '-')}" in usage, f.name


def test_the_generated_client_types_a_new_kind(toy: kinds.Kind) -> None:
    """scripts/client_methods.py, run over a registry that holds the kind, writes it a typed
    method: its fields with their types (a Literal of a string field's choices), the options,
    and the call by name."""
    import ast
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "client_methods.py"
    spec = importlib.util.spec_from_file_location("client_methods", path)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    tree = ast.parse(generator.render())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KindMethods"]
    (method,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "test_ramp"]
    annotations = {a.arg: ast.unparse(a.annotation) for a in method.args.kwonlyargs if a.annotation}
    assert list(annotations)[: len(toy.fields)] == list(toy.field_names)
    for f in toy.fields:
        if f.type == "str" and f.choices:
            assert annotations[f.name] == f"Literal[{', '.join(repr(c) for c in f.choices)}] | None"
        else:
            assert annotations[f.name] == f"{generator.ANNOTATIONS[f.type]} | None"
    assert annotations["method"] == "Method"
    assert "'test-ramp'" in ast.unparse(method)


def test_resolve_fields_maps_a_config_key_to_its_field():
    """The library (so the CLI and Python callers) says it too: rope_theta is base."""
    hint = "'rope_theta' is a config.json key: its body field is base"
    with pytest.raises(InvalidArgument, match=hint):
        resolve.resolve_fields(kinds.REGISTRY["rope"], {"seq_len": 2, "rope_theta": 1.0})
