"""GPU kernels (Triton, Gluon) for the ``graphfuse::`` ops, registered for the CUDA dispatch key.

By op family: ``quant/`` (FP8 / NVFP4 quant and dequant), ``norm_act/`` (RMSNorm and
act-and-mul fused with an FP8 / NVFP4 quant), ``prefill/`` (fused attention, the
warp-specialised Gluon kernel and the plain Triton kernel side by side) and ``decode/``
(split-KV decode attention, paged or dense KV); in each, the ``@triton.jit`` kernels apart
from their launchers. Shared device helpers: ``formats.py`` (one per output format) and
``epilogue.py``; host helpers: ``host.py``; the op impls: ``ops.py``.

Importing this package registers lazy CUDA impls only: Triton and the kernel modules are
imported on an op's first CUDA call.
"""

from __future__ import annotations

from . import _register  # noqa: F401
