"""``interpolate_pos_encoding``: ViT, DeiT, DINOv2, CLIP, SigLIP, BLIP and their copies.

The tower reshapes its patch rows to the native ``s × s`` grid, resizes them with
``F.interpolate(size=(h, w), align_corners=False)`` (bicubic for most; antialiased where the
model says so: DINOv2 with registers) and puts the prefix rows back in front (Dosovitskiy et
al., 2021, "An Image is Worth 16x16 Words", §3.2; Caron et al., 2021, DINO's
``interpolate_pos_encoding``). The reference is each model's own ``interpolate_pos_encoding`` in
transformers 5 (``ViTEmbeddings``, ``DeiTEmbeddings`` keeps two prefix rows, ``Dinov2Embeddings``
upcasts to float32, ``CLIPVisionEmbeddings``, ``SiglipVisionEmbeddings`` has no class row...).
At the native grid the model adds the table as it is; bicubic and antialiased resizes to the
same size are the identity, so both paths agree.

The per-axis weights are ``F.interpolate`` of the ``s × s`` identity along that axis in float64,
the other axis kept at its size ``s`` (not squeezed to 1: torch's antialiased kernels weight a
one-wide axis differently), so that output ``[k, c]`` is the weight of row ``c``. Their Kronecker
product equals the resize of the whole ``s² × s²`` identity to float64 rounding.

Notation used for tensor shapes: ``s`` native side, ``n`` output length of one axis, ``D`` width.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.vision.learned.base import LearnedTower, Mode, ResizeRule

__all__ = ["INTERPOLATE", "TOWERS", "interpolate_axis_weights", "interpolate_patch_rows"]


def interpolate_axis_weights(tower: LearnedTower, side: int, n: int) -> Tensor:
    """``(n, s)`` float64: how ``F.interpolate`` weights the ``s`` rows of one axis for each of
    its ``n`` outputs, computed by resizing the identity: the ``s × s`` identity resized to
    ``n × s`` (the other axis keeps its size, so its weights are one-hot), output ``[k, c]`` is
    the weight of row ``c`` in output ``k``. ``s²`` elements in, ``n·s`` out."""
    eye = torch.eye(side, dtype=torch.float64).reshape(1, 1, side, side)
    if tower.scale_offset is not None:  # the model's scale_factor, the other axis kept
        out = F.interpolate(
            eye,
            scale_factor=((n + tower.scale_offset) / side, 1.0),
            mode=tower.mode,
            align_corners=False,
        )  # (1, 1, n, s)
    else:
        out = F.interpolate(
            eye, size=(n, side), mode=tower.mode, align_corners=False, antialias=tower.antialias
        )  # (1, 1, n, s)
    return out[0, 0].contiguous()  # (n, s)


def interpolate_patch_rows(tower: LearnedTower, rows: Tensor, side: int, h: int, w: int) -> Tensor:
    """``(h·w, D)``: the patch rows ``(s², D)`` resized as the model's ``interpolate_pos_encoding``
    does it, in their dtype, with the same tensor layout (so the same kernel and the same bits)."""
    dim = rows.shape[-1]
    grid = rows.reshape(1, side, side, dim).permute(0, 3, 1, 2)  # (1, D, s, s) channels-last
    if tower.scale_offset is not None:  # HY-V4-VL: by scale factor, even at the native grid
        scale = ((h + tower.scale_offset) / side, (w + tower.scale_offset) / side)
        out = F.interpolate(grid, scale_factor=scale, mode=tower.mode, align_corners=False)
        return out.permute(0, 2, 3, 1).reshape(h * w, dim)
    if h == side and w == side:
        return rows
    out = F.interpolate(
        grid, size=(h, w), mode=tower.mode, align_corners=False, antialias=tower.antialias
    )  # (1, D, h, w)
    return out.permute(0, 2, 3, 1).reshape(h * w, dim)


INTERPOLATE = ResizeRule(
    name="interpolate_pos_encoding",
    axis_weights=interpolate_axis_weights,
    engine=interpolate_patch_rows,
)


def _tower(
    reference: str,
    hidden: int,
    image: Any,
    patch: Any,
    *,
    prefix: int = 1,
    prefix_key: str | None = None,
    parameter: str = "position_embedding.weight",
    mode: Mode = "bicubic",
    antialias: bool = False,
    note: str | None = None,
    **more: Any,
) -> LearnedTower:
    defaults = {
        more.get("width_key", "hidden_size"): hidden,
        more.get("image_key", "image_size"): image,
        more.get("patch_key", "patch_size"): patch,
    }
    if prefix_key is not None:
        defaults[prefix_key] = prefix
    if more.get("mode_key") is not None:
        defaults[more["mode_key"]] = mode
    return LearnedTower(
        reference=reference,
        rule=INTERPOLATE,
        defaults=defaults,
        prefix=prefix,
        prefix_key=prefix_key,
        mode=mode,
        antialias=antialias,
        parameter=parameter,
        note=note,
        **more,
    )


_VIT = "position_embeddings"  # a (1, P, D) nn.Parameter
_BLIP = "position_embedding"  # a (1, P, D) nn.Parameter under the other name
_SAM_RESIZED: dict[str, Any] = {
    "prefix": 0,
    "parameter": "pos_embed",
    "antialias": True,
    "in_embeddings": False,
    "note": "a (1, s, s, D) table added to the patch feature map",
}
_VITDET: dict[str, Any] = {
    "parameter": _VIT,
    "image_key": "pretrain_image_size",
    "drops_prefix": True,
    "note": "the pretraining class row is dropped; the patch rows are added to the feature map",
}
_HUNYUAN: dict[str, Any] = {
    "mode": "bilinear",
    "mode_key": "interpolate_mode",
    "image_key": "max_image_size",
    "drops_prefix": True,
    "note": "row 0 (a class row) is never added; repeated per frame of a video",
}

# Vision config model_type -> its tower. Defaults are transformers 5.24's config-class defaults.
TOWERS: Mapping[str, LearnedTower] = {
    "vit": _tower("ViTEmbeddings", 768, 224, 16, parameter=_VIT),
    "vit_msn": _tower("ViTMSNEmbeddings", 768, 224, 16, parameter=_VIT),
    "ijepa": _tower("IJepaEmbeddings", 768, 224, 16, prefix=0, parameter=_VIT),
    "deit": _tower(
        "DeiTEmbeddings",
        768,
        224,
        16,
        prefix=2,
        parameter=_VIT,
        note="two prefix rows: the class and the distillation token",
    ),
    "dinov2": _tower("Dinov2Embeddings", 768, 224, 14, parameter=_VIT),
    "pixio": _tower(
        "PixioEmbeddings",
        1280,
        256,
        16,
        prefix=8,
        prefix_key="n_cls_tokens",
        parameter=_VIT,
        note="n_cls_tokens class rows (the config's) come first",
    ),
    "dinov2_with_registers": _tower(
        "Dinov2WithRegistersEmbeddings",
        768,
        224,
        16,
        parameter=_VIT,
        antialias=True,
        note="the register tokens, inserted after the class token, get no position row",
    ),
    "qianfan_ocr_vision": _tower(
        "QianfanOCRVisionEmbeddings", 1024, [448, 448], [14, 14], parameter=_VIT
    ),
    "flava_image_model": _tower("FlavaImageEmbeddings", 768, 224, 16, parameter=_VIT),
    "groupvit_vision_model": _tower(
        "GroupViTVisionEmbeddings", 384, 224, 16, prefix=0, parameter=_VIT
    ),
    "tipsv2_vision_model": _tower(
        "Tipsv2VisionEmbeddings",
        768,
        448,
        14,
        parameter=_VIT,
        mode="bilinear",
        antialias=True,
        note="the register tokens, inserted after the class token, get no position row",
    ),
    "step3p5_vision": _tower(
        "Step3p7VisionEmbeddings",
        1536,
        728,
        14,
        prefix=0,
        mode="bilinear",
        note="the tower also rotates by a 2-D rotary embedding: see /v1/encodings/vision-rope",
    ),
    "internvl_vision": _tower(
        "InternVLVisionEmbeddings", 1024, [448, 448], [14, 14], parameter=_VIT
    ),
    "clip_vision_model": _tower("CLIPVisionEmbeddings", 768, 224, 32),
    "chinese_clip_vision_model": _tower("ChineseCLIPVisionEmbeddings", 768, 224, 32),
    "altclip_vision_model": _tower("AltCLIPVisionEmbeddings", 768, 224, 32),
    "metaclip_2_vision_model": _tower("MetaClip2VisionEmbeddings", 768, 224, 32),
    "xclip_vision_model": _tower("XCLIPVisionEmbeddings", 768, 224, 32),
    "clipseg_vision_model": _tower("CLIPSegVisionEmbeddings", 768, 224, 32),
    "kosmos_2_vision_model": _tower("Kosmos2VisionEmbeddings", 1024, 224, 14),
    "bridgetower_vision_model": _tower("BridgeTowerVisionEmbeddings", 768, 288, 16),
    "git_vision_model": _tower("GitVisionEmbeddings", 768, 224, 16),
    "owlvit_vision_model": _tower("OwlViTVisionEmbeddings", 768, 768, 32),
    "owlv2_vision_model": _tower("Owlv2VisionEmbeddings", 768, 768, 16),
    "blip_vision_model": _tower("BlipVisionEmbeddings", 768, 384, 16, parameter=_BLIP),
    "blip_2_vision_model": _tower("Blip2VisionEmbeddings", 1408, 224, 14, parameter=_BLIP),
    "instructblip_vision_model": _tower(
        "InstructBlipVisionEmbeddings", 1408, 224, 14, parameter=_BLIP
    ),
    "instructblipvideo_vision_model": _tower(
        "InstructBlipVideoVisionEmbeddings", 1408, 224, 14, parameter=_BLIP
    ),
    "siglip_vision_model": _tower("SiglipVisionEmbeddings", 768, 224, 16, prefix=0),
    "janus_vision_model": _tower("JanusVisionEmbeddings", 1024, 384, 16, prefix=0),
    "granite_docling_vision": _tower("GraniteDoclingVisionEmbeddings", 768, 512, 16, prefix=0),
    # SAM-style encoders of DeepSeek-OCR 2 and Unlimited-OCR: a (1, s, s, D) table, resized
    # in float32 (bicubic, antialiased) where the grid is not the native one.
    "deepseek_ocr2_sam_vision_model": _tower(
        "DeepseekOcr2SamVisionEncoder", 768, 1024, 16, **_SAM_RESIZED
    ),
    "unlimited_ocr_sam_vision_model": _tower(
        "UnlimitedOcrSamVisionEncoder", 768, 1024, 16, **_SAM_RESIZED
    ),
    # ViTDet-style backbones: the pretraining table's class row dropped, the patch rows
    # resized (bicubic) to the feature map.
    "vitdet": _tower("VitDetEmbeddings", 768, 224, 16, **_VITDET),
    "lw_detr_vit": _tower("LwDetrViTEmbeddings", 768, 224, 16, **_VITDET),
    # Hunyuan-VL and HY-V4-VL: a class row never added, the patch rows resized per image
    # with the config's interpolate_mode; HY-V4-VL by scale factor (n + 0.1) / s.
    "hunyuan_vl_vision": _tower("HunYuanVLVisionPatchEmbed", 1152, 2048, 16, **_HUNYUAN),
    "hy_v4_vl_vision": _tower(
        "HYV4VLVisionPatchEmbed", 1536, 2048, 16, scale_offset=0.1, **_HUNYUAN
    ),
    # Unlimited-OCR's CLIP-style encoder over its SAM feature map: antialiased bicubic.
    "unlimited_ocr_vision_encoder": _tower(
        "UnlimitedOcrVisionEmbeddings",
        1024,
        224,
        14,
        antialias=True,
        note="its patches are a SAM encoder's feature map; the class row comes first",
    ),
    # RF-DETR's DINOv2: antialiased bicubic, then the tokens are split into windows.
    "rf_detr_dinov2": _tower(
        "RfDetrDinov2Embeddings",
        768,
        224,
        14,
        parameter=_VIT,
        antialias=True,
        note="rows before the window partition (num_windows² windows, each with the class "
        "token's row)",
    ),
    # DPT's own ViT: _resize_pos_embed, bilinear, at every grid.
    "dpt": _tower("DPTViTEmbeddings", 768, 384, 16, parameter=_VIT, mode="bilinear"),
    # SegGPT: the pretraining class row dropped, resized (bicubic) to the prompt-and-image
    # pair's grid.
    "seggpt": _tower(
        "SegGptEmbeddings",
        1024,
        224,
        16,
        parameter=_VIT,
        image_key="pretrain_image_size",
        drops_prefix=True,
        note="the grid is the prompt and the image stacked (height 2·h); the pretraining "
        "class row is dropped",
    ),
    # Hiera: no class row, bicubic; its tokens are unrolled into mask units afterwards.
    "hiera": _tower(
        "HieraEmbeddings",
        96,
        [224, 224],
        [4, 4],
        prefix=0,
        parameter=_VIT,
        width_key="embed_dim",
        patch_key="patch_stride",
        note="rows before Hiera unrolls its tokens into mask units",
    ),
    # Cosmos 3 Edge: SigLIP 2's table resized per frame (bilinear, antialiased) and added in
    # spatial-merge block order.
    "cosmos3_edge_vision": LearnedTower(
        reference="Cosmos3EdgeVisionEmbeddings",
        rule=INTERPOLATE,
        defaults={"hidden_size": 1152, "num_patches": 256, "spatial_merge_size": 2},
        prefix=0,
        mode="bilinear",
        antialias=True,
        parameter="position_embedding.weight",
        side_key="num_patches",
        merge_key="spatial_merge_size",
        note="patches in spatial-merge block order; a video repeats the rows per frame",
    ),
}
