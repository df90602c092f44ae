"""The ``graphfuse::`` custom ops: schemas, fake impls, references and kernel registration.

Importing this package defines every op (so ``torch.export.load`` of a rewritten program
works), registers the fake impls, and loads the prebuilt native module with the CPU kernels:
``graphfuse._C_avx2`` when the CPU has AVX2 + FMA + F16C, else the portable ``graphfuse._C``
(``native_variant()`` says which; without either, calling an op on CPU raises an error saying
how to build it).
It never initialises CUDA and never compiles anything.
"""

from __future__ import annotations

from . import _library  # noqa: F401  (defines the schemas first)

# isort: split
from . import _fake_attention, _fake_norm_act, _fake_paged, _fake_quant  # noqa: F401
from ._native import native_available as native_available
from ._native import native_variant as native_variant

# isort: split
from . import _missing  # noqa: F401  (after _native: clear errors when _C is not built)

__all__ = ["native_available", "native_variant"]
