"""Launchers of the norm / activation + quant kernels: each ``*_into`` checks its arguments and
writes into caller-provided outputs (tests poison them first); the op impls in ``ops.py``
allocate. Launch shapes depend on tensor shapes only (CUDA-graph capturable)."""

from __future__ import annotations

import torch
import triton

from graphfuse.ops.quant_ref import nvfp4_scale_shape

from ..host import TL_DTYPE, check_scale, dependent_launch, has_pdl, sf_pad_programs, sm_count
from ..quant.launch import nvfp4_rows_cols
from .kernels import (
    GELU_TANH,
    SILU,
    act_and_mul_fp8_kernel,
    act_and_mul_nvfp4_kernel,
    rms_norm_fp8_kernel,
    rms_norm_nvfp4_kernel,
)

FP8 = torch.float8_e4m3fn
FLOATS = (torch.float32, torch.bfloat16, torch.float16)
ACTIVATIONS = {"silu": SILU.value, "gelu_tanh": GELU_TANH.value}
CHUNK = 1024  # columns a program of the FP8 act_and_mul kernel
NB_ACT = 64  # NVFP4 blocks (1024 columns) a program of the NVFP4 act_and_mul kernel
PAD_WORDS = 2048  # 32-bit words of swizzle padding zeroed by one padding program (at most)
# warps an SM the looping NVFP4 RMSNorm launch fills: 5 programs of 4 warps at hidden 4096
# (sm_90: 96 registers a thread, so 5 fit), 2 of 8 from hidden 4097 (2 blocks a thread too)
NORM_NVFP4_LOOP_WARPS = 20
# a launch of at most this many programs an SM is a programmatic dependent launch (``_launch``)
PDL_PROGRAMS = 8


def _early(m: int, sms: int) -> bool:
    """Whether the norm kernels load the weight with the row, before the reduction: where the
    rows fit in one wave (at most two an SM) a row's latency is the kernel's, and the weight's
    load then overlaps the row's; with more rows the early weight costs registers the other
    rows' programs need (docs/serving.md, "The weight loaded early")."""
    return m <= 2 * sms


def _pad_programs(m: int, kb_pad: int, swizzle: bool) -> int:
    """Programs that zero the swizzled layout's padding rows (none when there are none),
    launched beside the rows' programs: the zeros go out in parallel with the rows instead of
    after them (at T = 1 the 127 padding rows are most of the bytes written)."""
    return sf_pad_programs(m, kb_pad, PAD_WORDS) if swizzle else 0


def _act_nvfp4_warps(programs: int, sms: int) -> int:
    """Warps of an NVFP4 act_and_mul program (``NB_ACT`` blocks): 2, so a thread holds one
    whole block (16 values: no cross-thread block amax, fewest instructions a value), but 4
    (half a block a thread) where the launch has at most two programs an SM: there a thread's
    instructions are the kernel's latency, not its throughput (docs/serving.md, "The
    act_and_mul grids")."""
    return 4 if programs <= 2 * sms else 2


def _norm_nvfp4_warps(nb: int, m: int, sms: int) -> int:
    """Warps of the NVFP4 RMSNorm launch: ``m`` rows of ``nb`` blocks (a power of two) on
    ``sms`` multiprocessors. With few rows (at most 6 an SM, the programs of 8 warps that fit
    at once) a row's latency is the kernel's, so about 16 values a thread (4 to 16 warps).
    With more, at most 32 values a thread: per value, a thread's share of the row's fixed work
    (the reduction, ``1/rms``, addresses) shrinks, and smaller programs keep more rows in
    flight; at hidden 4096, 4 warps issue 11% fewer instructions a value than 8 and fit 8
    programs an SM instead of 6 (sm_90 compile: 64 registers against 40)."""
    warps = 4 if nb <= 128 else 8 if nb <= 512 else 16
    if m > 6 * sms:
        warps = min(warps, max(4, nb // 64))
    return warps


def _norm_nvfp4_row_programs(m: int, sms: int, warps: int, residual: bool) -> int:
    """Row programs of the NVFP4 RMSNorm launch: ``m`` (a program a row), or where each
    program would get more than four rows and there is no residual add, about
    ``NORM_NVFP4_LOOP_WARPS`` warps an SM of programs that loop over the rows, each loading
    its next row while it computes one (``LOOP``). With two or three rows a program, or with
    the residual add (three streams, near copy speed), the loop measured slower
    (docs/serving.md, "Looping launch")."""
    programs = max(1, NORM_NVFP4_LOOP_WARPS // warps) * sms
    return programs if not residual and m > 4 * programs else m


def _norm_nvfp4_parts(m: int, nb: int, warps: int, sms: int) -> int:
    """Programs a row of the NVFP4 RMSNorm launch (``PARTS``): where the rows leave SMs idle
    (``m`` at most half the SM count), a row is split over up to 4 programs by block columns,
    as many as keep the launch within the SMs and at least 2 words (4 values) a thread; each
    program sums the squares of the whole row (an L2 hit after the first) and encodes its
    part, so the encode, most of a row's instructions and at these sizes its latency, runs
    on several SMs at once."""
    parts = 1
    while parts < 4 and 2 * parts * m <= sms and nb // (2 * parts) >= 8 * warps:
        parts *= 2
    return parts


def _norm_nvfp4_regs(nb: int, warps: int, loop: bool) -> dict:
    """The register cap of the NVFP4 RMSNorm launch: without ``LOOP``, 64 a thread for 4 warps
    over 256 blocks (hidden 4096), the occupancy the kernel has anyway; under the cap ptxas
    issues the weight's four 16-byte loads together (docs/serving.md, "Shape of the work").
    Elsewhere no cap (at 128 blocks it would cost occupancy; the loop
    holds a second row)."""
    return {"maxnreg": 64} if warps == 4 and nb == 256 and not loop else {}


# no fused multiply-add: the kernels round every product as norm_act_ref does
_EXACT = {"enable_fp_fusion": False}


def _launch(device: torch.device, programs: int, loop: bool = False) -> dict:
    """The options of a launch of ``programs`` programs: no fused multiply-add (``_EXACT``)
    and, from sm_90, where the grid is at most ``PDL_PROGRAMS`` programs an SM and not the
    looping launch, a programmatic dependent launch (``kernels.dependent_start``): back to
    back, the next call's programs are placed while this one runs; after a kernel that does
    not signal it is a plain launch. Small grids gain most (their time is mostly the gap
    between launches); over larger grids it measured slower (docs/serving.md, "Dependent
    launches")."""
    pdl = has_pdl(device) and not loop and programs <= PDL_PROGRAMS * sm_count(device)
    return {**_EXACT, **dependent_launch(pdl)}


def rows_2d(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed ``[M, K]`` (K its last dim) with unit column stride: a view when the
    leading dims collapse into one row stride (halves of a merged projection, row slices),
    else a contiguous copy."""
    k = t.shape[-1]
    m = t.numel() // k if k else 0
    if t.stride(-1) == 1 or k == 1:
        try:
            return t.view(m, k)
        except RuntimeError:
            pass
    return t.contiguous().view(m, k)


def words(t: torch.Tensor) -> torch.Tensor:
    """``[M, K]`` (unit column stride, K even) as ``[M, K/2]`` words of two elements, the
    NVFP4 kernels' view (``pairs.split_pairs``): int32 for 16-bit floats, int64 for fp32;
    a contiguous copy where the storage offset or a stride is odd."""
    word = torch.int32 if t.element_size() == 2 else torch.int64
    try:
        return t.view(word)
    except RuntimeError:
        return t.contiguous().view(word)


def _fail(op: str, msg: str) -> None:
    raise ValueError(f"graphfuse::{op}: {msg}")


def _check_out(op: str, name: str, t: torch.Tensor, shape: tuple, dtype: torch.dtype) -> None:
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype or not t.is_contiguous():
        _fail(op, f"{name} must be contiguous {dtype} {tuple(shape)}, got {t.dtype} "
              f"{tuple(t.shape)} strides {t.stride()}")  # fmt: skip


def _norm_args(
    op: str, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None,
    residual_out: torch.Tensor | None, norm_dtype: torch.dtype | None, weight_first: bool,
) -> tuple:  # fmt: skip
    """Checks a norm call; returns the kernel's leading arguments ``(x, residual,
    residual_out, weight)`` (x and residual as ``[M, K]`` rows; both x where there is no
    residual) and the constexprs both norm kernels take."""
    if x.dtype not in FLOATS or weight.dtype not in FLOATS or x.dim() < 1:
        _fail(op, f"x and weight must be float32 / bfloat16 / float16: {x.dtype}, {weight.dtype}")
    k = x.shape[-1]
    if tuple(weight.shape) != (k,):
        _fail(op, f"weight must have shape [{k}], got {list(weight.shape)}")
    norm_dt = x.dtype if norm_dtype is None else norm_dtype
    if norm_dt not in FLOATS:
        _fail(op, f"norm_dtype must be float32 / bfloat16 / float16, got {norm_dt}")
    if (residual is None) != (residual_out is None):
        _fail(op, "residual and residual_out come together")
    x2 = rows_2d(x)
    r2, r_out = x2, x2
    if residual is not None:
        if residual.shape != x.shape or residual.dtype != x.dtype:
            _fail(op, "residual must have x's shape and dtype")
        _check_out(op, "residual_out", residual_out, x.shape, x.dtype)
        r2, r_out = rows_2d(residual), residual_out
    out_dt = torch.promote_types(norm_dt, weight.dtype)
    meta = {
        "HAS_RES": residual is not None,
        "NORM_DT": TL_DTYPE[norm_dt],
        "OUT_DT": TL_DTYPE[out_dt],
        "WEIGHT_FIRST": bool(weight_first),
    }
    return (x2, r2, r_out, weight.contiguous()), meta


def rms_norm_quant_fp8_into(
    x: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor, out: torch.Tensor,
    norm_dtype: torch.dtype | None = None, weight_first: bool = False,
    residual: torch.Tensor | None = None, residual_out: torch.Tensor | None = None,
) -> None:  # fmt: skip
    """Writes ``e4m3(rms_norm(x [+ residual]) * (1/scale))`` into ``out`` (float8_e4m3fn
    shaped like x) and, with ``residual``, ``x + residual`` into ``residual_out``."""
    op = "add_rms_norm_quant_fp8" if residual is not None else "rms_norm_quant_fp8"
    check_scale(op, "scale", scale, x.device)
    args, meta = _norm_args(op, x, weight, residual, residual_out, norm_dtype, weight_first)
    _check_out(op, "out", out, x.shape, FP8)
    x2, r2 = args[:2]
    m, k = x2.shape
    if m and k:
        block = triton.next_power_of_2(k)
        rms_norm_fp8_kernel[(m,)](
            *args, scale, out, k, x2.stride(0), r2.stride(0), float(eps), BLOCK=block,
            EARLY=_early(m, sm_count(x.device)),
            num_warps=4 if block <= 1024 else 8 if block <= 4096 else 16, **meta,
            **_launch(x.device, m),
        )  # fmt: skip


def rms_norm_quant_nvfp4_into(
    x: torch.Tensor, weight: torch.Tensor, eps: float, global_scale: torch.Tensor,
    packed: torch.Tensor, block_scale: torch.Tensor, norm_dtype: torch.dtype | None = None,
    weight_first: bool = False, swizzle: bool = True, residual: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
) -> None:  # fmt: skip
    """NVFP4 of ``rms_norm(x [+ residual])`` into ``packed`` ([M, K/2] uint8) and
    ``block_scale`` (float8_e4m3fn, swizzled or ``[M, K/16]``); with ``residual``,
    ``x + residual`` into ``residual_out``."""
    op = "add_rms_norm_quant_nvfp4" if residual is not None else "rms_norm_quant_nvfp4"
    check_scale(op, "global_scale", global_scale, x.device)
    m, k = nvfp4_rows_cols(op, x.shape, x.shape[-1] if x.dim() else 0)
    args, meta = _norm_args(op, x, weight, residual, residual_out, norm_dtype, weight_first)
    sshape = nvfp4_scale_shape(m, k, swizzle)
    _check_out(op, "packed", packed, (m, k // 2), torch.uint8)
    _check_out(op, "block_scale", block_scale, sshape, FP8)
    if not m:
        return
    x2, r2, r_out, w = (words(t.view(-1, k)) for t in args)
    nb = triton.next_power_of_2(sshape[1])  # a row covers the padding block columns too
    sms = sm_count(x.device)
    warps = _norm_nvfp4_warps(nb, m, sms)
    row_programs = _norm_nvfp4_row_programs(m, sms, warps, residual is not None)
    loop = row_programs < m
    parts = 1 if loop else _norm_nvfp4_parts(m, nb, warps, sms)
    programs = row_programs * parts + _pad_programs(m, sshape[1], swizzle)
    rms_norm_nvfp4_kernel[(programs,)](
        x2, r2, r_out, w, global_scale, packed, block_scale.view(torch.uint8), m, k, sshape[1],
        x2.stride(0), r2.stride(0), float(eps), row_programs, DT=TL_DTYPE[x.dtype],
        W_DT=TL_DTYPE[weight.dtype], SWIZZLE=bool(swizzle), EARLY=_early(m, sms), LOOP=loop,
        NB=nb, PARTS=parts, num_warps=warps, **_norm_nvfp4_regs(nb, warps, loop), **meta,
        **_launch(x.device, programs, loop),
    )  # fmt: skip


def _act_args(op: str, gate: torch.Tensor, up: torch.Tensor, activation: str) -> tuple:
    """Checks an act_and_mul call; returns gate and up as ``[M, K]`` views and ACT."""
    if gate.dtype not in FLOATS or gate.dim() < 1:
        _fail(op, f"gate must be float32 / bfloat16 / float16 of rank >= 1, got {gate.dtype}")
    if up.shape != gate.shape or up.dtype != gate.dtype:
        _fail(op, "up must have gate's shape and dtype")
    if activation not in ACTIVATIONS:
        _fail(op, f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
    return rows_2d(gate), rows_2d(up), ACTIVATIONS[activation]


def _chunk(cols: int) -> int:
    return max(64, min(CHUNK, triton.next_power_of_2(cols)))


def act_and_mul_quant_fp8_into(
    gate: torch.Tensor, up: torch.Tensor, scale: torch.Tensor, out: torch.Tensor,
    activation: str = "silu",
) -> None:  # fmt: skip
    """Writes ``e4m3(activation(gate) * up * (1/scale))`` into ``out`` (float8_e4m3fn shaped
    like gate). gate / up may be strided rows (the halves of a merged projection)."""
    op = "act_and_mul_quant_fp8"
    check_scale(op, "scale", scale, gate.device)
    g2, u2, act = _act_args(op, gate, up, activation)
    _check_out(op, "out", out, gate.shape, FP8)
    m, k = g2.shape
    if m and k:
        chunk = _chunk(k)
        chunks = triton.cdiv(k, chunk)
        act_and_mul_fp8_kernel[(m * chunks,)](
            g2, u2, scale, out, k, g2.stride(0), u2.stride(0), ACT=act, CHUNK=chunk,
            CHUNKS=chunks, num_warps=4, **_launch(gate.device, m * chunks),
        )  # fmt: skip


def act_and_mul_quant_nvfp4_into(
    gate: torch.Tensor, up: torch.Tensor, global_scale: torch.Tensor, packed: torch.Tensor,
    block_scale: torch.Tensor, activation: str = "silu", swizzle: bool = True,
) -> None:  # fmt: skip
    """NVFP4 of ``activation(gate) * up`` into ``packed`` ([M, K/2] uint8) and
    ``block_scale`` (float8_e4m3fn, swizzled or ``[M, K/16]``)."""
    op = "act_and_mul_quant_nvfp4"
    check_scale(op, "global_scale", global_scale, gate.device)
    m, k = nvfp4_rows_cols(op, gate.shape, gate.shape[-1] if gate.dim() else 0)
    g2, u2, act = _act_args(op, gate, up, activation)
    sshape = nvfp4_scale_shape(m, k, swizzle)
    _check_out(op, "packed", packed, (m, k // 2), torch.uint8)
    _check_out(op, "block_scale", block_scale, sshape, FP8)
    if not m:
        return
    g2, u2 = words(g2), words(u2)
    nb = min(NB_ACT, triton.next_power_of_2(sshape[1]))
    chunks = triton.cdiv(sshape[1], nb)
    pad_rows = triton.cdiv(_pad_programs(m, sshape[1], swizzle), chunks)
    act_and_mul_nvfp4_kernel[(m + pad_rows, chunks)](
        g2, u2, global_scale, packed, block_scale.view(torch.uint8), m, k, sshape[1],
        g2.stride(0), u2.stride(0), DT=TL_DTYPE[gate.dtype], ACT=act, SWIZZLE=bool(swizzle),
        NB=nb, num_warps=_act_nvfp4_warps(m * chunks, sm_count(gate.device)),
        **_launch(gate.device, (m + pad_rows) * chunks),
    )  # fmt: skip
