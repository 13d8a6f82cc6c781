"""The position rows a vision tower's own embeddings forward adds, from transformers 5.

Every parameter of the tower's embeddings module (``ViTEmbeddings``, ``CLIPVisionEmbeddings``,
``Siglip2VisionEmbeddings``, ``Idefics3VisionEmbeddings``...) is zeroed except its position
table, which is set to the table under test; the forward on zero pixels then returns exactly
the rows it adds (``0 + x`` is ``x``), in the order it adds them. DINOv2-with-registers' register
and TIPSv2's register
rows (zero, no position row) are dropped.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedConfig
from transformers.vision_utils import get_vision_position_ids

from posenc.vision.learned import LEARNED_TOWERS
from tests.helpers import without_random_init

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
    "Aimv2VisionEmbeddings": "aimv2",
    "VitDetEmbeddings": "vitdet",
    "LwDetrViTEmbeddings": "lw_detr",
    "HunYuanVLVisionPatchEmbed": "hunyuan_vl",
    "HYV4VLVisionPatchEmbed": "hy_v4_vl",
    "Sam3ViTEmbeddings": "sam3",
    "Glm4vVisionEmbeddings": "glm4v",
    "HieraEmbeddings": "hiera",
    "RadioPatchEmbeddings": "radio",
    "UnlimitedOcrVisionEmbeddings": "unlimited_ocr",
    "RfDetrDinov2Embeddings": "rf_detr",
    "DPTViTEmbeddings": "dpt",
    "SegGptEmbeddings": "seggpt",
    "LayoutLMv3Model": "layoutlmv3",
    "Cosmos3EdgeVisionEmbeddings": "cosmos3_edge",
    "Inkling2VisionEmbeddings": "inkling2",
    "PaddleOCRVisionEmbeddings": "paddleocr_vl",
    "Kimi_K25VisionPositionEmbeddings": "kimi_k25",
    "Glm4vMoeVisionEmbeddings": "glm4v_moe",
    "GlmImageVisionEmbeddings": "glm_image",
    # Whole encoders: the rows reach their first layer (captured there).
    "SamVisionEncoder": "sam",
    "SamHQVisionEncoder": "sam_hq",
    "GotOcr2VisionEncoder": "got_ocr2",
    "SLANeXtVisionEncoder": "slanext",
    "PPFormulaNetVisionModel": "pp_formulanet",
    "DeepseekOcr2SamVisionEncoder": "deepseek_ocr2",
    "UnlimitedOcrSamVisionEncoder": "unlimited_ocr",
}
#: Embeddings whose forward returns a (1, D, h, w) feature map (ViTDet's), not tokens.
CHANNELS_FIRST = {"VitDetEmbeddings", "LwDetrViTEmbeddings"}
#: Embeddings that take flattened patches (h·w, C·p·p) and grid_thw (Hunyuan-VL's).
FLAT_PATCHES = {"HunYuanVLVisionPatchEmbed", "HYV4VLVisionPatchEmbed"}


class _Reached(Exception):
    """Raised by the hook on an encoder's first layer, once it holds that layer's input."""

    def __init__(self, hidden: Tensor) -> None:
        super().__init__()
        self.hidden = hidden


def _input_of(module: torch.nn.Module, name: str, call: Any, pixels: Tensor) -> Tensor:
    """The first input of ``module``'s submodule ``name`` during ``call(pixels)`` (the call
    stops there)."""

    def stop(_layer: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise _Reached(args[0] if args else kwargs["hidden_states"])

    handle = module.get_submodule(name).register_forward_pre_hook(stop, with_kwargs=True)
    try:
        call(pixels)
    except _Reached as reached:
        return reached.hidden
    finally:
        handle.remove()
    raise AssertionError(f"{type(module).__name__} never reached {name}")


def _first_layer_input(module: torch.nn.Module, pixels: Tensor) -> Tensor:
    """A whole encoder's hidden states as they enter its first layer (patches + table)."""
    return _input_of(module, "layers.0", module, pixels)


def embeddings_class(reference: str) -> Any:
    module = importlib.import_module(
        f"transformers.models.{MODULES[reference]}.modeling_{MODULES[reference]}"
    )
    return getattr(module, reference)


def _patch(config: PreTrainedConfig) -> tuple[int, int]:
    patch = getattr(config, LEARNED_TOWERS[config.model_type].patch_key)
    return (patch[0], patch[1]) if isinstance(patch, list | tuple) else (patch, patch)


def tower_width(module: torch.nn.Module) -> int:
    """The width of the embeddings module's output (its ``embed_dim``)."""
    return int(module.embed_dim)  # type: ignore[arg-type]


def _set_table(module: torch.nn.Module, name: str, table: Tensor) -> None:
    param = module.get_parameter(name)
    param.copy_(table.reshape(param.shape))


# The module model_rows built last, for the next grid of the same config and table:
# ((config class, config JSON), table, module).
_last_built: list[tuple[tuple[type, str], Tensor, Any]] = []


def _built(config: PreTrainedConfig, table: Tensor) -> Any:
    """The tower's embeddings module (or one-layer encoder) for ``config``, every parameter
    zero but the position table, which holds ``table``; the last one is kept, since a test
    runs one config and table on several grids."""
    key = (type(config), config.to_json_string())
    if _last_built and _last_built[0][0] == key and torch.equal(_last_built[0][1], table):
        return _last_built[0][2]
    tower = LEARNED_TOWERS[config.model_type]
    with without_random_init():  # every parameter is set below
        module = embeddings_class(tower.reference)(config).eval()
    with torch.no_grad():
        for param in module.parameters():
            param.zero_()
        _set_table(module, tower.parameter, table)
    _last_built[:] = [(key, table.clone(), module)]
    return module


def model_rows(config: PreTrainedConfig, grid: tuple[int, int], table: Tensor) -> Tensor:
    """``(N, D)`` float32: the rows the tower's embeddings forward adds for one image of
    ``grid`` patches, with its position table set to ``table`` ``(P, D)``."""
    tower = LEARNED_TOWERS[config.model_type]
    encoder = (
        tower.reference.endswith(("Encoder", "Model")) and tower.reference != "LayoutLMv3Model"
    )
    if tower.reference.endswith(("Encoder", "Model")):  # one layer is enough
        config = copy.deepcopy(config)
        config.num_hidden_layers = 1
    module = _built(config, table)
    h, w = grid
    ph, pw = _patch(config)
    channels = getattr(config, "num_channels", 3)
    with torch.no_grad():
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
        elif tower.rule.name == "grid_sample":  # at the rotary's ids, as the vision model
            grid_thw = torch.tensor([[1, h, w]])
            y, x = get_vision_position_ids(grid_thw, config.spatial_merge_size).unbind(-1)
            dim = int(tower_width(module))
            out = module(torch.zeros(h * w, dim), [h * w], torch.tensor([[1, h, w]]), y, x)[None]
        elif tower.reference == "PaddleOCRVisionEmbeddings":
            pixels = torch.zeros(1, h * w, channels, ph, pw)
            out = module(pixels, grid_thw=torch.tensor([[1, h, w]]))[None]
        elif tower.reference == "Cosmos3EdgeVisionEmbeddings":  # patches in merge order
            pixels = torch.zeros(h * w, channels * ph * pw)
            out = module(pixels, torch.tensor([[1, h, w]]))[None]
        elif tower.reference == "Inkling2VisionEmbeddings":  # the class token's row dropped
            pixels = torch.zeros(h * w * ph * pw, channels)
            index = torch.arange(1, h * w + 1)
            out = module(pixels, torch.tensor([[1, h, w]]), index)[None, 1:]
        elif tower.reference == "UnlimitedOcrVisionEmbeddings":  # takes the SAM feature map
            out = module(torch.zeros(1, config.hidden_size, h, w))
        elif tower.reference == "RfDetrDinov2Embeddings":  # its own code, before the windows
            tokens = torch.zeros(1, 1 + h * w, config.hidden_size)
            out = module.interpolate_pos_encoding(tokens, h * ph, w * pw)
        elif tower.reference == "SegGptEmbeddings":  # its own code, on the pair's grid
            out = module.interpolate_pos_encoding(h, w)
        elif tower.reference == "LayoutLMv3Model":  # the image rows as pos_drop takes them
            out = _input_of(
                module, "pos_drop", module.forward_image, torch.zeros(1, channels, h * ph, w * pw)
            )
        elif tower.reference == "DPTViTEmbeddings":
            out = module(torch.zeros(1, channels, h * ph, w * pw)).last_hidden_states
        elif tower.reference == "RadioPatchEmbeddings":  # the class and register rows dropped
            out = module(torch.zeros(1, channels, h * ph, w * pw))
            out = out[:, config.num_cls_tokens + config.num_registers :]
        elif tower.reference == "Kimi_K25VisionPositionEmbeddings":
            out = module(torch.zeros(h * w, config.hidden_size), torch.tensor([[1, h, w]]))[None]
        elif encoder:
            out = _first_layer_input(module, torch.zeros(1, channels, h * ph, w * pw))
        elif tower.reference in FLAT_PATCHES:
            out = module(torch.zeros(h * w, channels * ph * pw), grid_thw=[[1, h, w]])
        elif tower.rule.name in ("fixed", "tile") or tower.reference in CHANNELS_FIRST:
            out = module(torch.zeros(1, channels, h * ph, w * pw))
        else:
            pixels = torch.zeros(1, channels, h * ph, w * pw)
            try:
                out = module(pixels, interpolate_pos_encoding=True)
            except TypeError:  # DINOv2, InternViT: always interpolate
                out = module(pixels)
    out = (out[0] if isinstance(out, tuple) else out).detach()
    if tower.reference in CHANNELS_FIRST:
        out = out.permute(0, 2, 3, 1)
    out = out.reshape(out.shape[0], -1, out.shape[-1])[0]  # (N, D), feature maps flattened
    if config.model_type in ("dinov2_with_registers", "tipsv2_vision_model"):
        out = torch.cat((out[:1], out[1 + config.num_register_tokens :]))
    return out
