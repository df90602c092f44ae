"""GPU kernels (Triton) for the ``graphfuse::`` ops, registered for the CUDA dispatch key.

Importing this package registers lazy CUDA impls only: Triton and the kernel modules
(``quant``, ``attention``, ``decode``) are imported on an op's first CUDA call.
"""

from __future__ import annotations

from . import _register  # noqa: F401
