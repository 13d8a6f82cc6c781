"""No 5xx anywhere in contract 1.2: every config transformers 5.24 can build, and every
published config posenc quotes, sent to each 1.2 endpoint in process.

The configs are ``AutoConfig.for_model(model_type).to_dict()`` for every model type of
transformers (those whose default config builds), as ``save_pretrained`` would write them,
serialised the way Python's ``json`` writes a config (``Infinity`` and ``NaN`` included: some
defaults hold them), plus :data:`posenc.facts.model_configs.MODEL_CONFIGS`. Each goes to
``/v1/encodings/vision-rope`` (with and without a grid), ``/v1/biases/relative``,
``/v1/configs/positions`` (both engines), ``/v1/encodings/query-scale`` and
``/v1/encodings/relative-sinusoidal``. Every answer must be a 2xx with the endpoint's body, or a
400/413/422 whose ``detail`` says what is wrong; a 5xx (or an exception inside the app) fails,
listing every one. The counts are printed.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from posenc.facts.model_configs import MODEL_CONFIGS
from tests.helpers import ApiClient, make_settings

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # noqa: E402

# (route, extra body fields, a name for the counts)
CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/encodings/vision-rope", {}, "vision-rope"),
    ("/v1/encodings/vision-rope", {"grid_thw": [[1, 8, 8]]}, "vision-rope+grid"),
    ("/v1/biases/relative", {"seq_len": 8}, "relative"),
    ("/v1/configs/positions", {}, "positions"),
    ("/v1/configs/positions", {"engine": "vllm"}, "positions+vllm"),
    ("/v1/encodings/query-scale", {"seq_len": 8}, "query-scale"),
    ("/v1/encodings/relative-sinusoidal", {"seq_len": 8}, "relative-sinusoidal"),
]
CLEAR_4XX = {400, 413, 422}


@functools.cache  # built once a process, shared by the routes' tests
def _configs() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type in sorted(CONFIG_MAPPING_NAMES):
            try:
                out[model_type] = AutoConfig.for_model(model_type).to_dict()
            except Exception:  # a config class that needs arguments has no default file
                continue
    for name, (_, config) in MODEL_CONFIGS.items():
        out[f"published:{name}"] = json.loads(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def client(gpt2_file: Path) -> Iterator[ApiClient]:
    """The app in process; an exception inside it comes back as a 500, not raised here."""
    from fastapi.testclient import TestClient

    from service.app import create_app

    with TestClient(create_app(make_settings(gpt2_file)), raise_server_exceptions=False) as c:
        yield c


def _clear(r: httpx.Response) -> bool:
    try:
        detail = r.json().get("detail")
    except ValueError:
        return False
    return bool(detail) and (isinstance(detail, str | list))


@pytest.mark.slow
@pytest.mark.parametrize(("route", "extra", "label"), CALLS, ids=[c[2] for c in CALLS])
def test_every_default_and_published_config_gets_2xx_or_a_clear_4xx(
    client: httpx.Client, route: str, extra: dict[str, Any], label: str
) -> None:
    """One route of :data:`CALLS` (a test each, so that pytest-xdist spreads them)."""
    configs = _configs()
    assert len(configs) > 800  # transformers 5.24 builds ~820 default configs
    counts: Counter[int] = Counter()
    failures: list[str] = []
    for name, config in configs.items():
        body = json.dumps({"config": config, **extra})  # allow_nan: as json writes configs
        r = client.post(route, content=body, headers={"content-type": "application/json"})
        counts[r.status_code] += 1
        if label.startswith("positions"):
            ok = r.status_code == 200 and "kind" in r.json()
        else:
            ok = r.status_code == 200 and "tensors" in r.json()
        if not ok and not (r.status_code in CLEAR_4XX and _clear(r)):
            failures.append(f"{name} -> {label}: {r.status_code} {r.text[:200]}")
    print(f"\n1.2 sweep of {label} over", len(configs), "configs:")
    for status, n in sorted(counts.items()):
        print(f"  {label:22} {status}: {n}")
    assert not failures, "\n".join(failures)
    # the sweep reaches the successful path too, not only refusals
    assert counts[200] > 0, label
