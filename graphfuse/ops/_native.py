"""Loads the native module (the C++ CPU kernels, registered for the CPU dispatch key).

setup.py builds ``graphfuse._C`` for the baseline instruction set and, on x86-64,
``graphfuse._C_avx2`` with AVX2 + FMA + F16C. Both register the same kernels, so exactly one
is imported: the AVX2 one when torch's CPU capability is AVX2 or AVX512 (the environment
variable ``ATEN_CPU_CAPABILITY=default`` lowers it) and, on Linux, ``/proc/cpuinfo`` lists
avx2, fma and f16c; otherwise, or when it is absent (not x86-64, an older build), the
portable one.
"""

from __future__ import annotations

import importlib

import torch

_MODULES = {"avx2": "graphfuse._C_avx2", "portable": "graphfuse._C"}
_ERROR: str | None = None
_VARIANT: str | None = None


def _cpu_has_avx2() -> bool:
    """True when the CPU (and torch's capability, which the environment may lower) has AVX2,
    FMA and F16C."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return {"avx2", "fma", "f16c"} <= set(line.split(":", 1)[1].split())
    except OSError:  # not Linux: torch's AVX2 means AVX2 + FMA, and such CPUs have F16C
        pass
    return True


def _load() -> None:
    global _ERROR, _VARIANT
    for variant in ("avx2", "portable") if _cpu_has_avx2() else ("portable",):
        try:
            importlib.import_module(_MODULES[variant])
        except ImportError as exc:  # not built: ops stay defined, CPU calls raise a clear error
            _ERROR = str(exc)
        else:
            _ERROR, _VARIANT = None, variant
            return


_load()


def native_available() -> bool:
    """True when the native CPU kernels (``graphfuse._C`` or ``graphfuse._C_avx2``) are loaded."""
    return _VARIANT is not None


def native_variant() -> str | None:
    """Which native module is loaded: ``"avx2"`` (``graphfuse._C_avx2``), ``"portable"``
    (``graphfuse._C``, the baseline instruction set), or None when neither is built."""
    return _VARIANT


def missing_native_message(op: str) -> str:
    """The error for calling ``op`` on CPU when the native module is not built."""
    return (
        f"graphfuse::{op} has no CPU kernel: the native module graphfuse._C is not built "
        f"({_ERROR}); build it with `pip install --no-build-isolation -e .`"
    )
