"""The rotation a transformers text model applies, read through its own code.

:func:`model_rotation` builds a model type's text model from a config on the meta device (no
memory, no weights), runs it once on ``T`` tokens, and records what its attention does: which
rotary module it built (and with which arguments), how the model called that module's
``forward``, and which ``apply_*rotary*`` / ``apply_*rope*`` function of the modeling file the
attention called, with which arguments. It then replays those two calls on the CPU: the rotary
module rebuilt from the same arguments, its ``forward`` on positions ``0 … T−1``, and the apply
function on identity vectors (one "head" per channel), so the result is the model's rotation
matrix at each position, in the model's own layout and sign, with its attention scaling.

A text model whose forward on the meta device stops before its attention applies the rotary
(a multimodal wrapper that wants pixels, a hybrid's cache, an encoder-decoder's mask that calls
``.item()``, JetMoE's router) is read by driving its attention's call directly: the rotary module
it built, rebuilt on the CPU and called on positions ``0 … T−1``, and the apply function that its
modeling file calls as ``apply_*(q, k, cos, sin)`` (or Gemma 4's per-tensor
``apply_*(x, cos, sin, unsqueeze_dim=2)``), on identity vectors of its head width. Models whose
forward requires audio, image or time-series inputs are not driven: they stay ``unread``.

Nothing here reads an attribute such as ``inv_freq``: a module of any shape (GPT-J's
sinusoidal buffer that returns ``(sin, cos)``, a complex ``freqs_cis``) is read through its
output.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

#: Distinct from every head count and head width of a default config, so the position axis of
#: a recorded tensor is the one of this size.
T = 23


class NotProbed(Exception):
    """The text model could not be read from this config (a reason, not a mismatch).

    Attributes:
        why: ``"no_rotary"`` (its text model applies no rotary embedding), ``"cannot_build"``
            (transformers cannot build or run it from this config) or ``"unread"`` (it
            applies one that this probe cannot follow).
    """

    def __init__(self, message: str, why: str = "cannot_build") -> None:
        super().__init__(message)
        self.why = why


@dataclass
class Rotation:
    """What one layer type of a text model applies.

    Attributes:
        matrices: ``(T, W, W)`` float64: ``matrices[t] @ x`` is what the model's apply function
            makes of a query ``x`` of ``W`` channels at position ``t``.
        position_rows: the ``(K, T)`` positions given to the rotary module (``K = 1`` for text
            RoPE, 3 for M-RoPE).
        rotary: the rotary module's class name.
        apply: the apply function's name.
    """

    matrices: torch.Tensor
    position_rows: torch.Tensor
    rotary: str
    apply: str


@dataclass
class _Record:
    rotaries: list[torch.nn.Module] = field(default_factory=list)
    forward_calls: list[tuple[torch.nn.Module, tuple, dict, Any]] = field(default_factory=list)
    apply_calls: list[tuple[str, Any, tuple, dict]] = field(default_factory=list)
    failed_applies: int = 0
    errors: list[str] = field(default_factory=list)  # why each forward tried stopped


def _is_rotary_name(name: str) -> bool:
    return (
        "Rotary" in name or name.endswith("RopeEmbedding") or name.endswith("RoPE")
    ) and not any(w in name for w in ("Vision", "Audio", "Patch", "Image", "Video"))


def _is_rotary_class(name: str, obj: Any) -> bool:
    return inspect.isclass(obj) and issubclass(obj, torch.nn.Module) and _is_rotary_name(name)


def _is_apply_function(name: str, obj: Any) -> bool:
    return (
        inspect.isfunction(obj)
        and name.startswith("apply_")
        and ("rot" in name or "rope" in name)
        and "vision" not in name
    )


@contextmanager
def _recording(modules: list[Any], record: _Record) -> Iterator[None]:
    """Wrap every rotary class and apply function of ``modules`` so that their use is recorded."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for mod in modules:
            for name, obj in list(vars(mod).items()):
                if _is_rotary_class(name, obj) and "_probe_init" not in vars(obj):
                    init, fwd = obj.__init__, obj.forward

                    def _init(self, *a, _orig=init, **k):  # type: ignore[no-untyped-def]
                        _orig(self, *a, **k)
                        self._probe_args = (a, k)
                        record.rotaries.append(self)

                    def _forward(self, *a, _orig=fwd, **k):  # type: ignore[no-untyped-def]
                        out = _orig(self, *a, **k)
                        record.forward_calls.append((self, a, k, out))
                        return out

                    undo += [(obj, "__init__", init), (obj, "forward", fwd)]
                    obj.__init__, obj.forward = _init, _forward
                    obj._probe_init = True
                    undo.append((obj, "_probe_init", None))
                elif _is_apply_function(name, obj):

                    def _apply(*a, _f=obj, _n=name, **k):  # type: ignore[no-untyped-def]
                        try:
                            out = _f(*a, **k)
                        except Exception:
                            record.failed_applies += 1  # the model's own call fails
                            raise
                        record.apply_calls.append((_n, _f, a, k))
                        return out

                    undo.append((mod, name, obj))
                    setattr(mod, name, _apply)
        yield
    finally:
        for owner, name, value in reversed(undo):
            if value is None:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def _modeling_name(config: Any) -> str:
    """The module name of the modeling file beside ``config``'s configuration file."""
    return type(config).__module__.replace(".configuration_", ".modeling_")


def _modeling_modules(cls: type) -> list[Any]:
    """The modeling files of ``cls`` and of every class it derives from in transformers."""
    out = []
    if not inspect.isclass(cls):
        raise NotProbed(f"the AutoModel entry is {cls!r}, not one class")
    for base in inspect.getmro(cls):
        mod = inspect.getmodule(base)
        if mod is not None and mod.__name__.startswith("transformers.models.") and mod not in out:
            out.append(mod)
    return out


def text_model_class(config: Any) -> type:
    """The ``AutoModel`` class of the text config, else of the whole config."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    try:
        text = config.get_text_config()
    except ValueError as exc:  # several text configs (an encoder and a decoder)
        raise NotProbed(f"get_text_config() refuses: {exc}") from None
    for c in (text, config):
        try:
            cls = MODEL_MAPPING[type(c)]
            if not inspect.isclass(cls):
                raise NotProbed(f"the AutoModel entry is {cls!r}, not one class")
            return cls
        except KeyError:
            continue
        except ValueError as exc:  # a mapped class that its module does not define
            raise NotProbed(f"no AutoModel class: {exc!s:.160}") from None
    # a sub-config without an AutoModel entry (BLT's local encoder, Qwen2.5-Omni's thinker
    # text model): the base model class of its modeling file that takes that config
    for c in (text, config):
        try:
            mod = importlib.import_module(_modeling_name(c))
        except ImportError:
            continue
        found = [
            o
            for n, o in vars(mod).items()
            if inspect.isclass(o)
            and getattr(o, "config_class", None) is type(c)
            and "For" not in n
            and not n.endswith("PreTrainedModel")
        ]
        if found:
            return sorted(found, key=lambda o: (not o.__name__.endswith("Model"), o.__name__))[0]
    raise NotProbed(f"no AutoModel class for {type(config).__name__}")


def _mentions_rotary(config: Any) -> bool:
    """Whether the modeling file beside the text config's class mentions a rotary embedding (read
    as text, so that the hundreds of other model files are never imported)."""
    try:
        text = config.get_text_config()
    except ValueError:
        return True  # let text_model_class say why
    found = False
    for c in (text, config):
        spec = importlib.util.find_spec(_modeling_name(c))
        if spec is None or spec.origin is None:
            continue
        with open(spec.origin, encoding="utf-8") as fh:
            source = fh.read()
        names = re.findall(r"^class (\w+)\(", source, re.MULTILINE)
        found = found or any(_is_rotary_name(n) for n in names)
    return found


def _run_on_meta(config: Any, record: _Record) -> None:
    if not _mentions_rotary(config):
        raise NotProbed(
            "the text model called no rotary module (its files define none)", "no_rotary"
        )
    cls = text_model_class(config)
    tc = config.get_text_config()
    built_from = (
        tc if cls in _mapped(tc) or getattr(cls, "config_class", None) is type(tc) else config
    )
    modules = _modeling_modules(cls)
    # sub-modules the text model builds from other files (a composite's language model)
    modules += [importlib.import_module(m) for m in _submodule_files(cls)]
    if not any(_is_rotary_class(n, o) for m in modules for n, o in vars(m).items()):
        raise NotProbed(
            "the text model called no rotary module (its files define none)", "no_rotary"
        )
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), _recording(modules, record), torch.device("meta"):
            warnings.simplefilter("ignore")
            try:
                # bfloat16: the grouped matmuls of MoE layers accept only that, even on meta
                model = cls._from_config(built_from, dtype=torch.bfloat16)  # type: ignore[attr-defined]
            except Exception as exc:
                raise NotProbed(f"{cls.__name__} cannot be built: {exc!r:.160}") from None
            model.eval()
            ids = torch.zeros(1, T, dtype=torch.long)
            embeds = torch.zeros(1, T, getattr(tc, "hidden_size", 8) or 8, dtype=torch.bfloat16)
            for inputs in (
                {"input_ids": ids},
                {"input_ids": ids, "decoder_input_ids": ids},  # encoder-decoders
                {"inputs_embeds": embeds},
                {"hidden_states": embeds},
                {"input_features": embeds},  # speech models whose decoder rotates
            ):
                try:
                    with torch.no_grad():
                        model(**inputs)
                except Exception as exc:  # later ops (MoE kernels) may refuse the meta device;
                    # the rotary calls of the layers before them are recorded by then
                    record.errors.append(f"{', '.join(inputs)}: {exc!r:.200}")
                if record.apply_calls:
                    break
    finally:
        logging.disable(logging.NOTSET)


def _head_width(config: Any) -> int | None:
    """The text config's attention head width (``head_dim``, else hidden / heads)."""
    tc = config.get_text_config()
    try:
        hd = getattr(tc, "head_dim", None)
    except Exception:  # Gemma 4's per-layer head_dim refuses a global read: the table's width
        return None
    if isinstance(hd, int) and hd > 0:
        return hd
    hidden, heads = getattr(tc, "hidden_size", None), getattr(tc, "num_attention_heads", None)
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        return hidden // heads
    return None


def _mapped(config: Any) -> set[type]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    try:
        return {MODEL_MAPPING[type(config)]}  # type: ignore[arg-type]
    except KeyError:
        return set()


def _submodule_files(cls: type) -> list[str]:
    """Modeling modules named in ``cls``'s file (a composite model's language model class)."""
    import sys

    mod = inspect.getmodule(cls)
    names = []
    for value in getattr(mod, "__dict__", {}).values():
        m = getattr(value, "__module__", "") or ""
        if m.startswith("transformers.models.") and ".modeling_" in m and m in sys.modules:
            names.append(m)
    return sorted(set(names))


def _positions_like(shape: torch.Size, distinct_rows: bool) -> torch.Tensor:
    """Positions of ``shape`` (``(..., T)``) from 0. With ``distinct_rows``, row ``k`` of a
    multi-row (M-RoPE) shape counts with step ``k + 1``, so that sections cannot be mistaken for
    one another; else every row is ``0 … T−1`` (text tokens)."""
    rows = shape[0] if len(shape) == 3 else 1
    base = torch.arange(shape[-1])
    if rows == 1 or not distinct_rows:
        return base.expand(*shape).clone()
    out = torch.stack([base * (k + 1) for k in range(rows)])  # (K, T)
    return out[:, None, :].expand(*shape).clone()


def _cpu_args(
    args: tuple, kwargs: dict, distinct_rows: bool
) -> tuple[tuple, dict, torch.Tensor | None]:
    """The recorded forward arguments with meta tensors replaced: integer ones by positions,
    float ones by zeros of the same shape."""
    pos: list[torch.Tensor] = []

    def conv(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if v.dtype in (torch.int64, torch.int32):
                p = _positions_like(v.shape, distinct_rows)
                pos.append(p)
                return p
            return torch.zeros(v.shape, dtype=torch.float32)
        return v

    a = tuple(conv(v) for v in args)
    k = {n: conv(v) for n, v in kwargs.items()}
    return a, k, (pos[0] if pos else None)


def _probe_query(q_shape: torch.Size, n: int) -> tuple[torch.Tensor, int]:
    """Identity vectors in the shape the apply function takes: one head per channel, at ``n``
    positions."""
    if len(q_shape) != 4 or n not in (q_shape[1], q_shape[2]):
        raise NotProbed(f"queries of shape {tuple(q_shape)} are not (B, ., ., W)", "unread")
    w = q_shape[-1]
    t_axis = 1 if q_shape[1] == n and q_shape[2] != n else 2
    eye = torch.eye(w, dtype=torch.float32)  # (head j, channel)
    q = eye[:, None, :].expand(w, n, w)  # (W, T, W)
    q = q[None] if t_axis == 2 else q.transpose(0, 1)[None]
    return q.contiguous(), t_axis


def _strings(args: tuple, kwargs: dict) -> set[str]:
    return {v for v in (*args, *kwargs.values()) if isinstance(v, str)}


def _pairs(record: _Record) -> list[tuple]:
    """Each apply call with the rotary forward call whose output it was given:
    ``(module, f_args, f_kwargs, name, fn, a_args, a_kwargs, tags)``; ``tags[i]`` is
    ``("out", j)`` where argument ``i`` is output ``j`` of the forward call."""
    out = []
    for name, fn, a_args, a_kwargs in record.apply_calls:
        for rot, f_args, f_kwargs, f_out in record.forward_calls:
            outs = f_out if isinstance(f_out, tuple) else (f_out,)
            tags: list[Any] = []
            for v in a_args:
                hit = [i for i, o in enumerate(outs) if v is o]
                tags.append(("out", hit[0]) if hit else v)
            if any(isinstance(t, tuple) and t and t[0] == "out" for t in tags):
                out.append((rot, f_args, f_kwargs, name, fn, a_args, a_kwargs, tags))
                break
    return out


def _unpermuted(mats: torch.Tensor) -> torch.Tensor:
    """Undo a permutation of the output channels (DeepSeek's ``apply_rotary_pos_emb_interleave``
    de-interleaves q and k before rotating them with ``rotate_half``): at position 0 the
    rotation is the identity, so ``mats[0]`` is the attention scaling times that permutation.
    Scores compare q and k permuted alike, so the rotation is read in the input's channels."""
    first = mats[0]
    scale = first.abs().max()
    perm = (first.abs() > 0.5 * scale).double()
    if scale == 0 or not torch.equal(perm.sum(0), torch.ones(perm.shape[1], dtype=perm.dtype)):
        return mats
    if torch.equal(perm, torch.eye(perm.shape[0], dtype=perm.dtype)):
        return mats
    return perm.T @ mats


def _replayed_matrices(res: Any, t_axis: int) -> torch.Tensor:
    """``(T, W out, W in)`` float64 rotation matrices from what an apply function returned for
    identity queries (its first output where it returns queries and keys; heads on the axis
    :func:`_probe_query` put them)."""
    res = res[0] if isinstance(res, tuple) else res
    res = res[0] if t_axis == 2 else res[0].transpose(0, 1)  # (W heads, T, W)
    return _unpermuted(res.double().permute(1, 2, 0))  # (T, W out, W in)


def shallow(config: Any) -> Any:
    """A copy of ``config`` whose text model has only the layers that show each of its layer
    types once (the first ``k``), with every per-layer list cut to ``k``: the rotary module and
    the attention of each layer type are the same, and building the model is quicker. Read
    this copy on both sides of a comparison."""
    import copy

    if not _mentions_rotary(config):
        return config  # nothing to build
    out = copy.deepcopy(config)
    try:
        text = out.get_text_config()
    except ValueError:
        return out
    n = getattr(text, "num_hidden_layers", None)
    if not isinstance(n, int) or n <= 2:
        return out
    types = getattr(text, "layer_types", None)
    k = 2
    if isinstance(types, list) and len(types) == n:
        k = max(k, *(types.index(t) + 1 for t in set(types)))
    if k >= n:
        return out
    try:
        for name, value in list(vars(text).items()):
            if isinstance(value, list) and len(value) == n:
                setattr(text, name, value[:k])
        text.num_hidden_layers = k
    except Exception:  # a config that derives its depth (Funnel's block_sizes): keep it whole
        return copy.deepcopy(config)
    return out


def model_rotation(
    config: Any, layer_types: list[str | None], *, distinct_rows: bool = False
) -> dict[str | None, Rotation]:
    """The model's rotation matrices per layer type (``None``: the one the model applies).

    Args:
        config: a transformers ``PretrainedConfig`` (the whole model's).
        layer_types: the layer types to replay the rotary module's forward for (passed as its
            ``layer_type`` argument where the model passes one).
        distinct_rows: M-RoPE position rows that differ (see :func:`_positions_like`).

    Raises:
        NotProbed: the model cannot be built or run on the meta device, or calls no rotary
            module or apply function from its modeling files.
    """
    key = _cache_key(config, layer_types, distinct_rows)
    if key is not None and key in _CACHE:
        return _CACHE[key]
    result = _model_rotation(config, layer_types, distinct_rows)
    if key is not None:
        _CACHE[key] = result
    return result


#: Rotations by the text model class and its config: the many multimodal model types whose
#: default text model is the same (LLaVA's family and Llama) are built once.
_CACHE: dict[tuple, dict[str | None, Rotation]] = {}


def _cache_key(config: Any, layer_types: list[str | None], distinct_rows: bool) -> tuple | None:
    try:
        cls = text_model_class(config)
        text = config.get_text_config()
    except Exception:  # model_rotation says why
        return None
    built_from = (
        text if cls in _mapped(text) or getattr(cls, "config_class", None) is type(text) else config
    )
    try:
        dump = built_from.to_json_string(use_diff=False)
    except Exception:
        return None
    return (cls.__qualname__, cls.__module__, dump, tuple(layer_types), distinct_rows)


#: The calls of an apply function that an attention makes with its rotary module's output as
#: returned: ``apply_rotary_pos_emb(query_states, key_states, cos, sin)`` (queries ``(B, H, T,
#: Dh)``), or Gemma 4's ``apply_rotary_pos_emb(query_states, cos, sin, unsqueeze_dim=2)`` on
#: queries and keys apart (``(B, T, H, Dh)``).
_QK_COS_SIN = r"\b{name}\(\s*[\w.]+\s*,\s*[\w.]+\s*,\s*cos\s*,\s*sin\s*\)"
_Q_COS_SIN_2 = r"\b{name}\(\s*[\w.]+\s*,\s*cos\s*,\s*sin\s*,\s*unsqueeze_dim=2\s*\)"

#: Inputs that mark a model as not a text model (its forward requires one of them).
_NOT_TEXT_INPUTS = frozenset(
    {"pixel_values", "input_values", "input_features", "past_values", "latents", "code"}
)


def _text_forward(model_cls: type) -> bool:
    """Whether ``model_cls.forward`` takes text: ``input_ids`` (or ``decoder_input_ids``), and
    requires none of the audio / image / time-series inputs."""
    params = inspect.signature(model_cls.forward).parameters  # type: ignore[attr-defined]
    required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
    takes_text = "input_ids" in params or "decoder_input_ids" in params
    return takes_text and not (required & _NOT_TEXT_INPUTS)


def _driven_directly(
    record: _Record, layer_types: list[str | None], distinct_rows: bool, width: int | None
) -> dict[str | None, Rotation]:
    """The rotation of a text model whose forward on the meta device stops before it calls its
    rotary module (a multimodal wrapper, a hybrid cache, an encoder-decoder, a meta ``.item()``):
    its attention's own call is replayed instead. The rotary module it built, rebuilt from the
    same arguments, is called on positions ``0 … T−1`` (``(1, T)``, else M-RoPE's ``(3, 1, T)``),
    and the apply function that its modeling file calls as ``apply_*(q, k, cos, sin)`` is run on
    identity vectors of the model's head width."""
    import sys

    rot = record.rotaries[0]
    cls = type(rot)
    mod = sys.modules[cls.__module__]
    source = inspect.getsource(mod)
    found = [
        (n, f, pattern is _QK_COS_SIN)
        for n, f in vars(mod).items()
        if _is_apply_function(n, f)
        for pattern in (_QK_COS_SIN, _Q_COS_SIN_2)
        if re.search(pattern.format(name=re.escape(n)), source)
    ]
    if len(found) != 1:
        raise NotProbed(
            f"its forward on the meta device never called {cls.__name__}, and its modeling "
            f"file calls {len(found)} apply functions as apply(q, k, cos, sin) "
            f"({', '.join(record.errors)[:200]})",
            "unread",
        )
    name, fn, with_keys = found[0]
    init_a, init_k = rot._probe_args  # type: ignore[misc]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu_rot = cls(*init_a, **init_k).eval()
    takes_layer_type = "layer_type" in inspect.signature(cpu_rot.forward).parameters
    result: dict[str | None, Rotation] = {}
    for lt in layer_types:
        if lt is not None and not takes_layer_type:
            raise NotProbed(f"{cls.__name__}.forward takes no layer_type (asked for {lt!r})",
                            "unread")  # fmt: skip
        kw = {"layer_type": lt} if lt is not None else {}
        out, rows = None, None
        errors = []
        for shape in ((1, T), (3, 1, T)):
            pos = _positions_like(torch.Size(shape), distinct_rows)
            try:
                with torch.no_grad():
                    out = cpu_rot(torch.zeros(1), pos, **kw)
                rows = pos.reshape(-1, T)
                break
            except Exception as exc:
                errors.append(f"{exc!r:.160}")
        if out is None or rows is None:
            raise NotProbed(
                f"{cls.__name__}.forward fails on positions (1, T) and (3, 1, T): {errors}",
                "unread",
            )
        out = out if isinstance(out, tuple) else (out,)
        r = out[0].shape[-1] * (2 if out[0].is_complex() else 1)
        w = max(r, width or 0)
        q, t_axis = _probe_query(torch.Size((1, w, T, w) if with_keys else (1, T, w, w)), T)
        try:
            with torch.no_grad():
                res = fn(q, q, *out) if with_keys else fn(q, *out, unsqueeze_dim=2)
        except Exception as exc:
            raise NotProbed(f"replaying {name} fails: {exc!r:.160}", "unread") from None
        result[lt] = Rotation(_replayed_matrices(res, t_axis), rows, cls.__name__, name)
    return result


def _model_rotation(
    config: Any, layer_types: list[str | None], distinct_rows: bool
) -> dict[str | None, Rotation]:
    record = _Record()
    _run_on_meta(config, record)
    if not record.forward_calls:
        if record.rotaries and _text_forward(text_model_class(config)):
            return _driven_directly(record, layer_types, distinct_rows, _head_width(config))
        if record.rotaries:  # built one, but the forward stopped before calling it
            raise NotProbed(
                "the text model built a rotary module but never called it ("
                + "; ".join(record.errors)
                + ")",
                "unread",
            )
        raise NotProbed("the text model called no rotary module", "no_rotary")
    if not record.apply_calls:
        if record.failed_applies:
            raise NotProbed("transformers' own apply function fails on this config")
        if _text_forward(text_model_class(config)):  # stopped between the two (JetMoE)
            return _driven_directly(record, layer_types, distinct_rows, _head_width(config))
        raise NotProbed("the text model called no apply_*rotary* function", "unread")
    pairs = _pairs(record)
    if not pairs:
        raise NotProbed(
            "no apply function was given a rotary module's output as it returned it", "unread"
        )
    result: dict[str | None, Rotation] = {}
    built: dict[int, torch.nn.Module] = {}
    for lt in layer_types:
        chosen = [p for p in pairs if lt is not None and lt in _strings(p[1], p[2])]
        rot, f_args, f_kwargs, name, fn, a_args, a_kwargs, tags = (chosen or pairs)[0]
        q_shape = a_args[0].shape
        a_cls = type(rot)
        if id(rot) not in built:
            init_a, init_k = rot._probe_args
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                built[id(rot)] = a_cls(*init_a, **init_k).eval()
        cpu_rot = built[id(rot)]
        args, kwargs, pos = _cpu_args(f_args, f_kwargs, distinct_rows)
        if lt is not None:
            if "layer_type" in kwargs:
                kwargs["layer_type"] = lt
            elif any(isinstance(v, str) for v in args):
                args = tuple(lt if isinstance(v, str) else v for v in args)
            else:
                raise NotProbed(
                    f"the rotary forward takes no layer_type (asked for {lt!r})", "unread"
                )
        try:
            with torch.no_grad():
                out = cpu_rot(*args, **kwargs)
        except Exception as exc:
            raise NotProbed(
                f"replaying {a_cls.__name__}.forward fails: {exc!r:.160}", "unread"
            ) from None
        out = out if isinstance(out, tuple) else (out,)
        n = pos.shape[-1] if pos is not None else T
        q, t_axis = _probe_query(q_shape, n)
        call = []
        for i, t in enumerate(tags):
            if isinstance(t, tuple) and t and t[0] == "out":
                call.append(out[t[1]])
            elif i == 0:
                call.append(q)
            elif isinstance(t, torch.Tensor) and t.dim() == 4:
                call.append(q)  # the keys: rotated the same way
            elif isinstance(t, torch.Tensor):
                raise NotProbed(
                    f"{name} takes a tensor argument {i} not from the rotary module", "unread"
                )
            else:
                call.append(t)
        kw = {k: (q if isinstance(v, torch.Tensor) and v.dim() == 4 else v)
              for k, v in a_kwargs.items()}  # fmt: skip
        if any(isinstance(v, torch.Tensor) and v.dim() != 4 for v in a_kwargs.values()):
            raise NotProbed(f"{name} takes tensor keyword arguments", "unread")
        try:
            with torch.no_grad():
                res = fn(*call, **kw)
        except Exception as exc:
            raise NotProbed(f"replaying {name} fails: {exc!r:.160}", "unread") from None
        rows = pos.reshape(-1, n) if pos is not None else torch.arange(n)[None]
        result[lt] = Rotation(_replayed_matrices(res, t_axis), rows, a_cls.__name__, name)
    return result


__all__ = ["NotProbed", "Rotation", "T", "model_rotation", "shallow", "text_model_class"]


def rotary_module_tables(
    config: Any, layer_types: list[str | None]
) -> dict[str | None, tuple[torch.Tensor, torch.Tensor]]:
    """For a model transformers cannot build or run from ``config``: its text rotary module
    alone, built from the text config on the CPU and called on positions ``0 … T−1``, as
    ``{layer_type: (cos (T, W), sin (T, W))}`` float64. This reads the values of its table, not
    the layout its attention applies them in (the apply function needs the model).

    Raises:
        NotProbed: no rotary class in the text config's modeling file, or the module cannot be
            built or called from this config (``cannot_build``).
    """
    try:
        text = config.get_text_config()
    except ValueError as exc:
        raise NotProbed(f"get_text_config() refuses: {exc}") from None
    name = _modeling_name(text)
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:
        raise NotProbed(f"no modeling file {name}: {exc!s:.120}") from None
    classes = sorted(
        (n, o) for n, o in vars(mod).items() if _is_rotary_class(n, o) and o.__module__ == name
    )
    if not classes:
        raise NotProbed(f"{name} defines no text rotary class")
    cls = classes[0][1]
    x = torch.zeros(1, T, 8)
    pos = torch.arange(T)[None]
    out = {}
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            try:
                module = cls(config=text)
            except Exception as exc:
                raise NotProbed(f"{cls.__name__} cannot be built: {exc!r:.120}") from None
            for lt in layer_types:
                try:
                    cos, sin = module(x, pos) if lt is None else module(x, pos, lt)
                except Exception as exc:
                    raise NotProbed(f"{cls.__name__} cannot be called: {exc!r:.120}") from None
                out[lt] = (cos[0].double(), sin[0].double())
    finally:
        logging.disable(logging.NOTSET)
    return out
