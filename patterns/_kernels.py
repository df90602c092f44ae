"""Whether a fused op can run where the matched graph runs."""

from __future__ import annotations

from typing import Any

import torch

from graphfuse import Match

_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


def check_kernel(m: Match, name: str, op: torch._ops.OpOverload) -> Any:
    """A failure naming ``op`` when it has no kernel for the device of ``name``'s value
    (fusing would give a program that cannot run there); None otherwise. Values without a
    device, or on the meta device (no data), pass."""
    device = getattr(m.val(name), "device", None)
    if device is None or device.type == "meta":
        return None
    key = _DISPATCH_KEYS.get(device.type)
    if key is not None and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key):
        return None
    return m.fail(
        "{op} has no {d} kernel yet, and this graph runs on {d}", name, op=op.name(), d=device.type
    )
