"""service.sliced_validation: large fields validated in slices give pydantic's own answer.

Each request model is validated twice, with slices of 3 items and with no slicing at all: the
model (valid input) or the list of errors (type, location, message, input) must be equal.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from posenc.core import kinds
from service import sliced_validation
from service.routes.check import CheckRequest
from service.routes.configs import ConfigPositionsRequest
from service.routes.registered import request_model
from service.routes.text import DetokenizeRequest, TokenizeRequest

_INT_KEY: dict[Any, Any] = {5: 1}  # a key JSON cannot give: refused by its position


def _answer(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data).model_dump()
    except ValidationError as exc:  # (as JSON: a ValueError in ctx is its message)
        return json.loads(exc.json(include_url=False))


CASES = [
    (request_model(kinds.REGISTRY["position_ids"]), {"input_ids": [[1, 2, 3, 4, 5, 6, 7]] * 3}),
    (request_model(kinds.REGISTRY["position_ids"]), {"input_ids": [list(range(20)), [1], []]}),
    (
        request_model(kinds.REGISTRY["position_ids"]),
        {"input_ids": [[1, 2, True, 4, "5", 6, 7.0, -1, 2**70], [1] * 9, "ab", [None]]},
    ),
    (request_model(kinds.REGISTRY["position_ids"]), {"input_ids": [[]] * 10 + [[1, "x"], []]}),
    (DetokenizeRequest, {"input_ids": [[]] * 8 + [[2**64]] + [[]] * 4}),
    (request_model(kinds.REGISTRY["rope"]), {"positions": [1, 2, "3", 4.0, 5, 6, 7, -1, 2**70]}),
    (request_model(kinds.REGISTRY["rope"]), {"positions": [1, 2, 3, 4, True, 6, "x", 8]}),
    (request_model(kinds.REGISTRY["rope"]), {"positions": list(range(10))}),
    (request_model(kinds.REGISTRY["sinusoidal"]), {"positions": [0.5, 2, 3, 4, 5, 6, 7]}),
    (request_model(kinds.REGISTRY["embed"]), {"text": ["a", "b", 3, "c", None, "d", "e"]}),
    (request_model(kinds.REGISTRY["embed"]), {"text": ["a", "b", "c", "d", "e", "f", "g"]}),
    (TokenizeRequest, {"text": ["x"] * 7 + [1]}),
    (DetokenizeRequest, {"input_ids": [[1, 2, 3, 4, "x", 6, 7, 2**64], [1] * 8]}),
    (ConfigPositionsRequest, {"config": {f"k{i}": i for i in range(10)}}),
    (ConfigPositionsRequest, {"config": {**{f"k{i}": i for i in range(10)}, **_INT_KEY}}),
    (CheckRequest, {"cos": [[0.5] * 8, [1, "x", 2, 3, None, 4, 5]], "sin": [[0.5] * 8] * 5}),
]


@pytest.mark.parametrize("model,data", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_sliced_validation_gives_pydantic_answer(
    monkeypatch: pytest.MonkeyPatch, model: type[BaseModel], data: dict[str, Any]
) -> None:
    whole = _answer(model, data)
    monkeypatch.setattr(sliced_validation, "SLICE_ITEMS", 3)
    calls: list[int] = []
    monkeypatch.setattr(sliced_validation.time, "sleep", calls.append)
    assert _answer(model, data) == whole
    assert calls, "the value was not validated in slices"
