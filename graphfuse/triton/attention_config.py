"""Host side of the prefill attention kernel: its knobs and their defaults
(``default_config``), the operand dtypes a call multiplies in, mask and output-layout
arguments. The kernel and its launcher are in
``attention.py``."""

from __future__ import annotations

import torch


def dot_dtypes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, precision: str):
    """(QK operand dtype, PV operand dtype, fast) for the input dtypes and precision."""
    fp8 = torch.float8_e4m3fn

    def wide(*ts: torch.Tensor) -> torch.dtype:
        ds = {t.dtype for t in ts if t.dtype != fp8}
        if torch.float32 in ds:
            return torch.float32
        if ds == {torch.bfloat16}:
            return torch.bfloat16
        return torch.float16

    qk = fp8 if q.dtype == fp8 and k.dtype == fp8 else wide(q, k)
    fast = precision == "fast" and v.dtype == fp8
    pv = fp8 if fast else wide(v)
    return qk, pv, fast


def mask_args(attn_mask: torch.Tensor | None, b: int, h: int, sq: int, skv: int, q: torch.Tensor):
    if attn_mask is None:
        return 0, q, (0, 0, 0, 0)
    m = attn_mask.expand(b, h, sq, skv)
    if m.dtype == torch.bool:
        return 1, m.view(torch.uint8), m.stride()
    return 2, m, m.stride()


def out_strides(layout: str, b: int, h: int, s: int, d: int) -> tuple[int, int, int]:
    """Element strides (b, h, s) of an output row in ``layout`` (contiguous along D)."""
    if layout == "bhsd":
        return h * s * d, s * d, d
    return s * h * d, d, h * d  # bshd, bs(hd), (bs)(hd): the same memory order


def nvfp4_row_strides(layout: str, h: int, s: int, d: int) -> tuple[int, int, int, int]:
    """(b, h, s) strides of a row's index in the 2-D NVFP4 view ``[M, K]`` of ``layout``, and
    the h stride of its first column (``nvfp4_rows_cols``: K is the layout's last dim)."""
    if layout == "bhsd":
        return h * s, s, 1, 0
    if layout == "bshd":
        return s * h, 1, h, 0
    return s, 0, 1, d  # bs(hd), (bs)(hd)


# Knobs of the prefill kernel (``_attn_fwd`` constexprs and launch options) with what they
# do; ``default_config`` is the one place their defaults are chosen.
#   BLOCK_M, BLOCK_N, num_warps, num_stages: tile shape and pipelining
#   LAZY: 0 rescales the accumulator on every key tile (FlashAttention-2); t > 0 moves a row's
#         reference max only when it grows by more than 2**t (P <= 2**t, exact after the final
#         division) behind a CTA-uniform branch, so most tiles skip the accumulator multiply.
#         Fast mode allows t <= 8 but loses accuracy (the row max's P is no longer exactly
#         2**(8-t) in e4m3; interpreter: RMSE ratio up to +0.09 on masked cases)
#   FAST_L: fast mode: the row sum taken over the e4m3-rounded P instead of the exact P
#   L_MMA: the row sums by the tensor cores (``P @ ones[BLOCK_N, 16]``, fp32 accumulation) of
#          the rounded P that the P·V product uses (so FAST_L in fast mode), not per element
#   REV_M: 0 query blocks in order; 1 each head's last (heaviest causal) block first;
#          2 all heads' last blocks first (grid (B*H, M blocks))
#   EPI: 0 ``store_attention_out``; 1 ``store_attention_acc`` (exact NVFP4 scale arithmetic);
#        2 the same with ``inv = g * rsqrt(sf * sf)``; 3: 2 with packed-half e2m1 codes
#   V16: host side, default precision with FP8 v: upcast v to fp16 once per call (exact) so
#        the kernel streams fp16 V tiles instead of converting each tile in registers
#   VT: host side, FP8 v stored ``[.., S, D]`` (D contiguous) and Sq > 16: copy v once per
#       call to K-major memory (``[.., D, S]``, keys contiguous) and pass that view, the
#       operand layout FP8 wgmma reads for P·V (Triton's MN-major FP8 P·V runs at about
#       half speed); costs one read + write of V, which the kernel reads Sq / BLOCK_M * G times
KERNEL_KNOBS = ("LAZY", "FAST_L", "L_MMA", "REV_M", "EPI")
HOST_KNOBS = ("V16", "VT")


def default_config(
    qk_dt: torch.dtype,
    dp: int,
    sq: int,
    *,
    fast: bool = False,
    out_kind: int = 1,
    mask_kind: int = 0,
) -> dict:
    """Every knob of a prefill launch (tuned on an H200); ``attention_into``'s ``config``
    entries override them. See ``KERNEL_KNOBS`` / ``HOST_KNOBS`` above."""
    cfg = dict(LAZY=0.0, FAST_L=False, L_MMA=False, REV_M=0, EPI=0, V16=False, VT=fast)
    if sq <= 16:
        cfg.update(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2)
    elif qk_dt == torch.float8_e4m3fn:
        cfg.update(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)
    elif qk_dt == torch.float32:
        cfg.update(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)
    else:
        cfg.update(BLOCK_M=128, BLOCK_N=64 if dp > 64 else 128, num_warps=8, num_stages=3)
    if out_kind == 2 and sq > 16 and not mask_kind:  # H200 sweep: wider key tiles
        cfg["BLOCK_N"] = 128
    if sq > 16:
        # H200 sweep 2026-12-03 (B=4 S=4096 causal): the cheaper epilogue (FP8 0.936x ->
        # 0.954x SDPA + quant; NVFP4 1.16x -> 1.04x the FP8 time, scale bytes exact) and the
        # heaviest causal row blocks launched first (0.957x)
        cfg.update(EPI=2, REV_M=2)
    if mask_kind:  # mask tiles are pipelined too: keep shared memory in bounds
        cfg.update(BLOCK_M=min(cfg["BLOCK_M"], 64), BLOCK_N=64, num_warps=4, num_stages=2)
    return cfg
