"""Runs every Triton kernel once on small shapes, for ``compute-sanitizer`` (not a test).

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
        python tests/gpu/sanitize_kernels.py

``python tests/gpu/sanitize_kernels.py ws`` runs only the warp-specialised kernel (for the
slower ``racecheck`` / ``synccheck`` tools); ``... scaffold VARIANT`` only a minimal Gluon kernel
whose partitions share no memory of their own (``_scaffold``): to tell what ``racecheck``
reports about ``warp_specialize``'s own hand-over of arguments and state (docs/gpu.md).
"""

from __future__ import annotations

import sys

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
    from graphfuse.triton.decode.paged import paged_into

    o = torch.empty(3, 8, 128, device=dev, dtype=FP8)
    for cfg in (
        {"splits": 1}, {"splits": 5}, {"splits": 5, "prefetch": True}, {"splits": 1, "pdl": True},
        {"splits": 5, "pdl": True},
    ):  # fmt: skip
        paged_into(*pa, o, 1, s, config=cfg)
    from graphfuse.ops._checks import nvfp4_shapes

    pshape, sshape = nvfp4_shapes(3, 8 * 128)
    pk = torch.empty(pshape, device=dev, dtype=torch.uint8)
    sf = torch.empty(sshape, device=dev, dtype=FP8)
    for splits in (1, 5):
        for prefetch in (False, True):
            paged_into(*pa, pk, 2, s * 1e4, sf, config={"splits": splits, "prefetch": prefetch})
    # one sequence of 1050 tokens in 17 splits of 64: the merge's 4-warp launch
    cache = (torch.randn(70, 2, 16, 2, 128, device=dev) * 64).to(FP8)
    tables = torch.randperm(70, device=dev)[:66].view(1, 66).to(torch.int32)
    lens = torch.tensor([1050], device=dev, dtype=torch.int32)
    pl = (qd[:1], cache, tables, lens, None, sc, sc, None)
    cfg = {"splits": 17, "block_n": 64}
    paged_into(*pl, o[:1], 1, s, config=cfg)
    pshape, sshape = nvfp4_shapes(1, 8 * 128)
    pk = torch.empty(pshape, device=dev, dtype=torch.uint8)
    sf = torch.empty(sshape, device=dev, dtype=FP8)
    paged_into(*pl, pk, 2, s * 1e4, sf, config=cfg)
    _norm_act(s)
    if torch.cuda.get_device_capability() == (9, 0):
        _warp_specialised(s)
    torch.cuda.synchronize()
    print("sanitize_kernels: all kernels ran")


def _norm_act(s: torch.Tensor) -> None:
    """The six norm / act + quant ops at 1, 130, 300 and 2700 rows (NVFP4's swizzled 128-row
    padding zeroed by the padding programs; rows fitting one wave and more, and more than four
    rows a program of the NVFP4 RMSNorm's looping launch), a hidden size that is not a power
    of two, merged gate / up halves read through their strides; NVFP4 RMSNorm rows split over
    several programs."""
    ops, dev = torch.ops.graphfuse, "cuda"
    for rows in (1, 130, 300, 2700):
        x = torch.randn(rows, 80, device=dev, dtype=torch.bfloat16)
        res = torch.randn(rows, 80, device=dev, dtype=torch.bfloat16)
        w = torch.rand(80, device=dev, dtype=torch.bfloat16) + 0.5
        gate, up = torch.randn(rows, 2 * 1040, device=dev, dtype=torch.bfloat16).chunk(2, dim=-1)
        ops.rms_norm_quant_fp8(x, w, 1e-6, s)
        ops.add_rms_norm_quant_fp8(x, res, w, 1e-6, s)
        ops.rms_norm_quant_nvfp4(x, w, 1e-6, s * 1e4)
        ops.add_rms_norm_quant_nvfp4(x, res, w, 1e-6, s * 1e4)
        ops.act_and_mul_quant_fp8(gate, up, s)
        ops.act_and_mul_quant_nvfp4(gate, up, s * 1e4, "gelu_tanh")
    for rows in (1, 3):  # few rows of hidden 1040: each row split over 4 programs
        x = torch.randn(rows, 1040, device=dev, dtype=torch.bfloat16)
        w = torch.rand(1040, device=dev, dtype=torch.bfloat16) + 0.5
        ops.rms_norm_quant_nvfp4(x, w, 1e-6, s * 1e4)
        ops.add_rms_norm_quant_nvfp4(x, x.flip(0), w, 1e-6, s * 1e4)


def _warp_specialised(s: torch.Tensor) -> None:
    """The warp-specialised Hopper prefill kernel (``prefill/gluon_kernel.py``): both memory
    orders, GQA, K and V in different memory orders (V also K-major), every causal form,
    16-bit, FP8 and NVFP4 out, FP8 inputs in both precisions, more row blocks than SMs; each
    call counted."""
    from graphfuse.triton.ops import attention_run as run
    from graphfuse.triton.prefill import launch

    calls = []
    real = launch.gluon_attention_into
    launch.gluon_attention_into = lambda *a, **k: calls.append(1) or real(*a, **k)
    dev = "cuda"

    def make(h, sq, d, dt, mem):
        shape = {"bshd": (2, sq, h, d), "bhds": (2, h, d, sq)}.get(mem, (2, h, sq, d))
        x = (torch.randn(shape, device=dev) * 8).to(dt)
        if mem == "bhsd":
            return x
        return x.transpose(1, 2) if mem == "bshd" else x.transpose(2, 3)

    n = 0
    for d, mems, dt, causal, hq, sq, prec in (
        (128, ("bhsd", "bhsd", "bhsd"), torch.bfloat16, "top_left", 8, 256, "default"),
        (64, ("bshd", "bshd", "bshd"), torch.float16, "bottom_right", 8, 256, "default"),
        (128, ("bhsd", "bhsd", "bshd"), torch.bfloat16, "none", 8, 256, "default"),
        (128, ("bshd", "bhsd", "bhsd"), FP8, "top_left", 8, 256, "default"),
        (64, ("bshd", "bhsd", "bshd"), FP8, "top_left", 8, 256, "fast"),
        # V K-major: upcast into contiguous rows (quant.launch.fp8_upcast)
        (128, ("bhsd", "bhsd", "bhds"), FP8, "top_left", 8, 256, "default"),
        # 512 row blocks: several a persistent program, some with no key tile
        (128, ("bhsd", "bhsd", "bhsd"), FP8, "bottom_right", 32, 1024, "default"),
        (128, ("bhsd", "bhsd", "bhsd"), FP8, "bottom_right", 32, 1024, "fast"),
    ):
        q = make(hq, sq, d, dt, mems[0])
        k, v = make(2, 384, d, dt, mems[1]), make(2, 384, d, dt, mems[2])
        sc = torch.tensor([1 / 8], device=dev) if dt == FP8 else None
        a = (q, k, v, sc, sc, sc, None, causal, None, "bhsd", prec)
        o16 = torch.empty(q.shape, device=dev, dtype=torch.bfloat16)
        run(*a, o16, 0)
        o8 = torch.empty(q.shape, device=dev, dtype=FP8)
        run(*a, o8, 1, s)
        torch.ops.graphfuse.attention_nvfp4(*a, s * 1e4)
        n += 3
    launch.gluon_attention_into = real
    assert len(calls) == n, (len(calls), n)


def _scaffold(variant: str) -> None:
    """Minimal Gluon kernels with the warp-specialised kernel's partition shapes (a default
    warpgroup, a worker warpgroup and a worker warp; 240 / 24 registers), each partition
    storing one value. Variant ``plain``: nothing else; ``many``: as many arguments handed
    to the partitions as the real kernel; ``mbarrier``: the partitions also meet at an
    mbarrier initialised before ``warp_specialize`` (the real kernel's setup); ``bar0``: the
    default partition also runs a warpgroup barrier."""
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

    @gluon.jit
    def part(out_ptr, i):
        gl.store(out_ptr + i, i + 1)

    @gluon.jit
    def part_bar0(out_ptr, i):
        gl.thread_barrier()
        gl.store(out_ptr + i, i + 1)

    @gluon.jit
    def part_wait(out_ptr, i, bar):
        mbarrier.wait(bar, 0)
        gl.store(out_ptr + i, i + 1)

    @gluon.jit
    def part_arrive(out_ptr, i, bar):
        gl.store(out_ptr + i, i + 1)
        mbarrier.arrive(bar, count=1)

    @gluon.jit
    def many(out_ptr, i, a, b, c, d, e, f, g, h, j, k, l, m, n, o, p):  # noqa: E741
        gl.store(out_ptr + i, i + 1 + (a + b + c + d + e + f + g + h + j + k + l + m + n + o + p))

    @gluon.jit
    def kernel(out_ptr):
        gl.warp_specialize(
            [(part, (out_ptr, 0)), (part, (out_ptr, 1)), (part, (out_ptr, 2))], [4, 1], [240, 24]
        )

    @gluon.jit
    def kernel_bar0(out_ptr):
        gl.warp_specialize(
            [(part_bar0, (out_ptr, 0)), (part, (out_ptr, 1)), (part, (out_ptr, 2))],
            [4, 1],
            [240, 24],
        )

    @gluon.jit
    def kernel_mbarrier(out_ptr):
        bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(bar, count=1)
        fence_async_shared()
        gl.warp_specialize(
            [
                (part_wait, (out_ptr, 0, bar)),
                (part_arrive, (out_ptr, 1, bar)),
                (part, (out_ptr, 2)),
            ],
            [4, 1],
            [240, 24],
        )

    @gluon.jit
    def kernel_many(out_ptr, x):
        xs = (x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7, x + 8, x + 9, x + 10, x + 11)
        xs = xs + (x + 12, x + 13, x + 14)
        gl.warp_specialize(
            [(many, (out_ptr, 0) + xs), (many, (out_ptr, 1) + xs), (many, (out_ptr, 2) + xs)],
            [4, 1],
            [240, 24],
        )

    out = torch.zeros(3, dtype=torch.int32, device="cuda")
    if variant == "many":
        kernel_many[(132,)](out, 0, num_warps=4, maxnreg=168)
        want = [106, 107, 108]  # i + 1 + (0 + 1 + ... + 14)
    else:
        fn = {"plain": kernel, "bar0": kernel_bar0, "mbarrier": kernel_mbarrier}[variant]
        fn[(132,)](out, num_warps=4, maxnreg=168)
        want = [1, 2, 3]
    torch.cuda.synchronize()
    assert out.tolist() == want, (variant, out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["scaffold"]:
        _scaffold(sys.argv[2])
        print("sanitize_kernels: the minimal warp-specialised kernel ran")
    elif sys.argv[1:] == ["ws"]:
        _warp_specialised(torch.tensor([0.01], device="cuda"))
        torch.cuda.synchronize()
        print("sanitize_kernels: the warp-specialised kernel ran")
    else:
        main()
