"""The one vector e4m3 decoder of the CPU kernels (quant_simd.h e4m3_decode8/16, also used by the
attention kernel for FP8 K/V) against torch's float8_e4m3fn -> float32, every code, bit for bit:
signed zero, subnormals, NaN codes (0x7F / 0xFF) NaN with the code's sign."""

from __future__ import annotations

import pytest
import torch

import graphfuse

pytestmark = pytest.mark.skipif(
    not graphfuse.ops.native_available(), reason="graphfuse native module not built"
)


@pytest.mark.parametrize("offset", [0, 1, 8])  # aligned (streaming stores) and unaligned output
def test_fp8_dequant_every_code_bit_exact(offset: int) -> None:
    codes = torch.arange(256, dtype=torch.uint8).repeat(3)[offset : offset + 512]
    got = torch.ops.graphfuse.fp8_dequant(
        codes.view(torch.float8_e4m3fn), torch.tensor(1.0), torch.float32
    )
    want = codes.view(torch.float8_e4m3fn).float()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))
    assert torch.equal(got[nan].view(torch.int32) < 0, codes[nan] >= 0x80)
