"""This tree's Gluon prefill kernel against other versions of it, on an sm_90 device, in one
process.

    git show main:graphfuse/triton/prefill/gluon_kernel.py > /tmp/base_gluon.py
    python -m benchmarks.prefill_kernels_ab /tmp/base_gluon.py [OTHER.py ...] [--tests]
        [--calls NAME ...] [--shapes I ...] [--rounds 7] [--json PATH]

Each file is loaded as a module of ``graphfuse/triton/prefill`` (its relative imports resolve
there); a ``.diff`` file is a unified diff against this tree's ``gluon_kernel.py``, applied
exactly where its hunks say (``apply_diff``), as the candidates in ``benchmarks/variants`` are
kept. The version's ``ws_attention_kernel``, which must take this tree's arguments, stands in for
this tree's while its calls run: the launcher (``launch.gluon_attention_into``, with its
``MAXNREG`` and ring depth) and everything before it are this tree's. With ``--tests``,
``tests/gpu/test_attention_ws_gpu.py`` first runs with each version in place (the acceptance
for a version whose output bytes differ). Then, per shape (``SHAPES``: B, Hq, Hkv, S, D,
causal), six calls (FP8 q / k / v in the default precision with FP8 and NVFP4 out, in fast mode
with FP8 and NVFP4 out, bf16 q / k / v with FP8 and bf16 out) run once per version with
poisoned outputs, for the fraction of output bytes equal to this tree's, and are timed with
``triton.testing.do_bench`` in interleaved rounds (medians): TFLOP/s and each version's speed
over this tree's (above 1: the version is faster). ``--calls`` (names from ``CALLS``) and
``--shapes`` (indices into ``SHAPES``) keep a run to part of that grid: each version compiles
once per call kind and head dim, which is most of a full run's time.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import re
import statistics
import sys
import tempfile
from types import ModuleType

import torch

from benchmarks.common import print_table, result_path, write_json
from graphfuse.triton.ops import attention_run

FP8 = torch.float8_e4m3fn
DEV = "cuda"
SHAPES = (
    (4, 32, 8, 4096, 128, True),
    (4, 32, 8, 4096, 128, False),
    (8, 32, 8, 2048, 64, True),
)
CALLS = (
    "fp8_default", "fp8_default_nvfp4", "fp8_fast", "fp8_fast_nvfp4", "bf16_in",
    "bf16_in_bf16_out",
)  # fmt: skip
TESTS = "tests/gpu/test_attention_ws_gpu.py"


_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def apply_diff(source: str, diff: str) -> str:
    """``source`` with the unified ``diff`` applied: each hunk at the line its header names,
    its context and removed lines checked there (no fuzz, no offsets); ValueError naming the
    first line that differs."""
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    rows = diff.splitlines(keepends=True)
    i = 0
    while i < len(rows):
        m = _HUNK.match(rows[i])
        i += 1
        if not m:
            continue  # the file headers, and text between hunks
        old_len = 1 if m.group(2) is None else int(m.group(2))
        new_len = 1 if m.group(3) is None else int(m.group(3))
        start = int(m.group(1)) - (1 if old_len else 0)
        if start < pos:
            raise ValueError(f"hunk at line {start + 1} overlaps the one before")
        out += lines[pos:start]
        pos = start
        while old_len or new_len:
            if i == len(rows):
                raise ValueError(f"hunk at line {start + 1} ends early")
            row = " \n" if rows[i] == "\n" else rows[i]  # a blank context line, trimmed
            tag, text = row[:1], row[1:]
            i += 1
            if tag == "\\":
                continue  # "no newline at end of file"
            if tag not in (" ", "-", "+"):
                raise ValueError(f"hunk at line {start + 1} has a line {row.strip()!r}")
            if tag in " -":
                if pos >= len(lines) or lines[pos].rstrip("\n") != text.rstrip("\n"):
                    raise ValueError(f"line {pos + 1} is not the diff's {text.strip()!r}")
                pos += 1
                old_len -= 1
            if tag in " +":
                out.append(lines[pos - 1] if tag == " " else text)
                new_len -= 1
    return "".join(out + lines[pos:])


def load_version(path: str, index: int) -> ModuleType:
    """``path`` as a module of ``graphfuse.triton.prefill`` (a ``.diff``: this tree's
    ``gluon_kernel.py`` with it applied); SystemExit if it has no kernel or does not apply."""
    name = f"graphfuse.triton.prefill._ab_version_{index}"
    if path.endswith(".diff"):
        from graphfuse.triton.prefill import gluon_kernel

        with open(gluon_kernel.__file__) as f, open(path) as d:
            try:
                source = apply_diff(f.read(), d.read())
            except ValueError as e:
                msg = f"benchmarks.prefill_kernels_ab: {path} does not apply: {e}"
                raise SystemExit(msg) from None
        # the file stays: Triton reads the kernel's source from it when it compiles
        path = os.path.join(tempfile.mkdtemp(), os.path.basename(path)[:-5] + ".py")
        with open(path, "w") as f:
            f.write(source)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"benchmarks.prefill_kernels_ab: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "ws_attention_kernel"):
        raise SystemExit(f"benchmarks.prefill_kernels_ab: {path} has no ws_attention_kernel")
    return module


def prefill_calls(b: int, hq: int, hkv: int, s: int, d: int, causal: bool) -> dict:
    """The benchmark calls of one shape as name -> (call(), its output buffers): FP8 q / k / v
    in the default precision and in fast mode, each with FP8 and NVFP4 out, bf16 q / k / v with
    FP8 and bf16 out, named as in ``CALLS``; outputs in ``bs(hd)`` rows
    (``benchmarks.prefill_stages_ab`` too)."""
    gen = torch.Generator(device=DEV).manual_seed(5)
    qf, kf, vf = (torch.randn((b, h, s, d), device=DEV, generator=gen) for h in (hq, hkv, hkv))
    sc = torch.tensor([1 / 64.0], device=DEV)
    q8, k8, v8 = ((x * 64).to(FP8) for x in (qf, kf, vf))
    qb, kb, vb = (x.to(torch.bfloat16) for x in (qf, kf, vf))
    m, width = b * s, hq * d
    o8 = torch.empty((b, s, width), device=DEV, dtype=FP8)
    o16 = torch.empty((b, s, width), device=DEV, dtype=torch.bfloat16)
    packed = torch.empty((m, width // 2), device=DEV, dtype=torch.uint8)
    sf = torch.empty((-(-m // 128) * 128, (width // 16 + 3) // 4 * 4), device=DEV, dtype=FP8)
    o_scale, g = torch.tensor([0.02], device=DEV), torch.tensor([40.0], device=DEV)
    mask = "top_left" if causal else "none"
    fp8 = (q8, k8, v8, sc, sc, sc, None, mask, None, "bs(hd)")
    bf16 = (qb, kb, vb, None, None, None, None, mask, None, "bs(hd)")
    outs = {
        0: (o16.view(torch.int16),),
        1: (o8.view(torch.uint8),),
        2: (packed, sf.view(torch.uint8)),
    }

    def call(args, precision, kind):
        def run() -> None:
            if kind == 0:
                attention_run(*args, precision, o16, 0)
            elif kind == 1:
                attention_run(*args, precision, o8, 1, o_scale)
            else:
                attention_run(*args, precision, packed, 2, g, sf)

        return run, outs[kind]

    return {
        "fp8_default": call(fp8, "default", 1),
        "fp8_default_nvfp4": call(fp8, "default", 2),
        "fp8_fast": call(fp8, "fast", 1),
        "fp8_fast_nvfp4": call(fp8, "fast", 2),
        "bf16_in": call(bf16, "default", 1),
        "bf16_in_bf16_out": call(bf16, "default", 0),
    }


def poisoned_outputs(run, bufs) -> list[torch.Tensor]:
    """Copies of ``bufs`` after ``run()``, each poisoned first."""
    for t in bufs:
        t.fill_(0x25)  # poison: a byte the kernel does not write stays unequal to a fresh one
    run()
    torch.cuda.synchronize()
    return [t.clone() for t in bufs]


def _in_place(use, name: str, run) -> None:
    use(name)
    run()


def main(argv: list[str] | None = None) -> None:
    from triton.testing import do_bench

    from graphfuse.triton.prefill import gluon_kernel

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("versions", nargs="+", help="other gluon_kernel.py files")
    ap.add_argument("--tests", action="store_true", help=f"run {TESTS} with each version first")
    ap.add_argument("--calls", nargs="+", choices=CALLS, default=list(CALLS))
    ap.add_argument("--shapes", nargs="+", type=int, choices=range(len(SHAPES)),
                    default=list(range(len(SHAPES))), help="indices into SHAPES")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=result_path("prefill_kernels_ab"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit("benchmarks.prefill_kernels_ab: needs an sm_90 GPU")
    kernels = {"this tree": gluon_kernel.ws_attention_kernel}
    for i, path in enumerate(args.versions):
        kernels[os.path.basename(path)] = load_version(path, i).ws_attention_kernel
    if len(kernels) != len(args.versions) + 1:
        raise SystemExit("benchmarks.prefill_kernels_ab: give the versions distinct file names")

    def use(name: str) -> None:
        gluon_kernel.ws_attention_kernel = kernels[name]  # the launcher imports it per call

    record: dict = {"versions": args.versions, "rounds": args.rounds, "tests": {}, "rows": []}
    shapes = [SHAPES[i] for i in args.shapes]
    table = []
    try:
        if args.tests:
            import pytest

            for name in list(kernels)[1:]:
                use(name)
                rc = pytest.main(["-q", "-p", "no:cacheprovider", TESTS])
                record["tests"][name] = int(rc)
                print(f"{TESTS} with {name}: exit status {int(rc)}", flush=True)
        for shape in shapes:
            b, hq, _, s, d, causal = shape
            flop = 4 * b * hq * s * s * d / (2 if causal else 1)
            calls = prefill_calls(*shape)
            for call_name in args.calls:
                run, bufs = calls[call_name]
                ref = None
                equal = {}
                for name in kernels:
                    use(name)
                    got = poisoned_outputs(run, bufs)
                    if ref is None:
                        ref = got
                    else:
                        same = sum(int((x == y).sum()) for x, y in zip(got, ref))
                        equal[name] = same / sum(x.numel() for x in ref)
                times: dict[str, list[float]] = {name: [] for name in kernels}
                for _ in range(args.rounds):
                    for name in kernels:
                        fn = functools.partial(_in_place, use, name, run)
                        times[name].append(do_bench(fn, warmup=10, rep=50, return_mode="median"))
                ms = {name: statistics.median(v) for name, v in times.items()}
                base = ms["this tree"]
                record["rows"].append({
                    "shape": list(shape), "call": call_name, "ms": ms, "rounds_ms": times,
                    "tflops": {n: flop / t / 1e9 for n, t in ms.items()},
                    "speed": {n: base / t for n, t in ms.items()}, "equal": equal,
                })  # fmt: skip
                for name in kernels:
                    eq = "-" if name == "this tree" else f"{equal[name]:.4f}"
                    table.append([f"{shape} {call_name}", name, ms[name], flop / ms[name] / 1e9,
                                  base / ms[name], eq])  # fmt: skip
                    print(" ".join(map(str, table[-1])), flush=True)
    finally:
        use("this tree")
    print_table(["shape call", "version", "ms", "TFLOP/s", "speed", "bytes equal"], table, ".4f")
    write_json(args.json, record, gpu=True)


if __name__ == "__main__":
    main()
