"""``POST /v1/tokenize`` and ``POST /v1/detokenize``: a model's tokenizer over HTTP.

Both answer exactly what Hugging Face ``tokenizers`` gives for the model's ``tokenizer.json``
(:mod:`posenc.tokens.tokenizer`): ``encode_batch`` (ids, tokens, character offsets; no padding, no
truncation) and ``decode_batch``. The handlers are plain ``def`` (FastAPI runs them in its
thread pool) and the Rust side works on the whole batch with the GIL released.

Limits: a tokenize response counts 4 elements per token (id, token, start, end) against
``POSENC_MAX_ELEMENTS``; a detokenize request counts its ids plus the characters of the tokens
they name (a bound on the text it makes), so a body of a few MB cannot ask for gigabytes.
"""

from __future__ import annotations

import time
from typing import Annotated

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, Strict

from posenc.tokens.tokenizer import NoTokenizer, TextTokenizer, text_groups
from service.formats import joined
from service.json_body import JsonBodyRoute
from service.responses.plans import check_output
from service.sliced_validation import SLICED_TEXT, sliced_rows
from service.state import ServiceState, read_state
from service.statuses import Does, declared_responses

router = APIRouter(prefix="/v1", tags=["tokens"], route_class=JsonBodyRoute)  # bodies off the loop

_INT64 = Annotated[int, Strict(), Field(ge=-(2**63), le=2**63 - 1)]

# What both routes do (service.statuses): read a JSON body, validate it, count their answer.
_DOES = Does(
    body=True,
    validates="a field is invalid, an unknown model or one without a tokenizer, an id outside "
    "the tokenizer's vocabulary",
    output_limit="the answer would be over POSENC_MAX_ELEMENTS",
    state=True,
)


class TokenizeRequest(BaseModel):
    """``POST /v1/tokenize``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"text": ["Hello world", "Positions"]}]},
    )

    text: Annotated[str | Annotated[list[str], Field(min_length=1)], SLICED_TEXT] = Field(
        ..., description="a string, or a list of strings (one row each; a string is one row)"
    )
    model: str | None = Field(None, description="name from GET /v1/models (default: the default)")
    add_special_tokens: bool = Field(
        True, description="add the tokenizer's special tokens (its post-processor)"
    )


class TokenizeResponse(BaseModel):
    input_ids: list[list[int]] = Field(description="B rows of token ids (ragged)")
    tokens: list[list[str]] = Field(description="the tokens, as the tokenizer names them")
    offsets: list[list[Annotated[list[int], Field(min_length=2, max_length=2)]]] = Field(
        description="[start, end) of each token in the characters of its string"
    )


class DetokenizeRequest(BaseModel):
    """``POST /v1/detokenize``."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"input_ids": [[72, 105], [33]]}]}
    )

    input_ids: Annotated[list[list[_INT64]], Field(min_length=1), sliced_rows(list[_INT64])] = (
        Field(..., description="B rows of token ids (ragged; an empty row is the empty string)")
    )
    model: str | None = Field(None, description="name from GET /v1/models (default: the default)")
    skip_special_tokens: bool = Field(True, description="leave the special tokens out")


class DetokenizeResponse(BaseModel):
    text: list[str] = Field(description="one string per row (decode_batch)")


def text_tokenizer(state: ServiceState, name: str | None) -> TextTokenizer:
    """The tokenizer of the named model (the default for None); UnknownName or NoTokenizer,
    both 422, the latter naming the models that have one."""
    model = state.model(name)
    if model.tokenizer is None:
        raise NoTokenizer(model.name, with_tokenizer=state.text_models(), reason=model.no_tokenizer)
    return model.tokenizer


#: The most characters of text one ``orjson.dumps`` call of a detokenize answer writes.
_DUMP_CHARS = 1 << 18


def texts_json(texts: list[str]) -> memoryview:
    """``orjson.dumps({"text": texts})``, at most :data:`_DUMP_CHARS` characters a call (a
    JSON string escapes each character alone, so a long text is written in slices): one call
    over a 16 MiB answer holds the GIL for 70 ms (issue 39)."""
    items: list[bytes] = []  # runs of texts, each without its brackets
    group: list[str] = []
    size = 0
    for text in texts:
        if group and size + len(text) > _DUMP_CHARS:
            items.append(orjson.dumps(group)[1:-1])
            group, size = [], 0
            time.sleep(0)  # the GIL to the event loop
        if len(text) <= _DUMP_CHARS:
            group.append(text)
            size += len(text)
            continue
        pieces = []
        for lo in range(0, len(text), _DUMP_CHARS):
            pieces.append(orjson.dumps(text[lo : lo + _DUMP_CHARS])[1:-1])
            time.sleep(0)
        items.append(b'"' + b"".join(pieces) + b'"')
    if group:
        items.append(orjson.dumps(group)[1:-1])
    pieces = [b'{"text":[']
    for i, item in enumerate(items):
        pieces += (b",", item) if i else (item,)
    return joined([*pieces, b"]}"])


@router.post(
    "/tokenize",
    summary="Tokenize texts",
    response_model=TokenizeResponse,
    responses=declared_responses("POST", "/v1/tokenize", _DOES),
)
def tokenize(body: TokenizeRequest, request: Request) -> Response:
    """The model's tokenizer on each text: equal to `tokenizers`'
    `Tokenizer.from_file(...).encode_batch(texts, add_special_tokens=...)` (`ids`, `tokens`,
    `offsets` in characters of the string); no padding, no truncation. Each token counts 4
    elements against POSENC_MAX_ELEMENTS."""
    state = read_state(request)
    tokenizer = text_tokenizer(state, body.model)
    texts = [body.text] if isinstance(body.text, str) else body.text
    limit = state.settings.max_elements
    # Group by group (posenc.tokens.tokenizer.text_groups): each group's encodings become JSON text at
    # once and are dropped, so the answer's Python objects never exist for the whole batch.
    parts: dict[str, list[bytes]] = {"input_ids": [], "tokens": [], "offsets": []}
    tokens = 0
    for start, stop in text_groups([len(t) for t in texts]):
        encodings = tokenizer.encode(
            texts[start:stop], add_special_tokens=body.add_special_tokens, first_row=start
        )
        tokens += sum(len(e) for e in encodings)
        check_output(
            4 * tokens,
            limit,
            field="text",
            message=f"the answer would have at least {4 * tokens} elements ({tokens} tokens x "
            f"id, token, start, end), over the limit of {limit} elements (POSENC_MAX_ELEMENTS); "
            "send fewer texts",
        )
        parts["input_ids"].append(orjson.dumps([e.ids for e in encodings])[1:-1])
        parts["tokens"].append(orjson.dumps([e.tokens for e in encodings])[1:-1])
        parts["offsets"].append(orjson.dumps([e.offsets for e in encodings])[1:-1])
        del encodings
    pieces = [b"{"]  # copied into one buffer a piece at a time (formats.joined)
    for k, (name, rows) in enumerate(parts.items()):
        pieces.append((b',"' if k else b'"') + name.encode() + b'":[')
        for i, row in enumerate(rows):
            pieces += (b",", row) if i else (row,)
        pieces.append(b"]")
    pieces.append(b"}")
    body_bytes = joined(pieces)
    return Response(body_bytes, media_type="application/json")


@router.post(
    "/detokenize",
    summary="Detokenize token ids",
    response_model=DetokenizeResponse,
    responses=declared_responses("POST", "/v1/detokenize", _DOES),
)
def detokenize(body: DetokenizeRequest, request: Request) -> Response:
    """The model's tokenizer's `decode_batch(input_ids, skip_special_tokens=...)`. An id
    outside the tokenizer's vocabulary is a 422 naming it as `input_ids[ROW][COL]`."""
    state = read_state(request)
    tokenizer = text_tokenizer(state, body.model)
    rows = body.input_ids
    tokenizer.check_ids(rows)
    limit = state.settings.max_elements
    ids = sum(len(r) for r in rows)
    chars = tokenizer.text_size(rows)
    check_output(
        int(ids + chars),
        limit,
        field="input_ids",
        message=f"the answer would hold up to {chars} characters for {ids} ids, {ids + chars} "
        f"elements, over the limit of {limit} elements (POSENC_MAX_ELEMENTS)",
    )
    texts = tokenizer.decode(rows, skip_special_tokens=body.skip_special_tokens)
    return Response(texts_json(texts), media_type="application/json")


__all__ = ["router", "text_tokenizer", "texts_json"]
