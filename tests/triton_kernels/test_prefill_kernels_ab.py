"""``benchmarks.prefill_kernels_ab`` loads another version of the Gluon prefill kernel as a
module of ``graphfuse/triton/prefill`` (its relative imports resolve there), or this tree's
with a unified diff applied exactly where its hunks say, and refuses a file without the kernel
or a diff that does not apply with a clear message; unknown call names or shape indices are
refused before anything runs. Skips without Triton's Gluon Hopper layer."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")

from benchmarks.prefill_kernels_ab import apply_diff, load_version  # noqa: E402
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


def _diff(old: str, new: str, context: int = 3) -> str:
    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), "a/k.py", "b/k.py",
        n=context,
    ))  # fmt: skip


@pytest.mark.parametrize("context", [0, 1, 3])
def test_a_diff_applies_to_exactly_the_changed_text(context: int) -> None:
    old = "".join(f"line {i}\n" for i in range(40)) + "\n" + "last\n"
    new = old.replace("line 0\n", "first\nline 0\n").replace("line 17\n", "")
    new = new.replace("line 30\n", "line thirty\n\n") + "after\n"
    assert apply_diff(old, _diff(old, new, context)) == new
    assert apply_diff(old, "") == old


def test_a_diff_that_does_not_fit_is_refused() -> None:
    old = "".join(f"line {i}\n" for i in range(20))
    diff = _diff(old, old.replace("line 9\n", "nine\n"))
    with pytest.raises(ValueError, match="line 10 is not the diff's 'line 9'"):
        apply_diff(old.replace("line 9\n", "line 9 moved\n"), diff)
    with pytest.raises(ValueError, match="ends early"):
        apply_diff(old, diff.rsplit("\n", 3)[0])
    two = _diff(old, old.replace("line 2\n", "two\n").replace("line 15\n", "fifteen\n"), 1)
    first, second = two.split("@@ -15")
    with pytest.raises(ValueError, match="hunk at line 2 overlaps the one before"):
        apply_diff(old, "@@ -15" + second + first.split("\n", 2)[2])  # hunks out of order
    with pytest.raises(ValueError, match="has a line '\\*line 9'"):
        apply_diff(old, diff.replace("-line 9", "*line 9"))


def test_loads_the_kernel_with_a_diff_applied(tmp_path: Path) -> None:
    source = Path(gluon_kernel.__file__).read_text()
    diff = tmp_path / "other.diff"
    diff.write_text(_diff(source, source.replace("MAXNREG = ", "OTHER = 2\nMAXNREG = ", 1)))
    module = load_version(str(diff), 92)
    try:
        assert module.OTHER == 2 and module.__file__.endswith("other.py")
        assert module.ws_attention_kernel is not gluon_kernel.ws_attention_kernel
    finally:
        sys.modules.pop(module.__name__)
    diff.write_text(_diff(source + "x\n", source + "y\n"))  # a line the kernel does not have
    with pytest.raises(SystemExit, match="other.diff does not apply: line"):
        load_version(str(diff), 93)


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
