"""The built-in kinds of endpoint, listed once: each is defined beside its maths in its
convention module, and registered here into :data:`posenc.core.kinds.REGISTRY`.

The service's routes, schemas and GET forms, the client's methods and the CLI's options are all
derived from the registry, so adding a convention is its module (maths and :class:`Kind`) plus one
entry in :data:`KINDS`. Importing :mod:`posenc` imports this module, so the registry is full
wherever posenc is.
"""

from __future__ import annotations

from posenc.absolute.learned import LEARNED
from posenc.absolute.sinusoidal import SINUSOIDAL
from posenc.attention.masks import MASKS
from posenc.attention.query_scale import QUERY_SCALE
from posenc.context_parallel import CONTEXT_PARALLEL
from posenc.core import kinds
from posenc.diffusion import DIFFUSION_ROPE, SINCOS_2D
from posenc.embedding import EMBED
from posenc.relative_schemes.alibi import ALIBI
from posenc.relative_schemes.relative import RELATIVE
from posenc.relative_schemes.relative_sinusoidal import RELATIVE_SINUSOIDAL
from posenc.rope.mrope_ids import MROPE_POSITION_IDS
from posenc.rope.xpos import XPOS
from posenc.rope_kinds.kind import ROPE
from posenc.rope_kinds.shift import ROPE_SHIFT
from posenc.tokens.position_ids import POSITION_IDS
from posenc.vision.learned.kind import VISION_LEARNED
from posenc.vision.rope import VISION_ROPE

__all__ = ["KINDS"]

KINDS: tuple[kinds.Kind, ...] = (
    SINUSOIDAL,
    LEARNED,
    ROPE,
    ROPE_SHIFT,
    VISION_ROPE,
    DIFFUSION_ROPE,
    SINCOS_2D,
    VISION_LEARNED,
    QUERY_SCALE,
    RELATIVE_SINUSOIDAL,
    XPOS,
    ALIBI,
    RELATIVE,
    MASKS,
    POSITION_IDS,
    MROPE_POSITION_IDS,
    CONTEXT_PARALLEL,
    EMBED,
)
"""Every built-in kind, in the order of the API reference's sections."""

for _kind in KINDS:
    kinds.register(_kind)
