"""Pure-PyTorch references of the quantization ops: the executable form of docs/numerics.md.

Every kernel (C++ CPU, Triton GPU, the fused attention epilogues) is tested bit-exact against
these functions. They are written for clarity, vectorised, in fp32, in the order docs/numerics.md
states. Conversions to e4m3 go through ``Tensor.to(torch.float8_e4m3fn)`` after a clamp to
±448: torch's cast rounds to nearest-even, produces subnormals, keeps the sign of zero and
maps NaN to 0x7F/0xFF, but it is *not* saturating (it gives NaN from 464 up), hence the clamp.
``tests/ops/test_quant_ref.py`` checks this exhaustively over all codes and midpoints.

Example:
    >>> x = torch.randn(4, 32)
    >>> g = torch.tensor(448 * 6 / x.abs().max().item())
    >>> packed, sf = nvfp4_quant_ref(x, g)
    >>> y = nvfp4_dequant_ref(packed, sf, g, torch.float32)
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Lower edges of e2m1 magnitude codes 1..7, and whether the edge itself belongs to the code
# above (ties to even: 0.75 -> 1, 1.75 -> 2, 3.5 -> 4 go up; 0.25, 1.25, 2.5, 5 stay down).
_E2M1_EDGES = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False),
               (3.5, True), (5.0, False))  # fmt: skip
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _scale(scale: torch.Tensor, name: str = "scale") -> torch.Tensor:
    if scale.numel() != 1:
        raise ValueError(f"{name} must have exactly one element, got shape {list(scale.shape)}")
    return scale.reshape(()).to(torch.float32)


def _check_float(x: torch.Tensor, what: str) -> None:
    if x.dtype not in _FLOATS:
        raise TypeError(f"{what} must be float32, bfloat16 or float16, got {x.dtype}")


def e4m3(v: torch.Tensor) -> torch.Tensor:
    """``e4m3(v)`` of docs/numerics.md: rne, saturating to ±448, NaN -> NaN byte.

    Args:
        v: float32 tensor.

    Returns:
        float8_e4m3fn tensor of the same shape.
    """
    return v.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """``e2m1(v)``: 4-bit codes (sign bit of v in bit 3), as uint8 in 0..15.

    Args:
        v: float32 tensor.

    Returns:
        uint8 tensor of codes; |v| > 5 and inf give magnitude 6 (code 7); NaN gives code 0.
    """
    a = v.abs()
    mag = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for edge, closed in _E2M1_EDGES:
        mag += (a >= edge if closed else a > edge).to(torch.uint8)
    return mag | (torch.signbit(v).to(torch.uint8) << 3)


def e2m1_to_float(codes: torch.Tensor) -> torch.Tensor:
    """Values of e2m1 codes.

    Args:
        codes: integer tensor with values in 0..15.

    Returns:
        float32 tensor of the same shape.
    """
    table = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), device=codes.device)
    return table[codes.long()]


def fp8_static_quant_ref(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Static per-tensor FP8: ``e4m3(clamp(float(x) * (1.0f / scale), -448, 448))``.

    Args:
        x: float32 / bfloat16 / float16 tensor of any shape.
        scale: dequantization scale, one element.

    Returns:
        float8_e4m3fn tensor shaped like x.
    """
    _check_float(x, "x")
    inv = torch.ones((), dtype=torch.float32, device=x.device) / _scale(scale).to(x.device)
    return e4m3(x.to(torch.float32) * inv)


def fp8_dequant_ref(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """FP8 dequantization: ``float(q) * scale`` in fp32, rounded once to ``dtype``.

    Args:
        q: float8_e4m3fn tensor.
        scale: dequantization scale, one element.
        dtype: float32, bfloat16 or float16.

    Returns:
        tensor of ``dtype`` shaped like q.
    """
    if q.dtype != torch.float8_e4m3fn:
        raise TypeError(f"q must be float8_e4m3fn, got {q.dtype}")
    return (q.to(torch.float32) * _scale(scale).to(q.device)).to(dtype)


def round_up(a, b: int):
    """``a`` (an int or a SymInt) rounded up to a multiple of ``b``."""
    return (a + b - 1) // b * b


def nvfp4_scale_shape(m, k, swizzle: bool = True) -> tuple:
    """Shape of the block scales of an ``[m, k]`` NVFP4 tensor (ints or SymInts): swizzled
    ``[round_up(m, 128), round_up(k/16, 4)]`` or linear ``[m, k/16]``."""
    return (round_up(m, 128), round_up(k // 16, 4)) if swizzle else (m, k // 16)


def swizzle_block_scales(linear: torch.Tensor) -> torch.Tensor:
    """Linear ``[M, K/16]`` block scales -> swizzled ``[round_up(M,128), round_up(K/16,4)]``.

    Tiles of 128 rows x 4 columns are stored as [32][4][4] (row m % 32, then (m % 128) // 32,
    then k % 4); padding bytes are zero.

    Args:
        linear: 2-D tensor (float8_e4m3fn or uint8).

    Returns:
        the swizzled tensor, same dtype.
    """
    m, kb = linear.shape
    mp, kp = round_up(m, 128), round_up(kb, 4)
    padded = torch.zeros(mp, kp, dtype=torch.uint8, device=linear.device)
    padded[:m, :kb] = linear.view(torch.uint8)
    # [m // 128, (m % 128) // 32, m % 32, k // 4, k % 4] -> [m // 128, k // 4, m % 32, ., k % 4]
    tiles = padded.reshape(mp // 128, 4, 32, kp // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(mp, kp).view(linear.dtype)


def unswizzle_block_scales(swizzled: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of :func:`swizzle_block_scales`, dropping the padding.

    Args:
        swizzled: ``[round_up(rows,128), round_up(cols,4)]`` tensor.
        rows: M.
        cols: K/16.

    Returns:
        linear ``[rows, cols]`` block scales, same dtype.
    """
    mp, kp = swizzled.shape
    if (mp, kp) != (round_up(rows, 128), round_up(cols, 4)):
        raise ValueError(f"swizzled shape {(mp, kp)} does not fit rows={rows}, cols={cols}")
    tiles = swizzled.view(torch.uint8).reshape(mp // 128, kp // 4, 32, 4, 4)
    linear = tiles.permute(0, 3, 2, 1, 4).reshape(mp, kp)[:rows, :cols].contiguous()
    return linear.view(swizzled.dtype)


def nvfp4_quant_ref(
    x: torch.Tensor, global_scale: torch.Tensor, swizzle: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 quantization with encode global scale g (blocks of 16 along the last dim).

    Args:
        x: float32 / bfloat16 / float16 tensor, rank >= 1, last dim K a positive multiple of 16.
        global_scale: g, one element.
        swizzle: swizzled (default) or linear block-scale layout.

    Returns:
        (packed uint8 ``[M, K/2]``, block scales float8_e4m3fn, swizzled or ``[M, K/16]``).
    """
    _check_float(x, "x")
    if x.dim() < 1 or x.shape[-1] == 0 or x.shape[-1] % 16:
        raise ValueError(f"last dim K must be a positive multiple of 16, got {list(x.shape)}")
    g = _scale(global_scale, "global_scale").to(x.device)
    k = x.shape[-1]
    blocks = x.to(torch.float32).reshape(-1, k // 16, 16)
    amax = blocks.abs().amax(dim=-1)  # propagates NaN
    sf = e4m3(g * (amax / 6.0))
    sf = sf.view(torch.uint8).masked_fill(amax.isnan(), 0x7F).view(torch.float8_e4m3fn)
    sf_f = sf.to(torch.float32)
    one = torch.ones((), dtype=torch.float32, device=x.device)
    inv = torch.where(sf_f == 0, torch.zeros_like(sf_f), one / (sf_f / g))
    v = blocks * inv.unsqueeze(-1)
    v = torch.where(blocks == 0, blocks, v)  # x = ±0 gives ±0 even when inv = inf
    codes = e2m1_codes(v).reshape(-1, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    linear = sf.reshape(-1, k // 16)
    return packed, swizzle_block_scales(linear) if swizzle else linear


def nvfp4_dequant_ref(
    packed: torch.Tensor,
    block_scale: torch.Tensor,
    global_scale: torch.Tensor,
    dtype: torch.dtype,
    swizzled: bool = True,
) -> torch.Tensor:
    """NVFP4 dequantization: ``(e2m1_value(q) * float(sf)) / g`` in fp32, rounded to dtype.

    Args:
        packed: uint8 ``[M, K/2]``.
        block_scale: float8_e4m3fn, swizzled or linear ``[M, K/16]``.
        global_scale: g, one element.
        dtype: float32, bfloat16 or float16.
        swizzled: layout of block_scale.

    Returns:
        ``[M, K]`` tensor of dtype.
    """
    m, half_k = packed.shape
    k = half_k * 2
    linear = unswizzle_block_scales(block_scale, m, k // 16) if swizzled else block_scale
    sf = linear.to(torch.float32).repeat_interleave(16, dim=1)
    codes = torch.stack([packed & 15, packed >> 4], dim=-1).reshape(m, k)
    g = _scale(global_scale, "global_scale").to(packed.device)
    return ((e2m1_to_float(codes) * sf) / g).to(dtype)
