"""GPU benchmark of the graphfuse Triton kernels against stock PyTorch (docs/benchmarks.md §3).

One script, one call: measures the machine's ceilings (copy bandwidth, bf16 GEMM), then every
§3 row side by side in one process (interleaved rounds, medians; decode CUDA-graph timed with
inputs rotated past L2), with the numerics of every fused row checked against the fp32
reference in the same run. Where FlashInfer can be imported (``benchmarks/flashinfer_peer``),
every row also times the peer on the same inputs: XQA and the tensor-core paged decode (FP8
and bf16 KV), FA3 prefill (bf16 and FP8 q/k/v), bf16 out, with their error against the same
reference. Writes ``benchmarks/results/attention_gpu.json`` (or ``--json``).

    python -m benchmarks.attention_gpu [--json PATH] [--sweep] [--only decode|prefill] [--no-peer]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import graphfuse  # noqa: F401
from benchmarks import flashinfer_peer as peer
from benchmarks.common import GraphTimer, print_table, result_path, write_json
from graphfuse.ops.attention_ref import attention_fp32
from graphfuse.ops.paged_ref import paged_decode_fp32
from graphfuse.ops.quant_ref import fp8_static_quant_ref, nvfp4_quant_ref
from graphfuse.triton.decode.config import decode_config
from graphfuse.triton.decode.paged import paged_into
from graphfuse.triton.ops import attention_run as dense_run
from tests.gpu._accept import fp8_stats, nvfp4_stats  # (the GPU tests' statistics, recorded)

FP8 = torch.float8_e4m3fn
DEV = "cuda"
ROUNDS = 5
L2_ROTATE_BYTES = 240e6


def ceilings() -> dict:
    x = torch.randn(2**28, device=DEV)
    y = torch.empty_like(x)
    t = do_bench(lambda: y.copy_(x), warmup=50, rep=300, return_mode="median")
    copy_bw = 2 * x.numel() * 4 / (t * 1e-3)
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    t = do_bench(lambda: a @ b, warmup=50, rep=300, return_mode="median")
    return {"copy_TBps": copy_bw / 1e12, "bf16_gemm_TFLOPs": 2 * 8192**3 / (t * 1e-3) / 1e12}


def _quant_fn(layout_bshd: bool):
    def q(o, s):
        if layout_bshd:
            o = o.transpose(1, 2).reshape(o.shape[0], o.shape[2], -1)
        return (o.float() / s).clamp(-448, 448).to(FP8)

    return torch.compile(q, dynamic=False)


def interleaved(timers: dict) -> dict:
    """Median over ROUNDS of interleaved timings: {name: ms}."""
    res = {k: [] for k in timers}
    for _ in range(ROUNDS):
        for k, t in timers.items():
            res[k].append(t.time() if isinstance(t, GraphTimer) else t())
    return {k: statistics.median(v) for k, v in res.items()}


def rel_rms(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| over all elements (out reshaped to ref's shape)."""
    err = out.float().reshape(ref.shape) - ref
    return (err.norm() / ref.norm()).item()


def bench_fn(fn):
    return lambda: do_bench(fn, warmup=25, rep=100, return_mode="median")


def make_sdpa(q, k, v, backend, gqa: bool, causal: bool):
    """An SDPA call on one backend; without ``gqa`` K/V are expanded once here (not timed)."""
    from torch.nn.attention import sdpa_kernel

    if not gqa:
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)

    def fn():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    return fn


def sdpa_best(q, k, v, causal: bool):
    """(name, backend, gqa) of the fastest working SDPA backend (cuDNN or flash)."""
    from torch.nn.attention import SDPBackend

    best = None
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        for gqa in (True, False):
            fn = make_sdpa(q, k, v, be, gqa, causal)
            try:
                fn()
                torch.cuda.synchronize()
            except RuntimeError:
                continue
            t = do_bench(fn, warmup=10, rep=50, return_mode="median")
            if best is None or t < best[3]:
                best = (f"{name}{'+gqa' if gqa else '+expanded_kv'}", be, gqa, t)
            break
    return best[:3]


# ---------------------------------------------------------------------------------------
# decode


def _paged_set(b, hq, hkv, ctx, d, kv_dtype, gen_seed):
    gen = torch.Generator(device=DEV).manual_seed(gen_seed)
    block = 16
    mb = ctx // block
    nblocks = b * mb
    q = torch.randn((b, hq, d), device=DEV, generator=gen).to(torch.bfloat16)
    cache = torch.randn((nblocks, 2, block, hkv, d), device=DEV, generator=gen)
    cache = (cache * 64).to(FP8) if kv_dtype == FP8 else cache.to(kv_dtype)
    tables = torch.randperm(nblocks, device=DEV, generator=gen).view(b, mb).to(torch.int32)
    lens = torch.full((b,), ctx, device=DEV, dtype=torch.int32)
    ks = torch.tensor([1 / 64.0], device=DEV) if kv_dtype == FP8 else None
    return q, cache, tables, lens, ks, ks


def decode_row(b, hq, hkv, ctx, d, ceil: dict, sweep: bool, with_peer: bool) -> dict:
    kv_bytes_fp8 = 2 * b * hkv * ctx * d
    n_fp8 = max(1, min(16, math.ceil(L2_ROTATE_BYTES / kv_bytes_fp8)))
    n_bf = max(1, min(16, math.ceil(L2_ROTATE_BYTES / (2 * kv_bytes_fp8))))
    sets = [_paged_set(b, hq, hkv, ctx, d, FP8, i) for i in range(n_fp8)]
    q, cache, tables, lens, ks, vs = sets[0]
    wide = paged_decode_fp32(q, cache, tables, lens, None, ks, vs, None)
    amax = wide.abs().max().item()
    s_o = torch.tensor([amax / 448], device=DEV)
    g = torch.tensor([448 * 6 / amax], device=DEV)
    o8 = torch.empty((b, hq, d), device=DEV, dtype=FP8)
    pk = torch.empty((b, hq * d // 2), device=DEV, dtype=torch.uint8)
    sf = torch.empty(((b + 127) // 128 * 128, (hq * d // 16 + 3) // 4 * 4), device=DEV, dtype=FP8)

    def fused(kind, cfg):
        def mk(st):
            qq, cc, tt, ll, kk, vv = st
            args = (qq, cc, tt, ll, None, kk, vv, None)
            if kind == 1:
                return lambda: paged_into(*args, o8, 1, s_o, config=cfg)
            return lambda: paged_into(*args, pk, 2, g, sf, config=cfg)

        return [mk(st) for st in sets]

    # config sweep (FP8 out), CUDA-graph timed: the table's choice, then every row of the
    # paged decode table (graphfuse.triton.decode.config) forced on this shape
    configs = [{}]  # the kernel's defaults
    if sweep:
        from graphfuse.triton.decode.config import CLASSES, KNOBS

        configs += [dict(zip(KNOBS, knobs)) for paged, _, _, _, knobs in CLASSES if paged]
    cfg_times = {}
    for i, cfg in enumerate(configs):
        try:
            cfg_times[i] = GraphTimer(fused(1, cfg)).time()
        except Exception as exc:  # a config that does not compile is reported, not fatal
            print(f"decode config {cfg} failed: {exc!r}"[:300])
    best = configs[min(cfg_times, key=cfg_times.get)]
    # numerics with the chosen config (poisoned outputs)
    o8.view(torch.uint8).fill_(0xFF)
    paged_into(q, cache, tables, lens, None, ks, vs, None, o8, 1, s_o, config=best)
    st8 = fp8_stats(o8, fp8_static_quant_ref(wide, s_o), wide, s_o.item())
    pk.fill_(0xA5)
    sf.view(torch.uint8).fill_(0xFF)
    paged_into(q, cache, tables, lens, None, ks, vs, None, pk, 2, g, sf, config=best)
    w2 = wide.reshape(b, hq * d)
    rp, rs = nvfp4_quant_ref(w2, g, swizzle=True)
    st4 = nvfp4_stats(pk, sf, rp, rs, w2, g)
    # baseline: bf16 dense KV, SDPA (best backend) + compiled FP8 quant
    bsets = []
    for i in range(n_bf):
        gen = torch.Generator(device=DEV).manual_seed(100 + i)
        qb = torch.randn((b, hq, 1, d), device=DEV, generator=gen, dtype=torch.bfloat16)
        kb = torch.randn((b, hkv, ctx, d), device=DEV, generator=gen, dtype=torch.bfloat16)
        vb = torch.randn((b, hkv, ctx, d), device=DEV, generator=gen, dtype=torch.bfloat16)
        bsets.append((qb, kb, vb))
    sname, be, gqa = sdpa_best(*bsets[0], causal=False)
    quant = _quant_fn(False)
    s_b = torch.tensor([0.01], device=DEV)
    sdpas = [make_sdpa(qb, kb, vb, be, gqa, False) for qb, kb, vb in bsets]

    def base_calls(with_quant: bool):
        return [(lambda sd=sd: quant(sd(), s_b)) if with_quant else sd for sd in sdpas]

    # bf16 paged KV, FP8 out (the kernel's own configuration for that cache)
    bf_sets = [_paged_set(b, hq, hkv, ctx, d, torch.bfloat16, 50 + i) for i in range(n_bf)]
    fused_bf16kv = [
        (lambda st=st: paged_into(*st[:4], None, None, None, None, o8, 1, s_o)) for st in bf_sets
    ]
    timers = {
        "fused_fp8": GraphTimer(fused(1, best)),
        "fused_nvfp4": GraphTimer(fused(2, best)),
        "fused_fp8_bf16kv": GraphTimer(fused_bf16kv),
        "sdpa_quant": GraphTimer(base_calls(True)),
        "sdpa": GraphTimer(base_calls(False)),
    }
    peer_numerics = {}
    if with_peer:
        builders = {
            "flashinfer_xqa": lambda st: peer.decode_xqa(*st[:4], st[4].item(), st[5].item()),
            "flashinfer_tc": lambda st: peer.decode_paged(*st[:4], st[4].item(), st[5].item()),
        }
        for name, build in builders.items():
            try:
                calls = [build(st) for st in sets]
                timers[name] = GraphTimer([c for c, _ in calls])
                calls[0][0]()
                peer_numerics[name] = rel_rms(calls[0][1], wide)
            except Exception as exc:  # a peer kernel that fails is reported, not fatal
                print(f"{name} B={b} failed: {exc!r}"[:300])
        try:
            calls = [peer.decode_paged(*st[:4], None, None) for st in bf_sets]
            timers["flashinfer_tc_bf16kv"] = GraphTimer([c for c, _ in calls])
        except Exception as exc:
            print(f"flashinfer_tc_bf16kv B={b} failed: {exc!r}"[:300])
    t = interleaved(timers)
    floor_ms = kv_bytes_fp8 / (ceil["copy_TBps"] * 1e12) * 1e3
    row = {
        "row": f"decode B={b} ctx={ctx} {hq}/{hkv} heads, paged FP8 KV (block 16)",
        "sdpa_backend": sname,
        "config": decode_config(True, b, hkv, ctx, best),
        "config_sweep_ms": {str(configs[i]): v for i, v in cfg_times.items()},
        "ms": t,
        "floor_ms_fp8_kv": floor_ms,
        "ratio_fp8_vs_sdpa_quant": t["sdpa_quant"] / t["fused_fp8"],
        "ratio_nvfp4_vs_sdpa_quant": t["sdpa_quant"] / t["fused_nvfp4"],
        "nvfp4_over_fp8": t["fused_nvfp4"] / t["fused_fp8"],
        "kv_TBps": kv_bytes_fp8 / (t["fused_fp8"] * 1e-3) / 1e12,
        "kv_TBps_bf16kv": 2 * kv_bytes_fp8 / (t["fused_fp8_bf16kv"] * 1e-3) / 1e12,
        "fraction_of_copy_bw": floor_ms / t["fused_fp8"],
        "numerics": {"fp8": st8, "nvfp4": st4},
    }
    fi_fp8 = [t[k] for k in ("flashinfer_xqa", "flashinfer_tc") if k in t]
    if fi_fp8:
        row["flashinfer"] = {"version": peer.version(), "rel_rms_bf16_out": peer_numerics}
        row["vs_flashinfer_fp8kv"] = min(fi_fp8) / t["fused_fp8"]
    if "flashinfer_tc_bf16kv" in t:
        row["vs_flashinfer_bf16kv"] = t["flashinfer_tc_bf16kv"] / t["fused_fp8_bf16kv"]
    return row


# ---------------------------------------------------------------------------------------
# prefill


def prefill_rows(b, hq, hkv, s, d, ceil: dict, sweep: bool, with_peer: bool) -> list[dict]:
    gen = torch.Generator(device=DEV).manual_seed(0)
    flops = 4 * b * hq * s * s * d / 2  # causal
    qf = torch.randn((b, hq, s, d), device=DEV, generator=gen)
    kf = torch.randn((b, hkv, s, d), device=DEV, generator=gen)
    vf = torch.randn((b, hkv, s, d), device=DEV, generator=gen)
    sc = torch.tensor([1 / 64.0], device=DEV)
    q8, k8, v8 = ((x * 64).to(FP8) for x in (qf, kf, vf))
    qb, kb, vb = (x.to(torch.bfloat16) for x in (qf, kf, vf))
    del qf, kf, vf
    layout = "bs(hd)"
    m, kk = b * s, hq * d
    o8 = torch.empty((b, s, kk), device=DEV, dtype=FP8)
    pk = torch.empty((m, kk // 2), device=DEV, dtype=torch.uint8)
    sf = torch.empty(((m + 127) // 128 * 128, (kk // 16 + 3) // 4 * 4), device=DEV, dtype=FP8)
    fp8_args = (q8, k8, v8, sc, sc, sc, None, "top_left", None, layout)
    # V stored K-major ([B, Hkv, D, S] memory, passed as a [B, Hkv, S, D] view): the layout
    # FP8 wgmma wants for P·V, written once by whoever produces V (not a per-call copy)
    v8t = v8.transpose(-1, -2).contiguous().transpose(-1, -2)
    fp8t_args = (q8, k8, v8t, sc, sc, sc, None, "top_left", None, layout)
    bf_args = (qb, kb, vb, None, None, None, None, "top_left", None, layout)
    s_o = torch.tensor([1.0], device=DEV)
    g = torch.tensor([1.0], device=DEV)

    variants = {
        "fp8_default": (fp8_args, "default", 1),
        "fp8_fast": (fp8_args, "fast", 1),
        "bf16_in": (bf_args, "default", 1),
        "fp8_default_nvfp4": (fp8_args, "default", 2),
        "fp8_fast_nvfp4": (fp8_args, "fast", 2),
        "fp8_fast_vT": (fp8t_args, "fast", 1),
        "fp8_default_vT": (fp8t_args, "default", 1),
    }
    base_cfgs = [None]  # the kernel's defaults
    if sweep:
        base_cfgs = [
            None,
            dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
            dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=4),
        ]

    def call(name, cfg):
        args, prec, kind = variants[name]
        if kind == 1:
            return lambda: dense_run(*args, prec, o8, 1, s_o, config=cfg)
        return lambda: dense_run(*args, prec, pk, 2, g, sf, config=cfg)

    best, sweep_ms = {}, {}
    for name in variants:
        ts = {}
        for i, cfg in enumerate(base_cfgs):
            try:
                ts[i] = do_bench(call(name, cfg), warmup=10, rep=50, return_mode="median")
            except Exception as exc:
                print(f"prefill {name} config {cfg} failed: {exc!r}"[:300])
        best[name] = base_cfgs[min(ts, key=ts.get)]
        sweep_ms[name] = {str(base_cfgs[i]): v for i, v in ts.items()}
    # numerics (FP8 and NVFP4 out) per variant, with the chosen configs, poisoned outputs
    numerics = {}
    for name, (args, _prec, kind) in variants.items():
        wide = attention_fp32(*args, "default")
        amax = wide.abs().max().item()
        s_o.fill_(amax / 448)
        g.fill_(448 * 6 / amax)
        if kind == 1:
            o8.view(torch.uint8).fill_(0xFF)
            call(name, best[name])()
            numerics[name] = fp8_stats(o8, fp8_static_quant_ref(wide, s_o), wide, s_o.item())
        else:
            pk.fill_(0xA5)
            sf.view(torch.uint8).fill_(0xFF)
            call(name, best[name])()
            w2 = wide.reshape(m, kk)
            rp, rs = nvfp4_quant_ref(w2, g, swizzle=True)
            numerics[name] = nvfp4_stats(pk, sf, rp, rs, w2, g)
        del wide
        torch.cuda.empty_cache()
    sname, be, gqa = sdpa_best(qb, kb, vb, causal=True)
    sdpa = make_sdpa(qb, kb, vb, be, gqa, True)
    quant = _quant_fn(True)
    s_b = torch.tensor([0.01], device=DEV)
    timers = {name: bench_fn(call(name, best[name])) for name in variants}
    timers["sdpa_quant"] = bench_fn(lambda: quant(sdpa(), s_b))
    timers["sdpa"] = bench_fn(sdpa)
    peer_numerics, peer_of = {}, {}
    if with_peer:  # FA3, bf16 out, on the same q/k/v (token-major copies made once)
        for name, args, fa3_args in (
            ("flashinfer_fa3_fp8", fp8_args, (q8, k8, v8, sc.item())),
            ("flashinfer_fa3_bf16", bf_args, (qb, kb, vb, None)),
        ):
            try:
                run, out = peer.prefill_fa3(*fa3_args)
                run()
                peer_numerics[name] = rel_rms(out, attention_fp32(*args, "default"))
                timers[name] = bench_fn(run)
                peer_of[args[0].dtype] = name
            except Exception as exc:  # a peer kernel that fails is reported, not fatal
                print(f"{name} failed: {exc!r}"[:300])
            torch.cuda.empty_cache()
    t = interleaved(timers)
    tf = {k: flops / (v * 1e-3) / 1e12 for k, v in t.items()}
    head = f"prefill B={b} S={s} causal {hq}/{hkv} heads"
    rows = [
        {
            "row": f"{head}, FP8 q/k/v, FP8 out, default",
            "fused": "fp8_default",
            "baseline": "sdpa_quant",
            "target": 0.95,
            "stretch": 1.1,
        },
        {
            "row": f"{head}, FP8 q/k/v, FP8 out, fast (FP8 P)",
            "fused": "fp8_fast",
            "baseline": "sdpa_quant",
            "target": 1.2,
            "stretch": 1.4,
        },
        {
            "row": f"{head}, FP8 q/k/v (V stored K-major), FP8 out, fast (FP8 P)",
            "fused": "fp8_fast_vT",
            "baseline": "sdpa_quant",
            "target": 1.2,
            "stretch": 1.4,
        },
        {
            "row": f"{head}, FP8 q/k/v (V stored K-major), FP8 out, default",
            "fused": "fp8_default_vT",
            "baseline": "sdpa_quant",
            "target": 0.95,
            "stretch": 1.1,
        },
        {
            "row": f"{head}, bf16 in, FP8 out",
            "fused": "bf16_in",
            "baseline": "sdpa",
            "target": 0.9,
            "stretch": 1.0,
        },
    ]
    for r in rows:
        r.update(
            sdpa_backend=sname,
            ms=t[r["fused"]],
            baseline_ms=t[r["baseline"]],
            ratio=t[r["baseline"]] / t[r["fused"]],
            TFLOPs=tf[r["fused"]],
            fraction_of_bf16_gemm=tf[r["fused"]] / ceil["bf16_gemm_TFLOPs"],
            config=best[r["fused"]],
            numerics=numerics[r["fused"]],
            config_sweep_ms=sweep_ms[r["fused"]],
        )
        r["met"] = r["ratio"] >= r["target"]
        fi = peer_of.get(variants[r["fused"]][0][0].dtype)
        if fi:
            r.update(
                flashinfer=fi,
                flashinfer_ms=t[fi],
                flashinfer_TFLOPs=tf[fi],
                flashinfer_rel_rms=peer_numerics[fi],
                vs_flashinfer=t[fi] / r["ms"],
            )
    for prec in ("default", "fast"):
        fp8_out, nvfp4_out = f"fp8_{prec}", f"fp8_{prec}_nvfp4"
        rows.append(
            {
                "row": f"{head}, FP8 q/k/v, NVFP4 out vs FP8 out ({prec})",
                "fused": nvfp4_out,
                "ms": t[nvfp4_out],
                "fp8_out_ms": t[fp8_out],
                "nvfp4_over_fp8": t[nvfp4_out] / t[fp8_out],
                "target": 1.05,
                "met": t[nvfp4_out] / t[fp8_out] <= 1.05,
                "numerics": numerics[nvfp4_out],
                "config": best[nvfp4_out],
                "config_sweep_ms": sweep_ms[nvfp4_out],
            }
        )
    rows.append(
        {
            "row": f"{head}, SDPA bf16 ({sname})",
            "ms": t["sdpa"],
            "TFLOPs": tf["sdpa"],
            "sdpa_quant_ms": t["sdpa_quant"],
        }
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=result_path("attention_gpu"))
    ap.add_argument("--sweep", action="store_true", help="sweep kernel configs first")
    ap.add_argument("--only", choices=["decode", "prefill"], default=None)
    ap.add_argument("--no-peer", action="store_true", help="leave out the FlashInfer columns")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    fi_version = None if args.no_peer else peer.version()
    ceil = ceilings()
    print(
        f"ceilings: copy {ceil['copy_TBps']:.2f} TB/s, bf16 GEMM "
        f"{ceil['bf16_gemm_TFLOPs']:.0f} TFLOP/s; FlashInfer {fi_version or 'not measured'}",
        flush=True,
    )
    rows: list[dict] = []
    result = {
        "triton": __import__("triton").__version__,
        "flashinfer": fi_version,
        "ceilings": ceil,
        "rows": rows,
    }
    if args.only in (None, "decode"):
        for shape in (
            (64, 32, 8, 4096, 128),
            (128, 40, 8, 1024, 128),
            (8, 32, 8, 1024, 128),
            (1, 32, 8, 1024, 128),
        ):
            r = decode_row(*shape, ceil, args.sweep, fi_version is not None)
            r["target"] = 1.3 if shape[0] == 64 else (1.0 if shape[0] <= 8 else None)
            r["met"] = None if r["target"] is None else r["ratio_fp8_vs_sdpa_quant"] >= r["target"]
            rows.append(r)
            write_json(args.json, result, gpu=True)
            print(
                json.dumps(
                    {k: r[k] for k in ("row", "ms", "ratio_fp8_vs_sdpa_quant", "kv_TBps", "config")}
                ),
                flush=True,
            )
            torch.cuda.empty_cache()
    if args.only in (None, "prefill"):
        rows += prefill_rows(4, 32, 8, 4096, 128, ceil, args.sweep, fi_version is not None)
    write_json(args.json, result, gpu=True)
    print_rows(rows)
    return 0


def print_rows(rows: list[dict]) -> None:
    """The run's table: fused time, baseline time and ratio with its target, and FlashInfer's
    time with the ratio FlashInfer / fused (above 1: graphfuse is faster)."""
    table = []
    for r in rows:
        if "ratio_fp8_vs_sdpa_quant" in r:  # decode
            ms = r["ms"]
            fi = min((ms[k] for k in ("flashinfer_xqa", "flashinfer_tc") if k in ms), default=None)
            table += [
                (r["row"], ms["fused_fp8"], ms["sdpa_quant"], r["ratio_fp8_vs_sdpa_quant"],
                 r["target"], fi, r.get("vs_flashinfer_fp8kv")),
                ("  NVFP4 out / FP8 out", ms["fused_nvfp4"], None, r["nvfp4_over_fp8"], "<=1.05",
                 None, None),
                ("  bf16 paged KV, FP8 out", ms["fused_fp8_bf16kv"], None, None, None,
                 ms.get("flashinfer_tc_bf16kv"), r.get("vs_flashinfer_bf16kv")),
            ]  # fmt: skip
        elif "ratio" in r:  # prefill against its baseline
            table.append((r["row"], r["ms"], r["baseline_ms"], r["ratio"], r["target"],
                          r.get("flashinfer_ms"), r.get("vs_flashinfer")))  # fmt: skip
        elif "nvfp4_over_fp8" in r:  # prefill NVFP4 against FP8 out
            table.append((r["row"], r["ms"], r["fp8_out_ms"], r["nvfp4_over_fp8"], "<=1.05",
                          None, None))  # fmt: skip
    fmts = ("", ".4f", ".4f", ".2f", "", ".4f", ".2f")  # per column: times, ratios, text
    cells = [
        ["-" if v is None else format(v, f) if f else str(v) for v, f in zip(row, fmts)]
        for row in table
    ]
    print()
    print_table(["row", "fused ms", "base ms", "ratio", "target", "FI ms", "FI/fused"], cells)


if __name__ == "__main__":
    raise SystemExit(main())
