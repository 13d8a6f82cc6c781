"""The position rows a vision tower's own embeddings forward adds, from transformers 5.

Every parameter of the tower's embeddings module (``ViTEmbeddings``, ``CLIPVisionEmbeddings``,
``Siglip2VisionEmbeddings``, ``Idefics3VisionEmbeddings``...) is zeroed except its position
table, which is set to the table under test; the forward on zero pixels then returns exactly
the rows it adds (``0 + x`` is ``x``), in the order it adds them. DINOv2-with-registers' register
and TIPSv2's register
rows (zero, no position row) are dropped.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedConfig

from posenc.vision_learned import LEARNED_TOWERS

MODULES = {  # embeddings class -> transformers.models.<module>
    "ViTEmbeddings": "vit",
    "ViTMSNEmbeddings": "vit_msn",
    "IJepaEmbeddings": "ijepa",
    "DeiTEmbeddings": "deit",
    "Dinov2Embeddings": "dinov2",
    "PixioEmbeddings": "pixio",
    "Dinov2WithRegistersEmbeddings": "dinov2_with_registers",
    "InternVLVisionEmbeddings": "internvl",
    "QianfanOCRVisionEmbeddings": "qianfan_ocr",
    "FlavaImageEmbeddings": "flava",
    "GroupViTVisionEmbeddings": "groupvit",
    "Tipsv2VisionEmbeddings": "tipsv2",
    "Step3p7VisionEmbeddings": "step3p7",
    "CLIPVisionEmbeddings": "clip",
    "ChineseCLIPVisionEmbeddings": "chinese_clip",
    "AltCLIPVisionEmbeddings": "altclip",
    "MetaClip2VisionEmbeddings": "metaclip_2",
    "XCLIPVisionEmbeddings": "x_clip",
    "CLIPSegVisionEmbeddings": "clipseg",
    "Kosmos2VisionEmbeddings": "kosmos2",
    "BridgeTowerVisionEmbeddings": "bridgetower",
    "GitVisionEmbeddings": "git",
    "OwlViTVisionEmbeddings": "owlvit",
    "Owlv2VisionEmbeddings": "owlv2",
    "BlipVisionEmbeddings": "blip",
    "Blip2VisionEmbeddings": "blip_2",
    "InstructBlipVisionEmbeddings": "instructblip",
    "InstructBlipVideoVisionEmbeddings": "instructblipvideo",
    "SiglipVisionEmbeddings": "siglip",
    "JanusVisionEmbeddings": "janus",
    "Ovis2VisionEmbeddings": "ovis2",
    "GraniteDoclingVisionEmbeddings": "granite_docling",
    "Siglip2VisionEmbeddings": "siglip2",
    "Idefics2VisionEmbeddings": "idefics2",
    "Idefics3VisionEmbeddings": "idefics3",
    "SmolVLMVisionEmbeddings": "smolvlm",
    "Phi4MultimodalVisionEmbeddings": "phi4_multimodal",
    "MiniCPMOcrVisionEmbeddings": "minicpm_ocr",
    "MiniCPMV4_6VisionEmbeddings": "minicpmv4_6",
    "MiniCPMV4_7VisionEmbeddings": "minicpmv4_7",
}


def embeddings_class(reference: str) -> Any:
    module = importlib.import_module(
        f"transformers.models.{MODULES[reference]}.modeling_{MODULES[reference]}"
    )
    return getattr(module, reference)


def _patch(config: PreTrainedConfig) -> tuple[int, int]:
    patch = config.patch_size
    return (patch[0], patch[1]) if isinstance(patch, list | tuple) else (patch, patch)


def _set_table(module: torch.nn.Module, name: str, table: Tensor) -> None:
    param = module.get_parameter(name)
    param.copy_(table.reshape(param.shape))


def model_rows(config: PreTrainedConfig, grid: tuple[int, int], table: Tensor) -> Tensor:
    """``(N, D)`` float32: the rows the tower's embeddings forward adds for one image of
    ``grid`` patches, with its position table set to ``table`` ``(P, D)``."""
    tower = LEARNED_TOWERS[config.model_type]
    cls = embeddings_class(tower.reference)
    module = cls(config).eval()
    h, w = grid
    ph, pw = _patch(config)
    channels = getattr(config, "num_channels", 3)
    with torch.no_grad():
        for param in module.parameters():
            param.zero_()
        _set_table(module, tower.parameter, table)
        if tower.rule.name == "naflex":
            pixels = torch.zeros(1, h * w, channels * ph * pw)
            out = module(pixels, spatial_shapes=torch.tensor([[h, w]]))
        elif tower.rule.name == "navit_buckets":
            pixels = torch.zeros(1, channels, h * ph, w * pw)
            mask = torch.ones(1, h, w, dtype=torch.bool)
            out = module(pixels, patch_attention_mask=mask)
        elif tower.rule.name == "nearest_buckets":
            pixels = torch.zeros(1, channels, h * ph, w * pw)
            out = module(pixels, target_sizes=torch.tensor([[h, w]]))
        elif tower.rule.name == "fixed":
            out = module(torch.zeros(1, channels, h * ph, w * pw))
        else:
            pixels = torch.zeros(1, channels, h * ph, w * pw)
            try:
                out = module(pixels, interpolate_pos_encoding=True)
            except TypeError:  # DINOv2, InternViT: always interpolate
                out = module(pixels)
    out = out[0]
    if config.model_type in ("dinov2_with_registers", "tipsv2_vision_model"):
        out = torch.cat((out[:1], out[1 + config.num_register_tokens :]))
    return out
