"""One record per vision tower that adds a learned 2-D position table: what its table is and
how its transformers code resizes it to an image's grid, read by :mod:`posenc.vision.learned`
(``POST /v1/encodings/vision-learned``) and :mod:`posenc.readers.vision_checkpoint`.

Each :class:`LearnedTowerRecord` is keyed by the ``model_type`` of a vision config (``vit``,
``clip_vision_model``, ``siglip2_vision_model`` ...): its embeddings class, the name of the
resizing rule whose code lives in :mod:`posenc.vision.learned` (``resize``), transformers
5.24's config-class defaults of the keys read, its prefix rows and interpolation mode.
:func:`learned_tower_record` is the one lookup; adding a tower is adding its record. The
top-level model types' default towers are the ``learned_vision_tower`` field of
:mod:`posenc.facts.families`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "LEARNED_TOWER_RECORDS",
    "LearnedTowerRecord",
    "Mode",
    "Resize",
    "learned_tower_record",
]

#: ``F.interpolate``'s modes the towers use.
Mode = Literal["bicubic", "bilinear"]
#: The resizing rules of :mod:`posenc.vision.learned`, by name.
Resize = Literal[
    "interpolate_pos_encoding",
    "naflex",
    "navit_buckets",
    "nearest_buckets",
    "fixed",
    "tile",
    "grid_sample",
    "gather_sum",
    "embedding_bag",
    "cropped",
]


@dataclass(frozen=True)
class LearnedTowerRecord:
    """A vision config ``model_type`` whose tower adds a learned 2-D position table.

    Attributes:
        reference: the transformers embeddings class whose forward adds the table.
        resize: how it resizes the patch rows: the name of a resizing rule of
            :mod:`posenc.vision.learned` (``interpolate_pos_encoding``, ``naflex``,
            ``navit_buckets`` ...; ``gather_sum`` and ``embedding_bag`` are the two ways of
            ``interpolate_gather``).
        defaults: transformers 5.24's config-class defaults of the keys read
            (``hidden_size``, ``image_size``, ``patch_size``, or ``num_patches``).
        prefix: rows before the patch rows, kept as they are (class token 1, DeiT 2, SigLIP 0).
        mode: the interpolation of ``interpolate_pos_encoding`` (``bicubic``, ``bilinear``).
        antialias: ``F.interpolate``'s ``antialias``.
        parameter: the table's name in the embeddings module (``position_embeddings``, a
            ``(1, P, D)`` parameter, or ``position_embedding``, an ``nn.Embedding(P, D)``).
        side_key: ``num_patches`` where the config gives the table's size directly (SigLIP 2),
            else None (``image_size // patch_size``).
        prefix_key: the config key that gives ``prefix`` where the config sets it (Pixio's
            ``n_cls_tokens``; ``defaults`` holds its default), else None.
        merge_key: the config key of the merge blocks (``spatial_merge_size``) in whose order
            the tower adds its patch rows (block-major), else None (row-major).
        grid_key: the config key that gives ``s`` itself (Kimi K2.5's ``pos_emb_height``),
            else None.
        width_key: the config key of the table's width (``hidden_size``; Hiera's
            ``embed_dim``).
        patch_key: the config key of the patch size (``patch_size``; Hiera's
            ``patch_stride``).
        image_key: the config key of the image size the table was made for
            (``image_size``; ViTDet's ``pretrain_image_size``, Hunyuan-VL's ``max_image_size``).
        drops_prefix: the table's ``prefix`` rows (a pretraining class row) are never added:
            the tokens are the patch rows only (ViTDet, Hunyuan-VL).
        mode_key: the config key that names the interpolation mode (Hunyuan-VL's
            ``interpolate_mode``; ``defaults`` holds its default), else None (``mode``).
        scale_offset: ``F.interpolate`` by ``scale_factor=(n + scale_offset) / s`` instead of
            ``size=n``, at every grid, the native one too (HY-V4-VL: 0.1), else None.
        in_embeddings: the checkpoint's tensor is ``…embeddings.<parameter>`` (else
            ``…<parameter>``: SAM's ``vision_encoder.pos_embed``).
        note: what else the tower does around the table (register tokens, padding).
    """

    reference: str
    resize: Resize
    defaults: Mapping[str, Any]
    prefix: int = 1
    mode: Mode = "bicubic"
    antialias: bool = False
    parameter: str = "position_embeddings"
    side_key: str | None = None
    prefix_key: str | None = None
    merge_key: str | None = None
    grid_key: str | None = None
    width_key: str = "hidden_size"
    patch_key: str = "patch_size"
    image_key: str = "image_size"
    drops_prefix: bool = False
    mode_key: str | None = None
    scale_offset: float | None = None
    in_embeddings: bool = True
    note: str | None = None


# interpolate_pos_encoding: ViT, DeiT, DINOv2, CLIP, SigLIP, BLIP and their copies.
def _interpolated(
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
) -> LearnedTowerRecord:
    defaults = {
        more.get("width_key", "hidden_size"): hidden,
        more.get("image_key", "image_size"): image,
        more.get("patch_key", "patch_size"): patch,
    }
    if prefix_key is not None:
        defaults[prefix_key] = prefix
    if more.get("mode_key") is not None:
        defaults[more["mode_key"]] = mode
    return LearnedTowerRecord(
        reference=reference,
        resize="interpolate_pos_encoding",
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
_INTERPOLATED: dict[str, LearnedTowerRecord] = {
    "vit": _interpolated("ViTEmbeddings", 768, 224, 16, parameter=_VIT),
    "vit_msn": _interpolated("ViTMSNEmbeddings", 768, 224, 16, parameter=_VIT),
    "ijepa": _interpolated("IJepaEmbeddings", 768, 224, 16, prefix=0, parameter=_VIT),
    "deit": _interpolated(
        "DeiTEmbeddings",
        768,
        224,
        16,
        prefix=2,
        parameter=_VIT,
        note="two prefix rows: the class and the distillation token",
    ),
    "dinov2": _interpolated("Dinov2Embeddings", 768, 224, 14, parameter=_VIT),
    "pixio": _interpolated(
        "PixioEmbeddings",
        1280,
        256,
        16,
        prefix=8,
        prefix_key="n_cls_tokens",
        parameter=_VIT,
        note="n_cls_tokens class rows (the config's) come first",
    ),
    "dinov2_with_registers": _interpolated(
        "Dinov2WithRegistersEmbeddings",
        768,
        224,
        16,
        parameter=_VIT,
        antialias=True,
        note="the register tokens, inserted after the class token, get no position row",
    ),
    "qianfan_ocr_vision": _interpolated(
        "QianfanOCRVisionEmbeddings", 1024, [448, 448], [14, 14], parameter=_VIT
    ),
    "flava_image_model": _interpolated("FlavaImageEmbeddings", 768, 224, 16, parameter=_VIT),
    "groupvit_vision_model": _interpolated(
        "GroupViTVisionEmbeddings", 384, 224, 16, prefix=0, parameter=_VIT
    ),
    "tipsv2_vision_model": _interpolated(
        "Tipsv2VisionEmbeddings",
        768,
        448,
        14,
        parameter=_VIT,
        mode="bilinear",
        antialias=True,
        note="the register tokens, inserted after the class token, get no position row",
    ),
    "step3p5_vision": _interpolated(
        "Step3p7VisionEmbeddings",
        1536,
        728,
        14,
        prefix=0,
        mode="bilinear",
        note="the tower also rotates by a 2-D rotary embedding: see /v1/encodings/vision-rope",
    ),
    "internvl_vision": _interpolated(
        "InternVLVisionEmbeddings", 1024, [448, 448], [14, 14], parameter=_VIT
    ),
    "clip_vision_model": _interpolated("CLIPVisionEmbeddings", 768, 224, 32),
    "chinese_clip_vision_model": _interpolated("ChineseCLIPVisionEmbeddings", 768, 224, 32),
    "altclip_vision_model": _interpolated("AltCLIPVisionEmbeddings", 768, 224, 32),
    "metaclip_2_vision_model": _interpolated("MetaClip2VisionEmbeddings", 768, 224, 32),
    "xclip_vision_model": _interpolated("XCLIPVisionEmbeddings", 768, 224, 32),
    "clipseg_vision_model": _interpolated("CLIPSegVisionEmbeddings", 768, 224, 32),
    "kosmos_2_vision_model": _interpolated("Kosmos2VisionEmbeddings", 1024, 224, 14),
    "bridgetower_vision_model": _interpolated("BridgeTowerVisionEmbeddings", 768, 288, 16),
    "git_vision_model": _interpolated("GitVisionEmbeddings", 768, 224, 16),
    "owlvit_vision_model": _interpolated("OwlViTVisionEmbeddings", 768, 768, 32),
    "owlv2_vision_model": _interpolated("Owlv2VisionEmbeddings", 768, 768, 16),
    "blip_vision_model": _interpolated("BlipVisionEmbeddings", 768, 384, 16, parameter=_BLIP),
    "blip_2_vision_model": _interpolated("Blip2VisionEmbeddings", 1408, 224, 14, parameter=_BLIP),
    "instructblip_vision_model": _interpolated(
        "InstructBlipVisionEmbeddings", 1408, 224, 14, parameter=_BLIP
    ),
    "instructblipvideo_vision_model": _interpolated(
        "InstructBlipVideoVisionEmbeddings", 1408, 224, 14, parameter=_BLIP
    ),
    "siglip_vision_model": _interpolated("SiglipVisionEmbeddings", 768, 224, 16, prefix=0),
    "janus_vision_model": _interpolated("JanusVisionEmbeddings", 1024, 384, 16, prefix=0),
    "granite_docling_vision": _interpolated(
        "GraniteDoclingVisionEmbeddings", 768, 512, 16, prefix=0
    ),
    # SAM-style encoders of DeepSeek-OCR 2 and Unlimited-OCR: a (1, s, s, D) table, resized
    # in float32 (bicubic, antialiased) where the grid is not the native one.
    "deepseek_ocr2_sam_vision_model": _interpolated(
        "DeepseekOcr2SamVisionEncoder", 768, 1024, 16, **_SAM_RESIZED
    ),
    "unlimited_ocr_sam_vision_model": _interpolated(
        "UnlimitedOcrSamVisionEncoder", 768, 1024, 16, **_SAM_RESIZED
    ),
    # ViTDet-style backbones: the pretraining table's class row dropped, the patch rows
    # resized (bicubic) to the feature map.
    "vitdet": _interpolated("VitDetEmbeddings", 768, 224, 16, **_VITDET),
    "lw_detr_vit": _interpolated("LwDetrViTEmbeddings", 768, 224, 16, **_VITDET),
    # Hunyuan-VL and HY-V4-VL: a class row never added, the patch rows resized per image
    # with the config's interpolate_mode; HY-V4-VL by scale factor (n + 0.1) / s.
    "hunyuan_vl_vision": _interpolated("HunYuanVLVisionPatchEmbed", 1152, 2048, 16, **_HUNYUAN),
    "hy_v4_vl_vision": _interpolated(
        "HYV4VLVisionPatchEmbed", 1536, 2048, 16, scale_offset=0.1, **_HUNYUAN
    ),
    # Unlimited-OCR's CLIP-style encoder over its SAM feature map: antialiased bicubic.
    "unlimited_ocr_vision_encoder": _interpolated(
        "UnlimitedOcrVisionEmbeddings",
        1024,
        224,
        14,
        antialias=True,
        note="its patches are a SAM encoder's feature map; the class row comes first",
    ),
    # RF-DETR's DINOv2: antialiased bicubic, then the tokens are split into windows.
    "rf_detr_dinov2": _interpolated(
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
    "dpt": _interpolated("DPTViTEmbeddings", 768, 384, 16, parameter=_VIT, mode="bilinear"),
    # SegGPT: the pretraining class row dropped, resized (bicubic) to the prompt-and-image
    # pair's grid.
    "seggpt": _interpolated(
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
    "hiera": _interpolated(
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
    "cosmos3_edge_vision": LearnedTowerRecord(
        reference="Cosmos3EdgeVisionEmbeddings",
        resize="interpolate_pos_encoding",
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


# NaFlex: SigLIP 2 resizes its table to each image (bilinear, antialiased).
_NAFLEX: dict[str, LearnedTowerRecord] = {
    "siglip2_vision_model": LearnedTowerRecord(
        reference="Siglip2VisionEmbeddings",
        resize="naflex",
        defaults={"hidden_size": 768, "num_patches": 256, "patch_size": 16},
        prefix=0,
        mode="bilinear",
        antialias=True,
        parameter="position_embedding.weight",
        side_key="num_patches",
        note="in a padded batch, the padding tokens take the first patch's row",
    ),
}


# NaViT buckets (Idefics2/3, SmolVLM, Phi-4) and MiniCPM-V's nearest buckets.
def _bucketed(
    reference: str, hidden: int, image: int, patch: int, resize: Resize = "navit_buckets"
) -> LearnedTowerRecord:
    return LearnedTowerRecord(
        reference=reference,
        resize=resize,
        defaults={"hidden_size": hidden, "image_size": image, "patch_size": patch},
        prefix=0,
        parameter="position_embedding.weight",
        note="in a padded batch, the padding patches read row 0",
    )


_BUCKETED: dict[str, LearnedTowerRecord] = {
    "idefics2_vision": _bucketed("Idefics2VisionEmbeddings", 768, 224, 32),
    "idefics3_vision": _bucketed("Idefics3VisionEmbeddings", 1152, 224, 32),
    "smolvlm_vision": _bucketed("SmolVLMVisionEmbeddings", 1152, 224, 32),
    "phi4_multimodal_vision": _bucketed("Phi4MultimodalVisionEmbeddings", 1152, 448, 14),
    "minicpm_ocr_vision": _bucketed("MiniCPMOcrVisionEmbeddings", 768, 224, 16, "nearest_buckets"),
    "minicpmv4_6_vision": _bucketed("MiniCPMV4_6VisionEmbeddings", 768, 224, 16, "nearest_buckets"),
    "minicpmv4_7_vision": _bucketed("MiniCPMV4_7VisionEmbeddings", 768, 224, 16, "nearest_buckets"),
}


# The table as it is, the native grid only.
def _sam(reference: str, image: int) -> LearnedTowerRecord:
    """A SAM-style encoder: a ``(1, s, s, D)`` ``pos_embed`` added to the patch feature map."""
    return LearnedTowerRecord(
        reference=reference,
        resize="fixed",
        defaults={"hidden_size": 768, "image_size": image, "patch_size": 16},
        prefix=0,
        parameter="pos_embed",
        in_embeddings=False,
        note="a (1, s, s, D) table added to the patch feature map (with use_abs_pos, the default)",
    )


_FIXED: dict[str, LearnedTowerRecord] = {
    "ovis2_vision": LearnedTowerRecord(
        reference="Ovis2VisionEmbeddings",
        resize="fixed",
        defaults={"hidden_size": 1024, "image_size": 224, "patch_size": 14},
        prefix=0,
        parameter="position_embedding.weight",
    ),
    "aimv2_vision_model": LearnedTowerRecord(
        reference="Aimv2VisionEmbeddings",
        resize="fixed",
        defaults={"hidden_size": 1024, "image_size": 224, "patch_size": 14},
        prefix=0,
        parameter="position_embedding.weight",
        note="with is_native false (the default); is_native true builds a 2-D sin-cos table "
        "per image instead, and has no learned table",
    ),
    "layoutlmv3": LearnedTowerRecord(
        reference="LayoutLMv3Model",
        resize="fixed",
        defaults={"hidden_size": 768, "input_size": 224, "patch_size": 16},
        prefix=1,
        parameter="pos_embed",
        image_key="input_size",
        in_embeddings=False,
        note="the image patches of a document model (visual_embed), the class row first",
    ),
    "sam_vision_model": _sam("SamVisionEncoder", 1024),
    "sam_hq_vision_model": _sam("SamHQVisionEncoder", 1024),
    "got_ocr2_vision": _sam("GotOcr2VisionEncoder", 1024),
    "slanext_vision": _sam("SLANeXtVisionEncoder", 512),
    "pp_formulanet_vision": _sam("PPFormulaNetVisionModel", 512),
}


# SAM 3's ViT: the pretraining table tiled over the grid.
_TILED: dict[str, LearnedTowerRecord] = {
    "sam3_vit_model": LearnedTowerRecord(
        reference="Sam3ViTEmbeddings",
        resize="tile",
        defaults={"hidden_size": 1024, "pretrain_image_size": 336, "patch_size": 14},
        prefix=0,
        image_key="pretrain_image_size",
        note="the tiled rows are added to the patch feature map, then split into windows",
    ),
}


# grid_sample: GLM-4V's table sampled at each patch (border padding).
def _grid_sampled(
    reference: str, hidden: int, image: int, patch: int, mode: Mode, merge: int
) -> LearnedTowerRecord:
    return LearnedTowerRecord(
        reference=reference,
        resize="grid_sample",
        defaults={
            "hidden_size": hidden,
            "image_size": image,
            "patch_size": patch,
            "spatial_merge_size": merge,
        },
        prefix=0,
        mode=mode,
        parameter="position_embedding.weight",
        merge_key="spatial_merge_size",
        note="beside a 2-D rotary embedding (/v1/encodings/vision-rope), in its spatial-merge "
        "block order",
    )


_GRID_SAMPLED: dict[str, LearnedTowerRecord] = {
    "glm4v_vision": _grid_sampled("Glm4vVisionEmbeddings", 1536, 336, 14, "bicubic", 2),
    "glm4v_moe_vision": _grid_sampled("Glm4vMoeVisionEmbeddings", 1536, 336, 14, "bicubic", 2),
    "glm_image_vision": _grid_sampled("GlmImageVisionEmbeddings", 1536, 2048, 16, "bilinear", 1),
}


# Interpolation as a weighted gather of taps (gather_sum) or an embedding bag.
def _gathered(reference: str, resize: Resize, mode: Mode, **more: object) -> LearnedTowerRecord:
    return LearnedTowerRecord(reference=reference, resize=resize, prefix=0, mode=mode, **more)  # type: ignore[arg-type]


_GATHERED: dict[str, LearnedTowerRecord] = {
    "paddleocr_vl_vision": _gathered(
        "PaddleOCRVisionEmbeddings",
        "gather_sum",
        "bilinear",
        defaults={"hidden_size": 1152, "image_size": 384, "patch_size": 14},
        parameter="position_embedding.weight",
        note="beside a 2-D rotary embedding (/v1/encodings/vision-rope)",
    ),
    "kimi_k25_vision": _gathered(
        "Kimi_K25VisionPositionEmbeddings",
        "embedding_bag",
        "bicubic",
        defaults={"hidden_size": 1152, "pos_emb_height": 64},
        parameter="position_embeddings",
        grid_key="pos_emb_height",
        note="a (s, s, D) table; videos add a per-frame sinusoid (zero for an image)",
    ),
    "inkling2_vision": _gathered(
        "Inkling2VisionEmbeddings",
        "gather_sum",
        "bilinear",
        defaults={"hidden_size": 1024, "posemb_grid_size": 32, "spatial_merge_size": 2},
        parameter="position_embedding.weight",
        grid_key="posemb_grid_size",
        merge_key="spatial_merge_size",
        note="patches in spatial-merge block order; each image's class token has its own "
        "learned row (cls_position_embedding), not in this table",
    ),
}


# RADIO: resized to a max(h, w) square, then cropped.
_CROPPED: dict[str, LearnedTowerRecord] = {
    "radio": LearnedTowerRecord(
        reference="RadioPatchEmbeddings",
        resize="cropped",
        defaults={"hidden_size": 1280, "max_img_size": 2048, "patch_size": 16},
        prefix=0,
        mode="bilinear",
        parameter="position_embedding",
        image_key="max_img_size",
        note="its num_cls_tokens + num_registers tokens come first, with rows of their own "
        "(cls_register_token), not in this table",
    ),
}


#: Vision config ``model_type`` -> its record, over every resizing rule (in this order).
LEARNED_TOWER_RECORDS: Mapping[str, LearnedTowerRecord] = MappingProxyType(
    {
        **_INTERPOLATED,
        **_NAFLEX,
        **_BUCKETED,
        **_FIXED,
        **_TILED,
        **_GRID_SAMPLED,
        **_GATHERED,
        **_CROPPED,
    }
)


def learned_tower_record(model_type: str | None) -> LearnedTowerRecord | None:
    """The record of the vision tower ``model_type``, or None where it adds no learned 2-D
    table posenc reads."""
    return LEARNED_TOWER_RECORDS.get(model_type)  # type: ignore[arg-type]
