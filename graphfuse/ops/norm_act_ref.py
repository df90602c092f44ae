"""Pure-PyTorch references of the fused norm / activation + quant ops: the executable form of
docs/numerics.md ("Norm and activation fused with a static quant").

The C++ CPU kernels are tested bit-exact against these functions, so every step whose result
PyTorch leaves to the implementation is pinned down here:

- the RMSNorm sum of squares runs in 16 lanes: lane ``l`` adds the squares of the elements
  ``l, l + 16, l + 32, ...`` in order, then the lanes are added as a tree (``l`` and
  ``l + 8``, then ``+ 4``, ``+ 2``, ``+ 1``); the mean divides that sum by K;
- ``rsqrt(v)`` is ``1 / sqrt(v)``, two correctly rounded fp32 operations (the square root is
  taken in fp64 and rounded once to fp32, which is the correctly rounded fp32 square root:
  ``torch.sqrt`` on fp32 CPU tensors may be an ulp off);
- ``exp`` is :func:`exp_ref` (Cody-Waite reduction and a degree-6 polynomial, about one ulp),
  ``silu(x) = x / (1 + exp(-x))`` and ``gelu_tanh(x) = x / (1 + exp(-2k))`` with
  ``k = sqrt(2/pi) * (x + 0.044715 x^3)`` (the same value as ``0.5 x (1 + tanh(k))``).

Every other step is an IEEE fp32 operation (no fused multiply-add) or a rounding to a dtype,
in the order written. The quantizers are those of :mod:`graphfuse.ops.quant_ref`.

Example:
    >>> x, w = torch.randn(4, 64, dtype=torch.bfloat16), torch.rand(64, dtype=torch.bfloat16)
    >>> q = rms_norm_quant_fp8_ref(x, w, 1e-6, torch.tensor(0.02))
"""

from __future__ import annotations

import torch

from .quant_ref import fp8_static_quant_ref, nvfp4_quant_ref

LANES = 16
ACTIVATIONS = ("silu", "gelu_tanh")
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)

# exp: n = rne(v * log2(e)), r = v - n * ln2 (ln2 split in two; the high part has 9 bits, so
# n * _LN2_HI is exact), exp(r) by a degree-6 polynomial, times 2^n as two powers of two.
_EXP_LO, _EXP_HI = -104.0, 89.0  # exp(v) is 0 / inf in fp32 beyond these
_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
# gelu_tanh: 2 * sqrt(2 / pi) and the cubic coefficient
GELU_BETA2 = 1.5957691216057308
GELU_KAPPA = 0.044715


def _check_float(t: torch.Tensor, what: str) -> None:
    if t.dtype not in _FLOATS:
        raise TypeError(f"{what} must be float32, bfloat16 or float16, got {t.dtype}")


def _pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k for integral fp32 ``k`` in [-126, 127], built from the exponent bits."""
    return torch.bitwise_left_shift(k.to(torch.int32) + 127, 23).view(torch.float32)


def exp_ref(v: torch.Tensor) -> torch.Tensor:
    """exp of an fp32 tensor as the kernels compute it (NaN stays NaN, overflow gives inf,
    underflow rounds once into the subnormals)."""
    v = v.clamp(_EXP_LO, _EXP_HI)
    n = torch.round(v * _LOG2E)
    r = v - n * _LN2_HI
    r = r - n * _LN2_LO
    p = r * _EXP_POLY[0] + _EXP_POLY[1]
    for c in _EXP_POLY[2:]:
        p = p * r + c
    y = p * (r * r)
    y = y + r
    y = y + 1.0
    n1 = torch.floor(n * 0.5)
    return y * _pow2(n1) * _pow2(n - n1)


def activation_ref(v: torch.Tensor, activation: str) -> torch.Tensor:
    """``silu`` or ``gelu_tanh`` of an fp32 tensor, in fp32."""
    if activation == "silu":
        k = v
    elif activation == "gelu_tanh":
        k = (v + ((v * v) * v) * GELU_KAPPA) * GELU_BETA2
    else:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    return v / (1.0 + exp_ref(-k))


def sum_squares_ref(v: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim of ``v * v`` (fp32 ``[M, K]`` -> ``[M]``) in the lane order
    above."""
    m, k = v.shape
    sq = v * v
    pad = (-k) % LANES
    if pad:
        sq = torch.cat([sq, sq.new_zeros(m, pad)], dim=1)
    lanes = sq.new_zeros(m, LANES)
    for chunk in sq.view(m, -1, LANES).unbind(1):
        lanes = lanes + chunk
    width = LANES
    while width > 1:
        width //= 2
        lanes = lanes[:, :width] + lanes[:, width : 2 * width]
    return lanes[:, 0]


def rms_norm_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    norm_dtype: torch.dtype | None = None,
    weight_first: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dim, before the quant.

    Args:
        x: float32 / bfloat16 / float16 ``[..., K]``.
        weight: ``[K]``, a floating dtype.
        eps: added to the mean square (as fp32).
        residual: added to x first (same shape and dtype), the sum rounded to x's dtype.
        norm_dtype: the dtype ``x * rsqrt(...)`` is rounded to (default x's dtype).
        weight_first: multiply by the weight in fp32, then round to ``norm_dtype``
            (``aten.rms_norm``); otherwise round first and multiply in
            ``promote_types(norm_dtype, weight.dtype)`` (transformers' LlamaRMSNorm).

    Returns:
        (the normalised tensor ``[M, K]``, the normalised input ``h`` = x or x + residual).
    """
    _check_float(x, "x")
    _check_float(weight, "weight")
    k = x.shape[-1]
    if weight.shape != (k,):
        raise ValueError(f"weight must have shape [{k}], got {list(weight.shape)}")
    h = x
    if residual is not None:
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError("residual must have x's shape and dtype")
        h = x + residual
    dtype = x.dtype if norm_dtype is None else norm_dtype
    v = h.reshape(-1, k).to(torch.float32)
    mean = sum_squares_ref(v) / float(k)
    r = 1.0 / torch.sqrt((mean + eps).to(torch.float64)).to(torch.float32)
    n = v * r.unsqueeze(1)
    w = weight.to(torch.float32)
    if weight_first:
        z = (n * w).to(dtype)
    else:
        z = (w * n.to(dtype).to(torch.float32)).to(torch.promote_types(dtype, weight.dtype))
    return z, h


def rms_norm_quant_fp8_ref(x, weight, eps, scale, norm_dtype=None, weight_first=False):
    """``graphfuse::rms_norm_quant_fp8``: :func:`rms_norm_ref`, then the static FP8 quant;
    float8_e4m3fn shaped like x."""
    z, _ = rms_norm_ref(x, weight, eps, None, norm_dtype, weight_first)
    return fp8_static_quant_ref(z, scale).reshape(x.shape)


def add_rms_norm_quant_fp8_ref(
    x, residual, weight, eps, scale, norm_dtype=None, weight_first=False
):
    """``graphfuse::add_rms_norm_quant_fp8``: (quantized norm of x + residual, x + residual)."""
    z, h = rms_norm_ref(x, weight, eps, residual, norm_dtype, weight_first)
    return fp8_static_quant_ref(z, scale).reshape(x.shape), h


def rms_norm_quant_nvfp4_ref(
    x, weight, eps, global_scale, norm_dtype=None, weight_first=False, swizzle=True
):
    """``graphfuse::rms_norm_quant_nvfp4``: (packed ``[M, K/2]``, block scales)."""
    z, _ = rms_norm_ref(x, weight, eps, None, norm_dtype, weight_first)
    return nvfp4_quant_ref(z, global_scale, swizzle)


def add_rms_norm_quant_nvfp4_ref(
    x, residual, weight, eps, global_scale, norm_dtype=None, weight_first=False, swizzle=True
):
    """``graphfuse::add_rms_norm_quant_nvfp4``: (packed, block scales, x + residual)."""
    z, h = rms_norm_ref(x, weight, eps, residual, norm_dtype, weight_first)
    return (*nvfp4_quant_ref(z, global_scale, swizzle), h)


def act_and_mul_ref(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu"):
    """``activation(gate) * up`` as a graph computes it in gate's dtype T: the activation in
    fp32 rounded to T, then the product rounded to T.

    Args:
        gate, up: float32 / bfloat16 / float16 tensors of one shape and dtype.
        activation: ``"silu"`` or ``"gelu_tanh"``.
    """
    _check_float(gate, "gate")
    if up.shape != gate.shape or up.dtype != gate.dtype:
        raise ValueError("gate and up must have one shape and dtype")
    dtype = gate.dtype
    a = activation_ref(gate.to(torch.float32), activation).to(dtype)
    return (a.to(torch.float32) * up.to(torch.float32)).to(dtype)


def act_and_mul_quant_fp8_ref(gate, up, scale, activation="silu"):
    """``graphfuse::act_and_mul_quant_fp8``: float8_e4m3fn shaped like gate."""
    return fp8_static_quant_ref(act_and_mul_ref(gate, up, activation), scale)


def act_and_mul_quant_nvfp4_ref(gate, up, global_scale, activation="silu", swizzle=True):
    """``graphfuse::act_and_mul_quant_nvfp4``: (packed ``[M, K/2]``, block scales)."""
    return nvfp4_quant_ref(act_and_mul_ref(gate, up, activation), global_scale, swizzle)
