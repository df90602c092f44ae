"""The Triton norm / activation + quant kernels under the Triton CPU interpreter, against
graphfuse/ops/norm_act_ref.py (small seeded cases, poisoned outputs; see
``tests/triton_kernels/_norm_act_cases.py``). Skips where Triton is not installed (the
``interpret`` extra)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from ._runner import interpret, run_seed  # noqa: E402

N = 10  # cases per op family


@pytest.mark.parametrize("seed", [run_seed()])
def test_norm_act_kernels_interpreted(seed: int) -> None:
    records = interpret("tests.triton_kernels._norm_act_cases", "--device", "cpu", "--small",
                        "--n", str(N), "--seed", str(seed), timeout=900)  # fmt: skip
    assert records[-1]["summary"]["cases"] == 4 + 4 + 2 + 3 + 2 * N + 6
