"""``benchmarks.prefill_kernels_ab`` loads another version of the Gluon prefill kernel as a
module of ``graphfuse/triton/prefill`` (its relative imports resolve there), and refuses a
file without the kernel with a clear message; unknown call names or shape indices are refused
before anything runs. Skips without Triton's Gluon Hopper layer."""

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


@pytest.mark.parametrize("bad", [["--calls", "fp8_nope"], ["--shapes", "9"]])
def test_an_unknown_call_or_shape_is_refused(bad: list[str], capsys) -> None:
    from benchmarks.prefill_kernels_ab import main

    with pytest.raises(SystemExit) as exc:
        main(["other.py", *bad])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_calls_and_shapes_parse_before_the_device_check() -> None:
    import torch

    from benchmarks.prefill_kernels_ab import main

    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("an sm_90 GPU would run the benchmark")
    with pytest.raises(SystemExit, match="needs an sm_90 GPU"):
        main(["other.py", "--calls", "fp8_default", "bf16_in", "--shapes", "0", "2"])
