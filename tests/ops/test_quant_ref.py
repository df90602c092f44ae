"""The quantization references checked against docs/numerics.md independently of torch's casts.

Exhaustive over every e4m3 / e2m1 code and the midpoints between neighbours (ties to even);
scalar numpy-fp32 transcriptions of the spec for the four ops; the swizzle formula against
the reshape/permute in the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphfuse.ops.quant_ref import (
    e2m1_codes,
    e2m1_to_float,
    e4m3,
    fp8_dequant_ref,
    fp8_static_quant_ref,
    nvfp4_dequant_ref,
    nvfp4_quant_ref,
    swizzle_block_scales,
    unswizzle_block_scales,
)

F32 = np.float32


def e4m3_value(code: int) -> float:
    """Value of an e4m3fn byte from its bit fields (NaN for S.1111.111)."""
    s, e, m = code >> 7, (code >> 3) & 15, code & 7
    if e == 15 and m == 7:
        return float("nan")
    mag = m * 2.0**-9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -mag if s else mag


POS_CODES = list(range(0x7F))  # 0x00..0x7E, increasing values
POS_VALUES = [e4m3_value(c) for c in POS_CODES]
E2M1_MAGS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _e4m3_bytes(v: list[float]) -> list[int]:
    return e4m3(torch.tensor(v, dtype=torch.float32)).view(torch.uint8).tolist()


def test_e4m3_every_code_round_trips() -> None:
    codes = [c for c in range(256) if c & 0x7F != 0x7F]
    assert _e4m3_bytes([e4m3_value(c) for c in codes]) == codes
    table = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist()
    for c in range(256):
        assert (np.isnan(table[c]) and np.isnan(e4m3_value(c))) or table[c] == e4m3_value(c)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_e4m3_midpoints_tie_to_even(sign: float) -> None:
    mids, below, above, even = [], [], [], []
    for lo, hi in zip(POS_CODES[:-1], POS_CODES[1:]):
        mid = (POS_VALUES[lo] + POS_VALUES[hi]) / 2  # exact in fp32 (one more bit)
        assert float(F32(mid)) == mid
        mids.append(sign * mid)
        below.append(sign * float(np.nextafter(F32(mid), F32(0))))
        above.append(sign * float(np.nextafter(F32(mid), F32(np.inf))))
        even.append(lo if lo % 2 == 0 else hi)
    sbit = 0x80 if sign < 0 else 0
    assert _e4m3_bytes(mids) == [c | sbit for c in even]
    assert _e4m3_bytes(below) == [c | sbit for c in POS_CODES[:-1]]
    assert _e4m3_bytes(above) == [c | sbit for c in POS_CODES[1:]]


def test_e4m3_saturation_nan_zero_subnormal() -> None:
    big = [448.0, 449.0, 464.0, 465.0, 480.0, 1e30, float("inf")]
    assert _e4m3_bytes(big) == [0x7E] * len(big)
    assert _e4m3_bytes([-v for v in big]) == [0xFE] * len(big)
    assert _e4m3_bytes([0.0, -0.0, 2.0**-11, -(2.0**-11), 1e-45, -1e-45]) == [0, 0x80] * 3
    assert _e4m3_bytes([2.0**-9, -(2.0**-9), 3 * 2.0**-10, 7 * 2.0**-9]) == [1, 0x81, 2, 7]
    assert _e4m3_bytes([2.0**-10 * 1.0000001]) == [1]  # just above half the min subnormal
    assert all(b & 0x7F == 0x7F for b in _e4m3_bytes([float("nan"), -float("nan")]))


def test_e2m1_codes_exhaustive_with_midpoints() -> None:
    def expect(a: float) -> int:  # nearest magnitude, ties to the even code, saturating
        d = [abs(min(a, 6.0) - m) for m in E2M1_MAGS]
        best = min(d)
        cands = [i for i, x in enumerate(d) if x == best]
        return next((i for i in cands if i % 2 == 0), cands[0])

    vals = list(E2M1_MAGS)
    for lo, hi in zip(E2M1_MAGS[:-1], E2M1_MAGS[1:]):
        mid = (lo + hi) / 2
        vals += [mid, float(np.nextafter(F32(mid), F32(0))), float(np.nextafter(F32(mid), 9))]
    vals += [5.0, 5.0001, 7.0, 1e30]
    for sign, sbit in ((1.0, 0), (-1.0, 8)):
        got = e2m1_codes(torch.tensor([sign * v for v in vals])).tolist()
        assert got == [expect(v) | sbit for v in vals]
    assert e2m1_codes(torch.tensor([float("inf"), -float("inf"), -0.0])).tolist() == [7, 15, 8]
    codes = torch.arange(16, dtype=torch.uint8)
    assert e2m1_to_float(codes).tolist() == E2M1_MAGS + [-m for m in E2M1_MAGS]
    assert e2m1_codes(e2m1_to_float(codes)).tolist() == list(range(16))


def _np_e4m3(v: np.float32) -> int:
    """Scalar spec: nearest e4m3 by search over the value list, ties to even, saturating."""
    if np.isnan(v):
        return 0x7F
    sbit = 0x80 if np.signbit(v) else 0
    a = min(abs(float(v)), 448.0)
    d = [abs(a - x) for x in POS_VALUES]
    best = min(d)
    cands = [c for c, x in zip(POS_CODES, d) if x == best]
    return sbit | next((c for c in cands if c % 2 == 0), cands[0])


def test_fp8_static_quant_ref_matches_scalar_spec() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(600, generator=gen) * torch.logspace(-4, 4, 600)
    x[:6] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1e-40, -3e4])
    scale = torch.tensor(0.0371)
    inv = F32(1.0) / F32(0.0371)
    want = [_np_e4m3(F32(F32(v) * inv)) for v in x.tolist()]
    assert fp8_static_quant_ref(x, scale).view(torch.uint8).tolist() == want
    q = fp8_static_quant_ref(x, scale)
    deq = [float(F32(F32(e4m3_value(c)) * F32(0.0371))) for c in want]
    assert fp8_dequant_ref(q, scale, torch.float32).tolist() == deq


def _np_nvfp4_block(x: list[float], g: np.float32) -> tuple[int, list[int]]:
    xs = [F32(v) for v in x]
    amax = max(abs(v) for v in xs)
    sf = _np_e4m3(F32(g * F32(amax / F32(6.0))))
    sf_f = F32(e4m3_value(sf))
    inv = F32(0.0) if sf_f == 0 else F32(F32(1.0) / F32(sf_f / g))
    codes = []
    for v in xs:
        p = v if v == 0 else F32(v * inv)
        a = min(abs(float(p)), 6.0)  # saturating (inf too)
        c = min(range(8), key=lambda i: (abs(a - E2M1_MAGS[i]), i % 2))
        codes.append(c | (8 if np.signbit(p) else 0))
    return sf, codes


def test_nvfp4_ref_matches_scalar_spec() -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 64, generator=gen) * torch.logspace(-3, 3, 64)
    x[0, :16] = 0.0
    x[1, 16:20] = torch.tensor([float("inf"), -0.0, 2.0, -float("inf")])
    x[2, 32:48] = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 2)
    for g_val in (1.0, 37.5, 1e-6):
        g = torch.tensor(g_val)
        packed, sf = nvfp4_quant_ref(x, g, swizzle=False)
        for m in range(3):
            for b in range(4):
                want_sf, want_codes = _np_nvfp4_block(
                    x[m, 16 * b : 16 * b + 16].tolist(), F32(g_val)
                )
                assert sf[m, b].view(torch.uint8).item() == want_sf
                row = packed[m, 8 * b : 8 * b + 8].tolist()
                assert [c for byte in row for c in (byte & 15, byte >> 4)] == want_codes
        deq = nvfp4_dequant_ref(packed, sf, g, torch.float32, swizzled=False)
        sf_f = sf.float().repeat_interleave(16, 1)
        codes = torch.stack([packed & 15, packed >> 4], -1).reshape(3, 64)
        want = [F32(F32(float(e2m1_to_float(c)) * F32(s)) / F32(g_val))
                for c, s in zip(codes.flatten(), sf_f.flatten().tolist())]  # fmt: skip
        assert deq.flatten().tolist() == [float(v) for v in want]


def test_nvfp4_ref_nan_block_scale() -> None:
    x = torch.randn(2, 32)
    x[1, 20] = float("nan")
    _, sf = nvfp4_quant_ref(x, torch.tensor(3.0), swizzle=False)
    assert sf.view(torch.uint8)[1, 1].item() == 0x7F
    assert sf.view(torch.uint8)[0].ne(0x7F).all() and sf.view(torch.uint8)[1, 0] != 0x7F


def swizzle_by_formula(linear: torch.Tensor) -> torch.Tensor:
    """The docs/numerics.md offset formula, element by element."""
    m_rows, kb = linear.shape
    mp, kp = (m_rows + 127) // 128 * 128, (kb + 3) // 4 * 4
    n_ktiles = kp // 4
    out = torch.zeros(mp * kp, dtype=torch.uint8)
    src = linear.view(torch.uint8)
    for m in range(m_rows):
        for k in range(kb):
            off = ((m // 128) * n_ktiles + k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4
            out[off + k % 4] = src[m, k]
    return out.reshape(mp, kp)


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (128, 4), (130, 9), (257, 6)])
def test_swizzle_matches_formula_and_round_trips(shape: tuple[int, int]) -> None:
    gen = torch.Generator().manual_seed(3)
    linear = torch.randint(1, 256, shape, generator=gen, dtype=torch.uint8)
    linear = linear.view(torch.float8_e4m3fn)
    sw = swizzle_block_scales(linear)
    ref = swizzle_by_formula(linear)
    assert torch.equal(sw.view(torch.uint8), ref)
    assert int((sw.view(torch.uint8) != 0).sum()) == linear.numel()  # padding bytes are zero
    back = unswizzle_block_scales(sw, *shape)
    assert torch.equal(back.view(torch.uint8), linear.view(torch.uint8))
