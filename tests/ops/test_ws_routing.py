"""Which prefill calls the warp-specialised Hopper kernel serves (host side, CPU tensors):
``prefill.config.rows_view`` must address every element of q / k / v exactly as the 2-D TMA
view the kernel reads, and ``ws_eligible`` must refuse what the kernel does not handle."""

from __future__ import annotations

import pytest
import torch

from graphfuse.triton.prefill.config import rows_view, ws_eligible

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn


def _bhsd(b, h, s, d, dtype=BF16):
    return torch.randn(b, h, s, d).to(dtype)


def _bshd(b, h, s, d, dtype=BF16):  # [B, S, H, D] memory, viewed [B, H, S, D]
    return torch.randn(b, s, h, d).to(dtype).transpose(1, 2)


def _check_view(x: torch.Tensor) -> None:
    view, rb, rh, ch = rows_view(x)
    b, h, s, d = x.shape
    for bi in range(b):
        for hi in range(h):
            r0 = bi * rb + hi * rh
            got = view[r0 : r0 + s, hi * ch : hi * ch + d]
            assert torch.equal(got, x[bi, hi]), (bi, hi)


@pytest.mark.parametrize("make", [_bhsd, _bshd])
@pytest.mark.parametrize("shape", [(2, 3, 128, 64), (1, 4, 256, 128), (3, 1, 128, 128)])
def test_rows_view_addresses_every_element(make, shape) -> None:
    _check_view(make(*shape))


def test_rows_view_of_slices_and_broadcasts() -> None:
    qkv = torch.randn(2, 128, 3 * 4 * 64).to(BF16)  # a fused projection [B, S, 3*H*D]
    for i in range(3):
        part = qkv[..., i * 256 : (i + 1) * 256].view(2, 128, 4, 64).transpose(1, 2)
        _check_view(part)  # the view ends at the slice's last element (no storage overrun)
    kv = torch.randn(2, 1, 128, 64).to(BF16).expand(2, 4, 128, 64)  # broadcast heads
    _check_view(kv)


def test_rows_view_refuses_what_tma_cannot_read() -> None:
    x = _bhsd(1, 2, 128, 64)
    assert rows_view(x.transpose(-1, -2).contiguous().transpose(-1, -2)) is None  # D strided
    odd = torch.randn(1, 2, 128, 65).to(BF16)[..., :64]  # rows of 130 bytes: not 16-aligned
    assert rows_view(odd) is None
    off = torch.randn(1 + 2 * 128 * 64).to(BF16)[1:].view(1, 2, 128, 64)  # base not aligned
    assert rows_view(off) is None


def _args(q, k=None, v=None, attn_mask=None, out_kind=1):
    k = q if k is None else k
    v = k if v is None else v
    wide = q.dtype if q.dtype != FP8 else torch.float16
    out = torch.empty(q.shape, dtype={0: wide, 1: FP8, 2: torch.uint8}[out_kind])
    return (q, k, v, attn_mask, out, out_kind)


def test_ws_eligible_accepts_16bit_and_fp8_prefill() -> None:
    for dtype in (BF16, torch.float16, FP8):
        q = _bhsd(1, 4, 256, 128, BF16).to(dtype)
        k = _bshd(1, 2, 384, 128, BF16).to(dtype)
        assert ws_eligible(*_args(q, k))
        assert ws_eligible(*_args(q, k, out_kind=0))
        assert ws_eligible(*_args(q, k, out_kind=2))  # NVFP4
    q8 = _bhsd(1, 4, 256, 128).to(FP8)
    v_kmajor = q8.transpose(-1, -2).contiguous().transpose(-1, -2)  # keys contiguous
    # the launcher upcasts V into rows, or in fast mode (FP8 P·V) copies it to K-major tiles
    # (fast_v_tiles): the rule is the same for both precisions
    assert ws_eligible(*_args(q8, q8, v_kmajor))


def test_wgmma_key_order_is_a_permutation_of_each_16_keys() -> None:
    """Fast mode's V^T key order (``config.wgmma_key_order``): thread ``t``'s accumulator
    columns ``2t, 2t + 1, 2t + 8, 2t + 9`` of each 16 land on the 4 consecutive keys
    ``4t .. 4t + 3`` that the FP8 wgmma A operand holds in one register."""
    from graphfuse.triton.prefill.config import wgmma_key_order

    for base in (0, 16, 4096):
        pos = [wgmma_key_order(base + i) - base for i in range(16)]
        assert sorted(pos) == list(range(16))
        for t in range(4):
            cols = (2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)
            assert [pos[c] for c in cols] == [4 * t, 4 * t + 1, 4 * t + 2, 4 * t + 3]


@pytest.mark.parametrize(
    "case",
    ["mixed_fp8", "mask", "d80", "sq", "skv", "mixed", "out8_as_wide"],
)
def test_ws_eligible_refuses(case: str) -> None:
    q = _bhsd(1, 4, 256, 128)
    args = _args(q)
    if case == "mixed_fp8":
        args = _args(q.to(FP8), q.to(FP8), q)
    elif case == "mask":
        args = _args(q, attn_mask=torch.ones(256, 256, dtype=torch.bool))
    elif case == "d80":
        args = _args(_bhsd(1, 4, 256, 80))
    elif case == "sq":
        args = _args(_bhsd(1, 4, 200, 128), _bhsd(1, 4, 256, 128))
    elif case == "skv":
        args = _args(q, _bhsd(1, 4, 130, 128))
    elif case == "mixed":
        args = _args(q, q.half())
    elif case == "out8_as_wide":  # a wide output must be a 16/32-bit float tensor
        q_, k_, v_, m_, out8, _ = _args(q)
        args = (q_, k_, v_, m_, out8, 0)
    assert not ws_eligible(*args)
