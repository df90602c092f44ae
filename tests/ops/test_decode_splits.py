"""The decode launch's split count and configuration row from shapes only
(``graphfuse/triton/decode/config.py``, host side, no Triton). Splits: at most four programs an
SM, rounded down; at least 4 key tiles a split (one tile a split below 32 (sequence, KV head)
pairs); at most 64."""

from __future__ import annotations

import pytest

from graphfuse.triton.decode.config import choose_splits, decode_config


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


@pytest.mark.parametrize(
    "b, hkv, ctx, kv_bytes, want",
    [
        # FP8 KV from 768 (sequence, KV head) pairs: one warp on 32-token tiles
        (128, 8, 1024, 1, {"num_warps": 1, "block_n": 32, "pdl": True}),
        (96, 8, 1536, 1, {"num_warps": 1, "block_n": 32}),
        # below 768 pairs, or a 16-bit cache: the 4-warp rows
        (64, 8, 1024, 1, {"num_warps": 4, "block_n": 64}),
        (128, 8, 1024, 2, {"num_warps": 4, "block_n": 64}),
        # long contexts, FP8 KV, from 512 pairs: two warps on 64-token tiles, one split
        (64, 8, 4096, 1, {"block_n": 64, "num_warps": 2, "splits": 1, "pdl": False}),
        (128, 8, 2048, 1, {"block_n": 64, "num_warps": 2, "splits": 1}),
        # long contexts on a full grid below 512 pairs: one split, wide FP8 tiles
        (32, 8, 4096, 1, {"block_n": 128, "num_warps": 4, "splits": 1, "pdl": False}),
        # long contexts, 16-bit KV: 64-token tiles in two stages
        (64, 8, 4096, 2, {"block_n": 64, "num_warps": 4, "num_stages": 2}),
        # B ~ 8 and B = 1 at short contexts: dependent launches; B = 1 from 2048 tokens: none
        (8, 8, 1024, 1, {"num_warps": 4, "pdl": True}),
        (1, 8, 1024, 1, {"num_warps": 8, "pdl": True}),
        (1, 8, 4096, 1, {"num_warps": 8, "pdl": False}),
    ],
)
def test_decode_config_rows(b: int, hkv: int, ctx: int, kv_bytes: int, want: dict) -> None:
    """The configuration table's row for a shape class (the first matching row wins)."""
    cfg = decode_config(True, b, hkv, ctx, kv_bytes=kv_bytes)
    assert {k: cfg[k] for k in want} == want


def test_config_ab_cases_name_the_table_rows() -> None:
    """``benchmarks/decode_config_ab``'s long-context A/B times the table's FP8 row for B=64
    ctx 4096 (its ``tiles64_warps2``) against the row it replaced (``tiles128_warps4``, the
    table's row for fewer pairs); its arguments parse or fail with a one-line error."""
    pytest.importorskip("triton")
    ab = pytest.importorskip("benchmarks.decode_config_ab")

    assert decode_config(True, 64, 8, 4096) == ab.ROW_64
    assert decode_config(True, 32, 8, 4096) == ab.ROW_128
    assert ab.parse_shape("128,40,8,1024") == (128, 40, 8, 1024)
    assert ab.parse_config('s2={"splits": 2}') == ("s2", {"splits": 2})
    for bad in ('x={"tile": 16}', "x=[1]", "noequals", 'x={"splits": 2'):
        with pytest.raises(SystemExit, match="--config"):
            ab.parse_config(bad)
    with pytest.raises(SystemExit, match="--shape"):
        ab.parse_shape("64,32,7,4096")
