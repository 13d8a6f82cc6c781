"""Published diffusers ``transformer/config.json`` files (their position-related keys).

Each entry is ``name -> (repository, config, verified_from)``: the Hugging Face Hub repository
whose ``transformer/config.json`` the keys are quoted from, the keys as published (with
``_class_name``), and where the values were checked. Keys that do not bear on positions (layer
counts, channels, norms) are left out; a key the published file does not carry is left out too,
and the diffusers class default then applies, as it does when diffusers loads the file.

Where a value was checked: diffusers' own conversion scripts (``scripts/convert_*_to_diffusers.py``
in the diffusers repository), which write these files, and copies of the published files quoted
in other public repositories. A value neither gave is not invented: it is left to the class
default and the note says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["DEFAULT_CONFIG", "PUBLISHED"]

_CONVERT = "diffusers scripts/{}.py"

PUBLISHED: Mapping[str, tuple[str, Mapping[str, Any], str]] = MappingProxyType(
    {
        "FLUX.1-dev": (
            "black-forest-labs/FLUX.1-dev",
            {
                "_class_name": "FluxTransformer2DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "patch_size": 1,
            },
            "the published file (diffusers 0.30.0.dev0) carries no axes_dims_rope key: "
            "FluxTransformer2DModel's default (16, 56, 56) applies, as in black-forest-labs' "
            "flux repo (axes_dim [16, 56, 56], theta 10000); copies of the file quoted in "
            "public repositories agree",
        ),
        "FLUX.1-schnell": (
            "black-forest-labs/FLUX.1-schnell",
            {
                "_class_name": "FluxTransformer2DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "patch_size": 1,
            },
            "as FLUX.1-dev (no axes_dims_rope key: the default (16, 56, 56) applies)",
        ),
        "Wan2.1-T2V-14B": (
            "Wan-AI/Wan2.1-T2V-14B-Diffusers",
            {
                "_class_name": "WanTransformer3DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 40,
                "patch_size": [1, 2, 2],
                "rope_max_seq_len": 1024,
            },
            _CONVERT.format("convert_wan_to_diffusers") + " (Wan-T2V-14B); rope_max_seq_len is "
            "WanTransformer3DModel's default 1024, which the script's FLF2V entry writes out",
        ),
        "Wan2.1-T2V-1.3B": (
            "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
            {
                "_class_name": "WanTransformer3DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 12,
                "patch_size": [1, 2, 2],
                "rope_max_seq_len": 1024,
            },
            _CONVERT.format("convert_wan_to_diffusers") + " (Wan-T2V-1.3B)",
        ),
        "Wan2.2-TI2V-5B": (
            "Wan-AI/Wan2.2-TI2V-5B-Diffusers",
            {
                "_class_name": "WanTransformer3DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "patch_size": [1, 2, 2],
                "rope_max_seq_len": 1024,
            },
            _CONVERT.format("convert_wan_to_diffusers") + " (Wan2.2-TI2V-5B)",
        ),
        "Wan2.2-T2V-A14B": (
            "Wan-AI/Wan2.2-T2V-A14B-Diffusers",
            {
                "_class_name": "WanTransformer3DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 40,
                "patch_size": [1, 2, 2],
                "rope_max_seq_len": 1024,
            },
            _CONVERT.format("convert_wan_to_diffusers") + " (Wan2.2-T2V-A14B)",
        ),
        "HunyuanVideo": (
            "hunyuanvideo-community/HunyuanVideo",
            {
                "_class_name": "HunyuanVideoTransformer3DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "patch_size": 2,
                "patch_size_t": 1,
                "rope_theta": 256.0,
                "rope_axes_dim": [16, 56, 56],
            },
            _CONVERT.format("convert_hunyuan_video_to_diffusers") + " (HYVideo-T/2-cfgdistill)",
        ),
        "Qwen-Image": (
            "Qwen/Qwen-Image",
            {
                "_class_name": "QwenImageTransformer2DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 24,
                "patch_size": 2,
                "axes_dims_rope": [16, 56, 56],
            },
            "copies of Qwen/Qwen-Image's transformer/config.json (diffusers 0.34.0.dev0) and "
            "Qwen-Image-Edit's quoted in public repositories",
        ),
        "CogVideoX-5b": (
            "THUDM/CogVideoX-5b",
            {
                "_class_name": "CogVideoXTransformer3DModel",
                "attention_head_dim": 64,
                "num_attention_heads": 48,
                "patch_size": 2,
                "sample_height": 60,
                "sample_width": 90,
                "sample_frames": 49,
                "temporal_compression_ratio": 4,
                "max_text_seq_length": 226,
                "spatial_interpolation_scale": 1.875,
                "temporal_interpolation_scale": 1.0,
                "use_rotary_positional_embeddings": True,
            },
            _CONVERT.format("convert_cogvideox_to_diffusers") + " (version 1.0, 48 heads, "
            "--use_rotary_positional_embeddings) and copies of the published file",
        ),
        "CogVideoX-2b": (
            "THUDM/CogVideoX-2b",
            {
                "_class_name": "CogVideoXTransformer3DModel",
                "attention_head_dim": 64,
                "num_attention_heads": 30,
                "patch_size": 2,
                "sample_height": 60,
                "sample_width": 90,
                "sample_frames": 49,
                "temporal_compression_ratio": 4,
                "max_text_seq_length": 226,
                "spatial_interpolation_scale": 1.875,
                "temporal_interpolation_scale": 1.0,
                "use_rotary_positional_embeddings": False,
            },
            _CONVERT.format("convert_cogvideox_to_diffusers") + " (version 1.0, its defaults: "
            "30 heads, no rotary: a 3-D sin-cos table)",
        ),
        "CogVideoX1.5-5B": (
            "THUDM/CogVideoX1.5-5B",
            {
                "_class_name": "CogVideoXTransformer3DModel",
                "attention_head_dim": 64,
                "num_attention_heads": 48,
                "patch_size": 2,
                "patch_size_t": 2,
                "sample_height": 300,
                "sample_width": 300,
                "sample_frames": 81,
                "use_rotary_positional_embeddings": True,
            },
            _CONVERT.format("convert_cogvideox_to_diffusers") + " (version 1.5)",
        ),
        "LTX-Video": (
            "Lightricks/LTX-Video",
            {
                "_class_name": "LTXVideoTransformer3DModel",
                "attention_head_dim": 64,
                "num_attention_heads": 32,
                "patch_size": 1,
                "patch_size_t": 1,
            },
            _CONVERT.format("convert_ltx_to_diffusers") + " (versions before 0.9.7)",
        ),
        "LTX-Video-0.9.7": (
            "Lightricks/LTX-Video-0.9.7-dev",
            {
                "_class_name": "LTXVideoTransformer3DModel",
                "attention_head_dim": 128,
                "num_attention_heads": 32,
                "patch_size": 1,
                "patch_size_t": 1,
            },
            _CONVERT.format("convert_ltx_to_diffusers") + " (version 0.9.7)",
        ),
        "stable-diffusion-3-medium": (
            "stabilityai/stable-diffusion-3-medium-diffusers",
            {
                "_class_name": "SD3Transformer2DModel",
                "attention_head_dim": 64,
                "num_attention_heads": 24,
                "patch_size": 2,
                "sample_size": 128,
                "pos_embed_max_size": 192,
            },
            "copies of the published file (diffusers 0.30.0.dev0) quoted in public repositories",
        ),
        "stable-diffusion-3.5-large": (
            "stabilityai/stable-diffusion-3.5-large",
            {
                "_class_name": "SD3Transformer2DModel",
                "attention_head_dim": 64,
                "num_attention_heads": 38,
                "patch_size": 2,
                "sample_size": 128,
                "pos_embed_max_size": 192,
            },
            "copies of the published file quoted in public repositories (38 heads x 64, "
            "pos_embed of 192^2 = 36864 positions in the checkpoint)",
        ),
        "PixArt-Sigma-XL-2-1024-MS": (
            "PixArt-alpha/PixArt-Sigma-XL-2-1024-MS",
            {
                "_class_name": "Transformer2DModel",
                "norm_type": "ada_norm_single",
                "attention_head_dim": 72,
                "num_attention_heads": 16,
                "patch_size": 2,
                "sample_size": 128,
                "interpolation_scale": 2,
            },
            _CONVERT.format("convert_pixart_sigma_to_diffusers") + " (image size 1024: "
            "sample_size 1024 // 8, interpolation_scale {1024: 2})",
        ),
        "DiT-XL-2-256": (
            "facebook/DiT-XL-2-256",
            {
                "_class_name": "Transformer2DModel",
                "norm_type": "ada_norm_zero",
                "attention_head_dim": 72,
                "num_attention_heads": 16,
                "patch_size": 2,
                "sample_size": 32,
            },
            _CONVERT.format("convert_dit_to_diffusers") + " (image size 256: latent 32)",
        ),
    }
)
"""Published transformer configs by checkpoint name."""

DEFAULT_CONFIG: Mapping[str, str] = MappingProxyType(
    {
        "flux": "FLUX.1-dev",
        "wan": "Wan2.1-T2V-14B",
        "hunyuan-video": "HunyuanVideo",
        "qwen-image": "Qwen-Image",
        "cogvideox": "CogVideoX-5b",
        "cogvideox-sincos": "CogVideoX-2b",
        "ltx-video": "LTX-Video",
        "sd3": "stable-diffusion-3.5-large",
        "pixart": "PixArt-Sigma-XL-2-1024-MS",
        "dit": "DiT-XL-2-256",
    }
)
"""The checkpoint a short model name stands for (``cogvideox`` at sincos-2d: CogVideoX-2b, the
one without rotary)."""
