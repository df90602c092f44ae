"""This tree's norm / activation + quant kernels against another version of them, on CUDA, in
one process.

    git show main:graphfuse/triton/norm_act/kernels.py > /tmp/base_kernels.py
    python -m benchmarks.norm_act_kernels_ab --base /tmp/base_kernels.py [--tokens 1 1024 4096]

    mkdir /tmp/base && git archive main graphfuse/triton/norm_act | tar -x -C /tmp/base
    python -m benchmarks.norm_act_kernels_ab --base /tmp/base/graphfuse/triton/norm_act

A base file is loaded as a module of ``graphfuse/triton/norm_act`` (its relative imports
resolve there) and its kernels stand in for this tree's in ``launch.py`` while the base
variant's CUDA graphs are captured. A base folder (a version of the whole
``graphfuse/triton/norm_act`` package: kernels and launchers) is loaded as a package beside
it, and its ``launch`` stands in for this tree's in ``graphfuse/triton/ops.py``. Either way
every op then runs through ``torch.ops.graphfuse`` as users call it. The cases are
``benchmarks.norm_act_quant_gpu``'s (bf16, hidden 4096, intermediate 14336); each is a CUDA
graph of ``--reps`` calls per version, timed in ``--rounds`` interleaved rounds (medians). A
row gives both times, the speedup (base / this tree) and the fraction of equal quantized
bytes between the two versions' outputs; the rows whose kernels a change leaves alone show
the run's noise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
from collections.abc import Callable
from types import ModuleType

import torch

from benchmarks.common import GraphTimer, print_table, result_path, write_json
from benchmarks.norm_act_quant_gpu import TOKENS, cases

KERNELS = (
    "rms_norm_fp8_kernel", "rms_norm_nvfp4_kernel", "act_and_mul_fp8_kernel",
    "act_and_mul_nvfp4_kernel",
)  # fmt: skip


def _load(name: str, path: str, package_dir: str | None = None) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=[package_dir] if package_dir else None
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"benchmarks.norm_act_kernels_ab: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_base(path: str) -> Callable[[bool], None]:
    """The other version at ``path`` (a ``kernels.py`` or a ``norm_act`` package folder) as a
    switch: ``use(True)`` puts it in place of this tree's, ``use(False)`` puts this tree's
    back."""
    from graphfuse.triton import ops
    from graphfuse.triton.norm_act import kernels, launch

    if os.path.isdir(path):
        init = os.path.join(path, "__init__.py")
        if not os.path.exists(os.path.join(path, "launch.py")) or not os.path.exists(init):
            raise SystemExit(f"benchmarks.norm_act_kernels_ab: {path} is not a norm_act folder")
        _load("graphfuse.triton._ab_base", init, path)
        base_launch = importlib.import_module("graphfuse.triton._ab_base.launch")

        def use(on: bool) -> None:
            ops.norm_act = base_launch if on else launch

        return use
    module = _load("graphfuse.triton.norm_act._ab_base", path)
    missing = [k for k in KERNELS if not hasattr(module, k)]
    if missing:
        raise SystemExit(f"benchmarks.norm_act_kernels_ab: {path} has no {', '.join(missing)}")

    def use(on: bool) -> None:
        for k in KERNELS:
            setattr(launch, k, getattr(module if on else kernels, k))

    return use


def _timer(fused, inputs: tuple, reps: int) -> GraphTimer:
    """A CUDA graph of ``reps`` calls of ``fused(*inputs)`` with the kernels now in place."""
    return GraphTimer(lambda: fused(*inputs), reps, replays=1)


def _quantized(out) -> torch.Tensor:
    first = out[0] if isinstance(out, tuple) else out
    return first.view(torch.uint8)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--base", required=True, help="the other version: a norm_act/kernels.py or folder"
    )
    ap.add_argument("--tokens", type=int, nargs="+", default=TOKENS)
    ap.add_argument("--cases", nargs="+", default=None, help="case names (default: all)")
    ap.add_argument("--reps", type=int, default=20, help="calls per CUDA graph")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    ap.add_argument("--json", default=result_path("norm_act_kernels_ab"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.norm_act_kernels_ab: no CUDA device")
    use_base = load_base(args.base)
    rows: list[dict] = []
    result = {"base": args.base, "reps": args.reps, "rounds": args.rounds, "rows": rows}
    for t in args.tokens:
        for name, (fused, _graph, inputs, _nbytes) in cases(t).items():
            if args.cases and name not in args.cases:
                continue
            timers, outs = {}, {}
            for label in ("base", "this"):
                use_base(label == "base")
                outs[label] = _quantized(fused(*inputs)).clone()
                timers[label] = _timer(fused, inputs, args.reps)
            use_base(False)
            times: dict[str, list[float]] = {k: [] for k in timers}
            for _ in range(args.rounds):
                for k, timer in timers.items():
                    times[k].append(timer.time())
            ms = {k: statistics.median(v) for k, v in times.items()}
            rows.append({
                "case": name, "tokens": t, "ms": ms, "speedup": ms["base"] / ms["this"],
                "bytes_equal": (outs["base"] == outs["this"]).double().mean().item(),
            })  # fmt: skip
            write_json(args.json, result, gpu=True)
        torch.cuda.empty_cache()
    if not rows:
        raise SystemExit(f"benchmarks.norm_act_kernels_ab: no case named {args.cases}")
    print_table(
        ["case", "T", "base µs", "this µs", "speedup", "bytes equal"],
        [[r["case"], str(r["tokens"]), r["ms"]["base"] * 1e3, r["ms"]["this"] * 1e3,
          r["speedup"], f"{r['bytes_equal']:.6f}"] for r in rows],
    )  # fmt: skip
    nv = [r["speedup"] for r in rows if r["case"].endswith("nvfp4")]
    if nv:
        print(f"NVFP4 rows: speedup {min(nv):.3f}x - {max(nv):.3f}x (base / this tree)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
