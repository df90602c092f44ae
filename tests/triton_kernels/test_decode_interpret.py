"""The Triton paged decode kernel under the Triton CPU interpreter, against
``graphfuse/ops/paged_ref.py`` (see ``tests/triton_kernels/_decode_cases.py``). Skips where
Triton is not installed (the ``interpret`` extra)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from ._runner import interpret, run_seed  # noqa: E402


@pytest.mark.parametrize("seed", [run_seed()])
def test_paged_decode_interpreted(seed: int) -> None:
    records = interpret("tests.triton_kernels._decode_cases", "--seed", str(seed), "--n", "4")
    assert records[-1]["summary"]["cases"] == 4
