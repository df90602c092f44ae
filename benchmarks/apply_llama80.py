"""Time to apply the ``trtllm`` rule set to an exported 80-layer Llama-style decoder
(pre-dispatch and core ATen), one process, median of repeats.

Usage: python -m benchmarks.apply_llama80 [--layers 80] [--repeats 3] [--json PATH]
Prints a table (export kind, nodes, rewrites, seconds) and writes
benchmarks/results/apply_llama80.json (or ``--json``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

import graphfuse
from benchmarks.common import print_table, result_path, write_json
from tests.patterns import _models as M  # (the tests' Llama-style decoder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=80)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=result_path("apply_llama80"))
    a = ap.parse_args()
    cfg = M.Config(dtype=torch.bfloat16)
    mod = M.LlamaLayer(cfg, layers=a.layers).eval()
    am = torch.ones(2, 16, dtype=torch.long)
    args = (torch.randn(2, 16, cfg.hidden, dtype=cfg.dtype), am)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        pre = torch.export.export(mod, args)
        t_export = time.perf_counter() - t
        t = time.perf_counter()
        core = pre.run_decompositions()
        t_decomp = time.perf_counter() - t
    rows = []
    for kind, ep in (("pre-dispatch", pre), ("core ATen", core)):
        times, result = [], None
        for _ in range(a.repeats):
            t = time.perf_counter()
            result = graphfuse.apply(ep, "trtllm")
            times.append(time.perf_counter() - t)
        assert result is not None
        fired = result.report.counts["attention_fp8_out"]
        assert fired == a.layers, f"{kind}: {fired} of {a.layers} attentions fused"
        rows.append(
            {
                "export": kind,
                "nodes": len(ep.graph.nodes),
                "rewrites": fired,
                "apply_s": statistics.median(times),
                "timings": {k: round(v, 4) for k, v in result.report.timings.items()},
            }
        )
    print(f"export {t_export:.1f} s, run_decompositions {t_decomp:.1f} s ({a.layers} layers)")
    print_table(
        ["export", "nodes", "rewrites", "apply s"],
        [[r["export"], r["nodes"], r["rewrites"], r["apply_s"]] for r in rows],
    )
    write_json(
        a.json,
        {"layers": a.layers, "export_s": t_export, "run_decompositions_s": t_decomp, "rows": rows},
    )
    print(f"core/pre apply time ratio: {rows[1]['apply_s'] / rows[0]['apply_s']:.2f}x")


if __name__ == "__main__":
    main()
