"""Registers the CUDA impls of the ``graphfuse::`` ops in ``OPS`` (``ops.IMPLS``), lazily.

Importing this module imports neither Triton nor the kernel modules and never initialises
CUDA: each registered impl imports ``graphfuse.triton.ops`` (its ``IMPLS``) on its first call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

# the ops with CUDA impls (``ops.IMPLS``)
OPS = (
    "fp8_static_quant",
    "fp8_dequant",
    "nvfp4_quant",
    "nvfp4_dequant",
    "attention",
    "attention_fp8",
    "attention_nvfp4",
    "paged_decode_attention",
    "paged_decode_attention_fp8",
    "paged_decode_attention_nvfp4",
    "rms_norm_quant_fp8",
    "add_rms_norm_quant_fp8",
    "rms_norm_quant_nvfp4",
    "add_rms_norm_quant_nvfp4",
    "act_and_mul_quant_fp8",
    "act_and_mul_quant_nvfp4",
)

_LIB = torch.library.Library("graphfuse", "IMPL")


def _lazy(name: str) -> Callable:
    target: list[Callable] = []

    def impl(*args, **kwargs):
        if not target:
            try:
                mod = importlib.import_module("graphfuse.triton.ops")
            except ImportError as exc:
                raise RuntimeError(
                    f"graphfuse::{name}: the CUDA kernel needs Triton, which failed to import "
                    f"({exc}); install triton to run graphfuse ops on CUDA"
                ) from exc
            target.append(mod.IMPLS[name])
        return target[0](*args, **kwargs)

    impl.__name__ = f"{name}_cuda"
    return impl


for _op in OPS:
    _LIB.impl(_op, _lazy(_op), "CUDA")
