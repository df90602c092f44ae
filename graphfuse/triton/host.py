"""Host-side helpers shared by the kernel launchers: Triton dtypes, scale checks, the zeroing
of swizzled NVFP4 scale padding (and the programs that zero it in a kernel), the device's SM
count."""

from __future__ import annotations

import functools

import torch
import triton.language as tl

TL_DTYPE = {
    torch.float32: tl.float32,
    torch.float16: tl.float16,
    torch.bfloat16: tl.bfloat16,
    torch.float8_e4m3fn: tl.float8e4nv,
}

_SM_COUNT: dict[int, int] = {}


def check_scale(op: str, name: str, s: torch.Tensor, device: torch.device) -> None:
    """Raises ValueError unless ``s`` is a one-element floating tensor on ``device``."""
    if s.numel() != 1 or not s.is_floating_point() or s.device != device:
        raise ValueError(
            f"graphfuse::{op}: {name} must be a one-element floating tensor on {device}, "
            f"got shape {tuple(s.shape)}, dtype {s.dtype}, device {s.device}"
        )


def zero_scale_padding(sf: torch.Tensor, m: int, kblocks: int) -> None:
    """Zeroes the padding bytes of a swizzled block-scale tensor for an ``[m, 16*kblocks]``
    output before a kernel writes its real bytes (stream-ordered; no host sync)."""
    mp, kbp = sf.shape
    flat = sf.view(torch.uint8).view(-1)
    if kbp != kblocks:
        flat.zero_()
    elif mp != m:  # only the last 128-row tile holds padding rows; it is contiguous
        flat[(mp - 128) * kbp :].zero_()


def sf_pad_programs(m: int, kb_pad: int, words: int) -> int:
    """Programs that zero the padding rows of an ``[m, 16 * kb_pad]`` output's swizzled NVFP4
    scales (``formats.zero_sf_pad``), at most ``words`` 32-bit words each: the
    ``kb_pad / 4 * 128`` words of the last 128-row tile, none when ``m`` is a multiple of 128.
    Launched beside the programs that write the real rows, so the zeros cost no tail."""
    return 0 if m % 128 == 0 else -(-(kb_pad // 4 * 128) // words)


@functools.cache
def has_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch (``griddepcontrol``, ``launch_pdl``): CUDA devices from
    sm_90."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def dependent_launch(pdl: bool) -> dict:
    """The launch arguments of a kernel taking the ``PDL`` constexpr: with ``pdl`` its
    dependent start compiled in and the launch made a programmatic dependent launch
    (``launch_pdl``), which need each other; without, neither.

    Example::

        kernel[grid](*args, **dependent_launch(has_pdl(x.device)))
    """
    return {"PDL": True, "launch_pdl": True} if pdl else {"PDL": False}


def sm_count(device: torch.device) -> int:
    """The device's multiprocessor count (132 under the Triton CPU interpreter)."""
    if device.type != "cuda":  # the Triton CPU interpreter (development only)
        return 132
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]
