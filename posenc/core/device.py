"""Device and dtype choice shared by every posenc function.

``auto`` gives CUDA when ``torch.cuda.is_available()``, else the CPU. Asking for CUDA where there
is none raises :class:`~posenc.core.errors.DeviceUnavailable` with a message saying so.
"""

from __future__ import annotations

import torch

from posenc.core.errors import DeviceUnavailable, InvalidArgument

FLOAT_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """Turn ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (or a ``torch.device``) into a device.

    Raises:
        DeviceUnavailable: CUDA asked for but not available, or ``cuda:N`` beyond the GPU count.
        InvalidArgument: a name torch does not know.
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidArgument(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}", field="device"
        ) from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailable(
                f"device {str(dev)!r} was asked for but CUDA is not available on this machine "
                "(torch.cuda.is_available() is False); use 'cpu' or 'auto'",
                field="device",
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise DeviceUnavailable(
                f"device {str(dev)!r} was asked for but this machine has {count} CUDA device(s)",
                field="device",
            )
    elif dev.type != "cpu":
        raise InvalidArgument(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}", field="device"
        )
    return dev


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """Turn ``float32`` (default), ``float16``, ``bfloat16`` or ``float64`` into a torch dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in FLOAT_DTYPES.values():
            raise InvalidArgument(
                f"dtype must be one of {sorted(FLOAT_DTYPES)}, got {dtype}", field="dtype"
            )
        return dtype
    try:
        return FLOAT_DTYPES[dtype]
    except KeyError:
        raise InvalidArgument(
            f"dtype must be one of {sorted(FLOAT_DTYPES)}, got {dtype!r}", field="dtype"
        ) from None
