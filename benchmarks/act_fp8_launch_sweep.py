"""SiLU-and-mul + FP8 on CUDA at small token counts: the FP8 act kernel's launch shapes
(columns a program x warps) against the shipped op and the ``torch.compile``d unfused graph.

    python -m benchmarks.act_fp8_launch_sweep [--tokens 1 16 128] [--json PATH]

The graph is ``benchmarks.norm_act_quant_gpu``'s (``silu(gate) * up`` on the halves of a merged
bf16 ``[T, 2 * 14336]`` projection, static FP8 quant). Each variant calls
``act_and_mul_fp8_kernel`` with the options ``launch.act_and_mul_quant_fp8_into`` gives its
grid (``launch._launch``: on sm_90 a programmatic dependent launch for at most 8 programs an
SM), with its own ``CHUNK`` and ``num_warps``, and the shipped shape also as a plain launch
(``_plain``); every variant is a CUDA graph of 20 calls, timed in 9
interleaved rounds (medians). A row gives each variant's time, its speed against the
compiled graph (above 1: faster) and the fraction of its FP8 bytes equal to the compiled
graph's (poisoned output first). At T = 1 the shipped launch (1024 columns, 4 warps: 14
programs) is level with the compiled graph (0.99-1.01x in the tables of docs/serving.md);
this finds whether another shape of the same kernel leads it.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks.common import GraphTimer, print_table, result_path, write_json
from benchmarks.norm_act_quant import INTER
from benchmarks.norm_act_quant_gpu import act_fp8

CHUNKS = (256, 512, 1024, 2048)
WARPS = (1, 2, 4, 8)
ROUNDS = 9


def sweep_row(t: int) -> dict:
    """Times every (chunk, warps) launch, the shipped op and the compiled graph at ``t`` tokens."""
    import triton

    from graphfuse.triton.host import dependent_launch
    from graphfuse.triton.norm_act import launch as rules
    from graphfuse.triton.norm_act.kernels import SILU, act_and_mul_fp8_kernel

    merged = torch.randn(t, 2 * INTER, device="cuda", dtype=torch.bfloat16)
    s = torch.tensor([0.02], device="cuda")
    gate, up = merged.chunk(2, dim=-1)
    out = torch.empty(t, INTER, device="cuda", dtype=torch.float8_e4m3fn)
    compiled = torch.compile(act_fp8, dynamic=False)
    ref = compiled(merged, s).view(torch.uint8)

    def launch(chunk: int, warps: int, plain: bool = False):
        chunks = triton.cdiv(INTER, chunk)
        # the launcher's options for this grid (a dependent launch where its rule says so)
        opts = rules._launch(gate.device, t * chunks)
        if plain:
            opts = {**rules._EXACT, **dependent_launch(False)}

        def run():
            act_and_mul_fp8_kernel[(t * chunks,)](
                gate, up, s, out, INTER, gate.stride(0), up.stride(0), ACT=SILU.value,
                CHUNK=chunk, CHUNKS=chunks, num_warps=warps, **opts,
            )  # fmt: skip

        return run

    timers = {
        "compiled": GraphTimer(lambda: compiled(merged, s), 20, replays=1),
        "shipped": GraphTimer(
            lambda: torch.ops.graphfuse.act_and_mul_quant_fp8(gate, up, s), 20, replays=1
        ),
    }
    equal = {}
    shapes = [(c, w, False) for c in CHUNKS for w in WARPS if c >= 32 * w] + [(1024, 4, True)]
    for chunk, warps, plain in shapes:
        name = f"chunk{chunk}_warps{warps}" + ("_plain" if plain else "")
        run = launch(chunk, warps, plain)
        out.view(torch.uint8).fill_(0xFF)
        run()
        equal[name] = (out.view(torch.uint8) == ref).double().mean().item()
        timers[name] = GraphTimer(run, 20, replays=1)
    times: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(ROUNDS):
        for k, timer in timers.items():
            times[k].append(timer.time())
    us = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {
        "tokens": t,
        "us": us,
        "vs_compiled": {k: us["compiled"] / v for k, v in us.items()},
        "bytes_equal_compiled": equal,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 128])
    ap.add_argument("--json", default=result_path("act_fp8_launch_sweep"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.act_fp8_launch_sweep: no CUDA device")
    rows: list[dict] = []
    result = {"intermediate": INTER, "dtype": "bfloat16", "rounds": ROUNDS, "rows": rows}
    table = []
    for t in args.tokens:
        r = sweep_row(t)
        rows.append(r)
        write_json(args.json, result, gpu=True)
        best = sorted(r["vs_compiled"].items(), key=lambda kv: -kv[1])
        for name, ratio in best[:5] + [kv for kv in best[5:] if kv[0] == "shipped"]:
            eq = r["bytes_equal_compiled"].get(name)
            table.append([t, name, f"{r['us'][name]:.2f}", f"{ratio:.3f}",
                          "-" if eq is None else f"{eq:.4f}"])  # fmt: skip
    print_table(
        ["T", "variant (5 fastest, shipped)", "µs", "vs compiled", "bytes = compiled"], table
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
