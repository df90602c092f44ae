"""Clear errors for CPU calls when the native module (``graphfuse._C`` / ``_C_avx2``) is not built.

Importing this module registers, only when neither native module loaded, a CPU kernel for
every ``graphfuse::`` op that raises :func:`missing_native_message`. There is no Python
fallback: a missing kernel is an error that says how to build it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._library import SCHEMAS
from ._native import missing_native_message, native_available


def _raiser(op: str) -> Callable[..., None]:
    def kernel(*args: object, **kwargs: object) -> None:
        raise RuntimeError(missing_native_message(op))

    return kernel


def register_missing_kernels() -> list[str]:
    """Registers the raising CPU kernels if the native module is missing.

    Returns:
        The op names that got a raising kernel (empty when a native module is loaded).
    """
    if native_available():
        return []
    for op in SCHEMAS:
        torch.library.register_kernel(f"graphfuse::{op}", "cpu", _raiser(op))
    return list(SCHEMAS)


MISSING = register_missing_kernels()
