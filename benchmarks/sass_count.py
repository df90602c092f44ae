"""sm_90 instruction counts of graphfuse's Triton and Gluon kernels, compiled offline.

No GPU is needed: Triton compiles for an sm_90 target with its own ``ptxas`` and
disassembles with its ``nvdisasm``. Each kernel gets the options and the argument
specialisation (pointers, sizes and strides divisible by 16) of a real launch:

- the NVFP4 norm / activation kernels at hidden 4096 / intermediate 14336 with many rows
  (no fused multiply-add; RMSNorm in its looping launch, 4 warps; add + RMSNorm a program a
  row, 4 warps under a 64-register cap; act_and_mul 2 warps): the instructions of the row
  programs' code (from the first branch target, where the row programs start, to the last
  ``EXIT``) and the values a thread holds on it. That code also holds what a row does not
  run: the division slow paths, and the side of the uniform branch on the global scale that
  scales the values before the encode (``g`` outside ``[2**-116, 2**118)``: one or two
  multiplies a value; 75 of RMSNorm's 807), so a row issues about 730 (docs/serving.md, "Where
  the NVFP4 kernels' time goes"). The kernels are compiled for that hidden size (``K`` is a
  compile-time constant, as the launchers pass it). Beside them the FP8 RMSNorm (a program a
  row, 8 warps), whose row path is everything up to its ``EXIT``;
- the warp-specialised Gluon prefill kernel (D=128) for each input / output pair: its
  instructions, tensor-core instructions (``HGMMA`` / ``QGMMA``), ``MUFU`` and shared
  memory (docs/gpu.md);
- the paged split-KV decode kernel and its split merge in the configuration of the B ~ 8
  class (``decode/config.CLASSES``: 64-token tiles, 4 warps, 3 stages, the block table
  one tile ahead, head-major, dependent launch), Llama-3-8B heads (32 / 8, D=128), an FP8
  cache with its dequant scales, bf16 q, FP8 or NVFP4 out: the same columns.

Both count local-memory spills (``STL``). ``compile_decode`` takes any row of the table and
either cache, and ``decode_row_usage`` gives a row's registers, shared memory and programs
an SM (``tests/triton_kernels/test_decode_compile.py`` runs them over every paged row).

    python -m benchmarks.sass_count [--dtype bfloat16] [--json PATH] [--prefill-kernel FILE]
    python -m benchmarks.sass_count --key-loop [--prefill-kernel FILE]

``--key-loop`` prints the basic blocks of each prefill case's key loop (``key_loop_blocks``)
instead; ``--prefill-kernel`` compiles another version of ``gluon_kernel.py`` for the prefill
rows, or this tree's with a ``.diff`` applied (``benchmarks.prefill_kernels_ab.load_version``;
its counts are written only where ``--json`` says, never over the recorded file).

Needs ``triton`` with Gluon's Hopper layer (not a dependency of graphfuse; the pinned
``interpret`` extra installs it).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from collections import Counter

from benchmarks.common import print_table, result_path, write_json

_INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"(\.L_x_\d+):")
_BRANCH = re.compile(r"BRA\s.*\((\.L_x_\d+)\)")
_WORD_PTRS = ("x_ptr", "res_ptr", "res_out_ptr", "w_ptr")
# ws_attention_kernel's arguments after the three TMA descriptors
_PREFILL_ARGS = (
    "out_ptr", "osc_ptr", "qs_ptr", "ks_ptr", "vs_ptr", "scale_bits", "H", "G", "SQ", "SKV",
    "q_rb", "q_rh", "q_ch", "k_rb", "k_rh", "k_ch", "v_rb", "v_rh", "v_ch", "sob", "soh", "sos",
    "qk_scale", "causal",
    "causal_off", "sf_ptr", "nmb", "nmh", "nms", "nch", "nv_k", "nv_kbpad", "n_work",
)  # fmt: skip
_PREFILL_SCALARS = ("scale_bits", "G", "causal", "causal_off", "n_work")
# the norm / activation kernels' launch: token rows, hidden size, SMs
_ROWS, _HIDDEN, _SMS = 16384, 4096, 132


def _norm(dtype, residual: bool) -> dict:
    """The NVFP4 RMSNorm kernel as its launcher runs it at hidden 4096 (256 blocks) over 16384
    rows of 132 SMs: warps, ``LOOP``, ``EARLY`` and register cap from ``norm_act/launch.py``."""
    from graphfuse.triton.norm_act import launch

    m, nb, sms = _ROWS, _HIDDEN // 16, _SMS
    warps = launch._norm_nvfp4_warps(nb, m, sms)
    loop = launch._norm_nvfp4_row_programs(m, sms, warps, residual) < m
    sig = dict.fromkeys(_WORD_PTRS, "*i32")
    sig |= {"g_ptr": "*fp32", "packed_ptr": "*u8", "scale_ptr": "*u8", "M": "i32", "sx": "i32",
            "sr": "i32", "eps": "fp32", "ROW_PROGRAMS": "i32"}  # fmt: skip
    const = {"K": nb * 16, "KB_PAD": nb, "DT": dtype, "W_DT": dtype, "HAS_RES": residual,
             "NORM_DT": dtype, "OUT_DT": dtype, "WEIGHT_FIRST": False, "SWIZZLE": True,
             "EARLY": launch._early(m, sms), "LOOP": loop, "NB": nb, "PARTS": 1,
             "PDL": False}  # fmt: skip
    name = "add + RMSNorm + NVFP4" if residual else "RMSNorm + NVFP4"
    options = {"num_warps": warps, **launch._norm_nvfp4_regs(nb, warps, loop)}
    return {"name": name, "kernel": "rms_norm_nvfp4_kernel", "sig": sig, "const": const,
            "options": options, "values": nb * 16 // (32 * warps)}  # fmt: skip


def _norm_fp8(dtype) -> dict:
    """The FP8 RMSNorm kernel as its launcher runs it at hidden 4096: a program a row, the row
    in 8 warps (``BLOCK`` 4096). It has no separate row-program code: its row path is every
    instruction up to its ``EXIT`` (the division and square-root slow paths after it)."""
    from graphfuse.triton.norm_act import launch

    ptrs = dict.fromkeys(_WORD_PTRS, f"*{dtype.name}")  # bf16 or fp16
    sig = ptrs | {"s_ptr": "*fp32", "out_ptr": "*fp8e4nv", "sx": "i32", "sr": "i32",
                  "eps": "fp32"}  # fmt: skip
    const = {"K": _HIDDEN, "HAS_RES": False, "NORM_DT": dtype, "OUT_DT": dtype,
             "WEIGHT_FIRST": False, "EARLY": launch._early(_ROWS, _SMS), "BLOCK": _HIDDEN,
             "PDL": False}  # fmt: skip
    return {"name": "RMSNorm + FP8", "kernel": "rms_norm_fp8_kernel", "sig": sig,
            "const": const, "options": {"num_warps": 8}, "values": _HIDDEN // (32 * 8),
            "whole": True}  # fmt: skip


def _act(dtype) -> dict:
    """The NVFP4 SiLU-and-mul kernel with its launcher's blocks a program and warps."""
    from graphfuse.triton.norm_act.launch import NB_ACT, _act_nvfp4_warps

    inter = 14336
    warps = _act_nvfp4_warps(_ROWS * (inter // 16 // NB_ACT), _SMS)
    sig = {"gate_ptr": "*i32", "up_ptr": "*i32", "g_ptr": "*fp32", "packed_ptr": "*u8",
           "scale_ptr": "*u8", "M": "i32", "sg": "i32", "su": "i32"}  # fmt: skip
    const = {"K": inter, "KB_PAD": inter // 16, "DT": dtype, "ACT": 0, "SWIZZLE": True,
             "NB": NB_ACT, "PDL": False}  # fmt: skip
    return {"name": "SiLU-and-mul + NVFP4", "kernel": "act_and_mul_nvfp4_kernel", "sig": sig,
            "const": const, "options": {"num_warps": warps},
            "values": NB_ACT * 16 // (32 * warps)}  # fmt: skip


def _disassemble(cubin: str) -> tuple[list[str], dict[str, int]]:
    """The SASS instructions of ``cubin`` (Triton's ``nvdisasm``) and each branch label's
    index among them."""
    import triton

    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
    sass = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True, check=True)
    lines, labels = [], {}
    for line in sass.stdout.splitlines():
        if m := _INSTRUCTION.match(line):
            lines.append(m.group(1))
        elif m := _LABEL.match(line):
            labels[m.group(1)] = len(lines)
    return lines, labels


def _compile(
    fn, sig: dict, const: dict, divisible: list[str], options: dict, workdir: str, source=None
) -> tuple[list[str], int, int]:  # fmt: skip
    """Compiles ``fn`` for sm_90 with argument types ``sig`` (name -> Triton type string),
    constexprs ``const`` and the arguments in ``divisible`` specialised as multiples of 16;
    returns its SASS instructions, the index of the first branch target among them (where
    the norm / act kernels' row programs start; 0 without one) and its shared bytes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    order = list(fn.arg_names)
    sig = sig | dict.fromkeys(const, "constexpr")
    src = (source or ASTSource)(
        fn=fn,
        signature={n: sig[n] for n in order},
        constexprs={(order.index(k),): v for k, v in const.items()},
        attrs={(order.index(n),): [["tt.divisibility", 16]] for n in divisible},
    )
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    cubin = os.path.join(workdir, fn.__name__ + ".cubin")
    with open(cubin, "wb") as f:
        f.write(compiled.asm["cubin"])
    lines, labels = _disassemble(cubin)
    return lines, labels.get(".L_x_0", 0), compiled.metadata.shared


def _compile_norm_act(case: dict, workdir: str) -> tuple[list[str], int, int]:
    """``_compile`` of a norm / activation case's kernel."""
    from graphfuse.triton.norm_act import kernels

    divisible = [
        n for n, t in case["sig"].items()
        if (t[0] == "*" or t == "i32") and n not in ("M", "ROW_PROGRAMS")
    ]  # fmt: skip
    options = {"enable_fp_fusion": False, **case["options"]}
    fn = getattr(kernels, case["kernel"])
    return _compile(fn, case["sig"], case["const"], divisible, options, workdir)


def compile_prefill(
    inp: str, out: str, workdir: str, d: int = 128, fast: bool = False, kernel=None
) -> tuple[list[str], int, int]:
    """``_compile`` of the Gluon prefill kernel, head dim ``d``, ``inp`` q / k / v (``bf16``
    or ``fp8``: default precision, V upcast to fp16; ``fast``: FP8 V^T tiles) into ``out``;
    ``kernel``: another version of ``gluon_kernel.py`` as a module
    (``benchmarks.prefill_kernels_ab.load_version``), else this tree's."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from graphfuse.triton.prefill import gluon_kernel
    from graphfuse.triton.prefill.config import WS_BLOCK_M, WS_BLOCK_N, ws_stages

    module = kernel or gluon_kernel

    types = {"bf16": (gl.bfloat16, "bf16"), "fp8": (gl.float8e4nv, "fp8e4nv"),
             "fp16": (gl.float16, "fp16")}  # fmt: skip

    def desc(rows: int, name: str, cols: int = d) -> str:
        layout = gl.NVMMASharedLayout.get_default_for([rows, cols], types[name][0])
        return f"tensordesc<{types[name][1]}[{rows}, {cols}],{layout!r}>"

    v_desc = (
        desc(d, "fp8", WS_BLOCK_N) if fast else desc(WS_BLOCK_N, "fp16" if inp == "fp8" else inp)
    )
    sig = {"q_desc": desc(WS_BLOCK_M // 2, inp), "k_desc": desc(WS_BLOCK_N, inp),
           "v_desc": v_desc}  # fmt: skip
    sig |= dict.fromkeys(_PREFILL_ARGS, "i32")
    sig |= {"out_ptr": {"nvfp4": "*u8", "fp8": "*fp8e4nv", "bf16": "*bf16"}[out],
            "osc_ptr": "*fp32", "qs_ptr": "*fp32", "ks_ptr": "*fp32", "vs_ptr": "*fp32",
            "qk_scale": "fp32", "sf_ptr": "*u8"}  # fmt: skip
    divisible = [n for n in _PREFILL_ARGS if n not in _PREFILL_SCALARS and n != "qk_scale"]
    options = {"num_warps": 4, "maxnreg": module.MAXNREG}
    const = {"NSTAGE": ws_stages(fast, d)}
    return _compile(module.ws_attention_kernel, sig, const, divisible, options, workdir,
                    GluonASTSource)  # fmt: skip


def key_loop_blocks(cubin: str) -> list[tuple[str, int, dict]]:
    """The basic blocks of the first consumer key loop in the prefill kernel ``cubin``'s
    SASS (the first backward branch whose body holds at least 60 ``MUFU``, a tile's
    exponentials, and at most 24 wgmmas): (label, instructions, opcode counts). The causal
    mask's block runs on a row block's last tiles only; a rescale's multiplies are skipped by
    warps whose factors are all 1 (``gluon_kernel._rescaled``)."""
    lines, labels = _disassemble(cubin)
    for end, ins in enumerate(lines):
        target = _BRANCH.search(ins)
        first = labels.get(target.group(1), end) if target else end
        body = lines[first : end + 1]
        if first < end and _ops(body, "MUFU") >= 60 and _ops(body, "HGMMA", "QGMMA") <= 24:
            starts = sorted(i for i in labels.values() if first <= i <= end)
            names = {i: n for n, i in labels.items()}
            return [
                (names[a], b - a, dict(Counter(_opcode(x) for x in lines[a:b]).most_common()))
                for a, b in zip(starts, [*starts[1:], end + 1])
            ]
    raise ValueError(f"{cubin}: no key loop found")


_DECODE_ARGS = (
    "Q", "K", "V", "QS", "KS", "VS", "BT", "LENS", "OSC", "OUT", "SF", "PO", "PML",
    "sqb", "sqh", "skb", "skh", "skt", "svb", "svh", "svt", "sbt", "HQ", "G", "SKV", "sm_scale",
    "CHUNK", "sob", "soh", "NV_M",
)  # fmt: skip
_MERGE_ARGS = (
    "PO", "PML", "VS", "OSC", "OUT", "SF", "NROWS", "NSPLIT", "sob", "soh", "NV_M",
)  # fmt: skip


def compile_decode(
    out: str, workdir: str, cfg: dict | None = None, kv: str = "fp8"
) -> list[tuple[str, tuple[list[str], int, int]]]:
    """(name, ``_compile``'s result) of the decode kernel and its merge, paged ``kv`` cache
    (``fp8`` with its dequant scales, or ``bf16``), bf16 q, ``out`` FP8 or NVFP4, as
    ``decode/launch.decode_into`` launches them for Llama-3-8B heads (32 / 8, D=128) with the
    knobs ``cfg`` (default: the B ~ 8 class's row); the merge only where the row splits (a
    split count of None is ``choose_splits``', more than one on the GPUs lent)."""
    import triton.language as tl

    from graphfuse.triton.decode import kernels
    from graphfuse.triton.decode.config import decode_config
    from graphfuse.triton.decode.launch import merge_launch

    cfg = cfg or decode_config(True, 8, 8, 1024)
    fp8 = kv == "fp8"
    split_out = cfg["splits"] != 1
    merge_warps, merge_sc = merge_launch(4)
    out_ty, kind = ("*u8", 2) if out == "nvfp4" else ("*fp8e4nv", 1)
    # the [B, Hq * D] view of the output (NVFP4), or one head's D columns
    nv = {"NV_K": 4096, "NV_KBPAD": 256} if kind == 2 else {"NV_K": 128, "NV_KBPAD": 4}
    kv_ty = "*fp8e4nv" if fp8 else "*bf16"
    ptrs = {"Q": "*bf16", "K": kv_ty, "V": kv_ty, "QS": "*bf16", "KS": "*fp32",
            "VS": "*fp32", "BT": "*i32", "LENS": "*i32", "OSC": "*fp32", "OUT": out_ty,
            "SF": "*u8" if out == "nvfp4" else out_ty, "PO": "*fp32", "PML": "*fp32"}  # fmt: skip
    runtime_ints = ("HQ", "G", "SKV", "NROWS", "NSPLIT", "NV_M")
    kernels_to_compile = [
        (kernels.decode_kernel, _DECODE_ARGS,
         {"PAGE": 16, "D": 128, "HAS_QS": False, "HAS_KS": fp8, "HAS_VS": fp8, "PAGED": True,
          "SPLIT_OUT": split_out, "OUT_KIND": kind,
          "DOT_DT": tl.float16 if fp8 else tl.bfloat16, "Q_RESCALE": fp8, "GP": 16,
          "BLOCK_N": cfg["block_n"], "DP": 128, "PREFETCH": cfg["prefetch"],
          "BT_AHEAD": cfg["bt_ahead"], "HEAD_MAJOR": cfg["head_major"],
          "SF_PAD": kind == 2 and not split_out, "PDL": cfg["pdl"], **nv},
         {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}),
    ]  # fmt: skip
    if split_out:
        kernels_to_compile.append(
            (kernels.decode_merge, _MERGE_ARGS,
             {"HAS_VS": fp8, "OUT_KIND": kind, "SC": merge_sc, "HQ": 32, "D": 128, "DP": 128,
              "SF_PAD": kind == 2, "PDL": cfg["pdl"], **nv},
             {"num_warps": merge_warps})
        )  # fmt: skip
    found = []
    for fn, names, const, options in kernels_to_compile:
        sig = {n: ptrs.get(n, "fp32" if n == "sm_scale" else "i32") for n in names}
        divisible = [n for n in names if n != "sm_scale" and n not in runtime_ints]
        name = f"{fn.__name__} {out}".replace("_", " ")
        found.append((name, _compile(fn, sig, const, divisible, options, workdir)))
    return found


# sm_90 limits a program's resources meet: registers and shared memory an SM (1 KB of the
# latter reserved a program), warps and programs an SM
SM90_LIMITS = {"registers": 65536, "shared": 228 * 1024, "reserved": 1024, "warps": 64,
               "programs": 32}  # fmt: skip


def cubin_registers(cubin: str) -> int:
    """Registers a thread of the kernel in ``cubin`` (``cuobjdump -res-usage``)."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    usage = subprocess.run([tool, "-res-usage", cubin], capture_output=True, text=True, check=True)
    return int(re.search(r"REG:(\d+)", usage.stdout).group(1))


def programs_per_sm(registers: int, shared: int, warps: int) -> int:
    """How many programs of ``warps`` warps, ``registers`` a thread and ``shared`` bytes fit an
    sm_90 SM at once (registers are allocated 256 a warp at a time).

    Example:
        >>> programs_per_sm(196, 55296, 2)  # the FP8 long-context decode row
        4
    """
    lim = SM90_LIMITS
    warp_regs = -(-registers * 32 // 256) * 256
    return min(
        lim["registers"] // (warp_regs * warps), lim["shared"] // (shared + lim["reserved"]),
        lim["warps"] // warps, lim["programs"],
    )  # fmt: skip


def decode_row_usage(cfg: dict, kv: str, workdir: str, out: str = "fp8") -> list[dict]:
    """``_record`` of the decode kernel (and of its merge where the row splits) with the knobs
    ``cfg`` over a ``kv`` cache into ``out`` (``compile_decode``); the kernel's record also
    has its ``registers`` and ``programs_per_sm``."""
    records = [_record(n, lines, shared) for n, (lines, _, shared) in
               compile_decode(out, workdir, cfg, kv)]  # fmt: skip
    regs = cubin_registers(os.path.join(workdir, "decode_kernel.cubin"))
    records[0] |= {"registers": regs, "programs_per_sm":
                   programs_per_sm(regs, records[0]["shared_bytes"], cfg["num_warps"])}  # fmt: skip
    return records


def _opcode(ins: str) -> str:
    """An instruction's opcode without its modifiers (``FMNMX`` of ``@P0 FMNMX.NAN ...``)."""
    return ins.split()[ins[0] == "@"].split(".")[0]


def _ops(lines: list[str], *names: str) -> int:
    """How many instructions (predicated or not) have one of ``names`` as their opcode."""
    return sum(1 for s in lines if _opcode(s) in names)


def _record(kernel: str, lines: list[str], shared: int) -> dict:
    """The columns every kernel gets: instructions, wgmmas, MUFU, spill stores, shared bytes."""
    return {"kernel": kernel, "instructions": len(lines), "wgmma": _ops(lines, "HGMMA", "QGMMA"),
            "mufu": _ops(lines, "MUFU"), "spills": _ops(lines, "STL"),
            "shared_bytes": shared}  # fmt: skip


def count_norm_act(dtype_name: str = "bfloat16") -> list[dict]:
    """A record per NVFP4 norm / activation kernel, and the FP8 RMSNorm's beside them:
    ``_record``'s columns, the row path (from the first branch target to the last ``EXIT``;
    the FP8 kernel's: up to its ``EXIT``) and the values a thread holds."""
    import triton.language as tl

    dtype = getattr(tl, dtype_name)
    records = []
    with tempfile.TemporaryDirectory() as workdir:
        for case in (_norm(dtype, False), _norm(dtype, True), _act(dtype), _norm_fp8(dtype)):
            lines, start, shared = _compile_norm_act(case, workdir)
            exits = [i for i, s in enumerate(lines) if s.split()[-1] == "EXIT"]
            row = exits[0] + 1 if case.get("whole") else exits[-1] + 1 - start
            records.append({
                **_record(case["name"], lines, shared), "dtype": dtype_name, "row_path": row,
                "values_a_thread": case["values"], "per_value": round(row / case["values"], 2),
            })  # fmt: skip
    return records


_PREFILL_CASES = (
    ("bf16", "fp8", False), ("fp8", "fp8", False), ("fp8", "nvfp4", False),
    ("bf16", "bf16", False), ("fp8", "fp8", True),
)  # fmt: skip


def _prefill_name(inp: str, out: str, fast: bool) -> str:
    return f"prefill {inp}{' fast' if fast else ''} -> {out}"


def count_prefill(kernel=None) -> list[dict]:
    """``_record`` of each Gluon prefill case (``kernel``: as ``compile_prefill``'s)."""
    with tempfile.TemporaryDirectory() as workdir:
        return [
            _record(_prefill_name(inp, out, fast), lines, shared)
            for inp, out, fast in _PREFILL_CASES
            for lines, _, shared in [compile_prefill(inp, out, workdir, fast=fast, kernel=kernel)]
        ]


def print_key_loops(kernel=None) -> None:
    """``key_loop_blocks`` of each Gluon prefill case at D = 128, a table each."""
    with tempfile.TemporaryDirectory() as workdir:
        for inp, out, fast in _PREFILL_CASES:
            compile_prefill(inp, out, workdir, fast=fast, kernel=kernel)
            blocks = key_loop_blocks(os.path.join(workdir, "ws_attention_kernel.cubin"))
            print(f"{_prefill_name(inp, out, fast)}: key loop {sum(n for _, n, _ in blocks)}")
            print_table(["block", "instructions", "most frequent"],
                        [[name, n, ", ".join(f"{o} {c}" for o, c in list(ops.items())[:6])]
                         for name, n, ops in blocks])  # fmt: skip
            print()


def count_decode() -> list[dict]:
    """``_record`` of the decode kernel and its merge for each output format."""
    with tempfile.TemporaryDirectory() as workdir:
        return [
            _record(name, lines, shared)
            for out in ("fp8", "nvfp4")
            for name, (lines, _, shared) in compile_decode(out, workdir)
        ]


_COLUMNS = ("instructions", "wgmma", "mufu", "spills", "shared_bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"],
                    help="the norm / activation kernels' input dtype")  # fmt: skip
    ap.add_argument("--json", help="where to write the records (default: the recorded "
                    "results/sass_count.json, unless --prefill-kernel is given)")  # fmt: skip
    ap.add_argument("--prefill-kernel", metavar="FILE",
                    help="another version of gluon_kernel.py, or a .diff of it, for the "
                    "prefill rows")  # fmt: skip
    ap.add_argument("--key-loop", action="store_true",
                    help="only the prefill key loops' basic blocks (no JSON)")  # fmt: skip
    args = ap.parse_args()
    kernel = None
    if args.prefill_kernel:
        from benchmarks.prefill_kernels_ab import load_version

        kernel = load_version(args.prefill_kernel, 0)
    if args.key_loop:
        print_key_loops(kernel)
        return
    norm_act = count_norm_act(args.dtype)
    print_table(["kernel", "instructions", "row path", "values a thread", "a value", "spills"],
                [[r["kernel"], r["instructions"], r["row_path"], r["values_a_thread"],
                  r["per_value"], r["spills"]] for r in norm_act])  # fmt: skip
    prefill, decode = count_prefill(kernel), count_decode()
    print()
    print_table(["kernel", "instructions", "wgmma", "MUFU", "spill stores", "shared bytes"],
                [[r["kernel"], *(r[c] for c in _COLUMNS)] for r in prefill + decode])  # fmt: skip
    path = args.json or (None if kernel else result_path("sass_count"))
    if path:
        write_json(path, {"norm_act": norm_act, "prefill": prefill, "decode": decode})


if __name__ == "__main__":
    main()
