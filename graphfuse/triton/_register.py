"""Registers the Triton kernels for the CUDA dispatch key, lazily.

Importing this module imports neither Triton nor the kernel modules and never initialises
CUDA: each registered impl imports its kernel module on first call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

# op name -> (kernel module under graphfuse.triton, function name)
_IMPLS = {
    "fp8_static_quant": ("quant", "fp8_static_quant"),
    "fp8_dequant": ("quant", "fp8_dequant"),
    "nvfp4_quant": ("quant", "nvfp4_quant"),
    "nvfp4_dequant": ("quant", "nvfp4_dequant"),
    "attention": ("attention_ops", "attention"),
    "attention_fp8": ("attention_ops", "attention_fp8"),
    "attention_nvfp4": ("attention_ops", "attention_nvfp4"),
    "paged_decode_attention": ("paged", "paged_decode_attention"),
    "paged_decode_attention_fp8": ("paged", "paged_decode_attention_fp8"),
    "paged_decode_attention_nvfp4": ("paged", "paged_decode_attention_nvfp4"),
}

_LIB = torch.library.Library("graphfuse", "IMPL")


def _lazy(module: str, name: str) -> Callable:
    target: list[Callable] = []

    def impl(*args, **kwargs):
        if not target:
            try:
                mod = importlib.import_module(f"graphfuse.triton.{module}")
            except ImportError as exc:
                raise RuntimeError(
                    f"graphfuse::{name}: the CUDA kernel needs Triton, which failed to import "
                    f"({exc}); install triton to run graphfuse ops on CUDA"
                ) from exc
            target.append(getattr(mod, name))
        return target[0](*args, **kwargs)

    impl.__name__ = f"{name}_cuda"
    return impl


for _op, (_module, _fn) in _IMPLS.items():
    _LIB.impl(_op, _lazy(_module, _fn), "CUDA")
