"""Draw docs/img/context-parallel-mask.png: each rank's mask rows when three packed documents
are split across 4 context-parallel ranks by Transformer Engine's per-document head-tail split.

    .venv/bin/python scripts/draw_context_parallel.py

The rows are computed by the library's context-parallel kind (the same as
``POST /v1/positions/context-parallel`` with ``mask: true``) and drawn with the service's own
heatmap (``posenc.core.heatmap``): one panel per rank, its queries in the rank's order (rows),
every key in global order (columns).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from posenc.context_parallel import CONTEXT_PARALLEL  # noqa: E402
from posenc.core.heatmap import heatmap_png  # noqa: E402
from posenc.resolve import compute, resolve_fields  # noqa: E402

OUT = ROOT / "docs" / "img" / "context-parallel-mask.png"
REQUEST = {
    "cu_seqlens": [0, 16, 48, 64],
    "cp_size": 4,
    "scheme": "per_document_head_tail",
    "mask": True,
}


def main() -> None:
    params = resolve_fields(CONTEXT_PARALLEL, REQUEST)
    tensors = compute(CONTEXT_PARALLEL, params)
    ranks = int(params["cp_size"])
    masks = torch.stack([tensors[f"{r}.mask"] for r in range(ranks)])  # (cp, T_r, T)
    meta = {"axes": {"mask": ["rank", "query (rank order)", "key"]}}
    OUT.write_bytes(heatmap_png("mask", masks, meta, None))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
