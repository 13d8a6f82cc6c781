"""diffusers' transformer classes that carry a positional encoding: served by posenc or not, and why.

Read from diffusers 0.42's ``models/transformers/`` (every ``*Transformer*Model`` class whose
file defines or calls a positional module: a ``*RotaryPosEmbed``, ``*PosEmbed``, ``*EmbedRope``,
``get_*_rotary_pos_embed``, ``get_*_sincos_pos_embed`` or a ``PatchEmbed`` that adds a table).
``tests/lib/test_diffusion_live.py`` checks this list against the installed diffusers where it
imports, so a class diffusers adds shows up as a test failure; ``tests/lib/test_diffusion_sweep.py``
checks that it agrees with the served rules and with docs/diffusion.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["SWEEP", "SweepEntry"]


@dataclass(frozen=True)
class SweepEntry:
    """One diffusers transformer class.

    Attributes:
        module: its file under ``diffusers/models/transformers/`` (without ``.py``).
        served: ``ENDPOINT:MODEL`` when posenc serves it (``diffusion-rope:flux``), else None.
        reason: what it uses, and why it is not served (or what serves it).
    """

    module: str
    served: str | None
    reason: str


def _served(module: str, where: str, what: str) -> SweepEntry:
    return SweepEntry(module, where, what)


def _not(module: str, reason: str) -> SweepEntry:
    return SweepEntry(module, None, reason)


SWEEP: Mapping[str, SweepEntry] = MappingProxyType(
    {
        # --- served -----------------------------------------------------------------------
        "FluxTransformer2DModel": _served(
            "transformer_flux", "diffusion-rope:flux", "FluxPosEmbed over (text, h, w) ids"
        ),
        "ChromaTransformer2DModel": _served(
            "transformer_chroma",
            "diffusion-rope:flux",
            "the same FluxPosEmbed(theta=10000, axes_dims_rope) and (txt_ids, img_ids) order",
        ),
        "WanTransformer3DModel": _served(
            "transformer_wan", "diffusion-rope:wan", "WanRotaryPosEmbed"
        ),
        "WanVACETransformer3DModel": _served(
            "transformer_wan_vace",
            "diffusion-rope:wan",
            "imports transformer_wan's WanRotaryPosEmbed",
        ),
        "HunyuanVideoTransformer3DModel": _served(
            "transformer_hunyuan_video",
            "diffusion-rope:hunyuan-video",
            "HunyuanVideoRotaryPosEmbed",
        ),
        "QwenImageTransformer2DModel": _served(
            "transformer_qwenimage",
            "diffusion-rope:qwen-image",
            "QwenEmbedRope(scale_rope=True); use_layer3d_rope (QwenEmbedLayer3DRope) is a 422",
        ),
        "CogVideoXTransformer3DModel": _served(
            "cogvideox_transformer_3d",
            "diffusion-rope:cogvideox",
            "get_3d_rotary_pos_embed with use_rotary_positional_embeddings; otherwise the 3-D "
            "sin-cos table at sincos-2d:cogvideox (a learned table is a 422)",
        ),
        "LTXVideoTransformer3DModel": _served(
            "transformer_ltx", "diffusion-rope:ltx-video", "LTXVideoRotaryPosEmbed"
        ),
        "SD3Transformer2DModel": _served(
            "transformer_sd3", "sincos-2d:sd3", "PatchEmbed cropped from pos_embed_max_size"
        ),
        "PixArtTransformer2DModel": _served(
            "pixart_transformer_2d", "sincos-2d:pixart", "PatchEmbed with interpolation_scale"
        ),
        "DiTTransformer2DModel": _served(
            "dit_transformer_2d", "sincos-2d:dit", "PatchEmbed, interpolation_scale 1"
        ),
        "Transformer2DModel": _served(
            "transformer_2d",
            "sincos-2d:pixart",
            "patched inputs: PatchEmbed with interpolation_scale (config or sample_size // 64), "
            "the rule of PixArt (and of DiT checkpoints published with this class)",
        ),
        # --- not served: rotary rules of their own -----------------------------------------
        "Flux2Transformer2DModel": _not(
            "transformer_flux2",
            "Flux2PosEmbed: four axes (t, h, w, l) and its own theta; no rule yet",
        ),
        "Flux3Transformer2DModel": _not("transformer_flux3", "Flux3PosEmbed; no rule yet"),
        "Krea2Transformer2DModel": _not("transformer_krea2", "Krea2RotaryPosEmbed; no rule yet"),
        "BriaTransformer2DModel": _not(
            "transformer_bria", "BriaPosEmbed (FLUX-like); not compared"
        ),
        "BriaFiboTransformer2DModel": _not(
            "transformer_bria_fibo", "its own 1-D rotary; no rule yet"
        ),
        "BriaFibo2Transformer2DModel": _not("transformer_bria_fibo2", "RopeEmbedder; no rule yet"),
        "LongCatImageTransformer2DModel": _not(
            "transformer_longcat_image", "LongCatImagePosEmbed; no rule yet"
        ),
        "OvisImageTransformer2DModel": _not(
            "transformer_ovis_image", "OvisImagePosEmbed; no rule yet"
        ),
        "ZImageTransformer2DModel": _not("transformer_z_image", "RopeEmbedder; no rule yet"),
        "QwenImage21Transformer2DModel": _not(
            "transformer_qwenimage21", "QwenImage21Rope; no rule yet"
        ),
        "NucleusMoEImageTransformer2DModel": _not(
            "transformer_nucleusmoe_image", "NucleusMoEEmbedRope; no rule yet"
        ),
        "HunyuanVideo15Transformer3DModel": _not(
            "transformer_hunyuan_video15", "HunyuanVideo15RotaryPosEmbed; no rule yet"
        ),
        "HunyuanVideoFramepackTransformer3DModel": _not(
            "transformer_hunyuan_video_framepack",
            "HunyuanVideoFramepackRotaryPosEmbed over history clips; no rule yet",
        ),
        "HunyuanImageTransformer2DModel": _not(
            "transformer_hunyuanimage", "HunyuanImageRotaryPosEmbed; no rule yet"
        ),
        "WanAnimateTransformer3DModel": _not(
            "transformer_wan_animate", "its own copy of WanRotaryPosEmbed; not compared with Wan's"
        ),
        "SanaVideoTransformer3DModel": _not(
            "transformer_sana_video", "its own copy of WanRotaryPosEmbed; not compared with Wan's"
        ),
        "SanaWMTransformer3DModel": _not(
            "transformer_sana_wm", "SanaWMRotaryPosEmbed; no rule yet"
        ),
        "SanaWMLTX2RefinerTransformer3DModel": _not(
            "transformer_sana_wm_refiner", "LTX-2 audio-video rotary; no rule yet"
        ),
        "LTX2VideoTransformer3DModel": _not(
            "transformer_ltx2",
            "LTX2AudioVideoRotaryPosEmbed (audio and video coordinates); no rule yet",
        ),
        "SkyReelsV2Transformer3DModel": _not(
            "transformer_skyreels_v2", "SkyReelsV2RotaryPosEmbed; no rule yet"
        ),
        "ChronoEditTransformer3DModel": _not(
            "transformer_chronoedit", "ChronoEditRotaryPosEmbed; no rule yet"
        ),
        "AnyFlowTransformer3DModel": _not(
            "transformer_anyflow", "AnyFlowRotaryPosEmbed; no rule yet"
        ),
        "AnyFlowFARTransformer3DModel": _not(
            "transformer_anyflow_far", "AnyFlowCausalRotaryPosEmbed; no rule yet"
        ),
        "CosmosTransformer3DModel": _not(
            "transformer_cosmos", "CosmosRotaryPosEmbed (and a learned option); no rule yet"
        ),
        "EasyAnimateTransformer3DModel": _not(
            "transformer_easyanimate", "EasyAnimateRotaryPosEmbed; no rule yet"
        ),
        "MotifVideoTransformer3DModel": _not(
            "transformer_motif_video", "MotifVideoRotaryPosEmbed; no rule yet"
        ),
        "MiniMaxH3Transformer3DModel": _not(
            "transformer_minimax_h3", "MiniMaxH3RotaryPosEmbed; no rule yet"
        ),
        "HeliosTransformer3DModel": _not("transformer_helios", "HeliosRotaryPosEmbed; no rule yet"),
        "CogView4Transformer2DModel": _not(
            "transformer_cogview4", "CogView4RotaryPosEmbed; no rule yet"
        ),
        "GlmImageTransformer2DModel": _not(
            "transformer_glm_image", "GlmImageRotaryPosEmbed; no rule yet"
        ),
        "Lumina2Transformer2DModel": _not(
            "transformer_lumina2", "Lumina2RotaryPosEmbed (complex); no rule yet"
        ),
        "JoyImageEditTransformer3DModel": _not(
            "transformer_joyimage", "its own get_rotary_pos_embed; no rule yet"
        ),
        "JoyImageEditPlusTransformer3DModel": _not(
            "transformer_joyimage_edit_plus", "its own rotary over ranges; no rule yet"
        ),
        "AceStepTransformer1DModel": _not(
            "ace_step_transformer", "1-D rotary over audio frames: not an image or video grid"
        ),
        "ConsisIDTransformer3DModel": _not(
            "consisid_transformer_3d",
            "CogVideoXPatchEmbed with its own rotary settings; not compared",
        ),
        # --- not served: sin-cos or learned tables of their own ------------------------------
        "AllegroTransformer3DModel": _not(
            "transformer_allegro", "get_3d_rotary_pos_embed_allegro; no rule yet"
        ),
        "LatteTransformer3DModel": _not(
            "latte_transformer_3d", "PatchEmbed plus a 1-D temporal sin-cos; no rule yet"
        ),
        "MochiTransformer3DModel": _not(
            "transformer_mochi", "MochiRoPE with learned frequencies (weights)"
        ),
        "SanaTransformer2DModel": _not(
            "sana_transformer", "no positional table by default (interpolation_scale None)"
        ),
        "AuraFlowTransformer2DModel": _not(
            "auraflow_transformer_2d", "AuraFlowPatchEmbed: a learned table (weights)"
        ),
        "CogView3PlusTransformer2DModel": _not(
            "transformer_cogview3plus",
            "CogView3PlusPatchEmbed: 2-D sin-cos of its own; no rule yet",
        ),
        "HiDreamImageTransformer2DModel": _not(
            "transformer_hidream_image", "HiDreamImagePatchEmbed with its own rotary; no rule yet"
        ),
        "OmniGenTransformer2DModel": _not(
            "transformer_omnigen",
            "OmniGenPatchEmbed: cropped sin-cos like SD3 plus rotary in attention; no rule yet",
        ),
    }
)
"""Every diffusers transformer class with a positional encoding, by class name."""
