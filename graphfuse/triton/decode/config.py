"""The decode kernel's launch configuration per shape class, as data (no Triton import).

One kernel design ships (``kernels.py``); what varies with the shape is the tile (``block_n``
tokens), ``num_warps`` / ``num_stages``, the split count, whether the next KV tile is double-
buffered in registers (``prefetch``) instead of left to Triton's pipeliner, whether block-table
entries are read one tile ahead (``bt_ahead``, paged KV), the grid order (``head_major``:
``(Hkv, B, splits)``) and whether the decode kernel and the split merge are programmatic
dependent launches (``pdl``, sm_90 and later; ``kernels.py``). The rows are the winners of the
decode sweeps that docs/gpu.md records: the class of a launch is its KV kind (paged or dense,
and the element size), its program count ``B * Hkv`` and its context length. Split counts and
tiles depend on shapes only (no host sync), so every launch is CUDA-graph capturable.
"""

from __future__ import annotations

import math

KNOBS = (
    "block_n", "num_warps", "num_stages", "splits", "prefetch", "bt_ahead", "head_major", "pdl",
)  # fmt: skip

# (paged, KV element bytes (0: any), least B*Hkv, least max context) -> KNOBS (splits None:
# ``choose_splits``); the first matching row wins
CLASSES = (
    # paged, 16-bit KV, long contexts on a full grid: 64-token tiles in two stages (38 KB of
    # shared memory, 5 programs an SM, against 1 with the 128-token tiles below)
    (True, 2, 256, 2048, (64, 4, 2, 1, False, True, False, False)),
    # paged, FP8 KV, at least 512 (sequence, KV head) pairs, long contexts (B=64 ctx 4096):
    # two warps a program on 64-token tiles in three stages, one split, head-major (196
    # registers, 54 KB of shared memory: 4 programs an SM)
    (True, 1, 512, 2048, (64, 2, 3, 1, False, True, True, False)),
    # paged: long contexts on a full grid: wide tiles, one split, a sequence's KV heads
    # side by side
    (True, 0, 256, 2048, (128, 4, 3, 1, False, True, True, False)),
    # paged, FP8 KV, at least 768 (sequence, KV head) pairs, short contexts (B=128 ctx 1k):
    # one warp a program on 32-token tiles, three stages, head-major (168 registers, 20 KB:
    # 10 programs an SM; at 512 pairs, B=64, the 4-warp row below is faster)
    (True, 1, 768, 0, (32, 1, 3, None, False, False, True, True)),
    # paged, full grid, short contexts (B=128 ctx 1k): 64-token tiles, two stages, head-major
    (True, 0, 512, 0, (64, 4, 2, None, False, False, True, True)),
    (True, 0, 256, 0, (64, 4, 3, None, False, False, False, True)),
    # paged, B ~ 8: table one tile ahead, a sequence's KV heads side by side
    (True, 0, 9, 0, (64, 4, 3, None, False, True, True, True)),
    # paged, B = 1: 8 warps, no pipelining; from 2048 tokens (32 splits and more) the
    # dependent launches measured slower
    (True, 0, 0, 2048, (64, 8, 1, None, False, True, False, False)),
    (True, 0, 0, 0, (64, 8, 1, None, False, True, False, True)),
    # dense KV (the attention ops with Sq = 1; the dependent launch not timed here)
    (False, 0, 512, 0, (128, 4, 3, None, False, False, False, False)),
    (False, 0, 32, 0, (64, 4, 3, None, False, False, False, False)),
    (False, 0, 0, 0, (64, 4, 1, None, True, False, False, False)),
)


def decode_config(
    paged: bool, b: int, hkv: int, max_ctx: int, config: dict | None = None, kv_bytes: int = 1
) -> dict:
    """The launch knobs (``KNOBS``) of a decode shape with a KV cache of ``kv_bytes``-byte
    elements (1: FP8, 2: bf16 / fp16); ``config`` entries override them (tests and benchmark
    sweeps; unknown keys raise ValueError).

    Example:
        >>> decode_config(True, 64, 8, 4096)["num_warps"]
        2
        >>> decode_config(True, 32, 8, 4096)["block_n"]
        128
    """
    knobs = next(
        k
        for p, kv, progs, ctx, k in CLASSES
        if p == paged and kv in (0, kv_bytes) and b * hkv >= progs and max_ctx >= ctx
    )
    cfg = dict(zip(KNOBS, knobs))
    unknown = set(config or ()) - set(KNOBS)
    if unknown:
        raise ValueError(f"unknown decode config keys {sorted(unknown)}: knobs are {KNOBS}")
    cfg.update(config or {})
    return cfg


def choose_splits(b: int, hkv: int, max_ctx: int, sms: int, block_n: int) -> int:
    """Split count from shapes only: at most four programs per SM (rounded down: one more
    split, and a fifth program on some SMs, was slower in 4 of the 6 shapes where the two
    differ, docs/gpu.md), at least 4 tiles a split (1 when there are fewer than 32
    (sequence, KV head) pairs: latency-bound), at most 64."""
    progs = max(1, b * hkv)
    want = max(1, 4 * sms // progs)
    cap = max(1, math.ceil(max_ctx / ((1 if progs < 32 else 4) * block_n)))
    return min(want, cap, 64)
