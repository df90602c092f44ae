"""``benchmarks.prefill_kernels_ab`` loads another version of the Gluon prefill kernel as a
module of ``graphfuse/triton/prefill`` (its relative imports resolve there), and refuses a
file without the kernel with a clear message. Skips without Triton's Gluon Hopper layer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

from benchmarks.prefill_kernels_ab import load_version  # noqa: E402
from graphfuse.triton.prefill import gluon_kernel  # noqa: E402


def test_loads_a_copy_of_the_kernel_with_its_relative_imports(tmp_path: Path) -> None:
    copy = tmp_path / "other_gluon.py"
    source = Path(gluon_kernel.__file__).read_text()
    assert "from ..formats import" in source  # the import the loading must resolve
    copy.write_text(source.replace("MAXNREG = ", "OTHER = True\nMAXNREG = ", 1))
    module = load_version(str(copy), 90)
    try:
        assert module.OTHER and module.ws_attention_kernel is not gluon_kernel.ws_attention_kernel
        assert module.__name__ == "graphfuse.triton.prefill._ab_version_90"
    finally:
        sys.modules.pop(module.__name__)


def test_a_file_without_the_kernel_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "not_a_kernel.py"
    other.write_text("X = 1\n")
    with pytest.raises(SystemExit, match="has no ws_attention_kernel"):
        load_version(str(other), 91)
    sys.modules.pop("graphfuse.triton.prefill._ab_version_91")
