"""Paged FP8-KV decode kernel sweep on one GPU (issue #8; docs/benchmarks.md section 3 decode rows).

One process, one call: for each decode shape (B=64 ctx 4096 32/8 first), every kernel variant
of ``graphfuse/triton/decode.py`` is checked against the fp32 reference (full-size FP8 out with
a poisoned buffer, plus a ragged-length batch) and CUDA-graph timed with inputs rotated past
L2; the best ones get a second round of split / grid-order variations, then the finalists are
timed interleaved with bf16 SDPA + compiled FP8 quant (FP8 and NVFP4 out, numerics of both).
A failing variant (compile error, numerics) is recorded and skipped. The sweep stops adding
variants when its time budget runs out. Results go to ``--json`` (written after each shape).

    python benchmarks/decode_sweep.py --json OUT.json [--quick] [--budget 240] [--ncu]

``--ncu`` (when ``ncu`` is on PATH) profiles the default and the best variant at B=64 ctx 4096
into ``decode_ncu.txt`` next to the JSON file (speed of light, memory, warp stall reasons,
occupancy).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import attention_gpu as ag  # noqa: E402  (GraphTimer, input sets, SDPA baseline, ceilings)

from graphfuse.ops.paged_ref import paged_decode_fp32  # noqa: E402
from graphfuse.ops.quant_ref import fp8_static_quant_ref, nvfp4_quant_ref  # noqa: E402
from graphfuse.testing.numerics import assert_nvfp4_close  # noqa: E402
from graphfuse.triton import decode as dec  # noqa: E402
from graphfuse.triton.paged import paged_into  # noqa: E402
from tests.gpu._accept import check_fp8, nvfp4_stats  # noqa: E402

FP8 = torch.float8_e4m3fn
DEV = "cuda"
PAGE = 16
# (B, Hq, Hkv, ctx, D), share of the remaining budget, target vs SDPA + quant
SHAPES = [
    ((64, 32, 8, 4096, 128), 0.55, 1.3),
    ((8, 32, 8, 1024, 128), 0.4, 1.0),
    ((1, 32, 8, 1024, 128), 0.6, 1.0),
    ((128, 40, 8, 1024, 128), 1.0, None),
]
_QUANT: dict = {}  # one torch.compile'd FP8 quant for every shape
NCU_SECTIONS = (
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "WarpStateStats",
    "Occupancy",
    "LaunchStats",
    "SchedulerStats",
)


def head(bn, w, s, **kw) -> dict:
    return dict(kernel="head", block_n=bn, num_warps=w, num_stages=s, **kw)


def phase1(b: int, hkv: int, quick: bool) -> list[tuple[str, dict]]:
    """First-round variants, most promising first (the budget may cut the tail): pipeline
    depth with block-table look-ahead, tile, warps, orientation, the all-heads kernel."""
    v: list[tuple[str, dict]] = [("default", {})]
    if b * hkv >= 128:  # bandwidth-bound shapes
        grid = [(32, 4, 4), (64, 8, 4), (128, 8, 3), (64, 4, 4), (32, 4, 5), (64, 8, 5)]
        grid += [] if quick else [(32, 8, 4), (128, 8, 4), (128, 4, 3), (64, 4, 3)]
        pf = [(64, 8), (32, 4)] + ([] if quick else [(128, 8)])
        tr = [(64, 8, 3)] + ([] if quick else [(64, 4, 3), (128, 8, 3)])
        seq = [(16, 8, 3, False), (16, 8, 2, True)] + ([] if quick else [(16, 8, 2, False)])
    else:  # latency-bound (B <= 8 at 8 KV heads)
        grid = [(64, 4, 3), (32, 4, 4), (64, 8, 4)] + ([] if quick else [(32, 8, 3), (128, 8, 3)])
        pf = [(64, 4), (32, 4)] + ([] if quick else [(64, 8)])
        tr = [] if quick else [(64, 4, 3)]
        seq = [(16, 8, 2, False)] + ([] if quick else [(16, 8, 3, False), (16, 8, 2, True)])
    for bn, w, s in grid:
        v.append((f"head_bt_n{bn}_w{w}_s{s}", head(bn, w, s, bt_ahead=True, prefetch=False)))
    if b * hkv < 32:  # few programs: one kernel (no merge) with a deep pipeline may win
        for sp in (1, 2):
            cfg = head(64, 4, 4, bt_ahead=True, prefetch=False, splits=sp)
            v.append((f"head_bt_n64_w4_s4_sp{sp}", cfg))
    for bn, w in pf:
        v.append((f"head_pf_bt_n{bn}_w{w}", head(bn, w, 1, bt_ahead=True, prefetch=True)))
    for bn, w, s in tr:
        cfg = head(bn, w, s, bt_ahead=True, prefetch=False, trans=True)
        v.append((f"head_trans_bt_n{bn}_w{w}_s{s}", cfg))
    for bn, w, s, t in seq:
        cfg = dict(kernel="seq", block_n=bn, num_warps=w, num_stages=s, bt_ahead=True, trans=t)
        cfg["prefetch"] = False
        v.append((f"seq_bt_n{bn}_w{w}_s{s}{'_trans' if t else ''}", cfg))
    v.append(("default_head_major", dict(head_major=True)))
    return v


def auto_splits(cfg: dict, b: int, hkv: int, ctx: int) -> int:
    """The split count ``decode_into`` picks for ``cfg`` (before rounding to whole tiles)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if cfg.get("kernel") == "seq":
        return dec.choose_splits_seq(b, ctx, sms, cfg.get("block_n") or 16)
    bn = cfg.get("block_n") or (128 if b * hkv >= 512 else 64)
    return dec.choose_splits(b, hkv, ctx, sms, bn)


def effective_splits(cfg: dict, b: int, hkv: int, ctx: int) -> int:
    bn = cfg.get("block_n") or (16 if cfg.get("kernel") == "seq" else 64)
    s = cfg.get("splits") or auto_splits(cfg, b, hkv, ctx)
    chunk = math.ceil(math.ceil(ctx / s) / bn) * bn
    return math.ceil(ctx / chunk)


def phase2(best: list[tuple[str, dict]], b: int, hkv: int, ctx: int) -> list[tuple[str, dict]]:
    """Second round around the best variants: split counts and (head kernel) grid order."""
    out, seen = [], set()
    for name, cfg in best:
        s0 = effective_splits(cfg, b, hkv, ctx)
        seen.add((json.dumps(cfg, sort_keys=True), s0))
        cands = [max(1, s0 // 2), s0 * 2, s0 * 4, s0 + 1]
        for s in cands:
            c = dict(cfg, splits=min(s, 64))
            key = (json.dumps(cfg, sort_keys=True), effective_splits(c, b, hkv, ctx))
            if key not in seen:
                seen.add(key)
                out.append((f"{name}_sp{key[1]}", c))
        if cfg.get("kernel", "head") == "head" and not cfg.get("head_major"):
            out.append((f"{name}_hm", dict(cfg, head_major=True)))
    return out


class Shape:
    """Inputs, reference, output buffers and SDPA baseline of one decode shape."""

    def __init__(self, b, hq, hkv, ctx, d):
        self.b, self.hq, self.hkv, self.ctx, self.d = b, hq, hkv, ctx, d
        self.kv_bytes = 2 * b * hkv * ctx * d
        n_sets = max(1, min(16, math.ceil(ag.L2_ROTATE_BYTES / self.kv_bytes)))
        self.sets = [ag._paged_set(b, hq, hkv, ctx, d, FP8, i) for i in range(n_sets)]
        q, cache, tables, lens, ks, vs = self.sets[0]
        self.wide = paged_decode_fp32(q, cache, tables, lens, None, ks, vs, None)
        amax = self.wide.abs().max().item()
        self.s_o = torch.tensor([amax / 448], device=DEV)
        self.g = torch.tensor([448 * 6 / amax], device=DEV)
        self.ref8 = fp8_static_quant_ref(self.wide, self.s_o)
        w2 = self.wide.reshape(b, hq * d)
        self.rp, self.rs = nvfp4_quant_ref(w2, self.g, swizzle=True)
        self.o8 = torch.empty((b, hq, d), device=DEV, dtype=FP8)
        self.pk = torch.empty((b, hq * d // 2), device=DEV, dtype=torch.uint8)
        self.sf = torch.empty(
            ((b + 127) // 128 * 128, (hq * d // 16 + 3) // 4 * 4), device=DEV, dtype=FP8
        )
        self.ragged = self._ragged()

    def _ragged(self):
        """A small batch with ragged lengths (0, full, partial tiles), same heads."""
        gen = torch.Generator().manual_seed(11)
        b, mb = 5, 32  # table stride 32: the same integer specialisation as the big shapes
        nb = b * mb + 3
        q = torch.randn((b, self.hq, self.d), generator=gen).to(torch.bfloat16)
        cache = (torch.randn((nb, 2, PAGE, self.hkv, self.d), generator=gen) * 64).to(FP8)
        tables = torch.randperm(nb, generator=gen)[: b * mb].view(b, mb).to(torch.int32)
        lens = torch.tensor([mb * PAGE, 0, 1, 37, 129], dtype=torch.int32)
        tables[1] = -1
        ks = torch.tensor([1 / 64.0])
        vs = torch.tensor([1 / 48.0])
        args = [x.to(DEV) for x in (q, cache, tables, lens)] + [None, ks.to(DEV), vs.to(DEV), None]
        wide = paged_decode_fp32(*args)
        return args, wide

    def calls(self, kind: int, cfg: dict, out=None):
        """One call per rotated input set (FP8 out: kind 1, NVFP4: kind 2)."""
        fns = []
        for st in self.sets:
            qq, cc, tt, ll, kk, vv = st
            if kind == 1:
                o8 = self.o8 if out is None else out
                fns.append(
                    lambda a=(qq, cc, tt, ll, None, kk, vv, None), o=o8: paged_into(
                        *a, o, 1, self.s_o, **cfg
                    )
                )
            else:
                fns.append(
                    lambda a=(qq, cc, tt, ll, None, kk, vv, None): paged_into(
                        *a, self.pk, 2, self.g, self.sf, **cfg
                    )
                )
        return fns

    def check_fp8(self, cfg: dict) -> dict:
        """FP8 out on the full-size set 0 (poisoned output) and the ragged batch."""
        q, cache, tables, lens, ks, vs = self.sets[0]
        self.o8.view(torch.uint8).fill_(0xFF)
        paged_into(q, cache, tables, lens, None, ks, vs, None, self.o8, 1, self.s_o, **cfg)
        st = check_fp8(self.o8, self.ref8, self.wide, self.s_o.item(), min_equal=0.9)
        args, wide = self.ragged
        s_o = torch.tensor([wide.abs().max().item() / 448], device=DEV)
        o8 = torch.full(wide.shape, 0xFF, dtype=torch.uint8, device=DEV).view(FP8)
        paged_into(*args, o8, 1, s_o, **cfg)
        check_fp8(o8, fp8_static_quant_ref(wide, s_o), wide, s_o.item(), min_equal=0.9)
        return st

    def check_nvfp4(self, cfg: dict) -> dict:
        """NVFP4 out (poisoned packed bytes and scales, padding must come back zero)."""
        q, cache, tables, lens, ks, vs = self.sets[0]
        self.pk.fill_(0xA5)
        self.sf.view(torch.uint8).fill_(0xFF)
        paged_into(q, cache, tables, lens, None, ks, vs, None, self.pk, 2, self.g, self.sf, **cfg)
        w2 = self.wide.reshape(self.b, self.hq * self.d)
        assert_nvfp4_close(self.pk, self.sf, self.rp, self.rs, w2, self.g, min_equal=0.9)
        st = nvfp4_stats(self.pk, self.sf, self.rp, self.rs, w2, self.g)
        args, wide = self.ragged
        b = wide.shape[0]
        g = torch.tensor([448 * 6 / wide.abs().max().item()], device=DEV)
        pk = torch.full((b, self.hq * self.d // 2), 0xA5, dtype=torch.uint8, device=DEV)
        sf = torch.full(
            ((b + 127) // 128 * 128, (self.hq * self.d // 16 + 3) // 4 * 4), 0xFF, device=DEV,
            dtype=torch.uint8,
        ).view(FP8)  # fmt: skip
        paged_into(*args, pk, 2, g, sf, **cfg)
        w2 = wide.reshape(b, -1)
        rp, rs = nvfp4_quant_ref(w2, g, swizzle=True)
        assert_nvfp4_close(pk, sf, rp, rs, w2, g, min_equal=0.9)
        return st

    def baseline_timers(self) -> tuple[str, dict]:
        """bf16 dense KV, fastest SDPA backend (+ compiled FP8 quant), CUDA-graph timed."""
        n_bf = max(1, min(16, math.ceil(ag.L2_ROTATE_BYTES / (2 * self.kv_bytes))))
        bsets = []
        for i in range(n_bf):
            gen = torch.Generator(device=DEV).manual_seed(100 + i)
            shp_q = (self.b, self.hq, 1, self.d)
            shp_kv = (self.b, self.hkv, self.ctx, self.d)
            bsets.append(
                tuple(
                    torch.randn(s, device=DEV, generator=gen, dtype=torch.bfloat16)
                    for s in (shp_q, shp_kv, shp_kv)
                )
            )
        sname, be, gqa = ag.sdpa_best(*bsets[0], causal=False)
        quant = _QUANT.setdefault("fn", ag._quant_fn(False))
        s_b = torch.tensor([0.01], device=DEV)
        sdpas = [ag.make_sdpa(qb, kb, vb, be, gqa, False) for qb, kb, vb in bsets]
        timers = {
            "sdpa_quant": ag.GraphTimer([(lambda sd=sd: quant(sd(), s_b)) for sd in sdpas]),
            "sdpa": ag.GraphTimer(sdpas),
        }
        return sname, timers


def kernel_stats() -> dict:
    """Registers / spills / shared memory of every compiled decode kernel (Triton's cache)."""
    from graphfuse.triton import decode_kernels as dk

    out = {}
    for fn in (dk.decode_head, dk.decode_seq):
        try:
            for key, k in fn.device_caches[torch.cuda.current_device()][0].items():
                if hasattr(k, "result"):
                    k = k.result()
                md = k.metadata
                tag = f"{fn.__name__} warps={md.num_warps} stages={md.num_stages} {str(key)[-160:]}"
                out[tag] = {"regs": k.n_regs, "spills": k.n_spills, "smem": md.shared}
        except Exception as exc:  # Triton internals differ between versions
            out[fn.__name__] = f"unavailable: {exc!r}"[:200]
    return out


class CudaContextLost(RuntimeError):
    """A CUDA error that poisons the context (every later call would fail too)."""


def _fatal(exc: Exception) -> None:
    msg = str(exc)
    if "illegal" in msg or "CUDA error" in msg or "unspecified launch failure" in msg:
        raise CudaContextLost(msg[:300]) from exc


def try_variant(sh: Shape, name: str, cfg: dict, log: dict) -> float | None:
    """Numerics (FP8 out) then one CUDA-graph timing; records the outcome in ``log``."""
    t0 = time.monotonic()
    rec = {"config": cfg}
    log[name] = rec
    try:
        rec["fp8_numerics"] = sh.check_fp8(cfg)
    except AssertionError as exc:
        rec["error"] = f"numerics: {exc}"[:600]
    except Exception as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"[:600]
        rec["trace"] = traceback.format_exc()[-1500:]
        _fatal(exc)
    if "error" not in rec:
        try:
            rec["fp8_ms"] = ag.GraphTimer(sh.calls(1, cfg)).time()
        except Exception as exc:
            rec["error"] = f"timing: {type(exc).__name__}: {exc}"[:600]
            _fatal(exc)
    rec["wall_s"] = round(time.monotonic() - t0, 2)
    ms = rec.get("fp8_ms")
    status = f"{ms * 1e3:8.1f} us" if ms else "FAILED " + rec.get("error", "")[:150]
    print(f"  {name:34s} {status}", flush=True)
    return ms


def run_shape(shape, target, deadline: float, quick: bool, ceil: dict) -> dict:
    b, hq, hkv, ctx, d = shape
    t_start = time.monotonic()
    print(f"\n== decode B={b} ctx={ctx} {hq}/{hkv} D={d} (budget {deadline - t_start:.0f} s)")
    sh = Shape(b, hq, hkv, ctx, d)
    log: dict = {}
    times: dict = {}
    for name, cfg in phase1(b, hkv, quick):
        if time.monotonic() > deadline and len(times) >= 1:
            log[name] = {"config": cfg, "skipped": "budget"}
            continue
        ms = try_variant(sh, name, cfg, log)
        if ms:
            times[name] = ms
    ranked = sorted(times, key=times.get)
    top = [(n, log[n]["config"]) for n in ranked[:3] if n != "default"] or [
        (n, log[n]["config"]) for n in ranked[:1]
    ]
    for name, cfg in phase2(top, b, hkv, ctx):
        if time.monotonic() > deadline:
            log[name] = {"config": cfg, "skipped": "budget"}
            continue
        ms = try_variant(sh, name, cfg, log)
        if ms:
            times[name] = ms
    ranked = sorted(times, key=times.get)
    finalists = list(dict.fromkeys([n for n in ranked[:3]] + ["default"]))
    finalists = [n for n in finalists if n in times]
    # finalists: NVFP4 numerics, then interleaved timing against the baseline
    timers = {}
    final = {}
    for n in finalists:
        cfg = log[n]["config"]
        try:
            log[n]["nvfp4_numerics"] = sh.check_nvfp4(cfg)
            timers[f"{n}|nvfp4"] = ag.GraphTimer(sh.calls(2, cfg))
        except Exception as exc:
            log[n]["nvfp4_error"] = f"{type(exc).__name__}: {exc}"[:600]
        timers[f"{n}|fp8"] = ag.GraphTimer(sh.calls(1, cfg))
    if "default" in finalists:  # the NVFP4 scale padding by a memset (the previous path)
        try:
            timers["default_memset_pad|nvfp4"] = ag.GraphTimer(sh.calls(2, dict(sf_pad=False)))
        except Exception as exc:
            final["memset_pad_error"] = repr(exc)[:300]
    sname, btimers = sh.baseline_timers()
    timers.update(btimers)
    t = ag.interleaved(timers)
    floor_ms = sh.kv_bytes / (ceil["copy_TBps"] * 1e12) * 1e3
    best = min(finalists, key=lambda n: t[f"{n}|fp8"]) if finalists else None
    rows = []
    for n in finalists:
        fp8_ms = t[f"{n}|fp8"]
        nv_ms = t.get(f"{n}|nvfp4")
        rows.append(
            {
                "variant": n,
                "config": log[n]["config"],
                "fp8_ms": fp8_ms,
                "nvfp4_ms": nv_ms,
                "ratio_fp8_vs_sdpa_quant": t["sdpa_quant"] / fp8_ms,
                "nvfp4_over_fp8": nv_ms / fp8_ms if nv_ms else None,
                "kv_TBps": sh.kv_bytes / (fp8_ms * 1e-3) / 1e12,
                "fraction_of_copy_bw": floor_ms / fp8_ms,
            }
        )
    result = {
        "row": f"decode B={b} ctx={ctx} {hq}/{hkv} heads D={d}, paged FP8 KV (block {PAGE})",
        "target": target,
        "sdpa_backend": sname,
        "baseline_ms": {"sdpa_quant": t["sdpa_quant"], "sdpa": t["sdpa"]},
        "floor_ms_fp8_kv": floor_ms,
        "finalists": rows,
        "best": best,
        "best_config": log[best]["config"] if best else None,
        "default_memset_pad_nvfp4_ms": t.get("default_memset_pad|nvfp4"),
        "variants": log,
        "wall_s": round(time.monotonic() - t_start, 1),
        **final,
    }
    if best:
        r = next(r for r in rows if r["variant"] == best)
        result["met"] = None if target is None else r["ratio_fp8_vs_sdpa_quant"] >= target
    return result


def ncu_child(cfg: dict) -> int:
    """Runs the B=64 ctx 4096 FP8-out call a few times (the process ncu profiles)."""
    b, hq, hkv, ctx, d = SHAPES[0][0]
    q, cache, tables, lens, ks, vs = ag._paged_set(b, hq, hkv, ctx, d, FP8, 0)
    out = torch.empty((b, hq, d), device=DEV, dtype=FP8)
    s_o = torch.tensor([0.01], device=DEV)
    for _ in range(4):
        paged_into(q, cache, tables, lens, None, ks, vs, None, out, 1, s_o, **cfg)
    torch.cuda.synchronize()
    return 0


def run_ncu(configs: dict, path: Path, limit_s: float) -> str:
    exe = shutil.which("ncu")
    if exe is None:
        return "ncu not on PATH"
    chunks = []
    t_end = time.monotonic() + limit_s
    for name, cfg in configs.items():
        left = t_end - time.monotonic()
        if left < 20:
            chunks.append(f"### {name}: skipped (time)\n")
            continue
        cmd = [exe, "--target-processes", "all", "-k", "regex:decode_(head|seq)"]
        cmd += ["--launch-skip", "2", "--launch-count", "1"]
        for s in NCU_SECTIONS:
            cmd += ["--section", s]
        cmd += [sys.executable, str(Path(__file__).resolve()), "--ncu-child", json.dumps(cfg)]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
            chunks.append(
                f"### {name} {json.dumps(cfg)}\n{res.stdout[-20000:]}\n{res.stderr[-3000:]}"
            )
        except subprocess.TimeoutExpired:
            chunks.append(f"### {name}: ncu timed out\n")
    path.write_text("\n".join(chunks))
    return f"written {path}"


def print_table(rows: list[dict]) -> None:
    print(f"\n{'shape / variant':<58} {'fp8 us':>8} {'nvfp4/fp8':>9} {'base us':>8} {'ratio':>6} "
          f"{'TB/s':>5} {'target':>6}")  # fmt: skip
    for r in rows:
        base = r["baseline_ms"]["sdpa_quant"]
        print(r["row"])
        for f in r["finalists"]:
            nv = f"{f['nvfp4_over_fp8']:.3f}" if f["nvfp4_over_fp8"] else "-"
            mark = "*" if f["variant"] == r["best"] else " "
            print(
                f" {mark} {f['variant']:<55} {f['fp8_ms'] * 1e3:8.1f} {nv:>9} {base * 1e3:8.1f} "
                f"{f['ratio_fp8_vs_sdpa_quant']:6.2f} {f['kv_TBps']:5.2f} {r['target'] or '-':>6}"
            )
        if r.get("default_memset_pad_nvfp4_ms"):
            print(f"   (default NVFP4 with the old memset padding: "
                  f"{r['default_memset_pad_nvfp4_ms'] * 1e3:.1f} us)")  # fmt: skip
    for r in rows:
        print(f"suggested config for {r['row'].split(',')[0]}: {json.dumps(r['best_config'])}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(HERE / "results" / "decode_sweep.json"))
    ap.add_argument("--quick", action="store_true", help="fewer variants")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run")
    ap.add_argument("--ncu", action="store_true", help="profile default and best with ncu")
    ap.add_argument("--only", type=int, default=None, help="only the shape with this batch")
    ap.add_argument("--ncu-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ncu_child is not None:
        return ncu_child(json.loads(args.ncu_child))
    t0 = time.monotonic()
    ncu_reserve = 80.0 if args.ncu and shutil.which("ncu") else 0.0
    end = t0 + args.budget - ncu_reserve - 30.0  # 30 s: the last shape's final timing
    torch.manual_seed(0)
    ceil = ag.ceilings()
    print(f"ceilings: copy {ceil['copy_TBps']:.2f} TB/s", flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "ceilings": ceil,
        "rows": [],
    }
    shapes = [s for s in SHAPES if args.only is None or s[0][0] == args.only]
    for shape, share, target in shapes:
        now = time.monotonic()
        if now > end:
            result["rows"].append({"row": str(shape), "skipped": "budget"})
            continue
        deadline = now + (end - now) * share
        quick = args.quick or target is None
        try:
            result["rows"].append(run_shape(shape, target, deadline, quick, ceil))
        except CudaContextLost as exc:  # nothing more can run in this process
            result["rows"].append({"row": str(shape), "error": f"CUDA context lost: {exc}"})
            out.write_text(json.dumps(result, indent=1, default=str))
            print(f"CUDA context lost ({exc}); stopping", flush=True)
            break
        except Exception as exc:
            traceback.print_exc()
            result["rows"].append({"row": str(shape), "error": repr(exc)[:1000]})
        result["kernel_stats"] = kernel_stats()
        out.write_text(json.dumps(result, indent=1, default=str))
        torch.cuda.empty_cache()
    rows = [r for r in result["rows"] if "finalists" in r]
    print_table(rows)
    if args.ncu:
        b64 = next((r for r in rows if r["row"].startswith("decode B=64")), None)
        cfgs = {"default": {}}
        if b64 and b64.get("best_config") not in (None, {}):
            cfgs["best"] = b64["best_config"]
        left = args.budget - (time.monotonic() - t0) - 5
        result["ncu"] = run_ncu(cfgs, out.parent / "decode_ncu.txt", left)
        print(result["ncu"])
    result["wall_s"] = round(time.monotonic() - t0, 1)
    out.write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {out} ({result['wall_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
