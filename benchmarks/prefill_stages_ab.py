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
from benchmarks.prefill_kernels_ab import poisoned_outputs, prefill_calls
from graphfuse.triton.prefill import launch

CALLS = ("fp8_fast", "fp8_fast_nvfp4", "fp8_default", "bf16_in")  # of prefill_calls
SHAPES = (
    (4, 32, 8, 4096, 128, True),
    (4, 32, 8, 4096, 128, False),
    (8, 32, 8, 2048, 64, True),
    (1, 32, 8, 1024, 128, True),
)
DEPTHS = (2, 3)


def _at_depth(run, depth: int) -> None:
    launch.ws_stages = lambda fast, d: depth
    run()


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
            every = prefill_calls(*shape)
            calls = {name: every[name] for name in CALLS}
            times = {(n, k): [] for n in calls for k in DEPTHS}
            equal = {}
            for name, (run, bufs) in calls.items():
                a, c = (
                    poisoned_outputs(functools.partial(_at_depth, run, k), bufs) for k in DEPTHS
                )
                equal[name] = all(torch.equal(x, y) for x, y in zip(a, c))
            for _ in range(args.rounds):
                for name, (run, _bufs) in calls.items():
                    for k in DEPTHS:
                        fn = functools.partial(_at_depth, run, k)
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
