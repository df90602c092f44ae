"""sm_90 instruction counts of the NVFP4 norm / activation kernels, compiled offline.

No GPU is needed: Triton compiles for an sm_90 target with its own ``ptxas`` and
disassembles with its ``nvdisasm``. Each kernel gets the options of its launcher at hidden
4096 / intermediate 14336 with many rows (no fused multiply-add; RMSNorm 4 warps under a
64-register cap, act_and_mul 2 warps) and the specialisation a real launch gets (pointers,
sizes and strides divisible by 16). Counted: all SASS instructions, those of a real row's
path (from the first branch target, where the row programs start, to the last ``EXIT``;
the division slow paths it skips are in it), the values a thread holds on that path, and
local-memory spills. The launch-bound kernels issue about that many instructions a thread,
so the per-value figure is what the issue-bound rows of ``benchmarks.norm_act_quant_gpu``
follow (docs/serving.md, "Where the NVFP4 kernels' time goes").

    python -m benchmarks.sass_count [--dtype bfloat16] [--json PATH]

Needs ``triton`` (not a dependency of graphfuse; the CI machine has none).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile

from benchmarks.common import print_table, result_path, write_json

_WORD_PTRS = ("x_ptr", "res_ptr", "res_out_ptr", "w_ptr")
_INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4}\*/\s+(.*?)\s*;")


def _norm(dtype, residual: bool) -> dict:
    sig = dict.fromkeys(_WORD_PTRS, "*i32")
    sig |= {"g_ptr": "*fp32", "packed_ptr": "*u8", "scale_ptr": "*u8", "M": "i32", "K": "i32",
            "KB_PAD": "i32", "sx": "i32", "sr": "i32", "eps": "fp32"}  # fmt: skip
    const = {"DT": dtype, "W_DT": dtype, "HAS_RES": residual, "NORM_DT": dtype, "OUT_DT": dtype,
             "WEIGHT_FIRST": False, "SWIZZLE": True, "EARLY": False, "NB": 256}  # fmt: skip
    name = "add + RMSNorm + NVFP4" if residual else "RMSNorm + NVFP4"
    return {"name": name, "kernel": "rms_norm_nvfp4_kernel", "sig": sig, "const": const,
            "options": {"num_warps": 4, "maxnreg": 64}, "values": 256 * 16 // 128}  # fmt: skip


def _act(dtype) -> dict:
    sig = {"gate_ptr": "*i32", "up_ptr": "*i32", "g_ptr": "*fp32", "packed_ptr": "*u8",
           "scale_ptr": "*u8", "M": "i32", "K": "i32", "KB_PAD": "i32", "sg": "i32",
           "su": "i32"}  # fmt: skip
    const = {"DT": dtype, "ACT": 0, "SWIZZLE": True, "NB": 64}
    return {"name": "SiLU-and-mul + NVFP4", "kernel": "act_and_mul_nvfp4_kernel", "sig": sig,
            "const": const, "options": {"num_warps": 2}, "values": 64 * 16 // 64}  # fmt: skip


def _compile(case: dict, workdir: str) -> list[str]:
    """The SASS instructions of ``case``'s kernel compiled for sm_90."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from graphfuse.triton.norm_act import kernels

    sig = dict(case["sig"]) | dict.fromkeys(case["const"], "constexpr")
    names = list(sig)
    divisible = [n for n, t in case["sig"].items() if t.startswith("*") or t == "i32"]
    divisible = [n for n in divisible if n != "M"]
    src = ASTSource(
        fn=getattr(kernels, case["kernel"]),
        signature=sig,
        constexprs={(names.index(k),): v for k, v in case["const"].items()},
        attrs={(names.index(n),): [["tt.divisibility", 16]] for n in divisible},
    )
    options = {"enable_fp_fusion": False, **case["options"]}
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    cubin = os.path.join(workdir, case["kernel"] + ".cubin")
    with open(cubin, "wb") as f:
        f.write(compiled.asm["cubin"])
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
    sass = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, check=True)
    lines = []
    for line in sass.stdout.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            lines.append(m.group(1))
        elif line.startswith(".L_x_0:"):
            lines.append(".L_x_0")
    return lines


def _row_path(lines: list[str]) -> list[str]:
    """The instructions from the first branch target (``.L_x_0``) to the last ``EXIT``."""
    start = lines.index(".L_x_0") + 1 if ".L_x_0" in lines else 0
    body = lines[start:]
    end = max(i for i, s in enumerate(body) if s.split()[-1] == "EXIT")
    return body[: end + 1]


def count(dtype_name: str = "bfloat16") -> list[dict]:
    """A record per kernel: instructions (all, row path), values a thread, spills."""
    import triton.language as tl

    dtype = getattr(tl, dtype_name)
    records = []
    with tempfile.TemporaryDirectory() as workdir:
        for case in (_norm(dtype, False), _norm(dtype, True), _act(dtype)):
            lines = _compile(case, workdir)
            row = _row_path(lines)
            instructions = [s for s in lines if s != ".L_x_0"]
            records.append({
                "kernel": case["name"], "dtype": dtype_name, "instructions": len(instructions),
                "row_path": len(row), "values_a_thread": case["values"],
                "per_value": round(len(row) / case["values"], 2),
                "spills": sum(1 for s in instructions if s.split()[0] in ("STL", "LDL")),
            })  # fmt: skip
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--json", default=result_path("sass_count"), help="where to write the records")
    args = ap.parse_args()
    records = count(args.dtype)
    rows = [[r["kernel"], r["instructions"], r["row_path"], r["values_a_thread"],
             r["per_value"], r["spills"]] for r in records]  # fmt: skip
    print_table(["kernel", "instructions", "row path", "values a thread", "a value", "spills"],
                rows)  # fmt: skip
    write_json(args.json, {"records": records})


if __name__ == "__main__":
    main()
