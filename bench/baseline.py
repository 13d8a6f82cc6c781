"""The baseline that ``python -m bench`` measures posenc against, and the transport ceiling.

Baseline: the seed tutorials' code served the obvious way. Each request builds the seed's
``PositionalEncoding`` for the asked length (or runs the seed's ``TransformerEmbedding``, built
once at start-up), turns the tensor into nested lists with ``tensor.tolist()`` and returns a dict
that FastAPI encodes (``jsonable_encoder`` then ``json.dumps``). The request bodies are posenc's
(``POST /v1/encodings/sinusoidal``, ``POST /v1/embed``); the response has posenc's JSON shape.

Ceiling: ``PUT /ceiling/{name}`` stores a body, its media type and response headers; ``POST
/ceiling/{name}`` reads the request body and answers the stored bytes and headers. The benchmark
stores posenc's own response for each case, so the ceiling sends exactly the bytes posenc sends
(body and headers): the cost of HTTP on this machine with no work at all, against which
posenc's overhead is measured.

Run with ``uvicorn bench.baseline:app``; ``BENCH_VOCAB_SIZE``, ``BENCH_D_MODEL`` and
``BENCH_MAX_POSITIONS`` size the embedding model (``python -m bench`` copies posenc's default
model's sizes into them).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from fastapi import FastAPI, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict


class PositionalEncoding(nn.Module):
    """Positional encoding module for transformers (seed tutorial 004, verbatim)."""

    def __init__(self, d_model, max_len=5000, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-np.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)  # (1, max_len, d_model)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:, : x.size(1), :]
        return self.dropout(x)


class TransformerEmbedding(nn.Module):
    """Token embeddings + learned positions (seed tutorial 003, verbatim)."""

    def __init__(self, vocab_size: int, d_model: int, max_seq_len: int, dropout: float = 0.1):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Embedding(max_seq_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.d_model = d_model

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        _batch_size, seq_len = token_ids.shape
        tok_emb = self.token_embedding(token_ids)  # (B, T, D)
        positions = torch.arange(seq_len, device=token_ids.device)
        pos_emb = self.pos_embedding(positions)  # (T, D)
        x = tok_emb + pos_emb
        x = self.dropout(x)
        return x


class SinusoidalBody(BaseModel):
    """posenc's sinusoidal request body; the seed only knows base 10000, interleaved."""

    model_config = ConfigDict(extra="forbid")
    seq_len: int | None = None
    positions: list[int] | None = None
    d_model: int
    base: float = 10000.0
    layout: str = "interleaved"
    offset: int = 0
    dtype: str = "float32"


class EmbedBody(BaseModel):
    """posenc's embed request body; the seed model pads right and uses learned positions."""

    model_config = ConfigDict(extra="forbid")
    input_ids: list[list[int]]
    model: str | None = None
    attention_mask: list[list[int]] | None = None
    pad_token_id: int | None = None
    padding_side: str = "right"
    positional: str | None = None
    scale: bool | None = None
    position_ids: list[list[int]] | None = None
    dtype: str = "float32"


def _tensor(t: torch.Tensor) -> dict[str, Any]:
    return {
        "shape": list(t.shape),
        "dtype": str(t.dtype).removeprefix("torch."),
        "data": t.tolist(),
    }


app = FastAPI(title="posenc bench baseline")

torch.manual_seed(0)
_embedder = TransformerEmbedding(
    int(os.environ.get("BENCH_VOCAB_SIZE", "32000")),
    int(os.environ.get("BENCH_D_MODEL", "512")),
    int(os.environ.get("BENCH_MAX_POSITIONS", "2048")),
).eval()

_ceiling: dict[str, tuple[bytes, str, dict[str, str]]] = {}


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


# response_model=None: FastAPI's default path for a handler without a return annotation
# (jsonable_encoder walks the nested lists, then json.dumps), which is what the obvious
# `return {"encoding": pe.tolist()}` gets. The /typed/ twin below keeps the annotation, so FastAPI
# serialises with pydantic-core instead; the benchmark reports it for information.
@app.post("/v1/encodings/sinusoidal", response_model=None)
def sinusoidal(body: SinusoidalBody) -> dict[str, Any]:
    if body.base != 10000.0 or body.layout != "interleaved":
        raise HTTPException(422, "the seed baseline knows only base 10000, interleaved")
    if body.positions is not None:
        positions = torch.tensor(body.positions) + body.offset
        pe = PositionalEncoding(body.d_model, max_len=int(positions.max()) + 1).pe[0, positions]
    elif body.seq_len is not None:
        max_len = body.offset + body.seq_len
        pe = PositionalEncoding(body.d_model, max_len=max_len).pe[0, body.offset : max_len]
    else:
        raise HTTPException(422, "give seq_len or positions")
    return {"tensors": {"encoding": _tensor(pe)}, "meta": {"d_model": body.d_model}}


@app.post("/v1/embed", response_model=None)
def embed(body: EmbedBody) -> dict[str, Any]:
    rows = body.input_ids
    width = max((len(r) for r in rows), default=0)
    pad = body.pad_token_id if body.pad_token_id is not None else 0
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    with torch.no_grad():
        emb = _embedder(ids) * mask.unsqueeze(-1)  # (B, T, D), padded slots zero
    position_ids = (torch.arange(width).unsqueeze(0) * mask).long()  # (B, T)
    return {
        "tensors": {
            "embeddings": _tensor(emb),
            "position_ids": _tensor(position_ids),
            "attention_mask": _tensor(mask),
        },
        "meta": {"model": "seed-baseline"},
    }


@app.post("/typed/v1/encodings/sinusoidal")
def sinusoidal_typed(body: SinusoidalBody) -> dict[str, Any]:
    return sinusoidal(body)


@app.put("/ceiling/{name}", status_code=204)
async def store_ceiling(name: str, request: Request) -> Response:
    """Store the body to answer, its media type, and (``X-Ceiling-Headers``, JSON) the other
    response headers to send with it, so the ceiling's response is posenc's byte for byte."""
    media_type = request.headers.get("content-type", "application/octet-stream")
    headers = json.loads(request.headers.get("x-ceiling-headers", "{}"))
    _ceiling[name] = (await request.body(), media_type, headers)
    return Response(status_code=204)


@app.post("/ceiling/{name}")
async def ceiling(name: str, request: Request) -> Response:
    await request.body()
    if name not in _ceiling:
        raise HTTPException(404, f"no ceiling body stored under {name!r}")
    content, media_type, headers = _ceiling[name]
    return Response(content=content, media_type=media_type, headers=headers)
