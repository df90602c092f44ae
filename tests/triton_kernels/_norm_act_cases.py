"""Seeded cases for the Triton norm / activation + quant kernels against
``graphfuse/ops/norm_act_ref.py``, shared by the CUDA tests (tests/gpu/test_norm_act_gpu.py)
and the Triton CPU interpreter run (tests/triton_kernels/test_norm_act_interpret.py).

Each case calls a ``*_into`` launcher with poisoned output buffers and returns statistics
against the reference (computed on the CPU): equal-byte fractions, the largest e4m3 step
between differing bytes, the NVFP4 RMSE ratio, whether the residual is bit-equal.
:func:`failures` applies docs/numerics.md's GPU acceptance to every kernel (FP8 bytes within
one step, at least 99% equal; NVFP4 block scales within one step, RMSE at most 1.05x; the
residual bit-equal): the RMSNorm kernels sum the squares as a tree and the activations use the
hardware's ``exp`` and reciprocal, the freedoms the kernels take from the reference's
arithmetic.

Under the interpreter (``python -m tests.triton_kernels._norm_act_cases --device cpu``, with
``TRITON_INTERPRET=1``) ``_interpreter.patch`` first makes the interpreter convert floats as
the GPU does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import sys

import torch

from graphfuse.ops import norm_act_ref as R
from graphfuse.ops.quant_ref import nvfp4_dequant_ref, nvfp4_scale_shape, unswizzle_block_scales

FP8 = torch.float8_e4m3fn
FLOATS = (torch.float32, torch.bfloat16, torch.float16)
NORM_DTYPES = (None, torch.float32, torch.bfloat16, torch.float16)
SPECIALS = (float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e4, -3e4, 1e-30)


# -- inputs ----------------------------------------------------------------------------------


def _rand(shape, dtype, gen: torch.Generator, scale: float, specials: bool) -> torch.Tensor:
    """Random values (never all zero), with special values sprinkled in when asked."""
    x = torch.randn(shape, generator=gen) * scale
    if specials and x.numel():
        flat = x.view(-1)
        n = max(1, flat.numel() // 300)
        idx = torch.randint(0, flat.numel(), (n,), generator=gen)
        pick = torch.randint(0, len(SPECIALS), (n,), generator=gen)
        flat[idx] = torch.tensor(SPECIALS)[pick]
    return x.to(dtype)


def _layout(x: torch.Tensor, layout: str | None) -> torch.Tensor:
    """``x`` as a row-strided view (``rows``: padded rows), a transposed copy (``copy``:
    unit column stride only after the launcher's copy) or as is."""
    m, k = x.shape
    if layout == "rows":
        wide = torch.full((m, k + 48), float("nan"), dtype=x.dtype)
        wide[:, 16 : 16 + k] = x
        return wide[:, 16 : 16 + k]
    if layout == "copy":
        return x.t().contiguous().t()
    return x


def _finite_amax(t: torch.Tensor) -> float:
    f = t.float()
    f = f[torch.isfinite(f)].abs()
    return float(f.max()) if f.numel() and float(f.max()) > 0 else 1.0


def _poisoned(shape, dtype, device, byte: int) -> torch.Tensor:
    t = torch.full(shape, byte, dtype=torch.uint8, device=device)
    return t.view(dtype) if dtype != torch.uint8 else t


# -- comparison --------------------------------------------------------------------------------


def _grid(b: torch.Tensor) -> torch.Tensor:
    """Rank of each e4m3 byte on the ordered grid of e4m3 values (-0 == +0)."""
    mag = (b & 0x7F).to(torch.int64)
    return torch.where((b & 0x80) != 0, -mag, mag)


def fp8_stats(got: torch.Tensor, want: torch.Tensor) -> dict:
    """Equal fraction and largest step of FP8 bytes; NaN bytes compare by NaN-ness."""
    gb, wb = got.cpu().contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
    gn, wn = (gb & 0x7F) == 0x7F, (wb & 0x7F) == 0x7F
    keep = ~wn
    diff = (_grid(gb) - _grid(wb)).abs()[keep & ~gn]
    n = int(keep.sum())
    return {
        "nan_same": bool(torch.equal(gn, wn)),
        "equal": float((gb == wb)[keep].double().mean()) if n else 1.0,
        "max_step": int(diff.max()) if diff.numel() else 0,
        "n": int(gb.numel()),
    }


def nvfp4_stats(got: tuple, want: tuple, wide: torch.Tensor, g: torch.Tensor, swizzle: bool):
    """Packed / scale equal fractions (data of NaN blocks excluded), the largest scale step,
    and the RMSE ratio of the dequantized outputs against the reference's unquantized
    values ``wide`` (finite elements)."""
    gp, gs = got[0].cpu(), got[1].cpu()
    wp, ws = want
    gsb, wsb = gs.view(torch.uint8), ws.view(torch.uint8)
    m, kb = wp.shape[0], wp.shape[1] // 8
    lin = unswizzle_block_scales(ws, m, kb) if swizzle else ws
    nan_blocks = ((lin.view(torch.uint8) & 0x7F) == 0x7F).repeat_interleave(8, dim=1)
    keep = ~nan_blocks
    st = {
        "packed_equal": float((gp == wp)[keep].double().mean()) if keep.any() else 1.0,
        "scale_equal": float((gsb == wsb).double().mean()) if wsb.numel() else 1.0,
        "scale_max_step": int((_grid(gsb) - _grid(wsb)).abs().max()) if wsb.numel() else 0,
        "rmse_ratio": 1.0,
    }
    if m and not (torch.equal(gp, wp) and torch.equal(gsb, wsb)):
        d_got = nvfp4_dequant_ref(gp, gs, g.cpu(), torch.float32, swizzled=swizzle)
        d_want = nvfp4_dequant_ref(wp, ws, g.cpu(), torch.float32, swizzled=swizzle)
        w = wide.float().reshape(m, -1)
        ok = torch.isfinite(w) & torch.isfinite(d_got) & torch.isfinite(d_want)
        e_got = (d_got - w)[ok].pow(2).mean().sqrt().item()
        e_want = (d_want - w)[ok].pow(2).mean().sqrt().item()
        st["rmse_ratio"] = e_got / max(e_want, 1e-30)
    return st


def same_float(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Bit-equal, except that NaNs compare by position only."""
    got = got.cpu()
    gn, wn = got.isnan(), want.isnan()
    return bool(
        torch.equal(gn, wn)
        and torch.equal(got[~gn].view(-1).view(torch.uint8), want[~wn].view(-1).view(torch.uint8))
    )


# -- cases ------------------------------------------------------------------------------------


def norm_cases(seed: int, n: int, hidden=(64, 100, 4096, 5120), rows=(0, 1, 3, 7, 130, 300)):
    """``n`` RMSNorm cases (dicts) drawn with ``seed``; K % 16 != 0 only with FP8 out."""
    rng = random.Random(seed)
    for _ in range(n):
        fmt = rng.choice(["fp8", "nvfp4"])
        k = rng.choice(hidden)
        if fmt == "nvfp4" and k % 16:
            k = 48  # 3 blocks: swizzle padding columns
        yield {
            "op": "norm", "fmt": fmt, "dtype": rng.choice(FLOATS), "wdtype": rng.choice(FLOATS),
            "k": k, "rows": rng.choice(rows), "norm_dtype": rng.choice(NORM_DTYPES),
            "weight_first": rng.random() < 0.5, "residual": rng.random() < 0.5,
            "swizzle": rng.random() < 0.6, "layout": rng.choice([None, None, "rows", "copy"]),
            "specials": rng.random() < 0.25, "seed": rng.randrange(1 << 30),
        }  # fmt: skip


def _nvfp4_norm_case(dtype=torch.bfloat16, **fields) -> dict:
    """An NVFP4 RMSNorm case in the transformers spelling of a ``dtype`` model (the weight of
    the input dtype, the norm rounded to it before the weight multiply), no residual, swizzled
    scales, contiguous inputs without special values; ``fields`` set the rest and override."""
    return {
        "op": "norm", "fmt": "nvfp4", "dtype": dtype, "wdtype": dtype, "norm_dtype": None,
        "weight_first": False, "residual": False, "swizzle": True, "layout": None,
        "specials": False, **fields,
    }  # fmt: skip


def model_norm_cases(seed: int, hidden=(64, 100, 4096, 5120), rows=(1, 3, 130, 300)):
    """The NVFP4 RMSNorm spellings of 16-bit transformers models, with and without the residual
    add: the kernels' packed weight products (``normed_pairs``) run only for these, which the
    random draw of ``norm_cases`` reaches in about one case in 36."""
    rng = random.Random(seed)
    for dtype in (torch.bfloat16, torch.float16):
        for residual in (False, True):
            yield _nvfp4_norm_case(
                dtype, k=rng.choice([h for h in hidden if h % 16 == 0]),
                rows=rng.choice([r for r in rows if r]), residual=residual,
                swizzle=rng.random() < 0.6, layout=rng.choice([None, "rows"]),
                specials=rng.random() < 0.25, seed=rng.randrange(1 << 30),
            )  # fmt: skip


def many_rows_cases(seed: int, rows: int = 4 * 132 + 77):
    """NVFP4 RMSNorm (bf16, 4 warps) over more than four rows a program of its looping launch
    (4 warps an SM here, ``loop_warps``: one program an SM, so that the case stays small): the
    programs loop over four or five rows, loading the next before computing the current; the
    rows end inside a swizzle tile. Hidden 64 (the row is the tile: no column masks) and 80
    (5 of the tile's 8 blocks real: masked loads, padding scale columns)."""
    rng = random.Random(seed)
    for k in (64, 80):
        yield _nvfp4_norm_case(k=k, rows=rows, loop_warps=4, seed=rng.randrange(1 << 30))


def split_row_cases(seed: int):
    """NVFP4 RMSNorm over few rows of a large hidden size, where the launcher splits each row
    over several programs by block columns (``launch._norm_nvfp4_parts``): hidden 1024 (2
    programs a row, the row is the tile) and 1040 (65 blocks: 4 programs a row of 32 block
    columns, the last ones masked or swizzle padding), with and without the residual add."""
    rng = random.Random(seed)
    for k, rows, residual in ((1024, 5, False), (1040, 3, True), (1040, 2, False)):
        yield _nvfp4_norm_case(
            k=k, rows=rows, residual=residual, swizzle=k == 1040 or rng.random() < 0.5,
            seed=rng.randrange(1 << 30),
        )  # fmt: skip


def extreme_scale_cases(seed: int, hidden=(64, 100, 4096, 5120), inter=(64, 4096, 5120, 14336)):
    """NVFP4 RMSNorm and SiLU-and-mul (bf16) at global scales of ``2**118`` or more, where an
    encode multiplier can overflow (``inf``: it always does), with about 2% of the inputs at
    ``+-1e-39``: values that a multiplier clamped to FLT_MAX alone would not send to +-6.
    Their bytes must equal the reference's (``exact``)."""
    rng = random.Random(seed)
    for g in (float("inf"), 2.0**120):
        yield _nvfp4_norm_case(
            k=rng.choice([h for h in hidden if h % 16 == 0]), rows=3,
            residual=rng.random() < 0.5, tiny=True, global_scale=g, seed=rng.randrange(1 << 30),
        )  # fmt: skip
        yield {
            "op": "act", "fmt": "nvfp4", "dtype": torch.bfloat16,
            "k": rng.choice([i for i in inter if i % 16 == 0]), "rows": 3, "activation": "silu",
            "swizzle": True, "merged": True, "specials": False, "tiny": True, "global_scale": g,
            "seed": rng.randrange(1 << 30),
        }  # fmt: skip


def act_cases(seed: int, n: int, inter=(64, 4096, 5120, 14336), rows=(0, 1, 3, 7, 130, 300)):
    """``n`` act_and_mul cases drawn with ``seed``; gate / up are usually the halves of one
    merged ``[M, 2I]`` tensor."""
    rng = random.Random(seed)
    for _ in range(n):
        yield {
            "op": "act", "fmt": rng.choice(["fp8", "nvfp4"]), "dtype": rng.choice(FLOATS),
            "k": rng.choice(inter), "rows": rng.choice(rows),
            "activation": rng.choice(list(R.ACTIVATIONS)), "swizzle": rng.random() < 0.6,
            "merged": rng.random() < 0.7, "specials": rng.random() < 0.25,
            "seed": rng.randrange(1 << 30),
        }  # fmt: skip


def _nvfp4_ref(z: torch.Tensor, g: torch.Tensor, swizzle: bool) -> tuple:
    """``nvfp4_quant_ref``, or the empty outputs of zero rows (which it cannot reshape)."""
    if z.shape[0]:
        return R.nvfp4_quant_ref(z, g, swizzle)
    k = z.shape[1]
    return z.new_empty((0, k // 2), dtype=torch.uint8), z.new_empty(
        nvfp4_scale_shape(0, k, swizzle), dtype=FP8
    )


def _tiny(x: torch.Tensor, gen: torch.Generator, case: dict) -> torch.Tensor:
    """``x`` with about 2% of its elements at ``+-1e-39`` where the case asks (``tiny``)."""
    if not case.get("tiny") or not x.numel():
        return x
    flat = x.float().view(-1)
    pick = torch.rand(flat.shape, generator=gen) < 0.02
    sign = torch.where(torch.rand(flat.shape, generator=gen) < 0.5, -1.0, 1.0)
    return torch.where(pick, sign * 1e-39, flat).view(x.shape).to(x.dtype)


def _global_scale(case: dict, wide: torch.Tensor) -> torch.Tensor:
    """The case's fixed NVFP4 global scale, or one that puts the largest value near 448 * 6."""
    if "global_scale" in case:
        return torch.tensor(case["global_scale"])
    return torch.tensor(448 * 6 / _finite_amax(wide) * random.Random(case["seed"]).uniform(0.5, 2))


@contextlib.contextmanager
def _loop_warps(n: int | None):
    """The looping NVFP4 RMSNorm launch filling ``n`` warps an SM inside (unchanged for
    None)."""
    from graphfuse.triton.norm_act import launch

    old = launch.NORM_NVFP4_LOOP_WARPS
    launch.NORM_NVFP4_LOOP_WARPS = n or old
    try:
        yield
    finally:
        launch.NORM_NVFP4_LOOP_WARPS = old


def run_norm(case: dict, device: str) -> dict:
    """One RMSNorm case through the launchers on ``device``; its statistics."""
    from graphfuse.triton.norm_act.launch import rms_norm_quant_fp8_into, rms_norm_quant_nvfp4_into

    gen = torch.Generator().manual_seed(case["seed"])
    m, k, dt = case["rows"], case["k"], case["dtype"]
    x = _tiny(_rand((m, k), dt, gen, 2.0, case["specials"]), gen, case)
    res = _rand((m, k), dt, gen, 1.0, False) if case["residual"] else None
    w = (torch.rand(k, generator=gen) + 0.5).to(case["wdtype"])
    eps, nd, wf = 1e-6, case["norm_dtype"], case["weight_first"]
    if m:
        z, h = R.rms_norm_ref(x, w, eps, res, nd, wf)
    else:  # (the reference's lane sum cannot reshape an empty tensor)
        z, h = torch.empty(0, k), x if res is None else x + res
    xd = _layout(x, case["layout"]).to(device)
    rd = None if res is None else _layout(res, case["layout"]).to(device)
    h_out = None if res is None else torch.full((m, k), float("nan"), dtype=dt, device=device)
    st: dict = {}
    if case["fmt"] == "fp8":
        s = torch.tensor(_finite_amax(z) / random.Random(case["seed"]).uniform(150, 600))
        out = _poisoned((m, k), FP8, device, 0xFF)
        rms_norm_quant_fp8_into(xd, w.to(device), eps, s.to(device), out, nd, wf, rd, h_out)
        st.update(fp8_stats(out, R.fp8_static_quant_ref(z, s).reshape(m, k)))
    else:
        g = _global_scale(case, z)
        sw = case["swizzle"]
        packed = _poisoned((m, k // 2), torch.uint8, device, 0xA5)
        sf = _poisoned(nvfp4_scale_shape(m, k, sw), FP8, device, 0xFF)
        with _loop_warps(case.get("loop_warps")):
            rms_norm_quant_nvfp4_into(xd, w.to(device), eps, g.to(device), packed, sf, nd, wf,
                                      sw, rd, h_out)  # fmt: skip
        want = _nvfp4_ref(z, g, sw)
        st.update(nvfp4_stats((packed, sf), want, z, g, sw), exact="global_scale" in case)
    st["residual_equal"] = True if res is None else same_float(h_out, h)
    return st


def run_act(case: dict, device: str) -> dict:
    """One act_and_mul case through the launchers on ``device``; its statistics."""
    from graphfuse.triton.norm_act.launch import (
        act_and_mul_quant_fp8_into,
        act_and_mul_quant_nvfp4_into,
    )

    gen = torch.Generator().manual_seed(case["seed"])
    m, k, dt, act = case["rows"], case["k"], case["dtype"], case["activation"]
    merged = _tiny(_rand((m, 2 * k), dt, gen, 3.0, case["specials"]), gen, case)
    gate, up = merged.chunk(2, dim=-1)
    if not case["merged"]:
        gate, up = gate.contiguous(), up.contiguous()
    wide = R.act_and_mul_ref(gate, up, act)
    md = merged.to(device)
    gd, ud = md.chunk(2, dim=-1) if case["merged"] else (gate.to(device), up.to(device))
    if case["fmt"] == "fp8":
        s = torch.tensor(_finite_amax(wide) / random.Random(case["seed"]).uniform(150, 600))
        out = _poisoned((m, k), FP8, device, 0xFF)
        act_and_mul_quant_fp8_into(gd, ud, s.to(device), out, act)
        return fp8_stats(out, R.fp8_static_quant_ref(wide, s))
    g = _global_scale(case, wide)
    sw = case["swizzle"]
    packed = _poisoned((m, k // 2), torch.uint8, device, 0xA5)
    sf = _poisoned(nvfp4_scale_shape(m, k, sw), FP8, device, 0xFF)
    act_and_mul_quant_nvfp4_into(gd, ud, g.to(device), packed, sf, act, sw)
    st = nvfp4_stats((packed, sf), _nvfp4_ref(wide, g, sw), wide, g, sw)
    return {**st, "exact": "global_scale" in case}


def run_exp_range(device: str) -> list[dict]:
    """The activations over the whole fp32 range (subnormal to overflow, both signs, and
    scales whose inverse overflows): FP8 of ``activation(v) * 1`` against the reference."""
    from graphfuse.triton.norm_act.launch import act_and_mul_quant_fp8_into

    gen = torch.Generator().manual_seed(7)
    mags = torch.logspace(-40, 38, 2048, dtype=torch.float64).to(torch.float32)
    jitter = 1 + 0.01 * torch.rand(2048, generator=gen)
    v = torch.cat([mags * jitter, -mags * jitter, torch.linspace(-120, 120, 2048)]).reshape(-1, 64)
    out = []
    for act in R.ACTIVATIONS:
        for s in (1.0, 1e-30, 2.0**-130):
            q = _poisoned(v.shape, FP8, device, 0xFF)
            scale = torch.tensor(s)
            act_and_mul_quant_fp8_into(
                v.to(device), torch.ones_like(v, device=device), scale.to(device), q, act
            )
            want = R.act_and_mul_quant_fp8_ref(v, torch.ones_like(v), scale, act)
            out.append({"op": "exp_range", "activation": act, "scale": s, **fp8_stats(q, want)})
    return out


def failures(st: dict) -> list[str]:
    """The acceptance rules a case's statistics break (empty: it passes)."""
    bad = []
    if "equal" in st:
        if not st["nan_same"]:
            bad.append("NaN bytes differ")
        if st["equal"] < 0.99 or st["max_step"] > 1:
            bad.append(f"FP8 bytes {st['equal']:.6f} equal, max step {st['max_step']}")
    elif st.get("exact"):
        if st["packed_equal"] < 1.0 or st["scale_equal"] < 1.0:
            bad.append(f"NVFP4 bytes not equal: packed {st['packed_equal']:.6f}, scales "
                       f"{st['scale_equal']:.6f}")  # fmt: skip
    else:
        if st["scale_max_step"] > 1 or st["rmse_ratio"] > 1.05:
            bad.append(f"NVFP4 scale step {st['scale_max_step']}, RMSE {st['rmse_ratio']:.4f}")
    if not st.get("residual_equal", True):
        bad.append("residual not bit-equal")
    return bad


def run_all(seed: int, n: int, device: str, **sizes) -> list[dict]:
    """Every case of ``seed`` (the 4 model RMSNorm spellings, the 4 extreme global scales,
    the many-row and the split-row RMSNorm, ``n`` RMSNorm and ``n`` act_and_mul, then the exp
    range): a record per case with its statistics and ``error``: the broken rules, "" when
    none."""
    records = []
    norm_kw = {k: v for k, v in sizes.items() if k in ("hidden", "rows")}
    act_kw = {k: v for k, v in sizes.items() if k in ("inter", "rows")}
    extreme_kw = {k: v for k, v in sizes.items() if k in ("hidden", "inter")}
    cases = [*model_norm_cases(seed, **norm_kw), *extreme_scale_cases(seed, **extreme_kw),
             *many_rows_cases(seed), *split_row_cases(seed), *norm_cases(seed, n, **norm_kw),
             *act_cases(seed + 1, n, **act_kw)]  # fmt: skip
    for case in cases:
        st = (run_norm if case["op"] == "norm" else run_act)(case, device)
        records.append({**case, **st, "error": "; ".join(failures(st))})
    for st in run_exp_range(device):
        records.append({**st, "error": "; ".join(failures(st))})
    return records


def _jsonable(r: dict) -> dict:
    return {k: (str(v).replace("torch.", "") if isinstance(v, torch.dtype) else v)
            for k, v in r.items()}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description="norm_act kernel cases against the reference")
    ap.add_argument("--device", default="cpu", help="cpu: the Triton interpreter")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=8, help="cases per op family")
    ap.add_argument("--small", action="store_true", help="hidden <= 256, rows <= 140")
    args = ap.parse_args()
    if args.device == "cpu":
        from ._interpreter import patch

        patch()
    sizes = {}
    if args.small:
        # (140 rows: more than the interpreter's 132 "SMs", so the launchers' many-row choices)
        sizes = {"hidden": (16, 64, 100, 160), "inter": (16, 64, 96, 160),
                 "rows": (0, 1, 3, 33, 140)}  # fmt: skip
    records = run_all(args.seed, args.n, args.device, **sizes)
    for r in records:
        print(json.dumps(_jsonable(r)))
    bad = [r for r in records if r["error"]]
    summary = {"cases": len(records), "failed": len(bad)}
    for key in ("equal", "packed_equal", "scale_equal"):
        vals = [r[key] for r in records if key in r]
        summary[f"min_{key}"] = min(vals) if vals else math.nan
    print(json.dumps({"summary": summary}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
