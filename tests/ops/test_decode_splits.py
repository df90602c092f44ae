"""The decode launch's split count from shapes only (``graphfuse/triton/decode/config.py``,
host side, no Triton): at most four programs an SM, rounded down; at least 4 key tiles a
split (one tile a split below 32 (sequence, KV head) pairs); at most 64."""

from __future__ import annotations

import pytest

from graphfuse.triton.decode.config import choose_splits


@pytest.mark.parametrize(
    "b, hkv, ctx, block_n, want",
    [
        (16, 8, 2048, 64, 4),  # 528 // 128 = 4 (rounded up it was 5, slower on an H100)
        (48, 8, 512, 64, 1),  # 528 // 384 = 1
        (12, 8, 2048, 64, 5),  # 528 // 96 = 5
        (8, 8, 1024, 64, 4),  # 528 // 64 = 8, capped: 1024 keys / (4 tiles of 64) = 4
        (1, 8, 1024, 64, 16),  # 8 pairs: latency-bound, one tile a split, 16 tiles
        (1, 8, 65536, 64, 64),  # at most 64
        (128, 8, 1024, 64, 1),  # more programs than 4 an SM
    ],
)
def test_choose_splits(b: int, hkv: int, ctx: int, block_n: int, want: int) -> None:
    assert choose_splits(b, hkv, ctx, 132, block_n) == want
