"""Diagnosis of the bf16 prefill gap (issue #8): a minimal causal attention kernel next to the
fused one, on the same inputs, in one process.

docs/benchmarks.md section 3's calibration says a straightforward Triton kernel reached 0.92x SDPA
on bf16 prefill (B=4, S=4096, causal, 32/8 heads, D=128); the fused kernel
(``graphfuse/triton/attention.py``) stays at 0.81x. The kernel here is that straightforward
kernel with nothing else: bf16 in and out, contiguous ``[B, H, S, D]`` inputs, no masks,
scales or bounds (S a multiple of the tiles), the causal key loop split into unmasked tiles
and the diagonal. Its knobs isolate what the fused kernel does differently:

- ``DESC``: K / V (and Q) through host-side TMA tensor descriptors instead of pointers;
- ``KT``: pointer loads of K as a ``[D, N]`` tile (as the fused kernel does) instead of
  ``[N, D]`` transposed in registers;
- ``WS``: Triton's automatic warp specialisation of the unmasked loop (needs ``DESC``);
- tile shape, warps and stages.

Every variant's output is compared with SDPA's (bf16); the times are ``do_bench`` medians,
interleaved over rounds, next to the faster SDPA backend and the fused kernel (bf16 in,
bf16 out and FP8 out).

    python benchmarks/prefill_minimal.py [--json OUT.json] [--only REGEX]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
import traceback
from pathlib import Path

import torch
import triton
import triton.language as tl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

B, HQ, HKV, S, D = 4, 32, 8, 4096, 128


@triton.jit
def _keys(
    acc,
    l_i,
    m_i,
    q,
    desc_k,
    desc_v,
    k_ptrs,
    v_ptrs,
    kv_row,
    lo,
    hi,
    offs_m,
    offs_n,
    qk_scale,
    sks,
    DIAG: tl.constexpr,
    DESC: tl.constexpr,
    KT: tl.constexpr,
    WS: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        if DESC:
            k = desc_k.load([kv_row + start_n, 0]).T
        elif KT:
            k = tl.load(k_ptrs + start_n * sks)
        else:
            k = tl.trans(tl.load(k_ptrs + start_n * sks))
        qk = tl.dot(q, k)
        if DIAG:
            keep = offs_m[:, None] >= start_n + offs_n[None, :]
            qk = qk * qk_scale + tl.where(keep, 0.0, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_new[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if DESC:
            v = desc_v.load([kv_row + start_n, 0])
        else:
            v = tl.load(v_ptrs + start_n * sks)
        acc = tl.dot(p.to(tl.bfloat16), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _minimal_fwd(
    Q,
    K,
    V,
    OUT,
    desc_q,
    desc_k,
    desc_v,
    H,
    G,
    SEQ,
    qk_scale,
    DESC: tl.constexpr,
    KT: tl.constexpr,
    WS: tl.constexpr,
    ORDER: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_D: tl.constexpr,
):
    if ORDER == 0:  # grid (B*H, M blocks): all heads' heaviest causal blocks first
        pid_bh = tl.program_id(0)
        pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    elif ORDER == 1:  # grid (M blocks, B*H): each head's blocks in order
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
    else:  # grid (M blocks, B*H): each head's heaviest block first
        pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
        pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    q_row = (pid_bh * SEQ).to(tl.int64)
    kv_row = ((b * (H // G) + h // G) * SEQ).to(tl.int64)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    if DESC:
        q = desc_q.load([(q_row + start_m).to(tl.int32), 0])
        k_ptrs = K
        v_ptrs = V
    else:
        q = tl.load(Q + (q_row + offs_m[:, None]) * HEAD_D + offs_d[None, :])
        if KT:
            k_ptrs = K + (kv_row + offs_n[None, :]) * HEAD_D + offs_d[:, None]
        else:
            k_ptrs = K + (kv_row + offs_n[:, None]) * HEAD_D + offs_d[None, :]
        v_ptrs = V + (kv_row + offs_n[:, None]) * HEAD_D + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    kv32 = kv_row.to(tl.int32)
    acc, l_i, m_i = _keys(
        acc, l_i, m_i, q, desc_k, desc_v, k_ptrs, v_ptrs, kv32, 0, start_m, offs_m, offs_n,
        qk_scale, HEAD_D, False, DESC, KT, WS, BLOCK_N,
    )  # fmt: skip
    acc, l_i, m_i = _keys(
        acc, l_i, m_i, q, desc_k, desc_v, k_ptrs, v_ptrs, kv32, start_m, start_m + BLOCK_M,
        offs_m, offs_n, qk_scale, HEAD_D, True, DESC, KT, False, BLOCK_N,
    )  # fmt: skip
    o = acc / l_i[:, None]
    tl.store(OUT + (q_row + offs_m[:, None]) * HEAD_D + offs_d[None, :], o.to(tl.bfloat16))


def minimal(q, k, v, o, cfg: dict):
    """Launches the minimal kernel (causal, contiguous [B, H, S, D] bf16, S % tiles == 0);
    returns Triton's compiled kernel."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    b, h, s, d = q.shape
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    assert s % bm == 0 and s % bn == 0 and bm % bn == 0
    q2, k2, v2 = (t.reshape(-1, d) for t in (q, k, v))
    dq = TensorDescriptor.from_tensor(q2, [bm, d])
    dk = TensorDescriptor.from_tensor(k2, [bn, d])
    dv = TensorDescriptor.from_tensor(v2, [bn, d])
    order = cfg.get("ORDER", 0)
    grid = (b * h, s // bm) if order == 0 else (s // bm, b * h)
    return _minimal_fwd[grid](
        q, k, v, o, dq, dk, dv, h, h // k.shape[1], s, d**-0.5 * 1.4426950408889634,
        DESC=cfg.get("DESC", False), KT=cfg.get("KT", False), WS=cfg.get("WS", False),
        ORDER=order, BLOCK_M=bm, BLOCK_N=bn, HEAD_D=d,
        num_warps=cfg.get("num_warps", 8), num_stages=cfg.get("num_stages", 3),
    )  # fmt: skip


BASE = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
VARIANTS = {
    "ptr": BASE,
    "ptr_kt": dict(BASE, KT=True),
    "ptr_o1": dict(BASE, ORDER=1),
    "ptr_o2": dict(BASE, ORDER=2),
    "ptr_n128": dict(BASE, BLOCK_N=128),
    "ptr_n128_s2": dict(BASE, BLOCK_N=128, num_stages=2),
    "ptr_o2_n128_s2": dict(BASE, ORDER=2, BLOCK_N=128, num_stages=2),
    "desc": dict(BASE, DESC=True),
    "desc_o1": dict(BASE, DESC=True, ORDER=1),
    "desc_o2": dict(BASE, DESC=True, ORDER=2),
    "desc_n128": dict(BASE, DESC=True, BLOCK_N=128),
    "desc_n128_s2": dict(BASE, DESC=True, BLOCK_N=128, num_stages=2),
    "desc_o2_n128_s2": dict(BASE, DESC=True, ORDER=2, BLOCK_N=128, num_stages=2),
    "desc_o2_s4": dict(BASE, DESC=True, ORDER=2, num_stages=4),
}


def serialized(kernel) -> bool | None:
    """Whether ptxas serialises the kernel's wgmma instructions (its C7515 advisory: the
    tensor-core ops then wait for each other, a large slowdown that the timings alone do not
    explain); None when ptxas is not found."""
    import os
    import subprocess
    import tempfile

    ptxas = Path(os.path.dirname(triton.__file__)) / "backends/nvidia/bin/ptxas"
    if not ptxas.exists():
        return None
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(kernel.asm["ptx"])
        cmd = [str(ptxas), "-v", "--gpu-name", "sm_90a", str(src), "-o", str(Path(d) / "k.o")]
        r = subprocess.run(cmd, capture_output=True, text=True)
    return "C7515" in r.stdout + r.stderr


def main() -> None:
    import attention_gpu as ag
    import prefill_sweep as ps
    from triton.testing import do_bench

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=str(HERE / "results" / "prefill_minimal.json"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=None, help="regex over variant names")
    args = ap.parse_args()
    torch.manual_seed(0)
    x = ps.make_inputs("bf16", B, 0)
    q, k, v = x["q"], x["k"], x["v"]
    sname, be, gqa = ag.sdpa_best(q, k, v, True)
    sdpa = ag.make_sdpa(q, k, v, be, gqa, True)
    ref = sdpa().float()
    out = torch.empty_like(q)
    fns, rec = {"sdpa": sdpa}, {"sdpa": {"backend": sname}}
    fam = ps.Family("bf16")
    fns["fused_fp8out"] = fam.fn("default", 1, {})
    fns["fused_bf16out"] = fam.fn("default", 0, {})
    for name, cfg in VARIANTS.items():
        if args.only and not re.search(args.only, name):
            continue
        r = rec[name] = {"config": cfg}
        try:
            out.fill_(float("nan"))
            kern = minimal(q, k, v, out, cfg)
            torch.cuda.synchronize()
            r["wgmma_serialized"] = serialized(kern)
            err = (out.float() - ref).abs()
            r["max_err"] = err.max().item()
            r["rel"] = ((out.float() - ref).norm() / ref.norm()).item()
            r["ok"] = bool(r["max_err"] < 0.05 and r["rel"] < 0.01)
            fns[name] = lambda cfg=cfg: minimal(q, k, v, out, cfg)
        except Exception as exc:
            r["error"] = "".join(traceback.format_exception_only(exc))[-500:]
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
