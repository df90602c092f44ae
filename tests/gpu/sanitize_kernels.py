"""Runs every Triton kernel once on small shapes, for ``compute-sanitizer`` (not a test).

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
        python tests/gpu/sanitize_kernels.py
"""

from __future__ import annotations

import torch

import graphfuse  # noqa: F401
import graphfuse.triton  # noqa: F401  (CUDA impls; until graphfuse/__init__ imports it)

FP8 = torch.float8_e4m3fn


def main() -> None:
    ops = torch.ops.graphfuse
    dev = "cuda"
    x = torch.randn(130, 80, device=dev, dtype=torch.bfloat16)
    s = torch.tensor([0.01], device=dev)
    q8 = ops.fp8_static_quant(x, s)
    ops.fp8_dequant(q8, s, torch.float32)
    for sw in (True, False):
        p, sf = ops.nvfp4_quant(x, s * 1e4, sw)
        ops.nvfp4_dequant(p, sf, s * 1e4, torch.bfloat16, sw)
    q = (torch.randn(2, 8, 77, 128, device=dev) * 64).to(FP8)
    k = (torch.randn(2, 2, 100, 128, device=dev) * 64).to(FP8)
    v = (torch.randn(2, 2, 100, 128, device=dev) * 64).to(FP8)
    sc = torch.tensor([1 / 64], device=dev)
    mask = torch.rand(2, 1, 77, 100, device=dev) > 0.5
    for causal, m, prec in (
        ("top_left", None, "default"),
        ("none", mask, "fast"),
        ("bottom_right", None, "fast"),
    ):
        a = (q, k, v, sc, sc, sc, m, causal, None, "bs(hd)", prec)
        ops.attention(*a, torch.bfloat16)
        ops.attention_fp8(*a, s)
        ops.attention_nvfp4(*a, s * 1e4)
    a = (q[:, :, :1], k, v, sc, sc, sc, None, "bottom_right", None, "bhsd", "default")
    ops.attention_fp8(*a, s)
    cache = (torch.randn(40, 2, 16, 2, 128, device=dev) * 64).to(FP8)
    tables = torch.randperm(40, device=dev)[:36].view(3, 12).to(torch.int32)
    lens = torch.tensor([192, 0, 77], device=dev, dtype=torch.int32)
    qd = torch.randn(3, 8, 128, device=dev, dtype=torch.bfloat16)
    pa = (qd, cache, tables, lens, None, sc, sc, None)
    ops.paged_decode_attention(*pa, torch.bfloat16)
    ops.paged_decode_attention_fp8(*pa, s)
    ops.paged_decode_attention_nvfp4(*pa, s * 1e4)
    from graphfuse.triton.paged import paged_into

    o = torch.empty(3, 8, 128, device=dev, dtype=FP8)
    paged_into(*pa, o, 1, s, splits=1)
    paged_into(*pa, o, 1, s, splits=5)
    from graphfuse.ops._fake_paged import nvfp4_out_shapes

    pshape, sshape = nvfp4_out_shapes(3, 8, 128)
    pk = torch.empty(pshape, device=dev, dtype=torch.uint8)
    sf = torch.empty(sshape, device=dev, dtype=FP8)
    for kernel in ("head", "seq"):
        for splits in (1, 5):
            paged_into(*pa, pk, 2, s * 1e4, sf, splits=splits, kernel=kernel)
    torch.cuda.synchronize()
    print("sanitize_kernels: all kernels ran")


if __name__ == "__main__":
    main()
