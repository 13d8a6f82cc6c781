"""The engines posenc answers for, one module each, and their registry.

Each module holds one object implementing :class:`posenc.engines.base.Engine`; the lines
below register them, in the order answers list them. Adding an engine is one module and one
line here. :data:`ENGINES` (:mod:`posenc.engines.registry`) is the only list of engines.

The 1.4 hooks (``apply``: rotate queries and keys; ``shift``: re-rotate cached keys) are class
attributes of each engine (``apply = staticmethod(fn)``), None where it has none (MLX's shift);
:func:`posenc.engines.registry.engine_hook` refuses an engine without one by name.
"""

from __future__ import annotations

from posenc.engines import diffusers, llama_cpp, mlx, timm, transformers, vllm
from posenc.engines.base import ApplyHook, Engine, ShiftHook
from posenc.engines.registry import (
    ENGINES,
    TEXT_ROPE,
    check_candidates,
    engine_hook,
    engine_named,
    engine_names,
    refuse_rope_type,
    register_engine,
    unregister_engine,
)

register_engine(transformers.ENGINE)
register_engine(vllm.ENGINE)
register_engine(llama_cpp.ENGINE)
register_engine(mlx.ENGINE)
register_engine(timm.ENGINE)
register_engine(diffusers.ENGINE)

__all__ = [
    "ENGINES",
    "TEXT_ROPE",
    "ApplyHook",
    "Engine",
    "ShiftHook",
    "check_candidates",
    "engine_hook",
    "engine_named",
    "engine_names",
    "refuse_rope_type",
    "register_engine",
    "unregister_engine",
]
