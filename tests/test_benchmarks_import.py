"""Every benchmark script imports on a CPU-only machine (CI never runs the GPU ones, so a
renamed function they use would otherwise go unnoticed until the next lent GPU)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

SCRIPTS = sorted(
    p.stem for p in (Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py")
    if p.stem != "__init__"
)  # fmt: skip


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_imports(name: str) -> None:
    try:
        importlib.import_module(f"benchmarks.{name}")
    except ModuleNotFoundError as exc:  # an optional package (Triton) that is not installed
        if exc.name and exc.name.split(".")[0] not in ("benchmarks", "graphfuse", "tests"):
            pytest.skip(f"needs {exc.name}")
        raise
