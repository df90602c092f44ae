"""Standalone quantization ops: graphfuse's C++ kernels vs the eager PyTorch spelling.

16M bfloat16 elements ([4096, 4096]), same process, same inputs, interleaved, median of
repeats. Target (docs/benchmarks.md section 2): every op >= 5x faster than the eager graph.

    python -m benchmarks.quant_ops [--repeats 9] [--json benchmarks/results/quant_ops.json]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

import graphfuse  # noqa: F401
from benchmarks.common import interleaved, print_table, result_path, write_json
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--json", default=result_path("quant_ops"))
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
        t = interleaved({"graphfuse": fast, "eager": eager}, args.repeats)
        f, e = t["graphfuse"], t["eager"]
        rows.append({"op": name, "graphfuse_ms": f, "eager_ms": e, "speedup": e / f})
    print_table(
        ["op", "graphfuse ms", "eager ms", "speedup"],
        [[r["op"], r["graphfuse_ms"], r["eager_ms"], f"{r['speedup']:.1f}x"] for r in rows],
    )
    worst = min(rows, key=lambda r: r["speedup"])
    result = {
        "shape": [args.rows, args.cols],
        "dtype": "bfloat16",
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "rows": rows,
        "min_speedup": worst["speedup"],
    }
    write_json(args.json, result)
    print(f"min speedup over eager: {worst['speedup']:.1f}x ({worst['op']}; target >= 5x)")


if __name__ == "__main__":
    main()
