"""Experiment for the bf16 prefill gap (issue #8): a warp-specialised causal attention in
Gluon (Triton 3.6's explicit layer), B=4 S=4096 32/8 heads D=128 on an H200.

Why: ``prefill_minimal.py`` showed a minimal plain-Triton kernel runs exactly as fast as the
fused one (0.84x cuDNN SDPA); in both, every key tile ends in CTA-wide barriers, so the two
warpgroups of a CTA run their softmax at the same time and the tensor cores idle meanwhile.
Here the roles are split as FlashAttention-3 does:

- a producer warp loads K / V tiles with TMA into a ring of ``STAGES`` buffers (mbarriers
  "ready" with the byte count, "empty" released by both consumers);
- two consumer warpgroups, each owning 64 of the CTA's 128 query rows, run ``S = Q K^T``
  (wgmma, operands in shared memory), the online softmax, and ``O += P V`` (P from
  registers) with no barrier between them, so one's softmax can run under the other's GEMMs;
- ``OFFSET``: the second consumer starts its first tile only after the first consumer's
  first ``Q K^T`` is done (a half-iteration offset that the tensor core's arbitration then
  keeps).

This is the experiment as it ran on 2026-12-03 (``results/prefill_gluon.json``); the kernel
the op uses grew out of it: ``graphfuse/triton/attention_ws.py`` (any causal form, GQA
layouts, scales, FP8 inputs, FP8 output). Restricted to what the experiment needs (bf16,
contiguous ``[B, H, S, D]``, S % 128 == 0, D = 128, causal or not); the output is bf16
``[B, H, S, D]``. Checked against SDPA and timed next to it and the fused kernel in one
process.

    python benchmarks/prefill_gluon.py [--json OUT.json] [--only REGEX]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import traceback
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

B, HQ, HKV, S, D = 4, 32, 8, 4096, 128
ROWS = 64  # query rows per consumer warpgroup


@gluon.jit
def _producer(
    k_desc, v_desc, q_desc, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty,
    q_row, kv_row, n_tiles,
):  # fmt: skip
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.type.shape[1]
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_bufs.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_row + 64, 0], q_bar, q_bufs.index(1))
    for j in range(n_tiles):
        s = j % STAGES
        ph = (j // STAGES) & 1
        mbarrier.wait(kv_empty.index(s), ph ^ 1)  # both consumers released the slot
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            k_desc, [kv_row + j * BLOCK_N, 0], k_ready.index(s), k_bufs.index(s)
        )
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            v_desc, [kv_row + j * BLOCK_N, 0], v_ready.index(s), v_bufs.index(s)
        )


@gluon.jit
def _consume(
    c: gl.constexpr, out_ptr, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, go_bar,
    q_row, q_start, n_tiles, qk_scale, CAUSAL, OFFSET,
):  # fmt: skip
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    BLOCK_N: gl.constexpr = k_bufs.type.shape[1]
    HEAD_D: gl.constexpr = k_bufs.type.shape[2]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_l: gl.constexpr = gl.SliceLayout(1, s_layout)  # (constexprs from the buffers' shapes:
    # scalars passed through warp_specialize arrive as values)
    col_l: gl.constexpr = gl.SliceLayout(0, s_layout)
    orow_l: gl.constexpr = gl.SliceLayout(1, o_layout)

    q_s = q_bufs.index(c)
    rows = q_start + c * 64 + gl.arange(0, 64, layout=row_l)
    cols0 = gl.arange(0, BLOCK_N, layout=col_l)
    m_i = gl.full([64], float("-inf"), gl.float32, layout=row_l)
    l_i = gl.full([64], 0.0, gl.float32, layout=row_l)
    acc = gl.zeros([64, HEAD_D], gl.float32, layout=o_layout)
    zero_s = gl.zeros([64, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(q_bar, 0)
    if OFFSET and c == 1:
        mbarrier.wait(go_bar, 0)
    for j in range(n_tiles):
        s = j % STAGES
        ph = (j // STAGES) & 1
        mbarrier.wait(k_ready.index(s), ph)
        qk = warpgroup_mma(q_s, k_bufs.index(s).permute((1, 0)), zero_s, use_acc=False,
                           is_async=True)  # fmt: skip
        qk = warpgroup_mma_wait(0, deps=(qk,))
        if OFFSET and c == 0:
            mbarrier.arrive(go_bar, count=1, pred=j == 0)
        if CAUSAL:
            if (j + 1) * BLOCK_N > q_start + c * 64:  # a tile reaching past the first row
                keep = gl.expand_dims(rows, 1) >= gl.expand_dims(j * BLOCK_N + cols0, 0)
                qk = gl.where(keep, qk, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(qk, axis=1) * qk_scale)
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(qk * qk_scale - gl.expand_dims(m_new, 1))
        l_i = l_i * alpha + gl.sum(p, axis=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, orow_l), 1)
        p16 = gl.convert_layout(p.to(gl.bfloat16), p_layout)
        mbarrier.wait(v_ready.index(s), ph)
        acc = warpgroup_mma(p16, v_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(kv_empty.index(s), count=1)
        m_i = m_new
    o = acc / gl.expand_dims(gl.convert_layout(l_i, orow_l), 1)
    orows = q_row + c * 64 + gl.arange(0, 64, layout=orow_l)
    ocols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
    offs = gl.expand_dims(orows.to(gl.int64), 1) * HEAD_D + gl.expand_dims(ocols, 0)
    gl.store(out_ptr + offs, o.to(gl.bfloat16))


@gluon.jit
def _consumer0(
    out_ptr, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, go_bar,
    q_row, q_start, n_tiles, qk_scale, CAUSAL, OFFSET,
):  # fmt: skip
    _consume(
        0, out_ptr, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, go_bar,
        q_row, q_start, n_tiles, qk_scale, CAUSAL, OFFSET,
    )  # fmt: skip


@gluon.jit
def _consumer1(
    out_ptr, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, go_bar,
    q_row, q_start, n_tiles, qk_scale, CAUSAL, OFFSET,
):  # fmt: skip
    _consume(
        1, out_ptr, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, go_bar,
        q_row, q_start, n_tiles, qk_scale, CAUSAL, OFFSET,
    )  # fmt: skip


@gluon.jit
def _producer_part(
    out_ptr, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, go_bar,
    q_row, q_start, n_tiles, qk_scale, CAUSAL, OFFSET, q_desc, k_desc, v_desc, kv_row,
):  # fmt: skip
    _producer(
        k_desc, v_desc, q_desc, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty,
        q_row, kv_row, n_tiles,
    )  # fmt: skip


@gluon.jit
def _ws_attn_fwd(
    q_desc, k_desc, v_desc, out_ptr, H, G, SEQ, qk_scale,
    CAUSAL: gl.constexpr, OFFSET: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
    STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
):  # fmt: skip
    BLOCK_M: gl.constexpr = 128
    pid_bh = gl.program_id(0)
    pid_m = gl.num_programs(1) - 1 - gl.program_id(1)  # heaviest causal blocks first
    b = pid_bh // H
    h = pid_bh % H
    q_start = pid_m * BLOCK_M
    q_row = pid_bh * SEQ + q_start
    kv_row = (b * (H // G) + h // G) * SEQ
    if CAUSAL:
        n_tiles = (q_start + BLOCK_M) // BLOCK_N
    else:
        n_tiles = SEQ // BLOCK_N

    q_bufs = gl.allocate_shared_memory(gl.bfloat16, [2, 64, HEAD_D], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    go_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(go_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(kv_empty.index(i), count=2)
    fence_async_shared()
    args = (
        out_ptr, q_bufs, k_bufs, v_bufs, q_bar, k_ready, v_ready, kv_empty, go_bar,
        q_row, q_start, n_tiles, qk_scale, CAUSAL, OFFSET,
    )  # fmt: skip
    gl.warp_specialize(
        [
            (_consumer0, args),
            (_consumer1, args),
            (_producer_part, args + (q_desc, k_desc, v_desc, kv_row)),
        ],
        [4, 1],
        [CONSUMER_REGS, 24],
    )


def ws_attention(q, k, v, out, cfg: dict):
    """Launches the Gluon kernel: bf16 contiguous [B, H, S, D] q/k/v, S % 128 == 0, D = 128."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    b, h, s, d = q.shape
    bn, stages = cfg.get("BLOCK_N", 128), cfg.get("STAGES", 2)
    assert d == 128 and s % 128 == 0 and s % bn == 0
    q2, k2, v2 = (t.reshape(-1, d) for t in (q, k, v))
    ql = gl.NVMMASharedLayout.get_default_for([64, d], gl.bfloat16)
    kl = gl.NVMMASharedLayout.get_default_for([bn, d], gl.bfloat16)
    qd = TensorDescriptor(q2, list(q2.shape), list(q2.stride()), [64, d], ql)
    kd = TensorDescriptor(k2, list(k2.shape), list(k2.stride()), [bn, d], kl)
    vd = TensorDescriptor(v2, list(v2.shape), list(v2.stride()), [bn, d], kl)
    grid = (b * h, s // 128)
    return _ws_attn_fwd[grid](
        qd, kd, vd, out, h, h // k.shape[1], s, d**-0.5 * 1.4426950408889634,
        CAUSAL=cfg.get("CAUSAL", True), OFFSET=cfg.get("OFFSET", True), BLOCK_N=bn, HEAD_D=d,
        STAGES=stages, CONSUMER_REGS=cfg.get("REGS", 240), num_warps=4,
        maxnreg=cfg.get("MAXNREG", 168),
    )  # fmt: skip


VARIANTS = {
    "ws": dict(),
    "ws_nooffset": dict(OFFSET=False),
    "ws_s3_n64": dict(STAGES=3, BLOCK_N=64),
    "ws_n64": dict(BLOCK_N=64),
}


def main() -> None:
    import re

    import attention_gpu as ag
    import prefill_sweep as ps
    from triton.testing import do_bench

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=str(HERE / "results" / "prefill_gluon.json"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=None, help="regex over variant names")
    args = ap.parse_args()
    x = ps.make_inputs("bf16", B, 0)
    q, k, v = x["q"], x["k"], x["v"]
    sname, be, gqa = ag.sdpa_best(q, k, v, True)
    sdpa = ag.make_sdpa(q, k, v, be, gqa, True)
    ref = sdpa().float()
    out = torch.empty_like(q)
    fns, rec = {"sdpa": sdpa}, {"sdpa": {"backend": sname}}
    fam = ps.Family("bf16")
    fns["fused_fp8out"] = fam.fn("default", 1, {})
    for name, cfg in VARIANTS.items():
        if args.only and not re.search(args.only, name):
            continue
        r = rec[name] = {"config": cfg}
        try:
            out.fill_(float("nan"))
            ws_attention(q, k, v, out, cfg)
            torch.cuda.synchronize()
            err = (out.float() - ref).abs()
            r["nan"] = torch.isnan(out).sum().item()
            r["max_err"] = err.nan_to_num(1e9).max().item()
            r["rel"] = ((out.float() - ref).nan_to_num(1e9).norm() / ref.norm()).item()
            r["ok"] = bool(r["nan"] == 0 and r["max_err"] < 0.05 and r["rel"] < 0.01)
            if r["ok"]:
                fns[name] = lambda cfg=cfg: ws_attention(q, k, v, out, cfg)
        except Exception as exc:
            r["error"] = "".join(traceback.format_exception_only(exc))[-800:]
        print(name, {kk: vv for kk, vv in r.items() if kk != "config"}, flush=True)
    times: dict[str, list] = {n: [] for n in fns}
    for i in range(args.rounds):
        for n, f in fns.items():
            times[n].append(do_bench(f, warmup=25, rep=100, return_mode="median"))
        print(f"round {i + 1}/{args.rounds}", flush=True)
    flops = 4 * B * HQ * S * S * D / 2
    base = statistics.median(times["sdpa"])
    print(f"\n{'variant':18s} {'ms':>8s} {'vs SDPA':>8s} {'TFLOP/s':>8s}")
    for n, ts in times.items():
        ms = statistics.median(ts)
        rec.setdefault(n, {}).update(ms=ms, ratio=base / ms, TFLOPs=flops / ms / 1e9)
        print(f"{n:18s} {ms:8.4f} {base / ms:8.3f} {flops / ms / 1e9:8.1f}")
    meta = dict(
        date=datetime.date.today().isoformat(),
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        shape=dict(B=B, HQ=HQ, HKV=HKV, S=S, D=D, causal=True),
    )
    Path(args.json).write_text(json.dumps(dict(meta, rows=rec), indent=1))


if __name__ == "__main__":
    main()
