"""Multimodal RoPE (M-RoPE) position ids of Qwen2-VL, Qwen2.5-VL and Qwen3-VL.

M-RoPE gives every token three position ids, temporal, height and width (Wang et al., 2024,
"Qwen2-VL: Enhancing Vision-Language Model's Perception of the World at Any Resolution", §2.1;
Bai et al., 2025, "Qwen2.5-VL Technical Report", §2.1.3 for the absolute-time temporal ids).
Text tokens carry the same id on all three axes and count up by one; the tokens of an image or
video of grid ``(t, h, w)`` (in patches; the language model sees ``h/m × w/m`` merged tokens per
frame, ``m = spatial_merge_size``) carry ``(start + temporal, start + row, start + column)``, and
the text after it resumes at ``start + max(h, w) / m``.

The rules are those of transformers 5 ``Qwen2VLModel.get_rope_index`` (and the Qwen2.5-VL and
Qwen3-VL overrides), which group each row's real tokens into runs of one modality (text, image
tokens, video tokens; the processor's ``mm_token_type_ids``) and give each image or video run the
next grid of ``image_grid_thw`` / ``video_grid_thw``, counted across the whole batch in order:

- ``qwen2_vl``: the temporal id of frame ``i`` is ``i``.
- ``qwen2_5_vl``: a video's frame ``i`` gets ``int(i · tokens_per_second · second_per_grid_ts)``,
  evaluated in float32 as transformers evaluates it with the processor's float32
  ``second_per_grid_ts`` tensor; images keep ``i``.
- ``qwen3_vl``: each video is split into its ``t`` frames (grid ``(1, h, w)`` each), which the
  chat template separates with timestamp text, so each frame is its own run.

Padded slots (attention mask 0) get id 0 on every axis. ``rope_deltas[b] = max(ids of row b) +
1 − (real tokens of row b)``: what generation adds to the text positions of later tokens.

Notation used for tensor shapes: ``B`` batch, ``T`` sequence length, ``N`` images or videos.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import Tensor

from posenc.core import kinds
from posenc.core.errors import InvalidArgument
from posenc.core.validate import check_binary_mask, check_int_matrix, first_true, is_number
from posenc.facts.families import FAMILIES
from posenc.tokens.position_ids import (
    ATTENTION_MASK_FIELD,
    CU_SEQLENS_FIELD,
    CU_SEQLENS_TENSOR,
    INPUT_IDS_FIELD,
    PADDING_SIDE_FIELD,
    build_batch,
    packed_meta,
    packed_row,
    with_cu_seqlens,
)

MRopeRule = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]

MROPE_RULES: tuple[str, ...] = get_args(MRopeRule)

# model_type (as in a config.json) -> the get_rope_index rule its transformers class uses: each
# record's mrope_ids_rule in posenc.facts.families.
MODEL_TYPE_RULES: dict[str, MRopeRule] = {
    t: f.mrope_ids_rule for t, f in FAMILIES.items() if f.mrope_ids_rule is not None
}

# transformers 5 config-class defaults, used where a published config.json omits the key
# (Qwen2VLConfig / Qwen2_5_VLConfig / Qwen3VLConfig; *VisionConfig.spatial_merge_size;
# Qwen2_5_VLVisionConfig.tokens_per_second).
_DEFAULT_TOKEN_IDS = {
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
}
_DEFAULT_SPATIAL_MERGE_SIZE = 2
_DEFAULT_TOKENS_PER_SECOND = 4

# Position ids are int64; keep them exact in float64 as every other posenc position.
_MAX_POSITION = 2**53


@dataclass(frozen=True)
class MRopeSettings:
    """What :func:`mrope_position_ids` reads from a model's config.

    Attributes:
        rule: ``qwen2_vl``, ``qwen2_5_vl`` or ``qwen3_vl`` (from ``model_type``).
        model_type: the config's ``model_type``.
        image_token_id: the image placeholder token (``<|image_pad|>``).
        video_token_id: the video placeholder token (``<|video_pad|>``).
        vision_start_token_id: ``<|vision_start|>`` (reported; transformers 5 no longer reads it).
        spatial_merge_size: ``m``: ``vision_config.spatial_merge_size``.
        tokens_per_second: ``vision_config.tokens_per_second`` (Qwen2.5-VL videos).
        defaulted: the keys the config lacked, filled with transformers' class defaults.
    """

    rule: MRopeRule
    model_type: str
    image_token_id: int
    video_token_id: int
    vision_start_token_id: int
    spatial_merge_size: int
    tokens_per_second: float
    defaulted: tuple[str, ...] = ()

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`mrope_position_ids` these settings give."""
        return {
            "rule": self.rule,
            "image_token_id": self.image_token_id,
            "video_token_id": self.video_token_id,
            "vision_start_token_id": self.vision_start_token_id,
            "spatial_merge_size": self.spatial_merge_size,
            "tokens_per_second": self.tokens_per_second,
        }


def _config_value(config: Mapping[str, Any], sub: str | None, key: str) -> tuple[bool, Any, str]:
    """``(found, value, field)`` for ``config[sub][key]`` (or ``config[key]`` when sub is None)."""
    holder: Any = config
    field = f"config.{key}"
    if sub is not None:
        holder = config.get(sub)
        field = f"config.{sub}.{key}"
        if holder is None:
            return False, None, field
        if not isinstance(holder, Mapping):
            raise InvalidArgument(
                f"config.{sub} must be an object, got {type(holder).__name__}",
                field=f"config.{sub}",
            )
    if key in holder and holder[key] is not None:
        return True, holder[key], field
    return False, None, field


def mrope_settings(config: Mapping[str, Any]) -> MRopeSettings:
    """Read the M-RoPE settings from a model's ``config.json`` mapping, as transformers 5 does.

    ``model_type`` picks the rule (``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, ``qwen3_vl_moe``).
    The token ids are top-level keys (a legacy ``text_config`` copy is read when the top level
    lacks them); ``spatial_merge_size`` and ``tokens_per_second`` are read from
    ``vision_config`` (the keys of ``Qwen2_5_VLVisionConfig``), with a top-level
    ``tokens_per_second`` accepted where ``vision_config`` lacks it. A missing key takes the
    transformers class default and is listed in ``defaulted``.

    Args:
        config: the parsed ``config.json``.

    Returns:
        :class:`MRopeSettings`.

    Raises:
        InvalidArgument: not a mapping, a missing or unknown ``model_type`` (the message lists the
            known ones), or a key of the wrong type or range (``field`` names it, e.g.
            ``config.vision_config.spatial_merge_size``).
    """
    if not isinstance(config, Mapping):
        raise InvalidArgument(
            f"config must be an object (a config.json), got {type(config).__name__}",
            field="config",
        )
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPE_RULES:
        known = ", ".join(sorted(MODEL_TYPE_RULES))
        got = "no model_type" if model_type is None else f"model_type {model_type!r}"
        raise InvalidArgument(
            f"config.model_type selects the M-RoPE rule and must be one of {known}; got {got}",
            field="config.model_type",
        )
    rule = MODEL_TYPE_RULES[model_type]
    defaulted: list[str] = []
    ids: dict[str, int] = {}
    for key, default in _DEFAULT_TOKEN_IDS.items():
        found, value, field = _config_value(config, None, key)
        if not found:
            found, value, field = _config_value(config, "text_config", key)
        if not found:
            value, field = default, f"config.{key}"
            defaulted.append(field)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
            raise InvalidArgument(
                f"{field} must be a token id (int64 >= 0), got {value!r}", field=field
            )
        ids[key] = value

    found, merge, field = _config_value(config, "vision_config", "spatial_merge_size")
    if not found:
        merge = _DEFAULT_SPATIAL_MERGE_SIZE
        defaulted.append(field)
    if isinstance(merge, bool) or not isinstance(merge, int) or not 1 <= merge < _MAX_POSITION:
        raise InvalidArgument(f"{field} must be an int in [1, 2**53), got {merge!r}", field=field)

    found, tps, field = _config_value(config, "vision_config", "tokens_per_second")
    if not found:
        found, tps, field = _config_value(config, None, "tokens_per_second")
    if not found:
        tps, field = _DEFAULT_TOKENS_PER_SECOND, "config.vision_config.tokens_per_second"
        if rule == "qwen2_5_vl":
            defaulted.append(field)
    if not is_number(tps) or not 0 <= tps < _MAX_POSITION:
        raise InvalidArgument(f"{field} must be a finite number >= 0, got {tps!r}", field=field)
    return MRopeSettings(
        rule=rule,
        model_type=model_type,
        image_token_id=ids["image_token_id"],
        video_token_id=ids["video_token_id"],
        vision_start_token_id=ids["vision_start_token_id"],
        spatial_merge_size=merge,
        tokens_per_second=tps,
        defaulted=tuple(defaulted),
    )


def _grid_tensor(grid: Sequence[Sequence[int]] | Tensor | None, field: str) -> Tensor:
    """``(N, 3)`` int64 CPU grid of ``[t, h, w]`` rows, each ≥ 1 (``(0, 3)`` for None)."""
    if grid is None:
        return torch.zeros((0, 3), dtype=torch.int64)
    if isinstance(grid, Tensor):
        if grid.is_floating_point() or grid.is_complex() or grid.dtype == torch.bool:
            raise InvalidArgument(
                f"{field} must hold integers, got a tensor of {grid.dtype}", field=field
            )
        g = grid.detach().to(device="cpu", dtype=torch.int64)
    else:
        rows = list(grid)
        for i, row in enumerate(rows):
            if isinstance(row, str | bytes) or not isinstance(row, Sequence) or len(row) != 3:
                raise InvalidArgument(
                    f"{field}[{i}] must be [t, h, w], got {row!r}", field=f"{field}[{i}]"
                )
            for v in row:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InvalidArgument(
                        f"{field}[{i}] must be three integers [t, h, w], got {list(row)!r}",
                        field=f"{field}[{i}]",
                    )
        g = torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)
    if g.dim() != 2 or g.shape[1] != 3:
        raise InvalidArgument(
            f"{field} must have shape (N, 3) ([t, h, w] rows), got {tuple(g.shape)}", field=field
        )
    if g.numel() and bool((g < 1).any()):
        (i, _) = first_true(g < 1)
        raise InvalidArgument(
            f"{field}[{i}] must be [t, h, w] with every entry >= 1, got {g[i].tolist()}",
            field=f"{field}[{i}]",
        )
    if g.numel() and bool((g >= _MAX_POSITION).any()):
        (i, _) = first_true(g >= _MAX_POSITION)
        raise InvalidArgument(
            f"{field}[{i}] entries must be < 2**53, got {g[i].tolist()}", field=f"{field}[{i}]"
        )
    return g


def mrope_position_ids(  # noqa: C901, PLR0915 (allowed: pyproject.toml)
    input_ids: Tensor,
    *,
    attention_mask: Tensor | None = None,
    image_grid_thw: Sequence[Sequence[int]] | Tensor | None = None,
    video_grid_thw: Sequence[Sequence[int]] | Tensor | None = None,
    second_per_grid_ts: Sequence[float] | Tensor | None = None,
    rule: MRopeRule,
    image_token_id: int,
    video_token_id: int,
    vision_start_token_id: int | None = None,
    spatial_merge_size: int,
    tokens_per_second: float = _DEFAULT_TOKENS_PER_SECOND,
) -> tuple[Tensor, Tensor]:
    """The 3-D M-RoPE position ids of a batch, as transformers 5 ``get_rope_index``.

    Vectorised over the batch: each row's real tokens are split into runs of one modality, every
    run gets its start position from an exclusive cumulative sum of the runs' advances (a text run
    advances by its length, a vision run by ``max(h, w) // m``), and each token's ids follow from
    its index in its run. Every run of image (video) tokens must hold exactly the ``t · (h // m) ·
    (w // m)`` tokens of its grid (Qwen3-VL: ``(h // m) · (w // m)`` per frame), and every grid
    must be used: both are checked before anything of size ``T`` is allocated per grid.

    Args:
        input_ids: ``(B, T)`` integer token ids (padding anywhere; the mask says where).
        attention_mask: ``(B, T)`` of 0/1; default all ones. Every row needs a real token.
        image_grid_thw: ``(N_img, 3)`` ``[t, h, w]`` of each image, in the order the images
            appear (row by row).
        video_grid_thw: ``(N_vid, 3)`` ``[t, h, w]`` of each video, in order.
        second_per_grid_ts: ``(N_vid,)`` seconds per temporal grid step of each video
            (Qwen2.5-VL; ignored by the other rules); default 1 each. Cast to float32, as the
            processor's tensor is.
        rule: ``qwen2_vl``, ``qwen2_5_vl`` or ``qwen3_vl``.
        image_token_id: the image placeholder token id.
        video_token_id: the video placeholder token id.
        vision_start_token_id: accepted for the configs that carry it; the transformers 5 rule
            groups the placeholder tokens themselves and does not read it.
        spatial_merge_size: ``m``, the vision tower's spatial merge (2 for every Qwen-VL).
        tokens_per_second: Qwen2.5-VL: temporal ids per second of video.

    Returns:
        ``(position_ids, rope_deltas)``: ``(3, B, T)`` and ``(B, 1)`` int64, on ``input_ids``'s
        device.

    Raises:
        InvalidArgument: an unknown rule, bad shapes or values, a run of image or video tokens
            whose length differs from its grid's token count (the message gives both numbers),
            more runs than grids or grids left over, a row without real tokens,
            ``second_per_grid_ts`` of the wrong length, ids beyond 2**53.
    """
    if rule not in MROPE_RULES:
        raise InvalidArgument(
            f"rule must be one of {', '.join(MROPE_RULES)}, got {rule!r}", field="rule"
        )
    check_int_matrix(input_ids, "input_ids")
    for name, value in (("image_token_id", image_token_id), ("video_token_id", video_token_id)):
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
            raise InvalidArgument(f"{name} must be an int64, got {value!r}", field=name)
    if (
        isinstance(spatial_merge_size, bool)
        or not isinstance(spatial_merge_size, int)
        or not 1 <= spatial_merge_size < _MAX_POSITION
    ):
        raise InvalidArgument(
            f"spatial_merge_size must be an int in [1, 2**53), got {spatial_merge_size!r}",
            field="spatial_merge_size",
        )
    if not is_number(tokens_per_second) or not 0 <= tokens_per_second < _MAX_POSITION:
        raise InvalidArgument(
            f"tokens_per_second must be a finite number >= 0, got {tokens_per_second!r}",
            field="tokens_per_second",
        )
    device = input_ids.device
    ids = input_ids.detach().to(device="cpu", dtype=torch.int64)  # (B, T)
    batch, seq_len = ids.shape
    if attention_mask is None:
        real = torch.ones_like(ids, dtype=torch.bool)  # (B, T)
    else:
        check_int_matrix(attention_mask, "attention_mask", ints=False)
        if attention_mask.shape != ids.shape:
            raise InvalidArgument(
                f"attention_mask must have the shape of input_ids {tuple(ids.shape)}, got "
                f"{tuple(attention_mask.shape)}",
                field="attention_mask",
            )
        mask = attention_mask.detach().to("cpu")
        check_binary_mask(mask, "attention_mask")
        real = mask.bool()
    counts = real.sum(dim=1)  # (B,)
    if batch and bool((counts == 0).any()):
        (row,) = first_true(counts == 0)
        raise InvalidArgument(
            f"attention_mask[{row}] has no real token (all 0); every row needs one",
            field=f"attention_mask[{row}]",
        )

    m = spatial_merge_size
    images = _grid_tensor(image_grid_thw, "image_grid_thw")  # (N_img, 3)
    videos = _grid_tensor(video_grid_thw, "video_grid_thw")  # (N_vid, 3)
    n_videos = videos.shape[0]

    # Temporal step of each video (Qwen2.5-VL): transformers multiplies the frame index by
    # `tokens_per_second * second_per_grid_ts[v]`, a float32 product when the seconds come as the
    # processor's float32 tensor, a plain integer step when they are absent (default 1 each).
    interval: Tensor | None = None  # (N_vid,) float32
    int_step = 1
    if rule == "qwen2_5_vl":
        if second_per_grid_ts is not None:
            secs = torch.as_tensor(second_per_grid_ts).detach().to("cpu")
            if secs.dim() != 1 or secs.shape[0] != n_videos:
                raise InvalidArgument(
                    f"second_per_grid_ts must have one entry per video ({n_videos}), got shape "
                    f"{tuple(secs.shape)}",
                    field="second_per_grid_ts",
                )
            secs = secs.to(torch.float32)
            if not bool(torch.isfinite(secs).all()) or bool((secs < 0).any()):
                raise InvalidArgument(
                    "second_per_grid_ts must be finite and >= 0 (read as float32), got "
                    f"{secs.tolist()}",
                    field="second_per_grid_ts",
                )
            interval = tokens_per_second * secs  # (N_vid,) float32
        elif isinstance(tokens_per_second, int):
            int_step = tokens_per_second
        else:
            interval = torch.full((n_videos,), float(tokens_per_second), dtype=torch.float32)

    # Modality of every real token, flattened row-major: 0 text, 1 image, 2 video.
    kind = torch.zeros_like(ids)
    kind[ids == image_token_id] = 1
    kind[ids == video_token_id] = 2
    flat_kind = kind[real]  # (N_real,)
    flat_row = torch.arange(batch).repeat_interleave(counts)  # (N_real,)
    n_real = flat_kind.shape[0]

    # The grids together must stand for exactly the placeholder tokens present (checked in
    # float64, so that no grid of huge entries is expanded or overflows int64).
    for k, name, noun, token_id, g in (
        (1, "image_grid_thw", "image", image_token_id, images),
        (2, "video_grid_thw", "video", video_token_id, videos),
    ):
        per_grid = g[:, 0].double() * (g[:, 1] // m).double() * (g[:, 2] // m).double()
        needed = float(per_grid.sum())
        have = int((flat_kind == k).sum())
        if needed != have:
            raise InvalidArgument(
                f"{name} ({g.shape[0]} grid(s), t*(h//{m})*(w//{m}) tokens each) stands for "
                f"{needed:.0f} {noun} tokens, but input_ids hold {have} {noun} token(s) "
                f"(id {token_id}) in real slots",
                field=name,
            )
        if rule == "qwen2_5_vl" and k == 2 and g.shape[0]:
            steps = interval.double() if interval is not None else torch.full((g.shape[0],), 1.0)
            top = (g[:, 0] - 1).double() * steps * (1 if interval is not None else int_step)
            if not bool(torch.isfinite(top).all()) or float(top.max()) >= _MAX_POSITION:
                raise InvalidArgument(
                    f"tokens_per_second {tokens_per_second} x second_per_grid_ts "
                    f"{second_per_grid_ts} gives temporal ids beyond 2**53 for video_grid_thw "
                    f"{g.tolist()}",
                    field="second_per_grid_ts",
                )

    if rule == "qwen3_vl" and n_videos:
        # Each frame is its own run between timestamps: (t, h, w) -> t x (1, h, w).
        videos = torch.repeat_interleave(videos, videos[:, 0], dim=0)
        videos[:, 0] = 1

    grids = {1: images, 2: videos}
    tokens_per_grid = {
        k: g[:, 0] * (g[:, 1] // m) * (g[:, 2] // m) for k, g in grids.items()
    }  # (N,) each, exact: their sum matched a token count above

    # Runs: a new one where the row or the modality changes.
    new_run = torch.ones(n_real, dtype=torch.bool)
    if n_real > 1:
        new_run[1:] = (flat_kind[1:] != flat_kind[:-1]) | (flat_row[1:] != flat_row[:-1])
    run_start = torch.nonzero(new_run).flatten()  # (R,)
    run_len = torch.diff(run_start, append=torch.tensor([n_real]))  # (R,)
    run_kind = flat_kind[run_start]  # (R,)
    run_row = flat_row[run_start]  # (R,)
    run_id = torch.cumsum(new_run.to(torch.int64), 0) - 1  # (N_real,)

    # Each vision run takes the next grid of its modality (across the batch, in order).
    run_h = torch.ones_like(run_len)  # (R,) merged grid of each run (text runs: 1 × len)
    run_w = run_len.clone()
    run_interval_idx = torch.full_like(run_len, -1)  # (R,) video index for Qwen2.5-VL
    for k, name, noun in ((1, "image_grid_thw", "image"), (2, "video_grid_thw", "video")):
        runs = torch.nonzero(run_kind == k).flatten()  # (N_runs,)
        grid = grids[k]
        token_id = image_token_id if k == 1 else video_token_id
        unit = "video frame" if (k == 2 and rule == "qwen3_vl") else noun
        if runs.numel() != grid.shape[0]:
            raise InvalidArgument(
                f"input_ids hold {runs.numel()} run(s) of {noun} tokens (id {token_id}) but "
                f"{name} gives {grid.shape[0]} {unit} grid(s); each {unit} needs one grid and "
                "one run of its tokens",
                field=name,
            )
        if not runs.numel():
            continue
        expected = tokens_per_grid[k]  # (N_runs,)
        got = run_len[runs]
        if bool((got != expected).any()):
            (i,) = first_true(got != expected)
            r = int(runs[i])
            row = int(run_row[r])
            col = int(torch.nonzero(real[row]).flatten()[int(run_start[r] - counts[:row].sum())])
            raise InvalidArgument(
                f"{unit} {i} ({name} entry {grid[i].tolist()}) needs t*(h//{m})*(w//{m}) = "
                f"{int(expected[i])} {noun} tokens, but the run of {noun} tokens at "
                f"input_ids[{row}][{col}] has {int(got[i])}",
                field=name,
            )
        run_h[runs] = grid[:, 1] // m
        run_w[runs] = grid[:, 2] // m
        if k == 2:
            run_interval_idx[runs] = torch.arange(grid.shape[0])

    # Start position of every run: exclusive cumsum of the advances, restarted at each row.
    advance = torch.where(run_kind == 0, run_len, torch.maximum(run_h, run_w))  # (R,)
    ends = torch.cumsum(advance, 0)  # (R,)
    before = ends - advance  # (R,): global exclusive cumsum
    first_run_of_row = torch.zeros(batch, dtype=torch.int64)
    if run_row.numel():
        row_firsts = torch.nonzero(
            torch.cat((torch.tensor([True]), run_row[1:] != run_row[:-1]))
        ).flatten()
        first_run_of_row[run_row[row_firsts]] = before[row_firsts]
    run_pos = before - first_run_of_row[run_row]  # (R,)

    # Every token's index inside its run, and its (t, h, w) coordinates there.
    k_in_run = torch.arange(n_real) - run_start[run_id]  # (N_real,)
    h_t = run_h[run_id]
    w_t = run_w[run_id]
    frame = k_in_run // (h_t * w_t)
    hh = (k_in_run // w_t) % h_t
    ww = k_in_run % w_t
    is_text = flat_kind == 0
    base = run_pos[run_id]  # (N_real,)
    temporal = frame
    if rule == "qwen2_5_vl":
        vid = run_interval_idx[run_id]
        is_video = flat_kind == 2
        if interval is not None and bool(is_video.any()):
            step = interval[vid[is_video]]  # float32
            temporal = frame.clone()
            temporal[is_video] = (frame[is_video].to(torch.float32) * step).to(torch.int64)
        elif int_step != 1:
            temporal = torch.where(is_video, frame * int_step, frame)
    pos_t = torch.where(is_text, k_in_run, temporal) + base
    pos_h = torch.where(is_text, k_in_run, hh) + base
    pos_w = torch.where(is_text, k_in_run, ww) + base
    flat = torch.stack((pos_t, pos_h, pos_w))  # (3, N_real)
    if flat.numel() and int(flat.max()) >= _MAX_POSITION:
        raise InvalidArgument(
            f"the position ids reach {int(flat.max())}, beyond 2**53; use shorter rows, smaller "
            "grids or a smaller second_per_grid_ts",
            field="second_per_grid_ts" if rule == "qwen2_5_vl" else "input_ids",
        )

    position_ids = torch.zeros((3, batch, seq_len), dtype=torch.int64)  # (3, B, T)
    position_ids[:, real] = flat
    row_max = torch.zeros(batch, dtype=torch.int64)
    if n_real:
        row_max = row_max.scatter_reduce(
            0, flat_row, flat.max(dim=0).values, reduce="amax", include_self=False
        )
    rope_deltas = (row_max + 1 - counts).unsqueeze(1)  # (B, 1)
    return position_ids.to(device), rope_deltas.to(device)


# ---------------------------------------------------------------------------------------------
# The M-RoPE position-ids endpoint kind (posenc.core.kinds)
# ---------------------------------------------------------------------------------------------

# Qwen2-VL-7B-Instruct's config.json, the keys this kind reads.
_EXAMPLE_CONFIG = {
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_config": {"spatial_merge_size": 2},
}


def _grid_field(name: str, what: str) -> kinds.FieldSpec:
    return kinds.FieldSpec(
        name,
        "int_rows",
        f"[t, h, w] of each {what} (in patches), in the order the {what}s appear",
        None,
        minimum=1,
        length=3,
    )


def _mrope_complete(p: dict[str, Any], _models: Any) -> dict[str, Any]:
    """The settings the config gives (a 422 naming the key, before any tensor work); they,
    not the raw config, key a cache: configs differing in keys not read are the same request."""
    return {**p, "settings": mrope_settings(p["config"]).kwargs()}


def packed_mrope_position_ids(
    input_ids: Tensor, cu_seqlens: Sequence[int], **kwargs: Any
) -> tuple[Tensor, Tensor]:
    """M-RoPE ids of documents packed in one row, each numbered as if it were sent alone.

    The ``(1, T)`` row is cut at ``cu_seqlens`` into ``n`` documents, laid out as ``n``
    right-padded rows and run through :func:`mrope_position_ids` (``get_rope_index``) at once:
    rows are independent, and the grids are taken in order, document by document, as they
    appear in the row. Each document's ids come back to its place in the row.

    Args:
        input_ids: ``(1, T)`` token ids, no padding.
        cu_seqlens: ``0 < … < T`` document boundaries (checked by the caller).
        **kwargs: the other arguments of :func:`mrope_position_ids`.

    Returns:
        ``(position_ids, rope_deltas)``: ``(3, 1, T)`` and ``(n, 1)``, one delta per document.
    """
    row = input_ids.reshape(-1)
    cu = torch.tensor(list(cu_seqlens), dtype=torch.int64)
    lengths = cu[1:] - cu[:-1]  # (n,)
    n, longest = int(lengths.numel()), int(lengths.max())
    doc = torch.repeat_interleave(torch.arange(n), lengths)  # (T,)
    col = torch.arange(row.numel()) - cu[:-1][doc]  # (T,) index inside its document
    docs = torch.zeros(n, longest, dtype=torch.int64)
    mask = torch.zeros(n, longest, dtype=torch.int64)
    docs[doc, col] = row
    mask[doc, col] = 1
    position_ids, rope_deltas = mrope_position_ids(docs, attention_mask=mask, **kwargs)
    return position_ids[:, doc, col][:, None, :], rope_deltas  # (3, 1, T), (n, 1)


def _mrope_compute(p: Mapping[str, Any], ctx: kinds.Context) -> dict[str, Tensor]:
    if p["cu_seqlens"] is not None:
        ids = build_batch(p["input_ids"]).input_ids
        position_ids, rope_deltas = packed_mrope_position_ids(
            ids,
            packed_row(p, ids.shape[1]),
            image_grid_thw=p["image_grid_thw"],
            video_grid_thw=p["video_grid_thw"],
            second_per_grid_ts=p["second_per_grid_ts"],
            **p["settings"],
        )
        return {
            "position_ids": position_ids.to(ctx.device),
            "rope_deltas": rope_deltas.to(ctx.device),
            "cu_seqlens": torch.tensor(p["cu_seqlens"], dtype=torch.int64, device=ctx.device),
        }
    batch = build_batch(
        p["input_ids"], attention_mask=p["attention_mask"], padding_side=p["padding_side"]
    )
    position_ids, rope_deltas = mrope_position_ids(
        batch.input_ids,
        attention_mask=batch.attention_mask,
        image_grid_thw=p["image_grid_thw"],
        video_grid_thw=p["video_grid_thw"],
        second_per_grid_ts=p["second_per_grid_ts"],
        **p["settings"],
    )  # (3, B, T), (B, 1)
    return {"position_ids": position_ids.to(ctx.device), "rope_deltas": rope_deltas.to(ctx.device)}


def _mrope_meta(p: Mapping[str, Any]) -> dict[str, Any]:
    settings = mrope_settings(p["config"])
    ignored = []
    if p["second_per_grid_ts"] is not None and settings.rule != "qwen2_5_vl":
        ignored.append("second_per_grid_ts")  # transformers' other rules take no such input
    b, t = kinds.batch_shape(p["input_ids"])
    return {
        "kind": "mrope_position_ids",
        "model_type": settings.model_type,
        "rule": settings.rule,
        "image_token_id": settings.image_token_id,
        "video_token_id": settings.video_token_id,
        "spatial_merge_size": settings.spatial_merge_size,
        "tokens_per_second": settings.tokens_per_second,
        "defaulted": list(settings.defaulted),
        "ignored": ignored,
        "batch_size": b,
        "seq_len": t,
        "padding_side": p["padding_side"],
        **packed_meta(p),
    }


def _mrope_shapes(p: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    b, t = kinds.batch_shape(p["input_ids"])
    documents = len(p["cu_seqlens"]) - 1 if p["cu_seqlens"] is not None else b
    return with_cu_seqlens(p, {"position_ids": (3, b, t), "rope_deltas": (documents, 1)})


MROPE_POSITION_IDS: kinds.Kind = kinds.Kind(
    name="mrope_position_ids",
    path="/v1/position-ids/mrope",
    tag="tokens",
    summary="Multimodal RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)",
    description="The 3-D (temporal, height, width) position ids of transformers 5's "
    "`get_rope_index` for the model whose `config.json` is given: runs of image (video) "
    "placeholder tokens take the next `image_grid_thw` (`video_grid_thw`) entry and must "
    "hold its `t·(h/m)·(w/m)` tokens (Qwen3-VL: one run per video frame); Qwen2.5-VL "
    "spaces video frames by `tokens_per_second · second_per_grid_ts`. Padded slots get 0.",
    fields=(
        dataclasses.replace(INPUT_IDS_FIELD, example=None),
        dataclasses.replace(
            ATTENTION_MASK_FIELD,
            description="0/1, the shape of input_ids; padded slots (0) get id 0",
        ),
        PADDING_SIDE_FIELD,
        _grid_field("image_grid_thw", "image"),
        _grid_field("video_grid_thw", "video"),
        kinds.FieldSpec(
            "second_per_grid_ts",
            "floats",
            "Qwen2.5-VL: seconds per temporal grid step of each video (default 1); read as "
            "float32, as the processor's tensor",
            None,
            minimum=0,
        ),
        dataclasses.replace(
            CU_SEQLENS_FIELD,
            description=CU_SEQLENS_FIELD.description
            + " (get_rope_index run on each document; rope_deltas one per document)",
        ),
        kinds.FieldSpec(
            "config",
            "object",
            "the model's config.json: model_type (qwen2_vl, qwen2_5_vl, qwen3_vl, "
            "qwen3_vl_moe) selects the rule; image_token_id, video_token_id, "
            "vision_config.spatial_merge_size, vision_config.tokens_per_second are read",
        ),
    ),
    tensors=(
        kinds.TensorSpec("position_ids", ("3", "B", "T"), integer=True),
        kinds.TensorSpec("rope_deltas", ("B", "1"), integer=True),
        CU_SEQLENS_TENSOR,
    ),
    shapes=_mrope_shapes,
    compute=_mrope_compute,
    meta=_mrope_meta,
    get=False,
    complete=_mrope_complete,
    cache_tensors=False,
    # its vectorised rule keeps a few (B, T) int64 intermediates per output row: 65-70 bytes per
    # element measured, x about 1.2 (docs/sizing.md)
    work_bytes_per_element=84,
    examples=(
        {
            "input_ids": [[9906, 151652, 151655, 151655, 151655, 151655, 151653, 30]],
            "image_grid_thw": [[1, 4, 4]],
            "config": _EXAMPLE_CONFIG,
        },
    ),
)
"""The M-RoPE position-ids endpoint kind (see :mod:`posenc.core.kinds`)."""
