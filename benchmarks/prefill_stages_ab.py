"""The Gluon prefill kernel's K / V ring depth (``prefill.config.ws_stages``) against the other
depth, per precision and shape, on an sm_90 device, in one process.

    python -m benchmarks.prefill_stages_ab [--rounds 7] [--json PATH]

Each shape ``(B, HQ, HKV, S, D, causal)`` runs four calls (FP8 q / k / v in fast mode with
FP8 and with NVFP4 out, FP8 q / k / v in the default precision and bf16 q / k / v, both FP8
out) with 2 and with 3 ring slots: output bytes compared between the two, then
``triton.testing.do_bench`` medians over interleaved rounds (each call once a round), as
TFLOP/s and the 3-slot speed over the 2-slot one (above 1: three slots are faster).
"""

from __future__ import annotations

import argparse
import functools
import statistics

import torch

from benchmarks.common import print_table, result_path, write_json
from graphfuse.triton.ops import attention_run
from graphfuse.triton.prefill import launch

FP8 = torch.float8_e4m3fn
DEV = "cuda"
SHAPES = (
    (4, 32, 8, 4096, 128, True),
    (4, 32, 8, 4096, 128, False),
    (8, 32, 8, 2048, 64, True),
    (1, 32, 8, 1024, 128, True),
)
DEPTHS = (2, 3)


def _calls(b: int, hq: int, hkv: int, s: int, d: int, causal: bool):
    """(name -> call(depth), the output buffers) of one shape."""
    gen = torch.Generator(device=DEV).manual_seed(1)
    qf, kf, vf = (torch.randn((b, h, s, d), device=DEV, generator=gen) for h in (hq, hkv, hkv))
    sc = torch.tensor([1 / 64.0], device=DEV)
    q8, k8, v8 = ((x * 64).to(FP8) for x in (qf, kf, vf))
    qb, kb, vb = (x.to(torch.bfloat16) for x in (qf, kf, vf))
    m, width = b * s, hq * d
    o8 = torch.empty((b, s, width), device=DEV, dtype=FP8)
    packed = torch.empty((m, width // 2), device=DEV, dtype=torch.uint8)
    sf = torch.empty((-(-m // 128) * 128, (width // 16 + 3) // 4 * 4), device=DEV, dtype=FP8)
    o_scale, g = torch.tensor([0.02], device=DEV), torch.tensor([40.0], device=DEV)
    mask = "top_left" if causal else "none"
    fp8 = (q8, k8, v8, sc, sc, sc, None, mask, None, "bs(hd)")
    bf16 = (qb, kb, vb, None, None, None, None, mask, None, "bs(hd)")

    def call(args, precision, nvfp4):
        def run(depth: int) -> None:
            launch.ws_stages = lambda fast, d: depth
            if nvfp4:
                attention_run(*args, precision, packed, 2, g, sf)
            else:
                attention_run(*args, precision, o8, 1, o_scale)

        return run

    calls = {
        "fast_fp8": call(fp8, "fast", False),
        "fast_nvfp4": call(fp8, "fast", True),
        "default_fp8": call(fp8, "default", False),
        "bf16_fp8": call(bf16, "default", False),
    }
    return calls, (o8.view(torch.uint8), packed, sf.view(torch.uint8))


def _outputs(run, depth: int, bufs) -> list[torch.Tensor]:
    for t in bufs:
        t.fill_(0xA5)  # poison: a byte the kernel does not write stays unequal to a fresh one
    run(depth)
    torch.cuda.synchronize()
    return [t.clone() for t in bufs]


def main(argv: list[str] | None = None) -> None:
    from triton.testing import do_bench

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=result_path("prefill_stages_ab"))
    args = ap.parse_args(argv)
    shipped = launch.ws_stages
    rows, table = [], []
    try:
        for shape in SHAPES:
            b, hq, _, s, d, causal = shape
            flop = 4 * b * hq * s * s * d / (2 if causal else 1)
            calls, bufs = _calls(*shape)
            times = {(n, k): [] for n in calls for k in DEPTHS}
            equal = {}
            for name, run in calls.items():
                a, c = (_outputs(run, k, bufs) for k in DEPTHS)
                equal[name] = all(torch.equal(x, y) for x, y in zip(a, c))
            for _ in range(args.rounds):
                for name, run in calls.items():
                    for k in DEPTHS:
                        fn = functools.partial(run, k)
                        ms = do_bench(fn, warmup=10, rep=50, return_mode="median")
                        times[(name, k)].append(ms)
            for name in calls:
                ms = {k: statistics.median(times[(name, k)]) for k in DEPTHS}
                rows.append({
                    "shape": list(shape), "call": name, "equal": equal[name],
                    "shipped": shipped("fast" in name, d),
                    **{f"ms{k}": ms[k] for k in DEPTHS},
                    **{f"tflops{k}": flop / ms[k] / 1e9 for k in DEPTHS},
                    "speed3": ms[2] / ms[3],
                    **{f"rounds{k}": times[(name, k)] for k in DEPTHS},
                })  # fmt: skip
                r = rows[-1]
                table.append([f"{shape} {name}", r["shipped"], r["tflops2"], r["tflops3"],
                              r["speed3"], str(r["equal"])])  # fmt: skip
                print(" ".join(map(str, table[-1])), flush=True)
    finally:
        launch.ws_stages = shipped
    print_table(["shape call", "shipped", "TF/s 2", "TF/s 3", "3 / 2", "bytes equal"], table)
    write_json(args.json, {"rounds": args.rounds, "rows": rows}, gpu=True)


if __name__ == "__main__":
    main()
