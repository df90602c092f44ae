"""Makes the Triton CPU interpreter (``TRITON_INTERPRET=1``, Triton 3.6) run graphfuse's
kernels as the GPU does, for the offline runs in this folder. Call :func:`patch` after
``import triton`` and before any launch:

- float conversions: the interpreter truncates (bf16) or rounds without carry (e4m3); torch's
  round-to-nearest-even conversions replace them (e4m3 saturating, as the hardware's
  ``satfinite``);
- loops: ``range`` / ``tl.range`` bounds that come from program ids or arguments are
  one-element arrays there, which numpy >= 2.4 refuses to turn into ints;
- ``tl.dot`` of bf16 operands: stored as uint16, they were multiplied as integers;
- the kernels' inline asm (``_ASM``: the decode's e4m3 -> fp16, the activations' ``ex2`` and
  ``rcp``, the norm / activation kernels' packed products) is computed with torch (the interpreter
  runs no asm; this checks everything around it, not the asm).
"""

from __future__ import annotations

import numpy as np
import torch
import triton.language as tl

FP8 = torch.float8_e4m3fn
_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8e4nv": FP8}
_INTS = {8: (np.int8, torch.int8, np.uint8), 16: (np.int16, torch.int16, np.uint16),
         32: (np.int32, torch.int32, np.uint32)}  # fmt: skip


def _flush(t: torch.Tensor) -> torch.Tensor:
    """fp32 ``t`` with subnormals flushed to (signed) zero, as the ``.ftz`` instructions do."""
    return torch.where(t.abs() < torch.finfo(torch.float32).tiny, t * 0.0, t)


def _fp8_to_f16(data: np.ndarray):
    out = torch.from_numpy(data.copy()).view(FP8).to(torch.float16).numpy()
    return out, tl.float16


def _ex2_ftz(data: np.ndarray):
    x = _flush(torch.from_numpy(data.astype(np.float32)))
    return _flush(torch.exp2(x)).numpy(), tl.float32


def _rcp_ftz(data: np.ndarray):
    x = _flush(torch.from_numpy(data.astype(np.float32)))
    return _flush(1.0 / x).numpy(), tl.float32


def _products(dtype: torch.dtype):
    """norm_act/pairs.packed_products: ``dtype(ae) * w_even`` / ``dtype(ao) * w_odd``,
    each rounded once to ``dtype``, packed into the halves of an int32 word."""

    def emulate(ae: np.ndarray, ao: np.ndarray, ww: np.ndarray):
        w = torch.from_numpy(ww.astype(np.int32)).view(dtype).view(*ww.shape, 2)
        n = torch.stack([torch.from_numpy(a.astype(np.float32)) for a in (ae, ao)], -1)
        z = (n.to(dtype).float() * w.float()).to(dtype)
        return z.view(torch.int32).view(ww.shape).numpy(), tl.int32

    return emulate


def _sums(dtype: torch.dtype):
    """norm_act/pairs.packed_sums: the halves of two int32 words of ``dtype`` pairs added,
    each sum rounded once to ``dtype``."""

    def emulate(aw: np.ndarray, bw: np.ndarray):
        a, b = (torch.from_numpy(w.astype(np.int32)).view(dtype).float() for w in (aw, bw))
        return (a + b).to(dtype).view(torch.int32).numpy(), tl.int32

    return emulate


def _identity(data: np.ndarray):
    return data, tl.int32


# the kernels' inline asm, computed with torch: decode/tiles._fp8_to_f16 (e4m3 -> fp16),
# norm_act/kernels._ex2 and _rcp (``ex2.approx.ftz`` / ``rcp.approx.ftz`` as exact results
# with the flushes: the hardware's are within 2 / 1 ulp of these), pairs.packed_products,
# packed_sums and unanalysed
_ASM = {
    "cvt.rn.f16x2.e4m3x2": _fp8_to_f16,
    "ex2.approx.ftz.f32": _ex2_ftz,
    "rcp.approx.ftz.f32": _rcp_ftz,
    "fma.rn.bf16x2 $0, p,": _products(torch.bfloat16),
    "fma.rn.f16x2 $0, p,": _products(torch.float16),
    "fma.rn.bf16x2 $0, $1, one,": _sums(torch.bfloat16),
    "fma.rn.f16x2 $0, $1, one,": _sums(torch.float16),
    "mov.b32 $0, $1;": _identity,
}


def patch() -> None:
    """Applies the four changes above to ``triton.runtime.interpreter`` (once a process)."""
    from triton.runtime import interpreter as I

    if getattr(I, "_graphfuse_patched", False):
        return
    I._graphfuse_patched = True
    original_convert = I._convert_float

    def convert(data, src, dst, rounding_mode):
        if src.name not in _NAMES or dst.name not in _NAMES:
            return original_convert(data, src, dst, rounding_mode)
        src_np, _, _ = _INTS[src.primitive_bitwidth]
        bits = torch.from_numpy(np.ascontiguousarray(data).view(src_np).copy())
        v = bits.view(_NAMES[src.name]).float()
        if dst.name == "fp8e4nv":
            v = v.clamp(-448.0, 448.0)
        _, dst_t, dst_np = _INTS[dst.primitive_bitwidth]
        return v.to(_NAMES[dst.name]).view(dst_t).numpy().view(dst_np).reshape(data.shape)

    I._convert_float = convert

    patch_tensor = I._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda t: int(np.asarray(t.handle.data).ravel()[0]))

    I._patch_lang_tensor = patch_lang_tensor

    dot = I.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        def wide(h):
            if h.dtype.scalar != tl.bfloat16:
                return h
            f = (np.ascontiguousarray(h.data).astype(np.uint32) << 16).view(np.float32)
            return I.TensorHandle(f, tl.float32)

        return dot(self, wide(a), wide(b), d, input_precision, max_num_imprecise_acc)

    I.InterpreterBuilder.create_dot = create_dot

    def create_inline_asm(self, asm, constraints, values, types, is_pure, pack):
        emulate = next((f for key, f in _ASM.items() if key in asm), None)
        if emulate is None:
            raise NotImplementedError(f"no interpreter emulation for the inline asm {asm!r}")
        out, dtype = emulate(*(np.ascontiguousarray(v.data) for v in values))
        handle = I.TensorHandle(out, dtype)

        class _Call:
            def get_result(self, i: int):
                return handle

        return _Call()

    I.InterpreterBuilder.create_inline_asm = create_inline_asm
