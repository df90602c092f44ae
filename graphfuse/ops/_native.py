"""Loads ``graphfuse._C`` (the C++ CPU kernels), registered for the CPU dispatch key."""

from __future__ import annotations

import importlib

_ERROR: str | None = None

try:
    importlib.import_module("graphfuse._C")
except ImportError as exc:  # not built: ops stay defined, CPU calls raise a clear error
    _ERROR = str(exc)


def native_available() -> bool:
    """True when the native CPU kernels (``graphfuse._C``) are loaded."""
    return _ERROR is None


def missing_native_message(op: str) -> str:
    """The error for calling ``op`` on CPU when ``graphfuse._C`` is not built."""
    return (
        f"graphfuse::{op} has no CPU kernel: the native module graphfuse._C is not built "
        f"({_ERROR}); build it with `pip install --no-build-isolation -e .`"
    )
