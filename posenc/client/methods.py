"""Typed client methods, one per kind of the registry: written by scripts/client_methods.py.

Do not edit: run ``python scripts/client_methods.py`` after changing a kind (a test fails until
the module equals what the registry gives). :class:`KindMethods` is a base of
:class:`~posenc.client.PosencClient` and :class:`~posenc.client.AsyncPosencClient`; ``T`` is what
a tensor call returns (a :class:`~posenc.client.TensorResult`, or an awaitable of one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, Literal, TypeVar

from posenc.client.calls import Format, Method
from posenc.client.results import ArrayKind

T = TypeVar("T")

TableKind = Literal[
    "alibi",
    "context_parallel",
    "diffusion_rope",
    "embed",
    "learned",
    "masks",
    "relative",
    "relative_sinusoidal",
    "rope",
    "sincos_2d",
    "sinusoidal",
    "vision_learned",
    "vision_rope",
    "xpos",
]
"""The kinds whose tables stream (``save_table`` writes any of them to a file)."""


class KindMethods(Generic[T]):
    """One method per kind; each calls :meth:`compute` with the kind's name."""

    def compute(self, kind: str, /, **fields: Any) -> T:
        """Any kind by name (the client's transport implements it)."""
        raise NotImplementedError

    def alibi(
        self,
        *,
        num_heads: int | None = None,
        seq_len: int | None = None,
        key_len: int | None = None,
        mode: Literal["causal", "symmetric"] | None = None,
        max_bias: float | None = None,
        preset: str | None = None,
        config: Mapping[str, Any] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/biases/alibi``: ALiBi attention bias.

        Press et al. (2022) linear biases; slopes as the paper's code, BLOOM and MPT. Query i
        sits at position i + S − T. `bias` is −inf (`null` in JSON) above the diagonal in causal
        mode.

        Args:
            num_heads: H (required unless a preset or config gives it).
            seq_len: T, the number of queries.
            key_len: S ≥ T (default T); query i sits at position i + S − T.
            mode: causal: −m_h·(i−j), −inf above the diagonal; symmetric: −m_h·|i−j| (default
                'causal').
            max_bias: slope exponent scale (default 8 when neither preset nor config gives it).
            preset: name of a preset from GET /v1/presets; its params are defaults the other
                fields override (kind alibi).
            config: a model's Hugging Face config.json object, pasted as published (a multimodal
                file whole): read as transformers 5 reads it; its values are defaults the other
                fields override. Not together with preset. See POST /v1/configs/positions for
                what it means. BLOOM, MPT (attn_config) or Falcon with alibi.
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``bias`` (H, T, S), ``slopes`` (H).
        """
        return self.compute(
            "alibi",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            num_heads=num_heads,
            seq_len=seq_len,
            key_len=key_len,
            mode=mode,
            max_bias=max_bias,
            preset=preset,
            config=config,
            dtype=dtype,
        )

    def context_parallel(
        self,
        *,
        seq_len: int | None = None,
        cu_seqlens: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        cp_size: int | None = None,
        scheme: Literal[
            "contiguous",
            "head_tail",
            "per_document_head_tail",
            "torch_per_document_head_tail",
            "ptrr",
        ]
        | None = None,
        block_size: int | None = None,
        reset_positions: bool | None = None,
        position_ids: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        mask: bool | None = None,
        kind: Literal["causal", "sliding", "chunked", "bidirectional", "sliding_bidirectional"]
        | None = None,
        window: int | None = None,
        chunk_size: int | None = None,
        head_dim: int | None = None,
        rotary_dim: int | None = None,
        base: float | None = None,
        layout: Literal["half", "interleaved"] | None = None,
        scaling: Mapping[str, Any] | None = None,
        exponent_dim: int | None = None,
        rotation: Literal["positive", "negative"] | None = None,
        layer_type: str | None = None,
        mrope_section: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        mrope_interleaved: bool | None = None,
        preset: str | None = None,
        config: Mapping[str, Any] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``POST /v1/positions/context-parallel``: One row split across context-parallel ranks.

        One sequence (`seq_len`) or packed documents (`cu_seqlens`) split across `cp_size`
        context-parallel ranks by `scheme`: contiguous; head_tail (2·cp chunks, rank r holds
        chunks r and 2·cp−1−r: Megatron-LM, Transformer Engine, torch's _HeadTailLoadBalancer);
        per_document_head_tail (the same in every document: Transformer Engine's THD split);
        torch_per_document_head_tail (torch's _PerDocumentHeadTailLoadBalancer, sharded in equal
        contiguous pieces); ptrr (torch's _PTRRLoadBalancer over the per-document causal block
        mask). Each rank: its global token `indices`, `position_ids` (restarting at each
        document with reset_positions), local `cu_seqlens` and `max_seqlen`; with rope settings
        its rows of the global cos/sin table, bit for bit; with `mask: true` its (T_r, T) rows
        of the per-document causal (sliding, chunked) mask. `restore` puts the ranks' tokens,
        concatenated, back in order (torch's restore=True indices). JSON lays the ranks out as
        `ranks`; safetensors names the tensors `{rank}.{name}`.

        Args:
            seq_len: T of one sequence.
            cu_seqlens: packed documents instead of seq_len: 0 < … < T, as flash-attn's varlen
                calls take them.
            cp_size: the context-parallel ranks.
            scheme: how the row is split: contiguous, head_tail (default),
                per_document_head_tail, torch_per_document_head_tail or ptrr (default
                'head_tail').
            block_size: ptrr: the block mask's BLOCK_SIZE; blocks are dealt out whole (default
                128).
            reset_positions: position ids restart at each document (default); false: they
                continue across documents, as Megatron-LM without --reset-position-ids (default
                True).
            position_ids: explicit global position ids (T), or M-RoPE's three rows (3, T); T
                then comes from them and each rank gets its columns.
            mask: add each rank's (T_r, T) mask rows (default False).
            kind: with mask: the rule, as POST /v1/masks takes it (default causal), within
                documents.
            window: W of kind sliding.
            chunk_size: C of kind chunked.
            head_dim: Dh, even: with it (or a preset or config that gives it) each rank adds cos
                and sin, its rows of the global RoPE table (the fields as POST
                /v1/encodings/rope takes them).
            rotary_dim: R, even ≤ head_dim (default head_dim).
            base: rope_theta (default 10000 when neither preset nor config gives it).
            layout: half (GPT-NeoX, Llama) or interleaved (GPT-J, RoFormer); default half when
                neither preset nor config gives it.
            scaling: null or a scaling object, with the names of transformers' rope_parameters.
            exponent_dim: E, the exponents' denominator (inv_freq = base^(-2i/E)): rotary_dim
                (default), or the odd rotary_dim - 1 of a config whose rotated width
                int(head_dim x partial_rotary_factor) is odd (GLM-4-MoE: 21, a 22-wide table).
            rotation: positive (default: x cos + rotate_half(x) sin) or negative: the model
                rotates by -theta and sin is negated (nanochat, whose rotate_half is cat(x2,
                -x1)).
            layer_type: for a config with RoPE parameters per layer type (Gemma 3:
                sliding_attention, full_attention): which type; required there, refused
                otherwise.
            mrope_section: M-RoPE: three ints (temporal, height, width) summing to rotary_dim/2.
            mrope_interleaved: M-RoPE: false (default) Qwen2-VL's contiguous sections, true
                Qwen3-VL's interleaving.
            preset: name of a preset from GET /v1/presets; its params are defaults the other
                fields override (kind rope).
            config: a model's Hugging Face config.json object, pasted as published (a multimodal
                file whole): read as transformers 5 reads it; its values are defaults the other
                fields override. Not together with preset. See POST /v1/configs/positions for
                what it means.
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``restore`` (T), ``{rank}.indices`` (T_r),
            ``{rank}.position_ids`` (T_r), ``{rank}.cos`` (T_r, R), ``{rank}.sin`` (T_r, R),
            ``{rank}.mask`` (T_r, T).
        """
        return self.compute(
            "context_parallel",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            cu_seqlens=cu_seqlens,
            cp_size=cp_size,
            scheme=scheme,
            block_size=block_size,
            reset_positions=reset_positions,
            position_ids=position_ids,
            mask=mask,
            kind=kind,
            window=window,
            chunk_size=chunk_size,
            head_dim=head_dim,
            rotary_dim=rotary_dim,
            base=base,
            layout=layout,
            scaling=scaling,
            exponent_dim=exponent_dim,
            rotation=rotation,
            layer_type=layer_type,
            mrope_section=mrope_section,
            mrope_interleaved=mrope_interleaved,
            preset=preset,
            config=config,
            dtype=dtype,
        )

    def diffusion_rope(
        self,
        *,
        model: Literal[
            "flux",
            "wan",
            "hunyuan-video",
            "qwen-image",
            "cogvideox",
            "ltx-video",
            "FLUX.1-dev",
            "FLUX.1-schnell",
            "Wan2.1-T2V-14B",
            "Wan2.1-T2V-1.3B",
            "Wan2.2-TI2V-5B",
            "Wan2.2-T2V-A14B",
            "HunyuanVideo",
            "Qwen-Image",
            "CogVideoX-5b",
            "CogVideoX-2b",
            "CogVideoX1.5-5B",
            "LTX-Video",
            "LTX-Video-0.9.7",
            "FluxTransformer2DModel",
            "ChromaTransformer2DModel",
            "WanTransformer3DModel",
            "WanVACETransformer3DModel",
            "HunyuanVideoTransformer3DModel",
            "QwenImageTransformer2DModel",
            "CogVideoXTransformer3DModel",
            "LTXVideoTransformer3DModel",
        ]
        | None = None,
        config: Mapping[str, Any] | None = None,
        frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        precision: Literal["exact", "engine", "diffusers"] | None = None,
        text_len: int | None = None,
        rope_interpolation_scale: Sequence[float] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/diffusion-rope``: Rotary tables of diffusion and video transformers (FLUX, Wan, HunyuanVideo, Qwen-Image, CogVideoX, LTX-Video).

        The rotary embedding of a diffusion or video transformer as diffusers' own module
        computes it, for a latent grid of `frames` × `height` × `width` patches and `text_len`
        text tokens placed where the model places them (FLUX and Qwen-Image: text first,
        rotated; CogVideoX: text first, not rotated; HunyuanVideo: text last, not rotated; Wan
        and LTX-Video: text by cross-attention, no rows). `ids` (N, A) are each token's
        positions per axis (fractional for CogVideoX 1.0 and LTX-Video), `cos` and `sin` (N, R)
        each angle on its pair's two adjacent channels (`meta.layout` interleaved), the axes'
        widths in `meta.axes`. Angles in float64, cast once (diffusers computes FLUX's and Wan's
        in float64 too, the others' in float32: `meta.reference_precision`).

        Args:
            model: a diffusers transformer's name (flux, wan, hunyuan-video, qwen-image,
                cogvideox, ltx-video: the published checkpoint each stands for is in
                meta.source), a published checkpoint (FLUX.1-dev, Wan2.2-TI2V-5B,
                CogVideoX1.5-5B …) or a diffusers transformer class (its defaults).
            config: a diffusers transformer/config.json (its _class_name picks the rule; keys it
                lacks take the class default, listed in meta.defaulted), instead of model.
            frames: latent frames in the transformer's patches (1 for an image) (default 1).
            height: latent rows in the transformer's patches.
            width: latent columns in the transformer's patches.
            precision: exact: float64 positions and angles, cast once; engine (or diffusers, the
                same): diffusers' own arithmetic, in float32 where it computes in float32
                (positions, frequencies, angles), as precision engine means on every RoPE-family
                table (default 'exact').
            text_len: text tokens, placed where the model places them (none for cross-attention
                models) (default 0).
            rope_interpolation_scale: LTX-Video only: what the pipeline passes, (vae temporal
                compression / frame_rate, vae spatial compression, vae spatial compression);
                default (8/25, 32, 32), LTXPipeline at 25 frames per second.
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``cos`` (N, R), ``sin`` (N, R), ``ids`` (N, A).
        """
        return self.compute(
            "diffusion_rope",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            model=model,
            config=config,
            frames=frames,
            height=height,
            width=width,
            precision=precision,
            text_len=text_len,
            rope_interpolation_scale=rope_interpolation_scale,
            dtype=dtype,
        )

    def embed(
        self,
        *,
        input_ids: Sequence[Sequence[int]] | Any | None = None,
        model: str | None = None,
        text: str | Sequence[str] | None = None,
        add_special_tokens: bool | None = None,
        attention_mask: Sequence[Sequence[int]] | Any | None = None,
        pad_token_id: int | None = None,
        padding_side: Literal["right", "left"] | None = None,
        positional: Literal["learned", "sinusoidal", "none", "rope"] | None = None,
        scale: bool | None = None,
        position_ids: Sequence[Sequence[int]] | Any | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``POST /v1/embed``: Embed token batches.

        Token embedding (× √D when `scale`) plus the positional encoding, for a ragged batch;
        padded slots are zeros, and an empty row is a row of padding. A token id outside [0,
        vocab_size) is a 422 naming `input_ids[ROW][COL]`. For a RoPE model (positional `rope`,
        its default) also `cos` and `sin` at the position ids, from the rope settings of its
        config. `text` in place of `input_ids`: the rows are the model's tokenizer's ids (the
        same result as sending them), and the response adds them as `input_ids`.

        Args:
            input_ids: B rows of token ids (ragged allowed; an empty row is a row of padding).
            model: name from GET /v1/models (default: the default).
            text: texts (a string is one row), in place of input_ids (exactly one of the two):
                the model's tokenizer gives the rows (encode_batch), padded as ragged input_ids
                are; the response adds input_ids (B, T).
            add_special_tokens: with text: add the tokenizer's special tokens (its post-
                processor); ignored with input_ids (default True).
            attention_mask: 0/1, the shape of input_ids; wins over pad_token_id.
            pad_token_id: tokens equal to it are padding.
            padding_side: where short rows are padded (default 'right').
            positional: learned, sinusoidal, none or rope (default: the model's own).
            scale: multiply token embeddings by sqrt(D) (default: the model's own).
            position_ids: explicit positions, the shape of input_ids.
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``embeddings`` (B, T, D), ``position_ids`` (B, T),
            ``attention_mask`` (B, T), ``cos`` (B, T, R), ``sin`` (B, T, R), ``input_ids`` (B,
            T).
        """
        return self.compute(
            "embed",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            input_ids=input_ids,
            model=model,
            text=text,
            add_special_tokens=add_special_tokens,
            attention_mask=attention_mask,
            pad_token_id=pad_token_id,
            padding_side=padding_side,
            positional=positional,
            scale=scale,
            position_ids=position_ids,
            dtype=dtype,
        )

    def learned(
        self,
        *,
        seq_len: int | None = None,
        d_model: int | None = None,
        model: str | None = None,
        seed: int | None = None,
        preset: str | None = None,
        config: Mapping[str, Any] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/learned``: Learned positional table.

        A loaded model's position table (`model`), or a seeded one: `torch.manual_seed(seed);
        nn.Embedding(max(seq_len, 1), d_model).weight` (GPT-2's `wpe`, BERT's
        `position_embeddings` at initialisation).

        Args:
            seq_len: T (required unless model, preset or config gives it).
            d_model: D (may be omitted with model, preset or config).
            model: name from GET /v1/models: use its position table.
            seed: torch.manual_seed of the table (default 0).
            preset: name of a preset from GET /v1/presets; its params are defaults the other
                fields override (kind learned).
            config: a model's Hugging Face config.json object, pasted as published (a multimodal
                file whole): read as transformers 5 reads it; its values are defaults the other
                fields override. Not together with preset. See POST /v1/configs/positions for
                what it means. Gives d_model and the table size (seq_len).
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``encoding`` (T, D).
        """
        return self.compute(
            "learned",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            d_model=d_model,
            model=model,
            seed=seed,
            preset=preset,
            config=config,
            dtype=dtype,
        )

    def masks(
        self,
        *,
        seq_len: int | None = None,
        key_len: int | None = None,
        kind: Literal["causal", "sliding", "chunked", "bidirectional", "sliding_bidirectional"]
        | None = None,
        window: int | None = None,
        chunk_size: int | None = None,
        config: Mapping[str, Any] | None = None,
        layer_type: str | None = None,
        layer: int | None = None,
        attention_mask: Sequence[Sequence[int]] | Any | None = None,
        token_type_ids: Sequence[Sequence[int]] | Any | None = None,
        cu_seqlens: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        position_ids: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        output: Literal["mask", "bias", "combined"] | None = None,
        position_bias: Literal["alibi", "relative"] | None = None,
        num_heads: int | None = None,
        max_bias: float | None = None,
        alibi_form: Literal["paper", "key_index", "from_last"] | None = None,
        num_buckets: int | None = None,
        max_distance: int | None = None,
        seed: int | None = None,
        masked_value: Literal["-inf", "min"] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/masks``: The attention mask a layer applies.

        The mask (B, T, S) of one layer, exactly as transformers' `masking_utils` builds it:
        causal, sliding (a query sees itself and the window − 1 keys before it: flash-attn's
        window_size (W − 1, 0)), chunked (Llama 4), bidirectional; Gemma 3's image spans
        (`token_type_ids`) both ways; padding (`attention_mask`) removes keys; packed documents
        (`cu_seqlens`) see only their own keys. The queries are the last T of the S positions.
        `meta` spells the same mask for flash-attn, SDPA, FlexAttention and vLLM. `as: combined`
        adds a position bias (ALiBi, T5) where the mask allows, as the model adds them. A layer
        without attention (Mamba, linear attention) is a 422 that says what it is.

        Args:
            seq_len: T, the number of queries.
            key_len: S ≥ T (default T); the queries are the last T positions.
            kind: the rule (default: the config's layer's, else causal): causal, sliding (with
                window), chunked (with chunk_size), bidirectional, sliding_bidirectional (|q −
                k| ≤ window).
            window: W of kind sliding (transformers' sliding_window: the query and the W − 1
                keys before it); with config, replaces the layer's.
            chunk_size: C of kind chunked (attention_chunk_size); with config, replaces the
                layer's.
            config: a model's config.json: the rule of its layer (layer_type or layer); see POST
                /v1/configs/positions' layers.
            layer_type: with config: the layer type (full_attention, sliding_attention,
                chunked_attention…).
            layer: with config: the layer's index.
            attention_mask: B rows of S: 1 for a real token, 0 for padding.
            token_type_ids: B rows of S (Gemma 3's): 1 marks image tokens, which see their own
                image both ways (causal and sliding layers).
            cu_seqlens: packed documents: 0 < … < T, as flash-attn's varlen calls take them (S =
                T, no padding).
            position_ids: one packed row's T position ids (in place of cu_seqlens): a document
                starts wherever a position is not the previous plus 1, as transformers detects
                packing.
            output: mask: the tensor `mask` (B, T, S) bool, true where attention is allowed;
                bias: the tensor `bias`, 0 or −inf, in dtype; combined: the tensor `combined`
                (B, H, T, S), the position_bias where allowed and −inf elsewhere, as the model
                adds them to its scores (default 'mask') (sent as as).
            position_bias: with as: combined, the bias the model adds beside the mask: alibi
                (its form in alibi_form) or relative (T5's bucketed table: both ways on
                bidirectional layers, its encoder; one way otherwise, its decoder); default: the
                config's model's (BLOOM, MPT: alibi; T5, mT5, UMT5, Switch, Pop2Piano:
                relative), and another is a 422.
            num_heads: H of position_bias (required with it, unless config gives n_head, n_heads
                or num_heads).
            max_bias: ALiBi's slope exponent scale (default: MPT's attn_config.alibi_bias_max
                with config, else 8).
            alibi_form: paper: −m·|q − k|; key_index: m·(the key's index among the real tokens),
                as BLOOM's build_alibi_tensor; from_last: m·(k − S + 1), as MPT's
                build_mpt_alibi_tensor (default: the config's model's form, else paper).
            num_buckets: T5's relative_attention_num_buckets (default: the config's, else 32).
            max_distance: T5's relative_attention_max_distance (default: the config's, else
                128).
            seed: T5's table: torch.manual_seed(seed); nn.Embedding(num_buckets,
                num_heads).weight (default 0).
            masked_value: the bias where attention is masked: -inf, or min
                (torch.finfo(dtype).min, as transformers' eager attention adds it) (default
                '-inf').
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``mask`` (B, T, S), ``bias`` (B, T, S), ``combined`` (B, H, T,
            S).
        """
        return self.compute(
            "masks",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            key_len=key_len,
            kind=kind,
            window=window,
            chunk_size=chunk_size,
            config=config,
            layer_type=layer_type,
            layer=layer,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            cu_seqlens=cu_seqlens,
            position_ids=position_ids,
            position_bias=position_bias,
            num_heads=num_heads,
            max_bias=max_bias,
            alibi_form=alibi_form,
            num_buckets=num_buckets,
            max_distance=max_distance,
            seed=seed,
            masked_value=masked_value,
            dtype=dtype,
            **{"as": output},
        )

    def mrope_position_ids(
        self,
        *,
        input_ids: Sequence[Sequence[int]] | Any | None = None,
        attention_mask: Sequence[Sequence[int]] | Any | None = None,
        padding_side: Literal["right", "left"] | None = None,
        image_grid_thw: Sequence[Sequence[int]] | Any | None = None,
        video_grid_thw: Sequence[Sequence[int]] | Any | None = None,
        second_per_grid_ts: Sequence[float] | None = None,
        cu_seqlens: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        config: Mapping[str, Any] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``POST /v1/position-ids/mrope``: Multimodal RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).

        The 3-D (temporal, height, width) position ids of transformers 5's `get_rope_index` for
        the model whose `config.json` is given: runs of image (video) placeholder tokens take
        the next `image_grid_thw` (`video_grid_thw`) entry and must hold its `t·(h/m)·(w/m)`
        tokens (Qwen3-VL: one run per video frame); Qwen2.5-VL spaces video frames by
        `tokens_per_second · second_per_grid_ts`. Padded slots get 0.

        Args:
            input_ids: B rows of token ids (ragged allowed; an empty row is a row of padding).
            attention_mask: 0/1, the shape of input_ids; padded slots (0) get id 0.
            padding_side: where short rows are padded (default 'right').
            image_grid_thw: [t, h, w] of each image (in patches), in the order the images
                appear.
            video_grid_thw: [t, h, w] of each video (in patches), in the order the videos
                appear.
            second_per_grid_ts: Qwen2.5-VL: seconds per temporal grid step of each video
                (default 1); read as float32, as the processor's tensor.
            cu_seqlens: documents packed in the one row of input_ids: 0 < … < T (flash-attn's
                varlen cu_seqlens); positions restart at each document, as if each were sent
                alone (get_rope_index run on each document; rope_deltas one per document).
            config: the model's config.json: model_type (qwen2_vl, qwen2_5_vl, qwen3_vl,
                qwen3_vl_moe) selects the rule; image_token_id, video_token_id,
                vision_config.spatial_merge_size, vision_config.tokens_per_second are read.
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``position_ids`` (3, B, T), ``rope_deltas`` (B, 1),
            ``cu_seqlens`` (D+1).
        """
        return self.compute(
            "mrope_position_ids",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            input_ids=input_ids,
            attention_mask=attention_mask,
            padding_side=padding_side,
            image_grid_thw=image_grid_thw,
            video_grid_thw=video_grid_thw,
            second_per_grid_ts=second_per_grid_ts,
            cu_seqlens=cu_seqlens,
            config=config,
        )

    def position_ids(
        self,
        *,
        input_ids: Sequence[Sequence[int]] | Any | None = None,
        text: str | Sequence[str] | None = None,
        model: str | None = None,
        add_special_tokens: bool | None = None,
        pad_token_id: int | None = None,
        attention_mask: Sequence[Sequence[int]] | Any | None = None,
        padding_side: Literal["right", "left"] | None = None,
        start: int | None = None,
        pad_position: int | None = None,
        cu_seqlens: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``POST /v1/position-ids``: Position ids of a padded batch.

        Pads a ragged batch and numbers its real tokens from `start` in order; padded slots get
        `pad_position`. Padding: `attention_mask` wins; else tokens equal to `pad_token_id`;
        else the slots beyond a short row's end. An empty row is a row of padding. `text` in
        place of `input_ids`: the rows are the model's tokenizer's ids, and the response adds
        them as `input_ids`. `cu_seqlens` packs documents into the one row: positions restart at
        each, and `meta` gives `cu_seqlens` and `max_seqlen`.

        Args:
            input_ids: B rows of token ids (ragged allowed; an empty row is a row of padding).
            text: texts (a string is one row), in place of input_ids (exactly one of the two):
                the model's tokenizer gives the rows (encode_batch), padded as ragged input_ids
                are; the response adds input_ids (B, T).
            model: name from GET /v1/models whose tokenizer reads text (default: the default).
            add_special_tokens: with text: add the tokenizer's special tokens (its post-
                processor); ignored with input_ids (default True).
            pad_token_id: tokens equal to it are padding.
            attention_mask: 0/1, the shape of input_ids; wins over pad_token_id.
            padding_side: where short rows are padded (default 'right').
            start: the first real token's position (default 0).
            pad_position: the position id given to padded slots (default 0).
            cu_seqlens: documents packed in the one row of input_ids: 0 < … < T (flash-attn's
                varlen cu_seqlens); positions restart at each document, as if each were sent
                alone.
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``position_ids`` (B, T), ``attention_mask`` (B, T),
            ``input_ids`` (B, T), ``cu_seqlens`` (D+1).
        """
        return self.compute(
            "position_ids",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            input_ids=input_ids,
            text=text,
            model=model,
            add_special_tokens=add_special_tokens,
            pad_token_id=pad_token_id,
            attention_mask=attention_mask,
            padding_side=padding_side,
            start=start,
            pad_position=pad_position,
            cu_seqlens=cu_seqlens,
        )

    def query_scale(
        self,
        *,
        seq_len: int | None = None,
        positions: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        alpha: float | None = None,
        period: int | None = None,
        offset: int | None = None,
        layer: int | None = None,
        preset: str | None = None,
        config: Mapping[str, Any] | None = None,
        precision: Literal["exact", "engine"] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/query-scale``: Position-dependent query scale (Llama 4, Ministral 3).

        The factor a model multiplies each query by, `1 + alpha · ln(1 + floor((p + offset) /
        period))`: Llama 4's `attn_temperature_tuning` on its no-RoPE layers (alpha
        `attn_scale`, period `floor_scale`, offset 1; transformers `Llama4TextAttention`), and
        `llama_4_scaling_beta` in `rope_parameters` on every layer (alpha the beta, period
        `original_max_position_embeddings`, offset 0; transformers `get_llama_4_attn_scale` of
        Ministral 3 / Mistral 4). float64, cast once.

        Args:
            seq_len: T: positions 0 … T−1.
            positions: explicit positions (ints ≥ 0) instead of seq_len.
            alpha: the scale's factor (Llama 4 attn_scale, Ministral 3 llama_4_scaling_beta);
                required without a config.
            period: positions per step (Llama 4 floor_scale, Ministral 3
                original_max_position_embeddings); required without a config.
            offset: added to p before the division (Llama 4: 1; default 0).
            layer: with a config: this layer's scale (ones where the layer scales no query, as
                Llama 4's RoPE layers).
            preset: a preset (GET /v1/presets) whose quoted config applies a query scale, e.g.
                llama-4-scout; not together with config.
            config: a model's config.json (a multimodal file whole): Llama 4
                (attn_temperature_tuning, attn_scale, floor_scale, no_rope_layers), Ministral 3
                / Mistral 3 / Mistral 4 (rope_parameters.llama_4_scaling_beta,
                original_max_position_embeddings); alpha, period, offset override it.
            precision: exact (default: integer floor, float64 logarithm, cast once) or engine:
                the model's transformers attention in float32, bit for bit (needs config or
                preset) (default 'exact').
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``scale`` (T).
        """
        return self.compute(
            "query_scale",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            positions=positions,
            alpha=alpha,
            period=period,
            offset=offset,
            layer=layer,
            preset=preset,
            config=config,
            precision=precision,
            dtype=dtype,
        )

    def relative(
        self,
        *,
        seq_len: int | None = None,
        key_len: int | None = None,
        num_buckets: int | None = None,
        max_distance: int | None = None,
        bidirectional: bool | None = None,
        bucketing: Literal["log", "clip", "deberta", "swin"] | None = None,
        position_buckets: int | None = None,
        max_position: int | None = None,
        window_size: int | None = None,
        num_heads: int | None = None,
        seed: int | None = None,
        preset: str | None = None,
        config: Mapping[str, Any] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/biases/relative``: Relative position buckets (T5, DeBERTa, Swin) and bias.

        `bucketing` log: T5's `_relative_position_bucket` of `j − (i + S − T)`; clip: those
        distances clamped; deberta: DeBERTa-v2/v3's `build_relative_position` (`i − j`, log-
        bucketed beyond `position_buckets // 2`, float64 log); swin: a Swin window's
        `relative_position_index` (W², W²). With `num_heads`, a seeded bias table
        `torch.manual_seed(seed); nn.Embedding(n_buckets, H)` gathered per pair (T5 and Swin,
        whose table has (2W − 1)² rows); `bias` only when `num_heads` is given.

        Args:
            seq_len: T, the number of queries (required, except with a Swin window: W²,
                optional).
            key_len: S (default T).
            num_buckets: log bucketing: the number of buckets (default 32 when neither preset
                nor config gives it).
            max_distance: log: distance of the last bucket; clip: the clamp (default 128 when
                neither preset nor config gives it).
            bidirectional: keys on both sides of the query (default true).
            bucketing: log: T5's _relative_position_bucket; clip: clamp to ±max_distance;
                deberta: DeBERTa-v2/v3's build_relative_position; swin: a Swin window's
                relative_position_index (default log; a DeBERTa or Swin config sets its own).
            position_buckets: deberta: DeBERTa's position_buckets; absent or <= 0: plain i − j.
            max_position: deberta: max_position of the log buckets (the config's
                max_relative_positions, or max_position_embeddings where that is < 1).
            window_size: swin: the window W (the config's window_size).
            num_heads: H: when given, also the bias tensor (not with deberta).
            seed: torch.manual_seed of the bias table (default 0).
            preset: name of a preset from GET /v1/presets; its params are defaults the other
                fields override (kind relative).
            config: a model's Hugging Face config.json object, pasted as published (a multimodal
                file whole): read as transformers 5 reads it; its values are defaults the other
                fields override. Not together with preset. See POST /v1/configs/positions for
                what it means. T5: relative_attention_num_buckets,
                relative_attention_max_distance, num_heads; DeBERTa-v2/v3 (relative_attention
                true): position_buckets, max_relative_positions, max_position_embeddings; Swin /
                Swin v2: window_size.
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``buckets`` (T, S), ``bias`` (H, T, S).
        """
        return self.compute(
            "relative",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            key_len=key_len,
            num_buckets=num_buckets,
            max_distance=max_distance,
            bidirectional=bidirectional,
            bucketing=bucketing,
            position_buckets=position_buckets,
            max_position=max_position,
            window_size=window_size,
            num_heads=num_heads,
            seed=seed,
            preset=preset,
            config=config,
            dtype=dtype,
        )

    def relative_sinusoidal(
        self,
        *,
        seq_len: int | None = None,
        d_model: int | None = None,
        base: float | None = None,
        config: Mapping[str, Any] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/relative-sinusoidal``: Transformer-XL relative sinusoidal positions (Parakeet).

        The sinusoidal table of the relative positions L−1 … −(L−1) (rows in that order), pairs
        interleaved [sin, cos] with ω_i = base^(−2i/D), as transformers'
        `ParakeetEncoderRelPositionalEncoding` (NVIDIA Parakeet / FastConformer, Transformer-XL
        style attention). float64 angles, cast once; row k is distance L − 1 − k.

        Args:
            seq_len: L, the sequence length.
            d_model: D, even (the encoder's hidden_size; required without a config).
            base: the frequencies' base (Parakeet: 10000) (default 10000.0).
            config: a Parakeet config.json (parakeet_ctc, parakeet_tdt, parakeet_rnnt: its
                encoder_config; or parakeet_encoder): gives d_model (hidden_size).
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``encoding`` (P, D).
        """
        return self.compute(
            "relative_sinusoidal",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            d_model=d_model,
            base=base,
            config=config,
            dtype=dtype,
        )

    def rope(
        self,
        *,
        seq_len: int | None = None,
        positions: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        head_dim: int | None = None,
        rotary_dim: int | None = None,
        base: float | None = None,
        layout: Literal["half", "interleaved"] | None = None,
        scaling: Mapping[str, Any] | None = None,
        exponent_dim: int | None = None,
        rotation: Literal["positive", "negative"] | None = None,
        preset: str | None = None,
        config: Mapping[str, Any] | None = None,
        layer_type: str | None = None,
        mrope_section: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        mrope_interleaved: bool | None = None,
        engine: Literal["transformers", "vllm", "llama.cpp", "mlx"] | None = None,
        precision: Literal["exact", "engine"] | None = None,
        llamacpp: Mapping[str, Any] | None = None,
        max_model_len: int | None = None,
        dual_chunk_cache: Literal["q", "qc", "k", "qc_no_clamp", "q_inter"] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/rope``: Rotary position embedding tables.

        RoPE cos/sin tables with the scaling types of Hugging Face transformers (linear,
        dynamic, yarn, longrope, llama3, proportional); cos and sin include the attention
        scaling (`meta.attention_scaling`, with `meta.rope_type`). `config` takes a model's
        config.json (as transformers 5 reads it; `layer_type` for per-layer-type RoPE);
        `positions` as three rows with `mrope_section` gives M-RoPE (Qwen2-VL).

        Args:
            seq_len: T: positions 0 … T−1.
            positions: explicit positions (ints ≥ 0) instead of seq_len; or three lists
                (temporal, height, width: (3, T)) with mrope_section; or four (P/W/H/T: (4, T))
                with a HunyuanOCR config's XD-RoPE.
            head_dim: Dh, even (required unless a preset or config gives it).
            rotary_dim: R, even ≤ head_dim (default head_dim).
            base: rope_theta (default 10000 when neither preset nor config gives it).
            layout: half (GPT-NeoX, Llama) or interleaved (GPT-J, RoFormer); default half when
                neither preset nor config gives it.
            scaling: null or a scaling object, with the names of transformers' rope_parameters.
            exponent_dim: E, the exponents' denominator (inv_freq = base^(-2i/E)): rotary_dim
                (default), or the odd rotary_dim - 1 of a config whose rotated width
                int(head_dim x partial_rotary_factor) is odd (GLM-4-MoE: 21, a 22-wide table).
            rotation: positive (default: x cos + rotate_half(x) sin) or negative: the model
                rotates by -theta and sin is negated (nanochat, whose rotate_half is cat(x2,
                -x1)).
            preset: name of a preset from GET /v1/presets; its params are defaults the other
                fields override (kind rope).
            config: a model's Hugging Face config.json object, pasted as published (a multimodal
                file whole): read as transformers 5 reads it; its values are defaults the other
                fields override. Not together with preset. See POST /v1/configs/positions for
                what it means.
            layer_type: for a config with RoPE parameters per layer type (Gemma 3:
                sliding_attention, full_attention): which type; required there, refused
                otherwise.
            mrope_section: M-RoPE: three ints (temporal, height, width) summing to rotary_dim/2.
            mrope_interleaved: M-RoPE: false (default) Qwen2-VL's contiguous sections, true
                Qwen3-VL's interleaving.
            engine: whose tables: transformers (default), vllm (what vLLM's get_rope builds from
                the same config), llama.cpp (what llama.cpp passes ggml_rope_ext for the model)
                or mlx (mlx-lm's initialize_rope and mx.fast.rope), or another registered engine
                (posenc.engines): see docs/engines.md (default 'transformers').
            precision: exact (default: float64 angles from the engine's rule, cast once) or
                engine: the engine's own arithmetic in its own dtype and order of operations
                (transformers: float32 inv_freq, float32 position x inv_freq, torch's float32
                cos/sin, bit for bit its rotary module's output; vLLM: its float32 cache, bit
                for bit, every class but XD-RoPE's and Gemma 4's; llama.cpp: ggml's float32
                rope, MLX: mx.fast.rope, within 2 ulp) (default 'exact').
            llamacpp: engine llama.cpp: ggml_rope_ext's arguments, given directly (a GGUF body
                is read into them) instead of read from the preset or config; n_dims defaults to
                rotary_dim.
            max_model_len: engine vllm: the server's --max-model-len (default the config's
                max_position_embeddings); LongRoPE uses its long factors everywhere above
                original_max_position_embeddings.
            dual_chunk_cache: engine vllm with a config that has dual_chunk_attention_config
                (Qwen2.5-1M): which of DualChunkRotaryEmbedding's five caches, positions being
                its rows: q, qc, k (default), qc_no_clamp, q_inter (see docs/engines.md).
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``cos`` (T, R), ``sin`` (T, R), ``inv_freq`` (R/2).
        """
        return self.compute(
            "rope",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            positions=positions,
            head_dim=head_dim,
            rotary_dim=rotary_dim,
            base=base,
            layout=layout,
            scaling=scaling,
            exponent_dim=exponent_dim,
            rotation=rotation,
            preset=preset,
            config=config,
            layer_type=layer_type,
            mrope_section=mrope_section,
            mrope_interleaved=mrope_interleaved,
            engine=engine,
            precision=precision,
            llamacpp=llamacpp,
            max_model_len=max_model_len,
            dual_chunk_cache=dual_chunk_cache,
            dtype=dtype,
        )

    def rope_shift(
        self,
        *,
        positions: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        delta: int | None = None,
        from_positions: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        to_positions: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        from_seq_len: int | None = None,
        to_seq_len: int | None = None,
        steps: int | None = None,
        k: Sequence[Any] | Any | None = None,
        seed: int | None = None,
        num_heads: int | None = None,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        rotary_dim: int | None = None,
        base: float | None = None,
        layout: Literal["half", "interleaved"] | None = None,
        scaling: Mapping[str, Any] | None = None,
        exponent_dim: int | None = None,
        rotation: Literal["positive", "negative"] | None = None,
        preset: str | None = None,
        config: Mapping[str, Any] | None = None,
        layer_type: str | None = None,
        mrope_section: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        mrope_interleaved: bool | None = None,
        engine: Literal["transformers", "vllm", "llama.cpp", "mlx"] | None = None,
        precision: Literal["exact", "engine"] | None = None,
        llamacpp: Mapping[str, Any] | None = None,
        max_model_len: int | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``POST /v1/rope/shift``: Move cached keys from one position to another.

        The rotation that moves keys rotated at `from` to `to` (attention sinks, context shift,
        cache eviction, position-independent caching), also across a change of frequencies
        (LongRoPE's short to long factors, dynamic NTK's base: `from_seq_len`, `to_seq_len`).
        `cos` and `sin` (T, R) in the model's layout hold θ_to·to − θ_from·from, with no
        attention factor; `meta.attention_scaling_ratio` is a_to / a_from. With `k` (T, H, D)
        the answer's `k` is that key at `to`, the ratio applied once, in k's dtype. engine
        llama.cpp with precision "engine" is its K-shift (ggml_rope_ext on the cached F32 keys
        at the delta, `steps` times); `meta.drift` is the largest difference from the key
        rotated exactly.

        Args:
            positions: the keys' positions now (ints >= 0), with delta.
            delta: how far every key moves (negative: towards 0, as a context shift); to =
                positions + steps x delta.
            from_positions: the keys' positions now, with to_positions.
            to_positions: where each key moves (as many as from_positions).
            from_seq_len: the sequence length whose frequencies rotated the keys (LongRoPE's
                factors, dynamic NTK's base); default max(from) + 1, as transformers chooses.
            to_seq_len: the sequence length whose frequencies apply at to; default max(to) + 1.
            steps: with delta: repeat the shift this many times (precision engine: the engine's
                own rotation each time, as a cache shifted again and again) (default 1).
            k: the cached keys (T, H, D), already rotated at from: nested lists read in dtype,
                or the tensor k of a safetensors body in its own dtype.
            seed: instead of k: the key /v1/rope/apply seeds (q = randn(T, H, D), then k =
                randn(T, H_kv, D) from torch.Generator().manual_seed(seed)), float32.
            num_heads: with seed: H, the query heads.
            num_kv_heads: with seed: H_kv, the key heads (default num_heads).
            head_dim: Dh, even (required unless a preset or config gives it).
            rotary_dim: R, even ≤ head_dim (default head_dim).
            base: rope_theta (default 10000 when neither preset nor config gives it).
            layout: half (GPT-NeoX, Llama) or interleaved (GPT-J, RoFormer); default half when
                neither preset nor config gives it.
            scaling: null or a scaling object, with the names of transformers' rope_parameters.
            exponent_dim: E, the exponents' denominator (inv_freq = base^(-2i/E)): rotary_dim
                (default), or the odd rotary_dim - 1 of a config whose rotated width
                int(head_dim x partial_rotary_factor) is odd (GLM-4-MoE: 21, a 22-wide table).
            rotation: positive (default: x cos + rotate_half(x) sin) or negative: the model
                rotates by -theta and sin is negated (nanochat, whose rotate_half is cat(x2,
                -x1)).
            preset: name of a preset from GET /v1/presets; its params are defaults the other
                fields override (kind rope).
            config: a model's Hugging Face config.json object, pasted as published (a multimodal
                file whole): read as transformers 5 reads it; its values are defaults the other
                fields override. Not together with preset. See POST /v1/configs/positions for
                what it means.
            layer_type: for a config with RoPE parameters per layer type (Gemma 3:
                sliding_attention, full_attention): which type; required there, refused
                otherwise.
            mrope_section: M-RoPE: three ints (temporal, height, width) summing to rotary_dim/2.
            mrope_interleaved: M-RoPE: false (default) Qwen2-VL's contiguous sections, true
                Qwen3-VL's interleaving.
            engine: whose tables: transformers (default), vllm (what vLLM's get_rope builds from
                the same config), llama.cpp (what llama.cpp passes ggml_rope_ext for the model)
                or mlx (mlx-lm's initialize_rope and mx.fast.rope), or another registered engine
                (posenc.engines): see docs/engines.md (default 'transformers').
            precision: exact (default: float64 angles from the engine's rule, cast once) or
                engine: the engine's own arithmetic in its own dtype and order of operations
                (transformers: float32 inv_freq, float32 position x inv_freq, torch's float32
                cos/sin, bit for bit its rotary module's output; vLLM: its float32 cache, bit
                for bit, every class but XD-RoPE's and Gemma 4's; llama.cpp: ggml's float32
                rope, MLX: mx.fast.rope, within 2 ulp) (default 'exact').
            llamacpp: engine llama.cpp: ggml_rope_ext's arguments, given directly (a GGUF body
                is read into them) instead of read from the preset or config; n_dims defaults to
                rotary_dim.
            max_model_len: engine vllm: the server's --max-model-len (default the config's
                max_position_embeddings); LongRoPE uses its long factors everywhere above
                original_max_position_embeddings.
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``cos`` (T, R), ``sin`` (T, R), ``k`` (T, H, D).
        """
        return self.compute(
            "rope_shift",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            positions=positions,
            delta=delta,
            from_positions=from_positions,
            to_positions=to_positions,
            from_seq_len=from_seq_len,
            to_seq_len=to_seq_len,
            steps=steps,
            k=k,
            seed=seed,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rotary_dim=rotary_dim,
            base=base,
            layout=layout,
            scaling=scaling,
            exponent_dim=exponent_dim,
            rotation=rotation,
            preset=preset,
            config=config,
            layer_type=layer_type,
            mrope_section=mrope_section,
            mrope_interleaved=mrope_interleaved,
            engine=engine,
            precision=precision,
            llamacpp=llamacpp,
            max_model_len=max_model_len,
            dtype=dtype,
        )

    def sincos_2d(
        self,
        *,
        model: Literal[
            "sd3",
            "pixart",
            "dit",
            "cogvideox",
            "CogVideoX-2b",
            "stable-diffusion-3-medium",
            "stable-diffusion-3.5-large",
            "PixArt-Sigma-XL-2-1024-MS",
            "DiT-XL-2-256",
            "SD3Transformer2DModel",
            "PixArtTransformer2DModel",
            "Transformer2DModel",
            "DiTTransformer2DModel",
            "CogVideoXTransformer3DModel",
        ]
        | None = None,
        config: Mapping[str, Any] | None = None,
        frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        precision: Literal["exact", "engine", "diffusers"] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/sincos-2d``: 2-D and 3-D sin-cos position tables of diffusion transformers (SD3, PixArt, DiT, CogVideoX).

        The fixed sin-cos table a diffusion transformer adds to its patches, as diffusers'
        get_2d_sincos_pos_embed / get_3d_sincos_pos_embed compute it for a grid of `frames` ×
        `height` × `width` patches, rows in row-major order: SD3 crops the centre of its
        pos_embed_max_size table; PixArt and DiT scale coordinates by base_size / grid and
        interpolation_scale; CogVideoX (without rotary) puts a frame part first. Each part is
        [sin | cos], the column coordinate's before the row's (`meta.parts`). float64, cast
        once.

        Args:
            model: sd3, pixart, dit or cogvideox (the published checkpoint each stands for is in
                meta.source), a published checkpoint (stable-diffusion-3-medium, CogVideoX-2b …)
                or a diffusers transformer class (its defaults).
            config: a diffusers transformer/config.json (its _class_name picks the rule),
                instead of model.
            frames: latent frames in the transformer's patches (1 for an image) (default 1).
            height: latent rows in the transformer's patches.
            width: latent columns in the transformer's patches.
            precision: exact: float64 positions and angles, cast once; engine (or diffusers, the
                same): diffusers' own arithmetic, in float32 where it computes in float32
                (positions, frequencies, angles), as precision engine means on every RoPE-family
                table (default 'exact').
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``pos_embed`` (N, D).
        """
        return self.compute(
            "sincos_2d",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            model=model,
            config=config,
            frames=frames,
            height=height,
            width=width,
            precision=precision,
            dtype=dtype,
        )

    def sinusoidal(
        self,
        *,
        seq_len: int | None = None,
        positions: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        d_model: int | None = None,
        base: float | None = None,
        layout: Literal["interleaved", "concat", "tensor2tensor"] | None = None,
        offset: int | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/sinusoidal``: Sinusoidal positional encoding.

        Vaswani et al. (2017) fixed sinusoidal table, computed in float64 and cast once.

        Args:
            seq_len: T: positions offset … offset+T−1.
            positions: explicit positions (ints ≥ 0) instead of seq_len.
            d_model: D, even int ≥ 2.
            base: wavelength base (default 10000.0).
            layout: interleaved: PE[p,2i]=sin, PE[p,2i+1]=cos; concat: [sin | cos];
                tensor2tensor: [sin | cos] with w_i = base^(−i/max(D/2−1, 1)) (default
                'interleaved').
            offset: added to every position (default 0).
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``encoding`` (T, D).
        """
        return self.compute(
            "sinusoidal",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            positions=positions,
            d_model=d_model,
            base=base,
            layout=layout,
            offset=offset,
            dtype=dtype,
        )

    def vision_learned(
        self,
        *,
        config: Mapping[str, Any] | None = None,
        model: str | None = None,
        grid: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        grid_thw: Sequence[Sequence[int]] | Any | None = None,
        seed: int | None = None,
        include: Literal["pos_embed", "resample", "both"] | None = None,
        precision: Literal["exact", "engine"] | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/vision-learned``: Vision-tower learned 2-D position tables, resized as the model does (ViT, DeiT, DINOv2, CLIP, SigLIP, SigLIP 2 NaFlex, Idefics3...).

        A vision tower's learned absolute position table resized to each image's patch grid
        exactly as the model's code resizes it: `interpolate_pos_encoding` (ViT, DeiT, DINOv2,
        CLIP, SigLIP, BLIP...: bicubic or antialiased, class rows kept first), SigLIP 2 NaFlex's
        per-image bilinear antialiased resize, NaViT's bucketed position ids (Idefics2/3,
        SmolVLM, Phi-4-multimodal, MiniCPM-V; `position_ids` gives the rows read), or none
        (Ovis2, AIMv2, SAM: the native grid only); SAM 3's tiling, GLM-4V's `grid_sample`, the
        gathered interpolation of PaddleOCR-VL, Kimi K2.5 and Inkling 2, and RADIO's cropped
        table. `meta.resize` names the rule. The table is `model`'s checkpoint table, or the
        seeded one of `config` (`torch.manual_seed(seed)` over the model's parameter shape).
        `include` `resample` gives the resampling matrix (N, P), which needs no weights:
        `resample @ table` is the resized table of any table a caller holds.

        Args:
            config: the model's config.json (whole, or its vision config alone): the vision
                config's model_type picks the rule; hidden_size, image_size and patch_size
                (SigLIP 2: num_patches; some towers other keys, named in meta.defaulted) are
                read. Not together with model.
            model: name of a vision model folder from GET /v1/models: its checkpoint's table.
            grid: [h, w]: one image's grid in patches (default: the native grid, image_size /
                patch_size).
            grid_thw: [1, h, w] per image, in patches, in order (instead of grid).
            seed: torch.manual_seed of the table of a config without weights (default 0).
            include: pos_embed: the resized table (N, D); resample: the resampling matrix (N,
                P), no weights needed; both (default 'pos_embed').
            precision: exact: float64 weights applied in float64, cast once; engine: the model's
                own arithmetic in float32, bit for bit what its forward adds (default 'exact').
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``pos_embed`` (N, D), ``resample`` (N, P), ``position_ids`` (N).
        """
        return self.compute(
            "vision_learned",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            config=config,
            model=model,
            grid=grid,
            grid_thw=grid_thw,
            seed=seed,
            include=include,
            precision=precision,
            dtype=dtype,
        )

    def vision_rope(
        self,
        *,
        config: Mapping[str, Any] | None = None,
        grid_thw: Sequence[Sequence[int]] | Any | None = None,
        precision: Literal["exact", "engine"] | None = None,
        engine: Literal["transformers", "timm"] | None = None,
        merge_sizes: Sequence[int] | Sequence[Sequence[int]] | Any | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/vision-rope``: Vision-tower 2-D rotary tables (Qwen-VL, GLM-4V, Pixtral, Llama 4, DINOv3...).

        The 2-D (axial) rotary cos/sin of a vision encoder, as its transformers rotary module
        computes them for the position ids its tower makes from `grid_thw`: one row per patch
        token of all the grids, in the tower's order (spatial-merge blocks for Qwen-VL, before
        Qwen2.5-VL's window reordering), laid out as the model applies them (`meta.layout`:
        `half`, `interleaved`, or `split` for Gemma 4's halves). `position_ids` gives each
        token's (row, column), (−1, −1) for a class token (Llama 4, Inkling2), and (frame, row,
        column) for MiniMax-M3-VL's 3-D rotary, whose tables are its `meta.rotary_dim` rotated
        channels. `config` is the model's config.json (its `vision_config`, under
        `thinker_config` for the Omni models) or the vision config alone.

        Args:
            config: the model's config.json (whole, or its vision config alone): the vision
                config's model_type picks the rule; head_dim (or hidden_size / num_heads),
                rope_theta, spatial_merge_size, image_size and patch_size are read.
            grid_thw: [t, h, w] of each image or video, in patches, as the image processor
                reports them; h and w multiples of the merge size the tower uses. Optional where
                the config fixes the grid (Llama 4; DINOv3 defaults to image_size / patch_size).
            precision: exact (default: float64 angles, cast once) or engine: the tower's rotary
                module's own float32 arithmetic (float32 inv_freq, position x inv_freq, torch's
                float32 cos/sin), bit for bit its output on the same torch build (default
                'exact').
            engine: whose tables: transformers (default: the vision tower of a transformers
                config) or timm (config is the arguments of timm's create_rope_embed: EVA's and
                ROPE-ViT's axial cat/base, ROPE-ViT's mixed, DINOv3's; see docs/engines.md)
                (default 'transformers').
            merge_sizes: the merge size of each grid, for a tower that takes one per image or
                video (Video-LLaMA 3; default 1 for an image, 2 for a video, as its processors
                do).
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``cos`` (N, Dh), ``sin`` (N, Dh), ``position_ids`` (N, 2).
        """
        return self.compute(
            "vision_rope",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            config=config,
            grid_thw=grid_thw,
            precision=precision,
            engine=engine,
            merge_sizes=merge_sizes,
            dtype=dtype,
        )

    def xpos(
        self,
        *,
        seq_len: int | None = None,
        dim: int | None = None,
        scale_base: float | None = None,
        dtype: Literal["float32", "float16", "bfloat16", "float64"] | None = None,
        format: Format | None = None,
        as_: ArrayKind | None = None,
        device: str | None = None,
        method: Method = "POST",
        query: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> T:
        """``GET or POST /v1/encodings/xpos``: xPos query and key scales (rotary-embedding-torch use_xpos).

        The per-position scales of a length-extrapolatable rotary embedding (Sun et al. 2023),
        as rotary-embedding-torch's `RotaryEmbedding(dim, use_xpos=True, xpos_scale_base)`
        applies them in `rotate_queries_and_keys`: ζ_i = (2i + 0.4R)/(1.4R), power (t −
        N//2)/scale_base for t = 0 … N−1; `query_scale` = ζ^power and `key_scale` = ζ^−power,
        each on its pair's two adjacent channels. float64, cast once.

        Args:
            seq_len: N: positions 0 … N−1.
            dim: R: the rotary embedding's dim (even).
            scale_base: xpos_scale_base (rotary-embedding-torch: 512) (default 512.0).
            dtype: dtype of the float tensors (integer tensors are always int64); bfloat16
                cannot be npy (default 'float32').
            format, as_, device, method, query, extra: as for ``compute``.

        Returns:
            A TensorResult with ``query_scale`` (T, R), ``key_scale`` (T, R).
        """
        return self.compute(
            "xpos",
            format=format,
            as_=as_,
            device=device,
            method=method,
            query=query,
            extra=extra,
            seq_len=seq_len,
            dim=dim,
            scale_base=scale_base,
            dtype=dtype,
        )
