"""NVFP4 quant kernel cases at extreme global scales against ``graphfuse/ops/quant_ref.py``,
byte for byte (the quant op is bit-exact), and the FP8 upcast of every byte, for the Triton
CPU interpreter run in ``test_quant_interpret.py`` (``python -m tests.triton_kernels._quant_cases``
with ``TRITON_INTERPRET=1``).

The rows hold zeros of both signs, subnormals and a block of tiny values (amax ``2**-126``):
with ``g = 2**120`` that block's scale is the smallest e4m3 value ``2**-9`` and its encode
multiplier ``1 / (2**-9 / g)`` overflows, as it does for every nonzero block at ``g = inf``.
"""

from __future__ import annotations

import json
import sys

import torch

from graphfuse.ops.quant_ref import nvfp4_quant_ref, nvfp4_scale_shape

G_VALUES = (float("inf"), 2.0**120, 2.0**117, 3e38, 1.0, 1e-30, 0.0)


def rows() -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    e = torch.randint(-30, 30, (4, 64), generator=gen).float()
    x = torch.randn(4, 64, generator=gen) * torch.exp2(e)
    x[0, :16] = 0.0
    x[0, 3] = -0.0
    x[1, 16:32] = 1e-40
    x[1, 20] = -0.0
    x[2, 5] = -1e-45
    x[3, :16] = torch.linspace(0.5, 1.0, 16) * 2.0**-126 * torch.tensor([1.0, -1.0]).repeat(8)
    return x.bfloat16().float()  # values every input dtype holds exactly


def run_all() -> list[dict]:
    from graphfuse.triton.quant.launch import nvfp4_quant_into

    records = []
    x = rows()
    for dt in (torch.float32, torch.bfloat16):
        for g in G_VALUES:
            for swizzle in (True, False):
                gt = torch.tensor(g)
                want_p, want_s = nvfp4_quant_ref(x.to(dt), gt, swizzle)
                packed = torch.full((4, 32), 0xA5, dtype=torch.uint8)
                sf = torch.full(nvfp4_scale_shape(4, 64, swizzle), 0x11, dtype=torch.uint8)
                nvfp4_quant_into(x.to(dt), gt, packed, sf.view(torch.float8_e4m3fn), swizzle)
                bad = int((packed != want_p).sum()) + int((sf != want_s.view(torch.uint8)).sum())
                record = {"dtype": str(dt), "g": g, "swizzle": swizzle, "bad_bytes": bad}
                if bad:
                    record["error"] = f"{bad} bytes differ from quant_ref"
                records.append(record)
    return records


def upcast_records() -> list[dict]:
    """``fp8_upcast`` of every e4m3 byte, bit for bit against PyTorch's conversion (NaN bytes
    to NaN), to float16 and bfloat16: a ``[2, 4, 32]`` tensor contiguous and as a permuted
    view (whose strides the output keeps), that view with ``contiguous=True``, a K-major
    ``[2, 3, 70, 72]`` V (unit stride along the sequence; 70 x 72 leaves partial 64 x 64
    tiles) and a strided slice (not dense); the last three come back contiguous."""
    from graphfuse.triton.quant.launch import fp8_upcast

    x = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).view(2, 4, 32)
    big = torch.arange(2 * 3 * 72 * 70, dtype=torch.int64).remainder(256).to(torch.uint8)
    big = big.view(torch.float8_e4m3fn).view(2, 3, 72, 70)
    views = {
        "contiguous": (x, False),
        "permuted": (x.permute(0, 2, 1), False),
        "permuted, contiguous=True": (x.permute(0, 2, 1), True),
        "K-major V": (big.transpose(2, 3), True),
        "strided slice": (big[:, :, ::2, 1:], False),
    }
    records = []
    for view, (xv, contiguous) in views.items():
        keeps = view in ("contiguous", "permuted")
        for dt in (torch.float16, torch.bfloat16):
            got, want = fp8_upcast(xv, dt, contiguous=contiguous), xv.to(dt)
            same = (got == want) | (got.isnan() & want.isnan())
            layout_ok = got.stride() == xv.stride() if keeps else got.is_contiguous()
            bad = int((~same).sum()) + int(not layout_ok)
            record = {"op": "fp8_upcast", "dtype": str(dt), "view": view, "bad_bytes": bad}
            if bad:
                record["error"] = f"{bad} values (or the layout) differ from torch's conversion"
            records.append(record)
    return records


def main() -> int:
    from ._interpreter import patch

    patch()
    records = run_all() + upcast_records()
    for r in records:
        print(json.dumps(r))
    failed = sum(r["bad_bytes"] > 0 for r in records)
    print(json.dumps({"summary": {"cases": len(records), "failed": failed}}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
