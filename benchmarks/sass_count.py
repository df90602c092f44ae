"""sm_90 instruction counts of graphfuse's Triton and Gluon kernels, compiled offline.

No GPU is needed: Triton compiles for an sm_90 target with its own ``ptxas`` and
disassembles with its ``nvdisasm``. Each kernel gets the options and the argument
specialisation (pointers, sizes and strides divisible by 16) of a real launch:

- the NVFP4 norm / activation kernels at hidden 4096 / intermediate 14336 with many rows
  (no fused multiply-add; RMSNorm 4 warps under a 64-register cap, act_and_mul 2 warps):
  the instructions of a real row's path (from the first branch target, where the row
  programs start, to the last ``EXIT``; the division slow paths it skips are in it) and the
  values a thread holds on it. These kernels issue about that many instructions a thread,
  so the per-value figure is what the issue-bound rows of ``benchmarks.norm_act_quant_gpu``
  follow (docs/serving.md, "Where the NVFP4 kernels' time goes");
- the warp-specialised Gluon prefill kernel (D=128) for each input / output pair: its
  instructions, tensor-core instructions (``HGMMA`` / ``QGMMA``), ``MUFU`` and shared
  memory (docs/gpu.md);
- the paged split-KV decode kernel and its split merge in the configuration of the B ~ 8
  class (``decode/config.CLASSES``: 64-token tiles, 4 warps, 3 stages, the block table
  one tile ahead, head-major, dependent launch), Llama-3-8B heads (32 / 8, D=128), an FP8
  cache with its dequant scales, bf16 q, FP8 or NVFP4 out: the same columns.

Both count local-memory spills (``STL``).

    python -m benchmarks.sass_count [--dtype bfloat16] [--json PATH]

Needs ``triton`` with Gluon's Hopper layer (not a dependency of graphfuse; the CI machine
has none).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile

from benchmarks.common import print_table, result_path, write_json

_INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_WORD_PTRS = ("x_ptr", "res_ptr", "res_out_ptr", "w_ptr")
# ws_attention_kernel's arguments after the three TMA descriptors
_PREFILL_ARGS = (
    "out_ptr", "osc_ptr", "qs_ptr", "ks_ptr", "vs_ptr", "scale_bits", "H", "G", "SQ", "SKV",
    "q_rb", "q_rh", "q_ch", "kv_rb", "kv_rh", "kv_ch", "sob", "soh", "sos", "qk_scale", "causal",
    "causal_off", "sf_ptr", "nmb", "nmh", "nms", "nch", "nv_k", "nv_kbpad", "n_work",
)  # fmt: skip
_PREFILL_SCALARS = ("scale_bits", "G", "causal", "causal_off", "n_work")


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


def _disassemble(compiled, workdir: str, name: str) -> list[str]:
    """The SASS instructions of a compiled kernel (``.L_x_0`` marks the first branch target)."""
    import triton

    cubin = os.path.join(workdir, name + ".cubin")
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


def _sm90():
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", 90, 32)


def _compile_norm_act(case: dict, workdir: str) -> list[str]:
    """The SASS of a norm / activation case's kernel."""
    import triton
    from triton.compiler import ASTSource

    from graphfuse.triton.norm_act import kernels

    sig = dict(case["sig"]) | dict.fromkeys(case["const"], "constexpr")
    names = list(sig)
    divisible = [n for n, t in case["sig"].items() if (t[0] == "*" or t == "i32") and n != "M"]
    src = ASTSource(
        fn=getattr(kernels, case["kernel"]),
        signature=sig,
        constexprs={(names.index(k),): v for k, v in case["const"].items()},
        attrs={(names.index(n),): [["tt.divisibility", 16]] for n in divisible},
    )
    options = {"enable_fp_fusion": False, **case["options"]}
    compiled = triton.compile(src, target=_sm90(), options=options)
    return _disassemble(compiled, workdir, case["kernel"])


def _compile_prefill(inp: str, out: str, workdir: str) -> tuple[list[str], int]:
    """The SASS and the shared-memory bytes of the Gluon prefill kernel, D=128, ``inp``
    q / k / v (``bf16`` or ``fp8``: default precision, V upcast to fp16) into ``out``."""
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from graphfuse.triton.prefill import gluon_kernel
    from graphfuse.triton.prefill.config import WS_BLOCK_M, WS_BLOCK_N

    types = {"bf16": (gl.bfloat16, "bf16"), "fp8": (gl.float8e4nv, "fp8e4nv"),
             "fp16": (gl.float16, "fp16")}  # fmt: skip

    def desc(rows: int, name: str) -> str:
        layout = gl.NVMMASharedLayout.get_default_for([rows, 128], types[name][0])
        return f"tensordesc<{types[name][1]}[{rows}, 128],{layout!r}>"

    sig = {"q_desc": desc(WS_BLOCK_M // 2, inp), "k_desc": desc(WS_BLOCK_N, inp),
           "v_desc": desc(WS_BLOCK_N, "fp16" if inp == "fp8" else inp)}  # fmt: skip
    sig |= dict.fromkeys(_PREFILL_ARGS, "i32")
    sig |= {"out_ptr": {"nvfp4": "*u8", "fp8": "*fp8e4nv", "bf16": "*bf16"}[out],
            "osc_ptr": "*fp32", "qs_ptr": "*fp32", "ks_ptr": "*fp32", "vs_ptr": "*fp32",
            "qk_scale": "fp32", "sf_ptr": "*u8"}  # fmt: skip
    names = list(sig)
    divisible = [n for n in _PREFILL_ARGS if n not in _PREFILL_SCALARS and n != "qk_scale"]
    src = GluonASTSource(
        fn=gluon_kernel.ws_attention_kernel,
        signature=sig,
        constexprs={},
        attrs={(names.index(n),): [["tt.divisibility", 16]] for n in divisible},
    )
    options = {"num_warps": 4, "maxnreg": gluon_kernel.MAXNREG}
    compiled = triton.compile(src, target=_sm90(), options=options)
    return _disassemble(compiled, workdir, f"prefill_{inp}_{out}"), compiled.metadata.shared


_DECODE_ARGS = (
    "Q", "K", "V", "QS", "KS", "VS", "BT", "LENS", "OSC", "OUT", "SF", "PO", "PML",
    "sqb", "sqh", "skb", "skh", "skt", "svb", "svh", "svt", "sbt", "HQ", "G", "SKV", "sm_scale",
    "CHUNK", "sob", "soh", "NV_M", "NV_K", "NV_KBPAD",
)  # fmt: skip
_MERGE_ARGS = (
    "PO", "PML", "VS", "OSC", "OUT", "SF", "NROWS", "HQ", "NSPLIT", "D", "sob", "soh", "NV_K",
    "NV_KBPAD",
)  # fmt: skip


def _compile_decode(out: str, workdir: str) -> list[tuple[str, list[str], int]]:
    """(name, SASS, shared bytes) of the decode kernel and its merge, FP8 cache, ``out`` FP8
    or NVFP4, as ``decode/launch.decode_into`` launches them for the B ~ 8 class."""
    import triton
    import triton.language as tl
    from triton.compiler import ASTSource

    from graphfuse.triton.decode import kernels
    from graphfuse.triton.decode.config import decode_config
    from graphfuse.triton.decode.launch import merge_launch

    cfg = decode_config(True, 8, 8, 1024)
    out_ty, kind = ("*u8", 2) if out == "nvfp4" else ("*fp8e4nv", 1)
    ptrs = {"Q": "*bf16", "K": "*fp8e4nv", "V": "*fp8e4nv", "QS": "*bf16", "KS": "*fp32",
            "VS": "*fp32", "BT": "*i32", "LENS": "*i32", "OSC": "*fp32", "OUT": out_ty,
            "SF": "*u8" if out == "nvfp4" else out_ty, "PO": "*fp32", "PML": "*fp32"}  # fmt: skip
    runtime_ints = ("HQ", "G", "SKV", "NROWS", "NSPLIT", "D", "NV_M")
    found = []
    for fn, names, const, options in (
        (kernels.decode_kernel, _DECODE_ARGS,
         {"PAGE": 16, "D": 128, "HAS_QS": False, "HAS_KS": True, "HAS_VS": True, "PAGED": True,
          "SPLIT_OUT": True, "OUT_KIND": kind, "DOT_DT": tl.float16, "Q_RESCALE": True,
          "GP": 16, "BLOCK_N": cfg["block_n"], "DP": 128, "PREFETCH": cfg["prefetch"],
          "BT_AHEAD": cfg["bt_ahead"], "HEAD_MAJOR": cfg["head_major"], "SF_PAD": kind == 2,
          "PDL": cfg["pdl"]},
         {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}),
        (kernels.decode_merge, _MERGE_ARGS,
         {"HAS_VS": True, "OUT_KIND": kind, "SC": merge_launch(4)[1], "DP": 128,
          "PDL": cfg["pdl"]},
         {"num_warps": merge_launch(4)[0]}),
    ):  # fmt: skip
        sig = {n: ptrs.get(n, "fp32" if n == "sm_scale" else "i32") for n in names}
        sig |= dict.fromkeys(const, "constexpr")
        order = list(fn.arg_names)
        sig = {n: sig[n] for n in order}
        divisible = [n for n in names if n != "sm_scale" and n not in runtime_ints]
        src = ASTSource(
            fn=fn,
            signature=sig,
            constexprs={(order.index(k),): v for k, v in const.items()},
            attrs={(order.index(n),): [["tt.divisibility", 16]] for n in divisible},
        )
        compiled = triton.compile(src, target=_sm90(), options=options)
        name = f"{fn.__name__}_{out}"
        found.append((name, _disassemble(compiled, workdir, name), compiled.metadata.shared))
    return found


def _row_path(lines: list[str]) -> list[str]:
    """The instructions from the first branch target (``.L_x_0``) to the last ``EXIT``."""
    start = lines.index(".L_x_0") + 1 if ".L_x_0" in lines else 0
    body = lines[start:]
    end = max(i for i, s in enumerate(body) if s.split()[-1] == "EXIT")
    return body[: end + 1]


def _ops(lines: list[str], *names: str) -> int:
    """How many instructions (predicated or not) have one of ``names`` as their opcode."""
    return sum(1 for s in lines if s != ".L_x_0" and s.split()[s[0] == "@"].split(".")[0] in names)


def count_norm_act(dtype_name: str = "bfloat16") -> list[dict]:
    """A record per NVFP4 norm / activation kernel: instructions (all, row path), values a
    thread, spills."""
    import triton.language as tl

    dtype = getattr(tl, dtype_name)
    records = []
    with tempfile.TemporaryDirectory() as workdir:
        for case in (_norm(dtype, False), _norm(dtype, True), _act(dtype)):
            lines = _compile_norm_act(case, workdir)
            row = _row_path(lines)
            records.append({
                "kernel": case["name"], "dtype": dtype_name,
                "instructions": len(lines) - lines.count(".L_x_0"), "row_path": len(row),
                "values_a_thread": case["values"], "per_value": round(len(row) / case["values"], 2),
                "spills": _ops(lines, "STL"),
            })  # fmt: skip
    return records


def count_prefill() -> list[dict]:
    """A record per Gluon prefill variant: instructions, wgmmas, MUFU, spills, shared bytes."""
    records = []
    with tempfile.TemporaryDirectory() as workdir:
        for inp, out in (("bf16", "fp8"), ("fp8", "fp8"), ("fp8", "nvfp4"), ("bf16", "bf16")):
            lines, shared = _compile_prefill(inp, out, workdir)
            records.append({
                "kernel": f"prefill {inp} -> {out}",
                "instructions": len(lines) - lines.count(".L_x_0"),
                "wgmma": _ops(lines, "HGMMA", "QGMMA"), "mufu": _ops(lines, "MUFU"),
                "spills": _ops(lines, "STL"), "shared_bytes": shared,
            })  # fmt: skip
    return records


def count_decode() -> list[dict]:
    """A record per decode kernel (and merge) and output format: instructions, MUFU, spills,
    shared bytes."""
    records = []
    with tempfile.TemporaryDirectory() as workdir:
        for out in ("fp8", "nvfp4"):
            for name, lines, shared in _compile_decode(out, workdir):
                records.append({
                    "kernel": name.replace("_", " "),
                    "instructions": len(lines) - lines.count(".L_x_0"),
                    "mufu": _ops(lines, "MUFU"), "spills": _ops(lines, "STL"),
                    "shared_bytes": shared,
                })  # fmt: skip
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"],
                    help="the norm / activation kernels' input dtype")  # fmt: skip
    ap.add_argument("--json", default=result_path("sass_count"), help="where to write the records")
    args = ap.parse_args()
    norm_act = count_norm_act(args.dtype)
    print_table(["kernel", "instructions", "row path", "values a thread", "a value", "spills"],
                [[r["kernel"], r["instructions"], r["row_path"], r["values_a_thread"],
                  r["per_value"], r["spills"]] for r in norm_act])  # fmt: skip
    print()
    prefill = count_prefill()
    print_table(["kernel", "instructions", "wgmma", "MUFU", "spill stores", "shared bytes"],
                [[r["kernel"], r["instructions"], r["wgmma"], r["mufu"], r["spills"],
                  r["shared_bytes"]] for r in prefill])  # fmt: skip
    print()
    decode = count_decode()
    print_table(["kernel", "instructions", "MUFU", "spill stores", "shared bytes"],
                [[r["kernel"], r["instructions"], r["mufu"], r["spills"], r["shared_bytes"]]
                 for r in decode])  # fmt: skip
    write_json(args.json, {"norm_act": norm_act, "prefill": prefill, "decode": decode})


if __name__ == "__main__":
    main()
