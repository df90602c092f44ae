"""Standalone quantization ops: graphfuse's C++ kernels vs the eager PyTorch spelling.

16M bfloat16 elements ([4096, 4096]), same process, same inputs, interleaved, median of
repeats. Target (docs/benchmarks.md section 2): every op >= 5x faster than the eager graph.

    python benchmarks/quant_ops.py [--repeats 9] [--json benchmarks/results/quant_ops.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

import graphfuse  # noqa: F401
from graphfuse.ops.quant_ref import (
    fp8_dequant_ref,
    fp8_static_quant_ref,
    nvfp4_dequant_ref,
    nvfp4_quant_ref,
)

OPS = torch.ops.graphfuse


def eager_fp8_quant(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (x.float() / s).clamp(-448, 448).to(torch.float8_e4m3fn)  # the graph spelling


def cases(x: torch.Tensor) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    s, g = torch.tensor(0.02), torch.tensor(448 * 6 / x.float().abs().max().item())
    q = OPS.fp8_static_quant(x, s)
    packed, sf = OPS.nvfp4_quant(x, g)
    bf16 = torch.bfloat16
    return {
        "fp8_static_quant": (lambda: OPS.fp8_static_quant(x, s), lambda: eager_fp8_quant(x, s)),
        "fp8_dequant": (lambda: OPS.fp8_dequant(q, s, bf16), lambda: fp8_dequant_ref(q, s, bf16)),
        "nvfp4_quant": (lambda: OPS.nvfp4_quant(x, g), lambda: nvfp4_quant_ref(x, g)),
        "nvfp4_dequant": (
            lambda: OPS.nvfp4_dequant(packed, sf, g, bf16),
            lambda: nvfp4_dequant_ref(packed, sf, g, bf16),
        ),
    }


def _time(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--json", default="benchmarks/results/quant_ops.json")
    args = ap.parse_args()
    x = torch.randn(args.rows, args.cols, generator=torch.Generator().manual_seed(0))
    x = x.to(torch.bfloat16)
    # correctness first (fp8 quant: the eager `/ s` spelling may differ in the last bit)
    assert torch.equal(
        OPS.fp8_static_quant(x, torch.tensor(0.02)).view(torch.uint8),
        fp8_static_quant_ref(x, torch.tensor(0.02)).view(torch.uint8),
    )
    rows = []
    for name, (fast, eager) in cases(x).items():
        fast(), eager()  # warm up
        tf, te = [], []
        for _ in range(args.repeats):  # interleaved
            tf.append(_time(fast))
            te.append(_time(eager))
        f, e = statistics.median(tf) * 1e3, statistics.median(te) * 1e3
        rows.append({"op": name, "graphfuse_ms": f, "eager_ms": e, "speedup": e / f})
    print(f"{'op':<18} {'graphfuse ms':>13} {'eager ms':>10} {'speedup':>8}")
    for r in rows:
        print(f"{r['op']:<18} {r['graphfuse_ms']:>13.2f} {r['eager_ms']:>10.2f} "
              f"{r['speedup']:>7.1f}x")  # fmt: skip
    worst = min(rows, key=lambda r: r["speedup"])
    result = {
        "shape": [args.rows, args.cols],
        "dtype": "bfloat16",
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "rows": rows,
        "min_speedup": worst["speedup"],
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"min speedup over eager: {worst['speedup']:.1f}x ({worst['op']}; target >= 5x)")


if __name__ == "__main__":
    main()
