"""Host side of the prefill kernels, as data and pure functions (no Triton import): the tile
table (``default_config``), which calls the warp-specialised Gluon kernel serves
(``ws_eligible``, ``rows_view``), the operand dtypes a call multiplies in, mask and
output-layout arguments."""

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


WS_BLOCK_M = 128  # warp-specialised kernel: query rows per CTA (64 per consumer warpgroup)
WS_BLOCK_N = 128  # and keys per tile


def ws_stages(fast: bool, d: int) -> int:
    """Slots in the warp-specialised kernel's K / V ring: 3 in fast mode at D = 128 (FP8 V,
    shorter tiles, more of each load exposed: 7-13% faster with FP8 out at B=4 S=4096 on
    H100s, level with NVFP4 out), else 2 (a third slot measured 2-7% slower in the default
    precision and with bf16 in, 0-2% at D = 64; docs/gpu.md, "Prefill: the K / V ring's
    depth")."""
    return 3 if fast and d == 128 else 2


def rows_view(x: torch.Tensor):
    """(2-D TMA view, rows per batch, rows per head, columns per head) of ``x`` [B, H, S, D]
    with D contiguous, when element (b, h, s, d) is row ``b*rb + h*rh + s``, column
    ``h*ch + d`` of a row-major matrix (``[B, H, S, D]`` and ``[B, S, H, D]`` memory both are);
    None otherwise."""
    b, h, s, d = x.shape
    sb, sh, ss, sd = x.stride()
    if sd != 1 or ss < d or (ss * x.element_size()) % 16 or x.data_ptr() % 16 or sb % ss:
        return None
    if sh % ss == 0:  # heads stacked as rows (or one head / broadcast heads)
        rh, ch = sh // ss, 0
    elif 0 < sh and (h - 1) * sh + d <= ss:  # heads side by side in a row
        rh, ch = 0, sh
    else:
        return None
    rows = (b - 1) * (sb // ss) + (h - 1) * rh + s
    width = (h - 1) * ch + d  # the columns used: the view ends at the tensor's last element
    return x.as_strided((rows, width), (ss, 1)), sb // ss, rh, ch


def ws_eligible(q, k, v, attn_mask, out, out_kind: int) -> bool:
    """Whether the warp-specialised Hopper kernel (``gluon_kernel.py``) serves this call:
    q / k / v all 16-bit of one type, or all FP8 (dequant scales allowed; either precision);
    no mask; D of 64 or 128; Sq and Skv multiples of 128; q and k each addressable as one 2-D
    TMA view (``rows_view``; so is a 16-bit v); wide, FP8 or NVFP4 output. An FP8 v is
    copied by the launcher (upcast, or fast mode's V^T tiles). The device check (sm_90) is
    the launcher's."""
    fp8 = torch.float8_e4m3fn
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.bfloat16, torch.float16, fp8):
        return False
    if attn_mask is not None or out_kind not in (0, 1, 2):
        return False
    b, h, sq, d = q.shape
    skv = k.shape[2]
    if d not in (64, 128) or sq % WS_BLOCK_M or skv % WS_BLOCK_N or sq == 0 or skv == 0:
        return False
    if out_kind == 0 and out.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return False
    return all(rows_view(t) is not None for t in ((q, k) if v.dtype == fp8 else (q, k, v)))


def wgmma_key_order(s: int) -> int:
    """Where fast mode's V^T tiles (``launch.fast_v_tiles``) store key ``s``: within each 16
    keys, key ``8u + 2t + e`` goes to ``4t + 2u + e``, the order in which the Gluon kernel's
    FP8 P operand holds its keys (``gluon_kernel._p_operand``)."""
    return (s & ~15) | ((s & 6) << 1) | ((s >> 2) & 2) | (s & 1)


# The Triton kernel's per-call choice is its tile shape (``TILE_KNOBS``: BLOCK_M / BLOCK_N and
# the launch's num_warps / num_stages, from the table below); ``WS`` (default True) lets a call
# take the warp-specialised kernel when the rule of ``prefill/__init__.py`` allows it.
TILE_KNOBS = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")

# (BLOCK_M, BLOCK_N, num_warps, num_stages) by the q·k dot dtype, H200 sweeps; the first
# matching row wins
_TILES = (
    # (decode-sized Sq <= 16, dot dtype or None for any, min padded D or 0, tiles)
    (True, None, 0, (16, 64, 4, 2)),
    (False, torch.float8_e4m3fn, 0, (128, 128, 8, 3)),
    (False, torch.float32, 0, (64, 32, 4, 2)),
    (False, None, 128, (128, 64, 8, 3)),  # 16-bit, D > 64
    (False, None, 0, (128, 128, 8, 3)),  # 16-bit, D <= 64
)


def default_config(
    qk_dt: torch.dtype,
    dp: int,
    sq: int,
    *,
    out_kind: int = 1,
    mask_kind: int = 0,
) -> dict:
    """The tile shape of a prefill launch (tuned on an H200) and ``WS``; ``attention_into``'s
    ``config`` entries override them (tests and benchmark sweeps)."""
    small = sq <= 16
    tiles = next(
        t for s, dt, min_dp, t in _TILES if s == small and dt in (None, qk_dt) and dp >= min_dp
    )
    cfg = dict(zip(TILE_KNOBS, tiles), WS=True)
    if out_kind == 2 and not small and not mask_kind:  # H200 sweep: wider key tiles
        cfg["BLOCK_N"] = 128
    if mask_kind:  # mask tiles are pipelined too: keep shared memory in bounds
        cfg.update(BLOCK_M=min(cfg["BLOCK_M"], 64), BLOCK_N=64, num_warps=4, num_stages=2)
    return cfg
