"""Host-side launch arithmetic shared by the Triton launchers (``graphfuse/triton/host.py``).
Skips where Triton is not installed (the ``interpret`` extra)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from graphfuse.triton.host import sf_pad_programs  # noqa: E402


@pytest.mark.parametrize(
    "m, kb_pad, words, want",
    [
        (1, 256, 1024, 8),  # Hq * D = 4096: 64 column tiles x 128 words, 8 programs of 1024
        (8, 256, 2048, 4),
        (127, 896, 2048, 14),  # intermediate 14336
        (129, 4, 1024, 1),  # one column tile: 128 words
        (128, 256, 1024, 0),  # no padding rows
        (256, 896, 2048, 0),
    ],
)
def test_sf_pad_programs(m: int, kb_pad: int, words: int, want: int) -> None:
    assert sf_pad_programs(m, kb_pad, words) == want
